//! What crosses the engine's boundary besides work requests and completions: the description
//! of a datagram to send and of one received. The bytes themselves stay in caller-owned buffers.

use std::net::SocketAddr;

/// A datagram the engine wants sent; its bytes are in the buffer passed to `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Transmit {
    /// Destination address and port.
    pub dst: SocketAddr,
    /// UDP source port the ICRC was computed with (send from it, or recompute the ICRC).
    pub src_port: u16,
    /// ECN codepoint for the IP header (0 = Not-ECT).
    pub ecn: u8,
    /// Datagram length.
    pub len: usize,
}

/// What the caller knows about a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramMeta {
    /// Sender's address and UDP source port.
    pub src: SocketAddr,
    /// ECN bits of the IP header.
    pub ecn: u8,
}
