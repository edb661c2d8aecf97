//! Typed errors. The network never makes this crate panic: every failure of a system call
//! becomes one of these values, with the address or option it concerned.

use std::io;
use std::net::SocketAddr;

/// Opening a [`RoceSocket`](crate::RoceSocket) failed. Nothing was sent or received yet.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// `socket(2)` itself failed (out of file descriptors, address family not supported).
    #[error("cannot create a UDP socket for {addr}: {source}")]
    Socket {
        /// The address the socket was meant for.
        addr: SocketAddr,
        /// The operating system's reason.
        source: io::Error,
    },
    /// A socket option that the wire format depends on could not be set (for example
    /// `IP_MTU_DISCOVER`, without which the kernel's IPv4 identification is unknown).
    #[error("cannot set socket option {option} on {addr}: {source}")]
    SetOption {
        /// The option, as named in `ip(7)`, `ipv6(7)`, `udp(7)` or `socket(7)`.
        option: &'static str,
        /// The socket's address.
        addr: SocketAddr,
        /// The operating system's reason.
        source: io::Error,
    },
    /// `bind(2)` failed: the address is in use or not local.
    #[error("cannot bind UDP {addr}: {source}")]
    Bind {
        /// The address that could not be bound.
        addr: SocketAddr,
        /// The operating system's reason.
        source: io::Error,
    },
}

/// Sending the first [`Transmit`](crate::Transmit) of a batch failed. Transmits before it in the
/// same call were sent (the call returned their count instead), so the failing one is always
/// `transmits[0]` of the call that returned this error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The requested UDP source port could not be bound (it is in use, or the pool of
    /// source-port sockets is full). [`RoceSocket::prepare_source_port`](crate::RoceSocket::prepare_source_port)
    /// returns `fallback` for it: re-emit the packet for that port (its ICRC covers the UDP header).
    #[error("UDP source port {requested} is unavailable; use {fallback} instead")]
    SourcePortUnavailable {
        /// The source port the transmit asked for.
        requested: u16,
        /// The port this socket will send from instead (its own port).
        fallback: u16,
    },
    /// The destination's address family differs from the socket's (IPv6 sockets are
    /// `IPV6_V6ONLY`; RoCEv2 over IPv4 uses an IPv4 socket).
    #[error("destination {dst} does not match the socket's address family ({local})")]
    AddressFamily {
        /// The destination of the transmit.
        dst: SocketAddr,
        /// The socket's local address.
        local: SocketAddr,
    },
    /// The transmit's contents or segmentation is malformed: empty, larger than one UDP
    /// datagram (or GSO super-packet) can be, `segment_size` 0, or more segments than
    /// [`RoceSocket::max_gso_segments`](crate::RoceSocket::max_gso_segments).
    #[error("invalid transmit to {dst}: {reason}")]
    InvalidTransmit {
        /// The destination of the transmit.
        dst: SocketAddr,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The kernel refused UDP GSO (`EIO`: the route's device cannot checksum-offload, or
    /// `EINVAL`: it rejected the segment size). GSO is now off for this socket
    /// ([`max_gso_segments`](crate::RoceSocket::max_gso_segments) returns 1). The transmit was
    /// **not** sent: re-emit its segments as single datagrams, recomputing each ICRC for IPv4
    /// identification 0 (see [`ipv4_id_of_segment`](crate::ipv4_id_of_segment)).
    #[error("UDP GSO refused by the kernel for {dst} ({source}); GSO is now disabled")]
    GsoUnavailable {
        /// The destination of the transmit.
        dst: SocketAddr,
        /// The kernel's error (`EIO` or `EINVAL`).
        source: io::Error,
    },
    /// The datagram (or one GSO segment) exceeds the path MTU; IPv4 packets carry DF and are
    /// never fragmented (`EMSGSIZE`).
    #[error("datagram of {len} bytes to {dst} exceeds the path MTU")]
    MessageTooLong {
        /// The destination of the transmit.
        dst: SocketAddr,
        /// The datagram (or segment) length in bytes.
        len: usize,
    },
    /// Any other failure of `sendmmsg(2)` (unreachable network, permission denied, ...).
    #[error("sending to {dst} failed: {source}")]
    Io {
        /// The destination of the transmit.
        dst: SocketAddr,
        /// The operating system's reason.
        source: io::Error,
    },
}

/// Receiving failed for a reason other than "nothing to read" (which is `Ok(0)`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// `recvmmsg(2)` or `poll(2)` failed.
    #[error("receiving on {local} failed: {source}")]
    Io {
        /// The socket's local address.
        local: SocketAddr,
        /// The operating system's reason.
        source: io::Error,
    },
}

/// Joining a multicast group failed; the socket is as before.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MulticastError {
    /// Not a multicast address, or of the other address family than the socket's.
    #[error("{group} is not a multicast group of the socket's address family ({local})")]
    NotAGroup {
        /// The group asked for.
        group: std::net::IpAddr,
        /// The socket's address.
        local: SocketAddr,
    },
    /// The kernel refused: no multicast route or interface (loopback without `MULTICAST`),
    /// the port is in use without address reuse, or out of file descriptors.
    #[error("cannot join multicast group {group} on {local}: {source}")]
    Join {
        /// The group.
        group: std::net::IpAddr,
        /// The socket's address (the interface joined on).
        local: SocketAddr,
        /// The operating system's reason.
        source: io::Error,
    },
    /// The portable fallback backend has no multicast.
    #[error("multicast needs the Linux backend")]
    Unsupported,
}
