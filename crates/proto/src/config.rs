//! The static configuration of one engine (one software RNIC port).

use std::net::{IpAddr, Ipv4Addr};

use softrdma_wire::ROCEV2_UDP_PORT;

use crate::cc::CcConfig;
use crate::qp::attr::Mtu;

/// Static configuration of one engine (one software RNIC port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// The local IP address packets are sent from (covered by the ICRC).
    pub local_ip: IpAddr,
    /// The local UDP port requests arrive on (4791).
    pub local_udp_port: u16,
    /// The UDP port peers listen on (4791).
    pub remote_udp_port: u16,
    /// Most unacknowledged request PSNs per RC QP: a packet further ahead waits for ACKs.
    /// 128 by default, rxe's `RXE_MAX_UNACKED_PSNS`: a peer as slow as rxe under emulation
    /// drops what overflows its receive queue, and every loss costs a retransmit timeout.
    pub max_inflight_packets: u32,
    /// Request packets all QPs of the engine may have in flight together, at most. The
    /// receiver's socket buffer and a slow link's queue absorb only so much; beyond it packets
    /// are lost or delayed past the retransmit timeout, whatever each QP's window says. The
    /// budget in force adapts below this to the measured round trip (a round trip above half
    /// the local ACK timeout halves it).
    pub device_inflight_packets: u32,
    /// The requester sets AckReq at least every this many packets of a long message.
    pub ack_req_every: u32,
    /// Check the ICRC of received packets (off only for fuzzing).
    pub verify_icrc: bool,
    /// The first QP number handed out (rxe starts at 0x11).
    pub first_qpn: u32,
    /// The last QP number handed out; numbering wraps from here to `first_qpn`. A device
    /// that shares its address with others is given a range of its own (the top byte of the
    /// QPN names it), so this bounds it; 0xFF_FFFE by default (0xFF_FFFF is multicast's).
    pub last_qpn: u32,
    /// The port's active MTU: the largest UD message (UD has no path MTU attribute; rxe uses
    /// the port's), and what connected QPs are usually given as their path MTU.
    pub port_mtu: Mtu,
    /// Every peer is a softrdma device, which sends IPv4 identification 0 (or a GSO segment
    /// number below 64). The ICRC check then holds every QP's peer to such identifications
    /// from its first packet on. Off by default, since Linux rxe and RoCE NICs count
    /// identifications up from anywhere: a QP then learns its peer's habit from the first
    /// packet, which leaves that one packet checked with 16 rather than ~26 effective bits
    /// (see `QpContext` docs and `softrdma_wire::icrc`).
    pub peers_use_small_ipv4_ids: bool,
    /// Request packets an RC responder keeps per QP when they arrive ahead of a lost one, to
    /// run once it comes (see `qp::responder::reorder`); 0 drops them as Linux rxe does.
    pub reorder_packets: usize,
    /// Bytes all QPs of the engine may keep that way together.
    pub reorder_bytes: usize,
    /// The requester resends only what was lost after a PSN sequence NAK when the peer keeps
    /// early packets (learned per QP; rxe does not, and gets go-back-N).
    pub selective_repeat: bool,
    /// Seed of the memory keys' randomness (see [`MrTable`](crate::MrTable)): rkeys must not
    /// be guessable by hosts that can reach the port, so a device on a real network seeds this
    /// from the operating system's random source (the verbs layer does); the simulator derives
    /// it from its seed, to stay reproducible. 0 by default.
    pub key_seed: u64,
    /// Congestion control (ECN marks, CNPs, DCQCN pacing): off by default, as in Linux rxe.
    pub cc: CcConfig,
    /// Direct placement (`crate::placement`) of READ responses into the READ's buffer, not
    /// only of WRITEs into their target. Off by default: received one datagram per system
    /// call, as placement receives them, a READ's three datagrams (FIRST, MIDDLEs, LAST) cost
    /// the requester more calls than the copy they save, and its READ requests then leave
    /// one round at a time (measured: `perf read-bw --loopback`, 4000 READs of 64 KiB, the
    /// requester's sends 636 -> 3983, 15-20 % less bandwidth). The simulator turns it on, so
    /// that the path stays checked under faults until receives take several datagrams.
    pub place_read_responses: bool,
}

impl EngineConfig {
    /// Defaults for a device bound to `local_ip`.
    pub fn new(local_ip: IpAddr) -> EngineConfig {
        EngineConfig {
            local_ip,
            local_udp_port: ROCEV2_UDP_PORT,
            remote_udp_port: ROCEV2_UDP_PORT,
            max_inflight_packets: 128,
            device_inflight_packets: 1024,
            ack_req_every: 64,
            verify_icrc: true,
            first_qpn: 0x11,
            last_qpn: 0xff_fffe,
            port_mtu: Mtu::Mtu4096,
            peers_use_small_ipv4_ids: false,
            reorder_packets: 512,
            reorder_bytes: 64 << 20,
            selective_repeat: true,
            key_seed: 0,
            cc: CcConfig::OFF,
            place_read_responses: false,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }
}
