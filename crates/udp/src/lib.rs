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

mod error;
#[cfg_attr(
    all(target_os = "linux", not(softrdma_udp_fallback)),
    path = "linux.rs"
)]
#[cfg_attr(
    not(all(target_os = "linux", not(softrdma_udp_fallback))),
    path = "fallback.rs"
)]
mod imp;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use socket2::Socket;

pub use error::{OpenError, RecvError, SendError};

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

/// The ECN codepoint: the two low bits of the IPv4 TOS / IPv6 traffic class (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Ecn {
    /// Not ECN-capable (00). What rxe sends.
    #[default]
    NotEct = 0b00,
    /// ECN-capable transport, ECT(1) (01).
    Ect1 = 0b01,
    /// ECN-capable transport, ECT(0) (10). What DCQCN senders mark their packets with.
    Ect0 = 0b10,
    /// Congestion experienced (11): set by a congested switch; the receiver answers with a CNP.
    Ce = 0b11,
}

impl Ecn {
    /// The codepoint in the two low bits of `tos` (a TOS or traffic-class byte).
    #[must_use]
    pub const fn from_tos(tos: u8) -> Self {
        match tos & 0b11 {
            0b00 => Self::NotEct,
            0b01 => Self::Ect1,
            0b10 => Self::Ect0,
            _ => Self::Ce,
        }
    }

    /// The two ECN bits.
    #[must_use]
    pub const fn bits(self) -> u8 {
        self as u8
    }
}

/// One outgoing datagram, or one GSO super-packet of equal-sized datagrams.
#[derive(Debug, Clone, Copy)]
pub struct Transmit<'a> {
    /// Where to send it (the peer's RoCEv2 port, normally [`ROCEV2_UDP_PORT`]).
    pub dst: SocketAddr,
    /// The UDP source port. 0 or the socket's own port send from the main socket; any other
    /// port goes through the source-port pool ([`RoceSocket::prepare_source_port`]).
    pub src_port: u16,
    /// The ECN codepoint written into the IP header.
    pub ecn: Ecn,
    /// With `Some(n)`, `contents` is a run of datagrams of `n` bytes each (the last may be
    /// shorter) sent with one GSO call. Each must be a complete RoCEv2 packet, with its own ICRC
    /// computed for IPv4 identification [`ipv4_id_of_segment(k)`](ipv4_id_of_segment). At most
    /// [`RoceSocket::max_gso_segments`] segments.
    pub segment_size: Option<usize>,
    /// The UDP payload (the RoCEv2 packet from the BTH to the ICRC).
    pub contents: &'a [u8],
}

impl Transmit<'_> {
    /// Number of datagrams this transmit becomes on the wire.
    #[must_use]
    pub fn segments(&self) -> usize {
        match self.segment_size {
            Some(size) if size > 0 && !self.contents.is_empty() => {
                self.contents.len().div_ceil(size)
            }
            _ => 1,
        }
    }
}

/// What the kernel said about one received message (one datagram, or several coalesced by GRO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// The sender's address and UDP source port.
    pub src: SocketAddr,
    /// The destination IP address of the datagram (`IP_PKTINFO`/`IPV6_PKTINFO`), needed for the
    /// ICRC when the socket is bound to a wildcard address. Without packet info (fallback
    /// platforms) it is the socket's bound IP.
    pub dst_ip: IpAddr,
    /// Bytes received into the slot. With GRO this is several datagrams of `stride` bytes each
    /// (the last may be shorter).
    pub len: usize,
    /// Size of each coalesced datagram (`UDP_GRO` control message), or `len` when the message is
    /// one datagram.
    pub stride: usize,
    /// The ECN codepoint of the datagram(s) (GRO coalesces only equal TOS bytes).
    pub ecn: Ecn,
    /// The message did not fit the slot and its tail was dropped (`MSG_TRUNC`): the last
    /// datagram in the slot is incomplete. Cannot happen with slots of [`MAX_UDP_PAYLOAD`] bytes.
    pub truncated: bool,
}

impl Default for RecvMeta {
    fn default() -> Self {
        Self {
            src: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            dst_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            len: 0,
            stride: 0,
            ecn: Ecn::NotEct,
            truncated: false,
        }
    }
}

/// How to open a [`RoceSocket`]. `Config::new(ip)` gives the defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// Local address to bind. Bind a specific IP rather than a wildcard: the source address the
    /// kernel picks for a wildcard socket is not known in advance, and the ICRC covers it.
    pub addr: SocketAddr,
    /// `SO_RCVBUF` to ask for (failures are ignored; the kernel's value is in [`Capabilities`]).
    pub recv_buffer_bytes: usize,
    /// `SO_SNDBUF` to ask for (failures are ignored).
    pub send_buffer_bytes: usize,
    /// Use UDP GSO if the kernel has it.
    pub gso: bool,
    /// Use UDP GRO if the kernel has it.
    pub gro: bool,
    /// TTL / hop limit of every packet.
    pub ttl: u8,
    /// DSCP (the six high bits of TOS / traffic class) of every packet; RoCE deployments often
    /// use 26 for lossless traffic classes.
    pub dscp: u8,
    /// Bound on the sockets of the source-port pool (each is a file descriptor).
    pub max_source_ports: usize,
}

impl Config {
    /// Defaults for `ip`: port [`ROCEV2_UDP_PORT`], 4 MiB buffers, GSO and GRO on, TTL 64,
    /// DSCP 0, up to [`DEFAULT_MAX_SOURCE_PORTS`] source ports.
    #[must_use]
    pub fn new(ip: IpAddr) -> Self {
        Self {
            addr: SocketAddr::new(ip, ROCEV2_UDP_PORT),
            recv_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            send_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            gso: true,
            gro: true,
            ttl: DEFAULT_TTL,
            dscp: 0,
            max_source_ports: DEFAULT_MAX_SOURCE_PORTS,
        }
    }

    /// The same configuration with another local port (0 lets the kernel choose one, which is
    /// what tests do; real peers send to 4791).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.addr.set_port(port);
        self
    }
}

/// What the socket can do, as probed at open (see also [`RoceSocket::max_gso_segments`], which
/// drops to 1 if GSO fails at run time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Segments per GSO send: [`MAX_GSO_SEGMENTS`] with GSO, 1 without.
    pub max_gso_segments: usize,
    /// Datagrams the kernel may coalesce into one received message: 64 with GRO, 1 without.
    pub gro_segments: usize,
    /// The receive buffer the kernel granted (`SO_RCVBUF` as read back; Linux doubles it).
    pub recv_buffer_bytes: usize,
    /// The send buffer the kernel granted.
    pub send_buffer_bytes: usize,
}

/// A caller-owned set of receive slots: one contiguous buffer cut into `slots` slots, plus the
/// per-slot metadata and the system-call scratch, all allocated once.
///
/// [`RoceSocket::try_recv`] overwrites it; after a call, [`RecvArena::iter`] lists the messages
/// received and [`RecvArena::datagrams`] splits GRO messages into datagrams.
pub struct RecvArena {
    buf: Box<[u8]>,
    slot_len: usize,
    meta: Box<[RecvMeta]>,
    filled: usize,
    scratch: imp::RecvScratch,
}

impl RecvArena {
    /// An arena of `slots` slots of `slot_len` bytes each. `slots` is clamped to
    /// `1..=RECV_SLOTS_MAX` and `slot_len` to `1..=65535`. A GRO socket needs slots of
    /// [`MAX_UDP_PAYLOAD`] bytes (see [`RecvArena::for_socket`]); otherwise the path MTU is enough.
    #[must_use]
    pub fn new(slots: usize, slot_len: usize) -> Self {
        let slots = slots.clamp(1, RECV_SLOTS_MAX);
        let slot_len = slot_len.clamp(1, usize::from(u16::MAX));
        let mut buf = vec![0u8; slots * slot_len].into_boxed_slice();
        let scratch = imp::RecvScratch::new(&mut buf, slot_len);
        Self {
            buf,
            slot_len,
            meta: vec![RecvMeta::default(); slots].into_boxed_slice(),
            filled: 0,
            scratch,
        }
    }

    /// An arena whose slots fit what `socket` can deliver: [`MAX_UDP_PAYLOAD`] bytes with GRO
    /// (a coalesced message is up to 64 KiB), 9216 bytes (jumbo frames) without.
    #[must_use]
    pub fn for_socket(socket: &RoceSocket, slots: usize) -> Self {
        let slot_len = if socket.gro_segments() > 1 {
            MAX_UDP_PAYLOAD
        } else {
            9216
        };
        Self::new(slots, slot_len)
    }

    /// Number of slots.
    #[must_use]
    pub fn slots(&self) -> usize {
        self.meta.len()
    }

    /// Bytes per slot.
    #[must_use]
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Messages filled by the last receive.
    #[must_use]
    pub fn len(&self) -> usize {
        self.filled
    }

    /// Whether the last receive got nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// Message `i` of the last receive: its metadata and bytes.
    #[must_use]
    pub fn get(&self, i: usize) -> Option<(&RecvMeta, &[u8])> {
        if i >= self.filled {
            return None;
        }
        let meta = &self.meta[i];
        let start = i * self.slot_len;
        let len = meta.len.min(self.slot_len);
        Some((meta, &self.buf[start..start + len]))
    }

    /// The messages of the last receive, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (&RecvMeta, &[u8])> + '_ {
        (0..self.filled).filter_map(move |i| self.get(i))
    }

    /// The datagrams of the last receive: GRO messages split at their stride.
    pub fn datagrams(&self) -> impl Iterator<Item = (&RecvMeta, &[u8])> + '_ {
        self.iter().flat_map(|(meta, bytes)| {
            let stride = if meta.stride == 0 {
                bytes.len().max(1)
            } else {
                meta.stride
            };
            bytes.chunks(stride).map(move |chunk| (meta, chunk))
        })
    }
}

impl std::fmt::Debug for RecvArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvArena")
            .field("slots", &self.slots())
            .field("slot_len", &self.slot_len)
            .field("filled", &self.filled)
            .finish_non_exhaustive()
    }
}

/// A source-port slot of the pool.
#[derive(Debug)]
enum PortSlot {
    /// A send-only socket bound to `<ip>:<port>`.
    Bound(Socket),
    /// Binding failed; sends for this port must use the main socket's port.
    Unavailable,
}

/// A UDP socket speaking RoCEv2: bound to `<ip>:<port>`, non-blocking, with batched I/O,
/// GSO/GRO, ECN and a pool of send-only sockets for chosen UDP source ports.
///
/// The sockets are never connected (see the crate docs: that keeps the IPv4 identification 0).
/// Sending takes `&mut self` (it may create pool sockets and switch GSO off); receiving takes
/// `&self`.
#[derive(Debug)]
pub struct RoceSocket {
    main: Socket,
    local: SocketAddr,
    config: Config,
    caps: Capabilities,
    gso_segments: usize,
    pool: HashMap<u16, PortSlot>,
    send_scratch: imp::SendScratch,
}

impl RoceSocket {
    /// Opens a socket on `ip`, port [`ROCEV2_UDP_PORT`], with the default [`Config`].
    pub fn bind(ip: IpAddr) -> Result<Self, OpenError> {
        Self::open(Config::new(ip))
    }

    /// Opens a socket as `config` says: sets DF, TTL, TOS, buffer sizes and the receive
    /// options, binds, and probes GSO and GRO.
    pub fn open(config: Config) -> Result<Self, OpenError> {
        let opened = imp::open(&config)?;
        let local = opened
            .socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .unwrap_or(config.addr);
        let caps = Capabilities {
            max_gso_segments: if config.gso { opened.gso_segments } else { 1 },
            gro_segments: opened.gro_segments,
            recv_buffer_bytes: opened.socket.recv_buffer_size().unwrap_or(0),
            send_buffer_bytes: opened.socket.send_buffer_size().unwrap_or(0),
        };
        tracing::debug!(%local, ?caps, "RoCEv2 UDP socket open");
        Ok(Self {
            main: opened.socket,
            local,
            gso_segments: caps.max_gso_segments,
            caps,
            config,
            pool: HashMap::new(),
            send_scratch: imp::SendScratch::new(),
        })
    }

    /// The bound local address (with the port the kernel chose if the config asked for 0).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What the socket could do at open.
    #[must_use]
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// Segments one transmit may carry now: [`MAX_GSO_SEGMENTS`], or 1 without GSO (also after
    /// the kernel refused GSO at run time).
    #[must_use]
    pub fn max_gso_segments(&self) -> usize {
        self.gso_segments
    }

    /// Datagrams one received message may hold (GRO): 64, or 1 without GRO.
    #[must_use]
    pub fn gro_segments(&self) -> usize {
        self.caps.gro_segments
    }

    /// Makes sending from UDP source port `sport` possible and returns the port that will really
    /// be used: `sport` if a send-only socket could be bound to `<ip>:<sport>` (now or before),
    /// else the main socket's port. Compute the ICRC with the returned port.
    ///
    /// 0 and the main socket's own port need no extra socket. Binding fails when the port is in
    /// use (no `SO_REUSEADDR`: sharing a port with another socket would steal its traffic) or
    /// the pool holds [`Config::max_source_ports`] sockets.
    pub fn prepare_source_port(&mut self, sport: u16) -> u16 {
        let main_port = self.local.port();
        if sport == 0 || sport == main_port {
            return main_port;
        }
        if let Some(slot) = self.pool.get(&sport) {
            return match slot {
                PortSlot::Bound(_) => sport,
                PortSlot::Unavailable => main_port,
            };
        }
        if self.pool.len() >= self.config.max_source_ports {
            tracing::debug!(sport, "source-port pool full; using the main port");
            return main_port;
        }
        let addr = SocketAddr::new(self.local.ip(), sport);
        match imp::open_send_only(&self.config, addr) {
            Ok(socket) => {
                self.pool.insert(sport, PortSlot::Bound(socket));
                sport
            }
            Err(error) => {
                tracing::debug!(sport, %error, "source port unavailable; using the main port");
                self.pool.insert(sport, PortSlot::Unavailable);
                main_port
            }
        }
    }

    /// Closes the pool socket of `sport` (when the last QP using it is gone), so the port and
    /// the file descriptor are free again. Also forgets an earlier failure to bind it.
    pub fn release_source_port(&mut self, sport: u16) {
        self.pool.remove(&sport);
    }

    /// Number of ports in the source-port pool (bound or remembered as unavailable).
    #[must_use]
    pub fn source_ports(&self) -> usize {
        self.pool.len()
    }

    /// Sends `transmits` in order and returns how many were sent completely.
    ///
    /// Runs of transmits with the same source port go out with one `sendmmsg(2)` each (at most
    /// [`BATCH_MAX`] per call). A source port not prepared yet is prepared on the spot. The
    /// count is short when the socket buffer is full (`Ok(0)` if nothing fit; wait with
    /// [`RoceSocket::wait_writable`]) or when a later transmit fails: the error is then reported
    /// by the next call, for which the failing transmit is the first.
    pub fn send(&mut self, transmits: &[Transmit<'_>]) -> Result<usize, SendError> {
        let mut sent = 0;
        while sent < transmits.len() {
            let first = &transmits[sent];
            if let Err(error) = self.check(first) {
                return if sent > 0 { Ok(sent) } else { Err(error) };
            }
            let port = first.src_port;
            let mut end = sent + 1;
            while end < transmits.len()
                && end - sent < BATCH_MAX
                && transmits[end].src_port == port
                && self.check(&transmits[end]).is_ok()
            {
                end += 1;
            }
            let run = &transmits[sent..end];
            let gso = self.gso_segments > 1;
            let key = match self.resolve_port(port) {
                Ok(key) => key,
                Err(error) => return if sent > 0 { Ok(sent) } else { Err(error) },
            };
            let socket = match key {
                None => &self.main,
                Some(p) => match self.pool.get(&p) {
                    Some(PortSlot::Bound(socket)) => socket,
                    _ => {
                        return if sent > 0 {
                            Ok(sent)
                        } else {
                            Err(self.unavailable(p))
                        }
                    }
                },
            };
            match imp::send(socket, &self.config, run, gso, &mut self.send_scratch) {
                Ok(n) => {
                    sent += n;
                    if n < run.len() {
                        return Ok(sent);
                    }
                }
                Err(error) if sent > 0 => {
                    // Reported again, as transmits[0], by the caller's next call.
                    tracing::trace!(%error, "send stopped early");
                    return Ok(sent);
                }
                Err(error) => return self.classify_send_error(&run[0], error),
            }
        }
        Ok(sent)
    }

    /// Waits until a datagram can be read, at most `timeout` (`None` waits forever). Returns
    /// `false` on timeout or when a signal interrupted the wait.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool, RecvError> {
        imp::wait(&self.main, true, timeout).map_err(|source| RecvError::Io {
            local: self.local,
            source,
        })
    }

    /// Waits until the socket of source port `src_port` (0 for the main socket) has room in its
    /// send buffer, at most `timeout`. Returns `false` on timeout or interruption.
    pub fn wait_writable(
        &mut self,
        src_port: u16,
        timeout: Option<Duration>,
    ) -> Result<bool, SendError> {
        let dst = self.local;
        let socket = match self.resolve_port(src_port)? {
            None => &self.main,
            Some(p) => match self.pool.get(&p) {
                Some(PortSlot::Bound(socket)) => socket,
                _ => return Err(self.unavailable(p)),
            },
        };
        imp::wait(socket, false, timeout).map_err(|source| SendError::Io { dst, source })
    }

    /// Receives what is queued, without waiting: one `recvmmsg(2)` fills up to
    /// `arena.slots()` slots. Returns the number of messages (0 if none was queued), which
    /// [`RecvArena::len`] also reports. Busy-poll friendly: an empty socket costs one system
    /// call and no allocation.
    pub fn try_recv(&self, arena: &mut RecvArena) -> Result<usize, RecvError> {
        arena.filled = 0;
        match imp::recv(&self.main, self.local, arena) {
            Ok(n) => {
                arena.filled = n;
                Ok(n)
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(0)
            }
            Err(source) => Err(RecvError::Io {
                local: self.local,
                source,
            }),
        }
    }

    /// Receives, waiting up to `timeout` (`None`: forever) for the first datagram. Returns 0 on
    /// timeout.
    pub fn recv_timeout(
        &self,
        arena: &mut RecvArena,
        timeout: Option<Duration>,
    ) -> Result<usize, RecvError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let n = self.try_recv(arena)?;
            if n > 0 {
                return Ok(n);
            }
            let left = match deadline {
                None => None,
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(0),
                },
            };
            self.wait_readable(left)?;
        }
    }

    /// Validates one transmit before it reaches the kernel, so that a kernel `EINVAL` can only
    /// mean that GSO itself was refused.
    fn check(&self, t: &Transmit<'_>) -> Result<(), SendError> {
        let dst = t.dst;
        if dst.is_ipv4() != self.local.is_ipv4() {
            return Err(SendError::AddressFamily {
                dst,
                local: self.local,
            });
        }
        let invalid = |reason| Err(SendError::InvalidTransmit { dst, reason });
        let max_len = if dst.is_ipv4() {
            MAX_UDP_PAYLOAD
        } else {
            65_535 - 8
        };
        if t.contents.is_empty() {
            return invalid("empty datagram");
        }
        if t.contents.len() > max_len {
            return invalid("larger than a UDP datagram");
        }
        if let Some(size) = t.segment_size {
            if size == 0 {
                return invalid("segment_size 0");
            }
            if t.segments() > self.gso_segments {
                return invalid("more GSO segments than max_gso_segments");
            }
        }
        Ok(())
    }

    /// Which socket sends from `port`: `None` for the main socket, `Some(port)` for a pool
    /// socket (prepared here if it was not yet).
    fn resolve_port(&mut self, port: u16) -> Result<Option<u16>, SendError> {
        let main_port = self.local.port();
        if port == 0 || port == main_port {
            return Ok(None);
        }
        if self.prepare_source_port(port) == port {
            Ok(Some(port))
        } else {
            Err(self.unavailable(port))
        }
    }

    fn unavailable(&self, requested: u16) -> SendError {
        SendError::SourcePortUnavailable {
            requested,
            fallback: self.local.port(),
        }
    }

    /// Maps the kernel's error for `first` (the first transmit of a call) to a [`SendError`],
    /// switching GSO off when the kernel refused it.
    fn classify_send_error(
        &mut self,
        first: &Transmit<'_>,
        error: io::Error,
    ) -> Result<usize, SendError> {
        let dst = first.dst;
        if error.kind() == io::ErrorKind::WouldBlock || error.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        let used_gso = self.gso_segments > 1 && first.segments() > 1;
        if used_gso && imp::is_gso_refusal(&error) {
            tracing::warn!(%dst, %error, "kernel refused UDP GSO; disabling it");
            self.gso_segments = 1;
            return Err(SendError::GsoUnavailable { dst, source: error });
        }
        if imp::is_message_too_long(&error) {
            let len = first
                .segment_size
                .unwrap_or(first.contents.len())
                .min(first.contents.len());
            return Err(SendError::MessageTooLong { dst, len });
        }
        Err(SendError::Io { dst, source: error })
    }
}

#[cfg(unix)]
impl std::os::fd::AsRawFd for RoceSocket {
    /// The main (receiving) socket, for an external `epoll`.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.main.as_raw_fd()
    }
}

#[cfg(unix)]
impl std::os::fd::AsFd for RoceSocket {
    /// The main (receiving) socket, for an external `epoll`.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.main.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_round_trips_through_tos() {
        for ecn in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
            assert_eq!(Ecn::from_tos(ecn.bits() | 0b1010_1000), ecn);
        }
    }

    #[test]
    fn segment_ids_count_from_zero_and_wrap() {
        assert_eq!(ipv4_id_of_segment(0), 0);
        assert_eq!(ipv4_id_of_segment(3), 3);
        assert_eq!(ipv4_id_of_segment(65_536 + 5), 5);
    }

    #[test]
    fn transmit_segment_count() {
        let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let bytes = [0u8; 2500];
        let mut t = Transmit {
            dst,
            src_port: 0,
            ecn: Ecn::NotEct,
            segment_size: None,
            contents: &bytes,
        };
        assert_eq!(t.segments(), 1);
        t.segment_size = Some(1000);
        assert_eq!(t.segments(), 3);
        t.segment_size = Some(2500);
        assert_eq!(t.segments(), 1);
    }

    #[test]
    fn arena_splits_at_stride() {
        let mut arena = RecvArena::new(2, 100);
        arena.buf[..10].copy_from_slice(&[1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
        arena.meta[0] = RecvMeta {
            len: 10,
            stride: 4,
            ..RecvMeta::default()
        };
        arena.filled = 1;
        let parts: Vec<&[u8]> = arena.datagrams().map(|(_, b)| b).collect();
        assert_eq!(parts, [&[1, 1, 1, 1][..], &[2, 2, 2, 2], &[3, 3]]);
        assert!(arena.get(1).is_none());
    }
}
