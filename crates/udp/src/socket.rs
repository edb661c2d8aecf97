//! [`RoceSocket`]: the bound main socket, the source-port pool, batched send and receive.

use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use socket2::Socket;

use crate::arena::RecvArena;
use crate::datagram::{RecvMeta, RecvPiece, Transmit};
use crate::fork::Uninherited;
use crate::{
    imp, OpenError, RecvError, SendError, BATCH_MAX, DEFAULT_MAX_SOURCE_PORTS,
    DEFAULT_SOCKET_BUFFER_BYTES, DEFAULT_TTL, MAX_UDP_PAYLOAD, ROCEV2_UDP_PORT,
};

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
    /// Bind with `SO_REUSEPORT`: other sockets of the same user may bind the same address
    /// and port, and the kernel spreads arriving datagrams over the group — by flow hash,
    /// or by the program attached with [`SteeringHandle::attach`](crate::SteeringHandle).
    /// Off by default: a second socket on the address then fails with `EADDRINUSE`.
    pub reuse_port: bool,
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
            reuse_port: false,
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
    /// Segments per GSO send: [`MAX_GSO_SEGMENTS`](crate::MAX_GSO_SEGMENTS) with GSO, 1 without.
    pub max_gso_segments: usize,
    /// Datagrams the kernel may coalesce into one received message: 64 with GRO, 1 without.
    pub gro_segments: usize,
    /// The receive buffer the kernel granted (`SO_RCVBUF` as read back; Linux doubles it).
    pub recv_buffer_bytes: usize,
    /// The send buffer the kernel granted.
    pub send_buffer_bytes: usize,
}

/// A source-port slot of the pool.
#[derive(Debug)]
enum PortSlot {
    /// A send-only socket bound to `<ip>:<port>`.
    Bound(Uninherited<Socket>),
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
    pub(crate) main: Uninherited<Socket>,
    local: SocketAddr,
    pub(crate) config: Config,
    caps: Capabilities,
    gso_segments: usize,
    pool: HashMap<u16, PortSlot>,
    send_scratch: imp::SendScratch,
    /// Joined multicast groups, each with its receiving socket (see `multicast.rs`).
    pub(crate) groups: Vec<Group>,
    /// Which group socket a receive tries first (they take turns).
    next_group: Cell<usize>,
    /// Readiness of the main socket and the group sockets together.
    pub(crate) poller: imp::Poller,
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
        let poller = imp::Poller::new(&opened.socket).map_err(|source| OpenError::Socket {
            addr: local,
            source,
        })?;
        Ok(Self {
            main: Uninherited::new(opened.socket),
            local,
            gso_segments: caps.max_gso_segments,
            caps,
            config,
            pool: HashMap::new(),
            send_scratch: imp::SendScratch::new(),
            groups: Vec::new(),
            next_group: Cell::new(0),
            poller,
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

    /// Segments one transmit may carry now: [`MAX_GSO_SEGMENTS`](crate::MAX_GSO_SEGMENTS), or 1 without GSO (also after
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
                self.pool
                    .insert(sport, PortSlot::Bound(Uninherited::new(socket)));
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
        imp::wait_any(&self.poller, &self.main, timeout).map_err(|source| RecvError::Io {
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
        let n = self.recv_from(&self.main, arena)?;
        if n > 0 || self.groups.is_empty() {
            return Ok(n);
        }
        // Nothing for this address: the multicast groups' sockets, taking turns.
        let k = self.groups.len();
        let start = self.next_group.get() % k;
        for i in 0..k {
            let at = (start + i) % k;
            let n = self.recv_from(&self.groups[at].socket, arena)?;
            if n > 0 {
                self.next_group.set(at + 1);
                return Ok(n);
            }
        }
        Ok(0)
    }

    /// Receives one message (a datagram, or a GRO batch of them) from the main socket
    /// without waiting, scattered over `pieces`: the kernel fills them in order, byte after
    /// byte, so a caller that knows the layout of what comes next receives each part where
    /// it belongs (RoCE payloads straight into registered memory). `None` if nothing was
    /// queued. Bytes beyond the pieces are cut off ([`RecvMeta::truncated`]). Multicast
    /// groups' sockets are not read.
    ///
    /// # Safety
    /// Every piece must be valid for writes of its length for the duration of the call, and
    /// the bytes may not be accessed meanwhile by anyone but with atomic operations (the
    /// kernel writes them as another thread would). If a piece is not writable, the call
    /// fails with `EFAULT`, and the datagram is lost.
    pub unsafe fn try_recv_scattered(
        &self,
        pieces: &[RecvPiece],
    ) -> Result<Option<RecvMeta>, RecvError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { imp::recv_scattered(&self.main, self.local, pieces) }.map_err(|source| {
            RecvError::Io {
                local: self.local,
                source,
            }
        })
    }

    fn recv_from(&self, socket: &Socket, arena: &mut RecvArena) -> Result<usize, RecvError> {
        arena.filled = 0;
        match imp::recv(socket, self.local, arena) {
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
    /// The main socket (bound to `<ip>:<port>`), for socket options. To wait for datagrams,
    /// use [`RoceSocket::readiness_fd`], which also covers the multicast groups.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.main.as_raw_fd()
    }
}

#[cfg(unix)]
impl std::os::fd::AsFd for RoceSocket {
    /// As [`as_raw_fd`](std::os::fd::AsRawFd::as_raw_fd).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.main.as_fd()
    }
}

#[cfg(unix)]
impl RoceSocket {
    /// A descriptor that is readable whenever [`try_recv`](Self::try_recv) has something,
    /// for `poll(2)` or an external `epoll`: an epoll set of the main socket and the
    /// multicast groups' on Linux, the main socket elsewhere.
    #[must_use]
    pub fn readiness_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.poller
            .fd()
            .unwrap_or_else(|| std::os::fd::AsFd::as_fd(&self.main))
    }
}

impl RecvArena {
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
}

/// One joined multicast group and its receiving socket (see `multicast.rs`).
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) addr: IpAddr,
    pub(crate) socket: Uninherited<Socket>,
}
