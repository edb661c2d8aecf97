//! The real network backend of softrdma: RoCEv2 datagrams over UDP/IP (port 4791).
//!
//! Like `quinn-udp`, this crate knows nothing of the packets it carries. It moves opaque
//! datagrams with the batching, offload and ECN machinery of the kernel, and it states exactly
//! what the kernel writes into the IP header, because the RoCEv2 ICRC covers parts of it.
//!
//! # What it offers
//! - [`RoceSocket`]: one UDP socket bound to `<ip>:<port>` (port [`ROCEV2_UDP_PORT`] by
//!   default), IPv4 or IPv6, non-blocking, with [`RoceSocket::wait_readable`] (`ppoll(2)`) for
//!   sleeping and [`RoceSocket::try_recv`] for busy polling.
//! - Batched I/O: [`RoceSocket::send`] takes a slice of [`Transmit`]s (one `sendmmsg(2)` per run
//!   of transmits with the same source port), [`RoceSocket::try_recv`] fills a caller-owned
//!   [`RecvArena`] with one `recvmmsg(2)`. Nothing is allocated per packet.
//! - Scattered receive: [`RoceSocket::try_recv_scattered`] receives one datagram (or GRO
//!   batch) with one `recvmsg(2)` over caller-given pieces of memory, in order, so that a
//!   caller that knows what comes next puts each part where it belongs (RoCE payloads
//!   straight into registered memory).
//! - Offloads: UDP GSO (`UDP_SEGMENT`, a [`Transmit::segment_size`]) and GRO (`UDP_GRO`,
//!   [`RecvMeta::stride`]), probed once at open and switched off at run time if the kernel
//!   refuses them ([`SendError::GsoUnavailable`]).
//! - ECN both ways ([`Ecn`] on [`Transmit`] and [`RecvMeta`]), via `IP_TOS`/`IPV6_TCLASS`
//!   control messages, and the destination address of each received datagram
//!   (`IP_PKTINFO`/`IPV6_RECVPKTINFO`).
//! - Per-packet UDP source ports: RoCEv2 peers choose the source port per QP (Linux rxe uses
//!   `0xC000 + hash`) for ECMP entropy. [`RoceSocket::prepare_source_port`] binds a send-only
//!   socket to `<ip>:<sport>` on first use and says which port will really be used.
//!
//! # Example
//! ```
//! use softrdma_udp::{Config, Ecn, RecvArena, RoceSocket, Transmit};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Port 0 for the example; real peers use 4791 (`RoceSocket::bind(ip)`).
//! let mut a = RoceSocket::open(Config::new("127.0.0.1".parse()?).port(0))?;
//! let b = RoceSocket::open(Config::new("127.0.0.2".parse()?).port(0))?;
//! let sport = a.prepare_source_port(0); // or 0xC000 + hash(qpn); compute the ICRC with `sport`
//! let packet = [0u8; 64]; // BTH .. ICRC, built for IPv4 identification 0
//! let t = Transmit { dst: b.local_addr(), src_port: sport, ecn: Ecn::Ect0, segment_size: None, contents: &packet };
//! assert_eq!(a.send(&[t])?, 1);
//!
//! let mut arena = RecvArena::for_socket(&b, 64);
//! b.recv_timeout(&mut arena, Some(Duration::from_secs(1)))?;
//! for (meta, datagram) in arena.datagrams() {
//!     assert_eq!((meta.src, datagram.len()), (a.local_addr(), 64)); // meta.ecn: Ect0 on Linux
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What the kernel writes into the IPv4 header (measured)
//! The ICRC covers the IPv4 total length, identification, flags and addresses (TOS, TTL and the
//! header checksum are masked). A sender that lets the kernel build the header must know them.
//! Measured with `tcpdump` on Linux 6.x (loopback, and a tun device that forces software
//! segmentation), and re-checked by this crate's `tests/kernel_facts.rs` (as root):
//!
//! | field | value | why |
//! | --- | --- | --- |
//! | flags | DF set ([`IPV4_DONT_FRAGMENT`]) | every socket sets `IP_MTU_DISCOVER = IP_PMTUDISC_DO` |
//! | identification, single datagram | 0 | Linux writes ID 0 into DF packets of **unconnected** sockets |
//! | identification, GSO segment `k` | `k` (0, 1, 2, ...) | software GSO (`inet_gso_segment`) numbers segments from the super-packet's ID 0 |
//! | TTL / hop limit | [`DEFAULT_TTL`] (64) unless configured | set explicitly with `IP_TTL`/`IPV6_UNICAST_HOPS`, not left to sysctls |
//! | TOS | DSCP from [`Config::dscp`], ECN from the transmit | masked by the ICRC anyway |
//! | UDP checksum | computed by the kernel | masked by the ICRC; rxe sends 0 and accepts either |
//!
//! [`ipv4_id_of_segment`] encodes the identification rule. It holds only because these sockets
//! are never `connect(2)`ed: a connected socket uses a per-socket counter that starts at a
//! random value and advances by one per `sendmsg` (not per GSO segment), measured too.
//! On loopback a GSO super-packet crosses intact (one 4028-byte IPv4 packet with ID 0 in the
//! capture) and is split, or kept whole for a GRO receiver, at the receiving socket.
//! Hardware USO on a real NIC is expected to number segments the same way (as TSO does), but
//! that has not been measured here.
//!
//! Receivers cannot see the identification of what they receive (no control message carries
//! it), so a receiver that checks the ICRC of a packet from a peer that increments its IDs
//! (rxe does) has to treat the identification as unknown.
//!
//! # Platforms
//! Linux is the real backend (`linux.rs`). Elsewhere (`fallback.rs`, also built on Linux with
//! `RUSTFLAGS="--cfg softrdma_udp_fallback"`) datagrams go one by one through `socket2`, with
//! no GSO, GRO, ECN or packet info, and the IPv4 header facts above are not guaranteed.
#![warn(missing_docs)]

mod arena;
mod datagram;
mod error;
pub mod fork;
#[cfg_attr(
    all(target_os = "linux", not(softrdma_udp_fallback)),
    path = "linux/mod.rs"
)]
#[cfg_attr(
    not(all(target_os = "linux", not(softrdma_udp_fallback))),
    path = "fallback.rs"
)]
mod imp;

mod multicast;
mod socket;
mod steering;

pub use arena::RecvArena;
pub use datagram::{Ecn, RecvMeta, RecvPiece, Transmit};
pub use error::{MulticastError, OpenError, RecvError, SendError};
pub use socket::{Capabilities, Config, RoceSocket};
pub use steering::{SteeringHandle, SteeringInsn};

/// The IANA-assigned UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// TTL (IPv4) or hop limit (IPv6) of every packet unless [`Config::ttl`] says otherwise: 64,
/// what Linux rxe sends on a default route.
pub const DEFAULT_TTL: u8 = 64;

/// Every IPv4 packet this crate sends carries the Don't Fragment flag (`IP_PMTUDISC_DO`):
/// RoCEv2 packets are never fragmented, and with DF the kernel writes a known identification.
pub const IPV4_DONT_FRAGMENT: bool = true;

/// Socket buffer size asked for by default (`SO_RCVBUF`/`SO_SNDBUF`, forced beyond
/// `net.core.rmem_max` with `SO_RCVBUFFORCE` when running as root): 4 MiB, room for about 4000
/// 1 KiB-MTU packets, so a burst at line rate is not dropped while the engine is busy.
pub const DEFAULT_SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// Most segments one GSO send may carry (`UDP_MAX_SEGMENTS` of Linux 4.18 and later; newer
/// kernels allow more, but 64 works everywhere).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Most datagrams one `sendmmsg(2)` or `recvmmsg(2)` call moves; longer slices are split.
pub const BATCH_MAX: usize = 64;

/// Most slots a [`RecvArena`] may have (`UIO_MAXIOV`, the kernel's limit for `recvmmsg`).
pub const RECV_SLOTS_MAX: usize = 1024;

/// Most pieces one [`RoceSocket::try_recv_scattered`] takes.
pub const RECV_PIECES_MAX: usize = 256;

/// Largest UDP payload: 65535 minus the IPv4 and UDP headers. It bounds a datagram and a whole
/// GSO super-packet, and it is the slot size a GRO receiver needs.
pub const MAX_UDP_PAYLOAD: usize = 65_535 - 20 - 8;

/// Default bound on the number of source-port sockets one [`RoceSocket`] keeps
/// ([`Config::max_source_ports`]): each is a file descriptor.
pub const DEFAULT_MAX_SOURCE_PORTS: usize = 1024;

/// The IPv4 identification the kernel writes into segment `k` (0-based) of a transmit.
///
/// A transmit without `segment_size`, or with one segment, is segment 0. The rule is
/// `k mod 2^16`: unconnected DF sockets send ID 0, and GSO numbers its segments upwards from
/// there (measured; see the crate docs). Sends that fell back from GSO after
/// [`SendError::GsoUnavailable`] are separate datagrams and each has ID 0 again.
#[must_use]
pub const fn ipv4_id_of_segment(k: usize) -> u16 {
    // Truncation is the rule: the kernel's counter is a wrapping u16.
    #[allow(clippy::cast_possible_truncation)]
    let id = k as u16;
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_ids_count_from_zero_and_wrap() {
        assert_eq!(ipv4_id_of_segment(0), 0);
        assert_eq!(ipv4_id_of_segment(3), 3);
        assert_eq!(ipv4_id_of_segment(65_536 + 5), 5);
    }
}
