//! Test support: the out-of-band TCP exchanges in the captures, read with a minimal pcap reader.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::HashMap;
use std::path::PathBuf;

/// Who sent a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Client → server (destination port is the listening port).
    C,
    /// Server → client.
    S,
}

/// One TCP connection's payloads, in capture order, retransmissions removed.
#[derive(Debug, Clone)]
pub struct Conn {
    pub client_port: u16,
    pub segments: Vec<(Dir, Vec<u8>)>,
}

impl Conn {
    pub fn sizes(&self) -> Vec<(Dir, usize)> {
        self.segments.iter().map(|(d, b)| (*d, b.len())).collect()
    }
    pub fn sent_by(&self, d: Dir) -> Vec<Vec<u8>> {
        self.segments
            .iter()
            .filter(|(x, _)| *x == d)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

pub fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

pub fn crate_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// TCP payloads to or from `port` in a classic little-endian pcap with Ethernet framing,
/// grouped by connection (client port) in order of first appearance.
pub fn tcp_conns(path: &PathBuf, port: u16) -> Vec<Conn> {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(d.len() >= 24, "short pcap");
    let magic = u32::from_le_bytes(d[0..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "not a little-endian classic pcap"
    );
    let linktype = u32::from_le_bytes(d[20..24].try_into().unwrap());
    assert_eq!(linktype, 1, "expected Ethernet link type");
    let mut conns: Vec<Conn> = Vec::new();
    let mut index: HashMap<u16, usize> = HashMap::new();
    // next expected sequence number per (client port, direction), to drop retransmissions
    let mut next_seq: HashMap<(u16, Dir), u32> = HashMap::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        let pkt = &d[off + 16..off + 16 + incl];
        off += 16 + incl;
        if pkt.len() < 14 || pkt[12..14] != [0x08, 0x00] {
            continue; // not IPv4
        }
        let ip = &pkt[14..];
        let ihl = usize::from(ip[0] & 0xf) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if ip[9] != 6 {
            continue; // not TCP
        }
        let tcp = &ip[ihl..total];
        let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
        let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
        let seq = u32::from_be_bytes(tcp[4..8].try_into().unwrap());
        let doff = usize::from(tcp[12] >> 4) * 4;
        let syn = tcp[13] & 0x02 != 0;
        let payload = &tcp[doff..];
        let (dir, cport) = if dport == port {
            (Dir::C, sport)
        } else if sport == port {
            (Dir::S, dport)
        } else {
            continue;
        };
        if syn {
            next_seq.insert((cport, dir), seq.wrapping_add(1));
            continue;
        }
        if payload.is_empty() {
            continue;
        }
        let expect = next_seq.get(&(cport, dir)).copied().unwrap_or(seq);
        let skip = expect.wrapping_sub(seq) as usize;
        if skip >= payload.len() && (expect.wrapping_sub(seq) as i32) >= 0 {
            continue; // pure retransmission
        }
        let payload = if (expect.wrapping_sub(seq) as i32) > 0 {
            &payload[skip..]
        } else {
            payload
        };
        next_seq.insert((cport, dir), seq.wrapping_add((tcp.len() - doff) as u32));
        let i = *index.entry(cport).or_insert_with(|| {
            conns.push(Conn {
                client_port: cport,
                segments: Vec::new(),
            });
            conns.len() - 1
        });
        conns[i].segments.push((dir, payload.to_vec()));
    }
    conns
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

/// Every RoCEv2 packet of a bundled capture, in order (read with the wire crate's capture
/// reader).
pub fn roce_packets(capture: &str) -> Vec<RocePacket> {
    use softrdma_wire::pcap::CaptureReader;
    use softrdma_wire::{IpPacket, PacketRepr, ROCEV2_UDP_PORT};
    let path = repo_file(&format!("testdata/conformance/{capture}"));
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = CaptureReader::new(std::io::BufReader::new(file)).expect("a capture");
    let mut out = Vec::new();
    while let Some(r) = reader.next_record().expect("a readable record") {
        let Some(ip) = r
            .link
            .network_layer(r.data)
            .and_then(|b| IpPacket::parse(b).ok())
        else {
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

/// One MAD of a capture: sender and receiver addresses and the 256 bytes.
#[derive(Debug, Clone)]
pub struct GsiMad {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    pub mad: Vec<u8>,
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
