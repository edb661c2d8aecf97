//! What crosses the engine's boundary besides work requests and completions: the description
//! of a datagram to send and of one received. The bytes themselves stay in caller-owned buffers.

use std::net::{IpAddr, SocketAddr};

/// A datagram the engine wants sent; its bytes are in the buffer passed to `poll_transmit`.
///
/// The engine's description of a datagram it built, not the socket's send request
/// (`softrdma_udp::Transmit`, which carries the bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct DatagramOut {
    /// Destination address and port.
    pub dst: SocketAddr,
    /// UDP source port the ICRC was computed with (send from it, or recompute the ICRC).
    pub src_port: u16,
    /// ECN codepoint for the IP header (0 = Not-ECT).
    pub ecn: u8,
    /// Datagram length.
    pub len: usize,
}

/// What the caller knows about a received datagram: its IP header as far as the socket
/// reports it. The ICRC covers the addresses; a UD receive reproduces the whole header in its
/// GRH area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramMeta {
    /// Sender's address and UDP source port.
    pub src: SocketAddr,
    /// The address the datagram was sent to: the device's own, or a multicast group.
    pub dst: IpAddr,
    /// The TOS / traffic-class byte (DSCP and the ECN bits).
    pub tos: u8,
    /// TTL / hop limit on arrival.
    pub ttl: u8,
    /// Where the datagram stood in the GRO batch it arrived in (0 for one that came alone).
    /// Segment k of a UDP GSO send leaves with IPv4 identification k, which the ICRC covers
    /// and `recvmsg` does not report: the receiver tries k first and solves for the
    /// identification only when it was not (see `IcrcContext::verify_ipv4_near`).
    pub segment: u16,
}

impl DatagramMeta {
    /// A datagram from `src` to `dst` with TOS 0 and TTL 64 (what softrdma and rxe send).
    pub fn new(src: SocketAddr, dst: IpAddr) -> DatagramMeta {
        DatagramMeta {
            src,
            dst,
            tos: 0,
            ttl: 64,
            segment: 0,
        }
    }

    /// The ECN codepoint (the two low bits of the TOS).
    pub fn ecn(&self) -> u8 {
        self.tos & 0b11
    }
}
