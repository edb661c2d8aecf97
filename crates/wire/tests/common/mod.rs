//! Shared by the wire crate's integration tests and its seed-corpus example: a tiny reader for
//! the bundled captures (classic little-endian pcap, Ethernet link type — what tcpdump wrote in
//! the rxe lab), and extraction of their RoCEv2 datagrams. `softrdma-wire` must not depend on
//! a pcap library, and the captures are fixed files, so this reader may assume their format
//! and panic with a clear message if it does not hold.

#![allow(dead_code, unreachable_pub)] // each test binary uses a different part

use std::path::{Path, PathBuf};

use softrdma_wire::ip::{parse_ethernet, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use softrdma_wire::{IcrcContext, IpHeader, IpPacket, ROCEV2_UDP_PORT};

/// The bundled rxe captures, by file name.
pub const CAPTURES: [&str; 17] = [
    "rc_send.pcap",
    "rc_send_retransmit.pcap",
    "ud_send.pcap",
    "rc_write.pcap",
    "rc_read.pcap",
    "atomic_fa.pcap",
    "rdma_cm.pcap",
    "uc_send.pcap",
    "uc_write.pcap",
    "ud_perf.pcap",
    "srq_send.pcap",
    "srq_perf.pcap",
    "write_lat.pcap",
    "read_lat.pcap",
    "ucmatose.pcap",
    "write_bw_cm.pcap",
    "send_bw_cm.pcap",
];

/// Path of a bundled capture.
pub fn capture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/conformance")
        .join(name)
}

/// The frames (Ethernet, as captured) of a classic pcap file.
pub fn frames(file: &[u8]) -> Vec<Vec<u8>> {
    assert!(file.len() >= 24, "pcap file header");
    assert_eq!(
        file[..4],
        [0xd4, 0xc3, 0xb2, 0xa1],
        "little-endian microsecond pcap"
    );
    assert_eq!(file[20..24], [1, 0, 0, 0], "Ethernet link type");
    let mut at = 24;
    let mut out = Vec::new();
    while at < file.len() {
        let hdr = &file[at..at + 16];
        let caplen = u32::from_le_bytes(hdr[8..12].try_into().unwrap()) as usize;
        let orig = u32::from_le_bytes(hdr[12..16].try_into().unwrap()) as usize;
        assert_eq!(caplen, orig, "capture records are complete");
        out.push(file[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    out
}

/// One RoCEv2 datagram of a capture.
#[derive(Debug, Clone)]
pub struct RocePacket {
    /// Capture file name.
    pub capture: &'static str,
    /// 1-based record index in the file.
    pub index: usize,
    /// The IP packet (IP header through ICRC).
    pub ip: Vec<u8>,
    /// Length of the IP header.
    pub ip_header_len: usize,
    /// The ICRC context the sender used: addresses, ports, IPv4 ID and DF.
    pub ctx: IcrcContext,
}

impl RocePacket {
    /// The UDP payload: BTH through ICRC.
    pub fn transport(&self) -> &[u8] {
        &self.ip[self.ip_header_len + 8..]
    }
    /// The raw UDP header.
    pub fn udp_header(&self) -> &[u8] {
        &self.ip[self.ip_header_len..self.ip_header_len + 8]
    }
}

/// Every UDP/4791 datagram of a capture.
pub fn roce_packets(capture: &'static str) -> Vec<RocePacket> {
    let file = std::fs::read(capture_path(capture)).expect("read capture");
    let mut out = Vec::new();
    for (i, frame) in frames(&file).iter().enumerate() {
        let (ethertype, ip_bytes) = parse_ethernet(frame).expect("Ethernet frame");
        if ethertype != ETHERTYPE_IPV4 && ethertype != ETHERTYPE_IPV6 {
            continue;
        }
        let ip = IpPacket::parse(ip_bytes).expect("IP packet");
        let Ok((udp, _, _)) = ip.udp() else { continue };
        if udp.dst_port != ROCEV2_UDP_PORT {
            continue;
        }
        let mut ctx = IcrcContext::new(ip.ip.src(), ip.ip.dst(), udp.src_port, udp.dst_port);
        if let IpHeader::V4(h) = ip.ip {
            ctx.ipv4_id = h.id;
            ctx.ipv4_dont_fragment = h.dont_fragment;
        }
        let ip_len = ip.ip_header.len() + ip.transport.len();
        out.push(RocePacket {
            capture,
            index: i + 1,
            ip: ip_bytes[..ip_len].to_vec(),
            ip_header_len: ip.ip_header.len(),
            ctx,
        });
    }
    out
}
