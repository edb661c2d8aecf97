//! Test support: the RoCEv2 packets and GSI MADs of the conformance captures.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::PathBuf;

pub fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// One MAD of a capture: sender and receiver addresses and the 256 bytes.
#[derive(Debug, Clone)]
pub struct GsiMad {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    pub mad: Vec<u8>,
}

/// One RoCEv2 packet of a capture: addresses, destination QP, opcode, payload.
#[derive(Debug, Clone)]
pub struct RocePacket {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    pub dest_qpn: u32,
    pub opcode: softrdma_wire::Opcode,
    pub payload: Vec<u8>,
}

/// Every RoCEv2 packet of a bundled capture, in order.
pub fn roce_packets(capture: &str) -> Vec<RocePacket> {
    use softrdma_wire::ip::parse_ethernet;
    use softrdma_wire::{IpPacket, PacketRepr, ROCEV2_UDP_PORT};
    let path = repo_file(&format!("testdata/conformance/{capture}"));
    let d = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let frame = &d[off + 16..off + 16 + incl];
        off += 16 + incl;
        let Ok((_, ip_bytes)) = parse_ethernet(frame) else {
            continue;
        };
        let Ok(ip) = IpPacket::parse(ip_bytes) else {
            continue;
        };
        let Ok((udp, _, payload)) = ip.udp() else {
            continue;
        };
        if udp.dst_port != ROCEV2_UDP_PORT {
            continue;
        }
        let packet = PacketRepr::parse(payload).expect("captured RoCEv2 packets parse");
        out.push(RocePacket {
            src: ip.ip.src(),
            dst: ip.ip.dst(),
            dest_qpn: packet.bth.dest_qpn,
            opcode: packet.bth.opcode,
            payload: packet.payload.to_vec(),
        });
    }
    out
}

/// The MADs (UD SEND_ONLY payloads to QP 1) of a bundled capture, in order.
pub fn gsi_mads(capture: &str) -> Vec<GsiMad> {
    roce_packets(capture)
        .into_iter()
        .filter(|p| p.dest_qpn == 1)
        .map(|p| GsiMad {
            src: p.src,
            dst: p.dst,
            mad: p.payload,
        })
        .collect()
}
