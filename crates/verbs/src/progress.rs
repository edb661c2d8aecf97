//! The progress engine: the software NIC of one device.
//!
//! One [`Core`] per device holds the sans-IO [`Engine`] and the [`RoceSocket`] behind one
//! mutex. A dedicated thread ([`run`]) receives datagrams (`recvmmsg` batches), feeds them to
//! the engine, runs its timers, transmits what it produces (`sendmmsg` batches) and wakes
//! completion waiters. Application threads take the same mutex briefly to post work requests
//! and poll completions; with `inline_transmit` (the default) the posting thread also sends
//! the packets its post produced, so a request leaves without a thread hand-off.
//!
//! The thread sleeps in `ppoll(2)` on the socket and an eventfd, with the engine's next timer
//! deadline as the timeout; posting threads write the eventfd only when they armed a timer
//! earlier than the one the thread sleeps for (or, without inline transmit, always). With
//! `busy_poll` the thread never sleeps.
//!
//! Application threads waiting for completions run the same [`Inner::drive`] step and sleep
//! on the socket plus their CQ's event fd ([`CqNotify`]), which any thread producing
//! completions for that CQ writes while the waiter has armed it. While at least one such
//! poller exists the progress thread sleeps on timers and its eventfd only (one wake-up per
//! datagram, for the thread that wants it); the last poller to leave hands the socket back.
//!
//! Time: `std::time::Instant` since the device opened, read *under the mutex* and clamped to
//! never go backwards, so the engine sees one monotonic clock whichever thread calls it.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Waker;
use std::time::Duration;

use softrdma_proto::{CqHandle, DatagramMeta, Engine, Instant};
use softrdma_udp::{
    Ecn, RecvArena, RoceSocket, SendError, Transmit, BATCH_MAX, MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD,
};
use softrdma_wire::IcrcContext;

use crate::event::{AsyncEvent, AsyncEvents, EventPipe};
use crate::tap::Tap;

/// Counters of the I/O around the engine (the engine counts the protocol).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounters {
    /// Datagrams received from the socket and handed to the engine.
    pub rx_datagrams: u64,
    /// Received messages dropped because the kernel truncated them.
    pub rx_truncated: u64,
    /// Receive system calls that failed.
    pub rx_errors: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Batches handed to the socket: one `sendmmsg` each (one per UDP source port in the
    /// batch), however many datagrams they carry.
    pub tx_calls: u64,
    /// Datagrams dropped because sending failed (the RC transport retransmits them).
    pub tx_errors: u64,
    /// Datagrams whose ICRC was recomputed because their UDP source port was unavailable.
    pub tx_port_fallbacks: u64,
    /// Times the progress thread woke from sleep.
    pub wakeups: u64,
    /// Times a completion queue's event fd was written to wake a thread sleeping in
    /// [`CompletionQueue::wait`](crate::CompletionQueue::wait) for completions another thread
    /// produced.
    pub cq_signals: u64,
    /// Records written to the pcap tap ([`DeviceConfig::pcap`](crate::DeviceConfig::pcap)).
    pub pcap_records: u64,
    /// Records the pcap tap failed to write.
    pub pcap_errors: u64,
    /// Datagrams dropped because their source is outside
    /// [`DeviceConfig::allowed_peers`](crate::DeviceConfig::allowed_peers).
    pub rx_denied: u64,
}

/// Wake-up state of one completion queue: async wakers, and an event fd for a thread that
/// waits (ibverbs' completion channel, per CQ). The fd is written only while a waiter has
/// `armed` it — like `ibv_req_notify_cq` — so producing completions costs no system call when
/// nobody sleeps on them.
#[derive(Debug)]
pub(crate) struct CqNotify {
    pub state: Mutex<NotifyState>,
    pub fd: WakeFd,
    pub armed: AtomicBool,
    /// The completion channel this CQ reports to, and the token its events carry.
    pub channel: OnceLock<(Arc<EventPipe>, u64)>,
    /// Armed by `req_notify`: the next completion writes one event to `channel`.
    pub channel_armed: AtomicBool,
}

/// Guarded by [`CqNotify::state`].
#[derive(Debug, Default)]
pub(crate) struct NotifyState {
    /// Async waiters to wake.
    pub wakers: Vec<Waker>,
}

impl CqNotify {
    pub(crate) fn new() -> std::io::Result<CqNotify> {
        Ok(CqNotify {
            state: Mutex::new(NotifyState::default()),
            fd: WakeFd::new()?,
            armed: AtomicBool::new(false),
            channel: OnceLock::new(),
            channel_armed: AtomicBool::new(false),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, NotifyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct CqWatch {
    handle: CqHandle,
    notify: Arc<CqNotify>,
    seen: u64,
    /// The overrun was reported as an asynchronous event.
    overrun_reported: bool,
}

/// The engine, the socket, and the scratch the I/O needs: everything behind the device mutex.
pub(crate) struct Core {
    pub engine: Engine,
    socket: RoceSocket,
    epoch: std::time::Instant,
    last_now: u64,
    /// One buffer per datagram of a batch; a GSO datagram holds its segments back to back,
    /// each built in place by the engine. Only the first `TxGroup::len` bytes count: the
    /// buffers keep their length between batches, so that building in them never zero-fills.
    tx_bufs: Vec<Vec<u8>>,
    tx_meta: Vec<TxGroup>,
    /// Batch equal-sized packets to one destination into UDP GSO sends (see [`TxGroup`]).
    gso: bool,
    /// GSO to every destination, not only loopback ones (see
    /// [`crate::netdev::kernel_segments_gso`]).
    pub gso_any_destination: bool,
    /// Requested UDP source port -> the port really used.
    ports: HashMap<u16, u16>,
    watches: Vec<CqWatch>,
    /// Receive buffers, used by whichever thread drives progress (under the lock).
    arena: RecvArena,
    pub io: IoCounters,
    /// The pcap tap, if the device writes one.
    pub tap: Option<Tap>,
    /// Where asynchronous events go, once the application asked for them.
    pub async_events: Option<AsyncEvents>,
    /// Networks datagrams may come from (empty: any).
    pub allowed_peers: Vec<crate::IpNetwork>,
}

impl Core {
    pub(crate) fn new(
        engine: Engine,
        socket: RoceSocket,
        arena: RecvArena,
        gso: bool,
        epoch: std::time::Instant,
    ) -> Core {
        let gso = gso && gso_allowed(&socket);
        Core {
            engine,
            socket,
            epoch,
            last_now: 0,
            tx_bufs: (0..BATCH_MAX).map(|_| Vec::with_capacity(4200)).collect(),
            tx_meta: Vec::with_capacity(BATCH_MAX),
            gso,
            gso_any_destination: false,
            ports: HashMap::new(),
            watches: Vec::new(),
            arena,
            io: IoCounters::default(),
            tap: None,
            async_events: None,
            allowed_peers: Vec::new(),
        }
    }

    /// The engine's clock: monotonic, never behind a value already handed out.
    pub(crate) fn now(&mut self) -> Instant {
        let t = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_now = self.last_now.max(t);
        Instant::from_nanos(self.last_now)
    }

    pub(crate) fn watch_cq(&mut self, handle: CqHandle, notify: Arc<CqNotify>) {
        let seen = self.engine.cq(handle).map_or(0, |c| c.produced);
        self.watches.push(CqWatch {
            handle,
            notify,
            seen,
            overrun_reported: false,
        });
    }

    /// Joins multicast `group` on the socket (see `softrdma_udp::RoceSocket::join_multicast`).
    pub(crate) fn join_multicast(
        &mut self,
        group: std::net::IpAddr,
    ) -> Result<(), softrdma_udp::MulticastError> {
        self.socket.join_multicast(group)
    }

    /// Leaves multicast `group`.
    pub(crate) fn leave_multicast(&mut self, group: std::net::IpAddr) {
        self.socket.leave_multicast(group);
    }

    pub(crate) fn unwatch_cq(&mut self, handle: CqHandle) {
        self.watches.retain(|w| w.handle != handle);
    }

    /// Receives one batch and feeds it to the engine; returns the number of messages.
    fn receive(&mut self, now: Instant) -> usize {
        let arena = &mut self.arena;
        let n = match self.socket.try_recv(arena) {
            Ok(n) => n,
            Err(e) => {
                self.io.rx_errors += 1;
                tracing::debug!(error = %e, "receive failed");
                return 0;
            }
        };
        for (meta, data) in arena.iter() {
            if meta.truncated {
                self.io.rx_truncated += 1;
                continue;
            }
            let stride = if meta.stride == 0 {
                data.len().max(1)
            } else {
                meta.stride
            };
            let dm = DatagramMeta {
                tos: meta.tos,
                ttl: meta.ttl,
                ..DatagramMeta::new(meta.src, meta.dst_ip)
            };
            let allowed = self.allowed_peers.is_empty()
                || self.allowed_peers.iter().any(|n| n.contains(meta.src.ip()));
            for d in data.chunks(stride) {
                self.io.rx_datagrams += 1;
                if let Some(tap) = self.tap.as_mut() {
                    tap.received(meta.src, meta.dst_ip, dm.tos, d);
                }
                if !allowed {
                    self.io.rx_denied += 1;
                    continue;
                }
                self.engine.handle_datagram(now, &dm, d);
            }
        }
        n
    }

    /// Sends everything the engine has to send.
    pub(crate) fn flush(&mut self, now: Instant) {
        loop {
            self.tx_meta.clear();
            // Poll only while a packet that does not join the open group still has a slot.
            while self.tx_meta.len() < BATCH_MAX {
                // Ask for the packet as the next segment of the open group: the kernel will
                // give it that IPv4 identification, which the ICRC covers.
                let next_id = match self.tx_meta.last() {
                    Some(g) if g.open => g.count as u16,
                    _ => 0,
                };
                // Built straight after the open group's datagrams, where it joins them if it
                // can; otherwise in the next free slot.
                let (slot, at) = match self.tx_meta.last() {
                    Some(g) if g.open => (self.tx_meta.len() - 1, g.len),
                    _ => (self.tx_meta.len(), 0),
                };
                let Some(t) =
                    self.engine
                        .poll_transmit_at(now, &mut self.tx_bufs[slot], at, next_id)
                else {
                    break;
                };
                let port = match self.ports.get(&t.src_port) {
                    Some(&p) => p,
                    None => {
                        let p = self.socket.prepare_source_port(t.src_port);
                        self.ports.insert(t.src_port, p);
                        p
                    }
                };
                let joins = self.tx_meta.last().is_some_and(|g| {
                    g.open
                        && g.dst == t.dst
                        && g.src_port == port
                        && g.ecn == t.ecn
                        && t.len <= g.segment
                        && g.len + t.len <= MAX_UDP_PAYLOAD
                });
                let id = if joins { next_id } else { 0 };
                if port != t.src_port || id != next_id {
                    // The ICRC covers the UDP source port and the IPv4 identification:
                    // recompute it for the ones the datagram really gets.
                    if port != t.src_port {
                        self.io.tx_port_fallbacks += 1;
                    }
                    let local = self.socket.local_addr().ip();
                    let ctx = IcrcContext {
                        ipv4_id: id,
                        ..IcrcContext::new(local, t.dst.ip(), port, t.dst.port())
                    };
                    if ctx.fill(&mut self.tx_bufs[slot][at..at + t.len]).is_err() {
                        self.io.tx_errors += 1;
                        continue;
                    }
                }
                if joins {
                    let g = &mut self.tx_meta[slot];
                    g.count += 1;
                    g.len += t.len;
                    // GSO allows only the last segment to be shorter; a full group is done.
                    g.open = t.len == g.segment
                        && g.count < MAX_GSO_SEGMENTS
                        && g.len + g.segment <= MAX_UDP_PAYLOAD;
                    continue;
                }
                let i = self.tx_meta.len();
                if slot != i {
                    // Built behind a group it does not join: it starts the next slot (the only
                    // packets copied, one per group at most).
                    let (done, free) = self.tx_bufs.split_at_mut(i);
                    let to = &mut free[0];
                    if to.len() < t.len {
                        to.resize(t.len, 0);
                    }
                    to[..t.len].copy_from_slice(&done[slot][at..at + t.len]);
                }
                let gso = self.gso && (self.gso_any_destination || t.dst.ip().is_loopback());
                self.tx_meta.push(TxGroup {
                    dst: t.dst,
                    src_port: port,
                    ecn: t.ecn,
                    segment: t.len,
                    count: 1,
                    len: t.len,
                    open: gso,
                });
            }
            if self.tx_meta.is_empty() {
                return;
            }
            let full = self.tx_meta.len() == BATCH_MAX;
            self.send_batch();
            if !full {
                return;
            }
        }
    }

    fn send_batch(&mut self) {
        let mut sent = 0;
        let mut stalls = 0;
        while sent < self.tx_meta.len() {
            let transmits: Vec<Transmit<'_>> = self.tx_meta[sent..]
                .iter()
                .zip(&self.tx_bufs[sent..])
                .map(|(g, buf)| Transmit {
                    dst: g.dst,
                    src_port: g.src_port,
                    ecn: Ecn::from_tos(g.ecn),
                    segment_size: (g.count > 1).then_some(g.segment),
                    contents: &buf[..g.len],
                })
                .collect();
            self.io.tx_calls += 1;
            match self.socket.send(&transmits) {
                Ok(0) => {
                    // Socket buffer full: wait a little, then give the rest up to the
                    // transport's retransmission rather than stall every thread.
                    stalls += 1;
                    let port = transmits[0].src_port;
                    drop(transmits);
                    let ready = self
                        .socket
                        .wait_writable(port, Some(Duration::from_millis(1)))
                        .unwrap_or(false);
                    if !ready && stalls > 3 {
                        let left: usize = self.tx_meta[sent..].iter().map(|g| g.count).sum();
                        self.io.tx_errors += left as u64;
                        return;
                    }
                }
                Ok(n) => {
                    drop(transmits);
                    for i in sent..sent + n {
                        self.record_sent(i);
                    }
                    sent += n;
                }
                Err(SendError::GsoUnavailable { .. }) => {
                    // The kernel refused GSO (the socket stopped using it): send this group's
                    // segments one by one, each now identification 0.
                    drop(transmits);
                    self.gso = false;
                    self.send_split(sent);
                    sent += 1;
                }
                Err(e) => {
                    if !matches!(e, SendError::SourcePortUnavailable { .. }) {
                        tracing::debug!(error = %e, "send failed; the datagram is dropped");
                    }
                    self.io.tx_errors += self.tx_meta[sent].count as u64;
                    sent += 1;
                }
            }
        }
    }

    /// Sends group `i` as separate datagrams, recomputing each segment's ICRC for IPv4
    /// identification 0.
    fn send_split(&mut self, i: usize) {
        let g = self.tx_meta[i];
        let local = self.socket.local_addr().ip();
        let ctx = IcrcContext::new(local, g.dst.ip(), g.src_port, g.dst.port());
        for k in 0..g.count {
            let start = k * g.segment;
            let seg = &mut self.tx_bufs[i][start..(start + g.segment).min(g.len)];
            if ctx.fill(seg).is_err() {
                self.io.tx_errors += 1;
                continue;
            }
            let t = Transmit {
                dst: g.dst,
                src_port: g.src_port,
                ecn: Ecn::from_tos(g.ecn),
                segment_size: None,
                contents: seg,
            };
            match self.socket.send(std::slice::from_ref(&t)) {
                Ok(1) => {
                    self.io.tx_datagrams += 1;
                    if let Some(tap) = self.tap.as_mut() {
                        tap.sent(g.src_port, g.dst, g.ecn, 0, seg);
                    }
                }
                _ => self.io.tx_errors += 1,
            }
        }
    }

    /// Accounts for (and taps) group `i` after the kernel took it.
    fn record_sent(&mut self, i: usize) {
        let g = self.tx_meta[i];
        self.io.tx_datagrams += g.count as u64;
        if let Some(tap) = self.tap.as_mut() {
            for (k, seg) in self.tx_bufs[i][..g.len].chunks(g.segment).enumerate() {
                tap.sent(g.src_port, g.dst, g.ecn, k as u16, seg);
            }
        }
    }

    /// The I/O counters, with the tap's.
    pub(crate) fn io_counters(&self) -> IoCounters {
        let mut io = self.io;
        if let Some(tap) = &self.tap {
            io.pcap_records = tap.records;
            io.pcap_errors = tap.errors;
        }
        io
    }

    /// Whether a watched CQ has completions its waiters have not been told of.
    fn has_fresh_completions(&self) -> bool {
        self.watches.iter().any(|w| {
            self.engine
                .cq(w.handle)
                .is_some_and(|cq| cq.produced != w.seen)
        })
    }

    /// Wakes the waiters of every CQ that got completions; returns async wakers to call once
    /// the core lock is released.
    pub(crate) fn notify_cqs(&mut self, wakers: &mut Vec<Waker>) {
        for w in &mut self.watches {
            let Some(cq) = self.engine.cq(w.handle) else {
                continue;
            };
            if cq.produced != w.seen {
                w.seen = cq.produced;
                wakers.append(&mut w.notify.lock().wakers);
                if w.notify.armed.swap(false, Ordering::AcqRel) {
                    w.notify.fd.signal();
                    self.io.cq_signals += 1;
                }
                if w.notify.channel_armed.swap(false, Ordering::AcqRel) {
                    if let Some((pipe, token)) = w.notify.channel.get() {
                        pipe.push(0, *token);
                    }
                }
            }
            if cq.overrun && !w.overrun_reported {
                w.overrun_reported = true;
                if let Some(events) = &self.async_events {
                    events.push(AsyncEvent::CqOverrun { cq: w.handle.0 });
                }
            }
        }
        // The engine's own events (QP and SRQ); dropped unless the application asked for
        // them, as ibverbs has no events without an async fd reader.
        while let Some(e) = self.engine.poll_async_event() {
            if let (Some(events), Some(e)) = (&self.async_events, AsyncEvent::from_engine(e)) {
                events.push(e);
            }
        }
    }
}

/// Datagrams of a batch: one, or several equal-sized ones to the same destination sent as one
/// UDP GSO datagram (`segment` bytes each, the last possibly shorter). Segment `k` of a GSO
/// send leaves with IPv4 identification `k` (`softrdma_udp::ipv4_id_of_segment`), so the
/// engine computes each one's ICRC for that identification.
#[derive(Debug, Clone, Copy)]
struct TxGroup {
    dst: std::net::SocketAddr,
    src_port: u16,
    ecn: u8,
    segment: usize,
    count: usize,
    len: usize,
    /// More segments may join.
    open: bool,
}

/// Whether the kernel offers GSO on this socket ([`crate::DeviceConfig::gso`] decides whether
/// to use it). Datagrams to loopback addresses are batched, and to any address when the
/// device sends from a veth interface ([`crate::netdev::kernel_segments_gso`]).
fn gso_allowed(socket: &RoceSocket) -> bool {
    socket.max_gso_segments() > 1
}

/// A level-triggered wake-up file descriptor (eventfd).
#[derive(Debug)]
pub(crate) struct WakeFd(pub(crate) RawFd);

impl WakeFd {
    pub(crate) fn new() -> std::io::Result<WakeFd> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(WakeFd(fd))
    }

    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A full counter (EAGAIN)
        // still leaves the fd readable, which is all that matters.
        let _ = unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd.
        let _ = unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
    }
}

impl Drop for WakeFd {
    fn drop(&mut self) {
        // SAFETY: the fd is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}

/// How long a busy-polling application thread keeps the socket after its last poll.
const SPIN_LEASE: Duration = Duration::from_millis(2);

/// What the device's threads share.
pub(crate) struct Inner {
    core: Mutex<Core>,
    wake: WakeFd,
    sock_fd: RawFd,
    pub stop: AtomicBool,
    /// The deadline (engine ns) the progress thread sleeps until; `u64::MAX` = no timer.
    next_wake_ns: AtomicU64,
    pub busy_poll: bool,
    pub inline_transmit: bool,
    epoch: std::time::Instant,
    /// Application threads driving progress while they wait for completions. While there is
    /// one, the progress thread leaves the socket to it and watches only timers and the wake
    /// fd, so an arriving packet wakes one thread — the one that wants the result.
    pollers: AtomicUsize,
    /// When (ns since `epoch`) an application thread last drove the device from a
    /// non-blocking poll ([`Inner::drive_from_poll`]): while such a spinner is recent, the
    /// progress thread leaves the socket to it, as to a waiter.
    last_spin_ns: AtomicU64,
}

impl Inner {
    pub(crate) fn new(
        core: Core,
        sock_fd: RawFd,
        busy_poll: bool,
        inline_transmit: bool,
    ) -> std::io::Result<Inner> {
        let epoch = core.epoch;
        Ok(Inner {
            core: Mutex::new(core),
            wake: WakeFd::new()?,
            sock_fd,
            stop: AtomicBool::new(false),
            next_wake_ns: AtomicU64::new(u64::MAX),
            busy_poll,
            inline_transmit,
            epoch,
            pollers: AtomicUsize::new(0),
            last_spin_ns: AtomicU64::new(0),
        })
    }

    /// Locks the core. A panic on another thread while it held the lock leaves the engine in
    /// whatever state it reached; carrying on is better than poisoning every later call.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the core as an application thread, then transmits what it produced (inline
    /// mode) or wakes the progress thread, and wakes completion waiters.
    pub(crate) fn with_core<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        self.with_core_then(Flush::After, f)
    }

    /// [`with_core`](Self::with_core) for work that may end a QP (modify, destroy): what is
    /// queued goes out first — the ACKs a spinner held back (see [`Inner::drive_inner`]) must
    /// not die with the QP, or the peer would retry into a void.
    pub(crate) fn with_core_settled<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        self.with_core_then(Flush::BeforeAndAfter, f)
    }

    /// [`with_core`](Self::with_core) for work that puts nothing on the wire (posting
    /// receives): it leaves queued datagrams queued, so the ACKs a spinner held back for the
    /// application's answer (see [`Inner::drive_inner`]) still go out with that answer when
    /// the application reposts its receive first, as ping-pong loops do.
    pub(crate) fn with_core_quiet<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        self.with_core_then(Flush::Never, f)
    }

    fn with_core_then<R>(&self, flush: Flush, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        let mut wakers = Vec::new();
        let mut core = self.lock();
        let now = core.now();
        if flush == Flush::BeforeAndAfter {
            core.flush(now);
        }
        let r = f(&mut core, now);
        if self.inline_transmit && flush != Flush::Never {
            core.flush(now);
        }
        core.notify_cqs(&mut wakers);
        // The progress thread must learn of a timer earlier than the one it sleeps for —
        // unless an application thread waits on the device: waiters run the timers themselves
        // (and the last one to leave wakes the progress thread), so a ping-pong does not wake
        // it for the retransmit timer every request arms.
        let earlier_timer = core
            .engine
            .poll_timeout()
            .is_some_and(|d| d.as_nanos() < self.next_wake_ns.load(Ordering::Acquire));
        // Nor while a spinner holds its lease: it runs the timers on every poll, and the
        // progress thread looks again when the lease ends (a wake-up per post would cost the
        // spinner a context switch per message).
        let wake_thread = !self.busy_poll
            && (!self.inline_transmit
                || (earlier_timer
                    && self.pollers.load(Ordering::Acquire) == 0
                    && self.spin_lease_left().is_none()));
        drop(core);
        if wake_thread {
            self.wake.signal();
        }
        for w in wakers {
            w.wake();
        }
        r
    }

    /// Wakes the progress thread.
    pub(crate) fn signal(&self) {
        self.wake.signal();
    }

    /// Sleeps until a datagram arrives or `cq` (a CQ's event fd) fires, or `timeout` passes:
    /// how an application thread waits for completions while it drives the device.
    pub(crate) fn sleep_for_cq(&self, cq: &WakeFd, timeout: Option<Duration>) {
        if poll_two(self.sock_fd, cq.0, timeout) {
            cq.drain();
        }
    }

    /// Sleeps until a datagram arrives (if `socket`), the wake fd fires, or `timeout` passes.
    pub(crate) fn sleep(&self, timeout: Option<Duration>, socket: bool) {
        // ppoll ignores negative descriptors.
        let sock = if socket { self.sock_fd } else { -1 };
        if poll_two(sock, self.wake.0, timeout) {
            self.wake.drain();
        }
    }
}

/// `ppoll` on two descriptors for reading; returns whether the second one is readable.
fn poll_two(first: RawFd, second: RawFd, timeout: Option<Duration>) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: first,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: second,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a live array of two pollfds, `tsp` null or a live timespec, and the
    // signal mask pointer is null (unchanged).
    let _ = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, tsp, std::ptr::null()) };
    fds[1].revents != 0
}

impl Inner {
    /// One round of progress on the calling thread: receive what is queued, run due timers,
    /// transmit, wake completion waiters. Returns whether any datagram was received.
    pub(crate) fn drive(&self) -> bool {
        self.drive_inner(false)
    }

    /// [`drive`](Self::drive); with `hold_replies`, what the received datagrams produced (their
    /// ACKs above all) stays queued when they also completed work: the caller is a spinner
    /// about to hand those completions to an application that typically answers at once, and
    /// its post then sends the ACK and the answer in one `sendmmsg`. Sent first and on their
    /// own, the ACKs would put a system call (and, on loopback, the peer's whole receive
    /// path) between every message and its answer. The next round of progress on any thread
    /// — the spinner's next poll, its post, or the progress thread when the spinner's lease
    /// ends — sends them.
    fn drive_inner(&self, hold_replies: bool) -> bool {
        let mut wakers = Vec::new();
        let mut core = self.lock();
        let now = core.now();
        let got = core.receive(now);
        if core.engine.poll_timeout().is_some_and(|d| d <= now) {
            core.engine.handle_timeout(now);
        }
        if !(hold_replies && got > 0 && core.has_fresh_completions()) {
            core.flush(now);
        }
        core.notify_cqs(&mut wakers);
        let deadline = core.engine.poll_timeout();
        if got == 0 {
            // Going idle: make what the tap has seen visible in the file.
            if let Some(tap) = core.tap.as_mut() {
                tap.flush();
            }
        }
        self.next_wake_ns.store(
            deadline.map_or(u64::MAX, Instant::as_nanos),
            Ordering::Release,
        );
        drop(core);
        for w in wakers {
            w.wake();
        }
        got > 0
    }

    /// Time until the engine's next timer, `None` if none is armed.
    pub(crate) fn until_next_timer(&self) -> Option<Duration> {
        let d = self.next_wake_ns.load(Ordering::Acquire);
        (d != u64::MAX).then(|| {
            let now_ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(d.saturating_sub(now_ns))
        })
    }

    /// One round of progress on behalf of a thread that busy-polls a CQ (`ibv_poll_cq` in a
    /// loop, as perftest does): the datagram the spinner waits for is received by the spinner
    /// itself instead of waking the progress thread, which would have to get a core first.
    /// The spinner holds the socket for [`SPIN_LEASE`] after its last call; then the progress
    /// thread takes it back.
    pub(crate) fn drive_from_poll(&self) -> bool {
        self.last_spin_ns
            .store(self.now_ns().max(1), Ordering::Release);
        self.drive_inner(true)
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// How long the progress thread leaves the socket to a spinner that has stopped calling:
    /// `None` when no spinner is recent.
    fn spin_lease_left(&self) -> Option<Duration> {
        let last = self.last_spin_ns.load(Ordering::Acquire);
        if last == 0 {
            return None;
        }
        let end = last.saturating_add(SPIN_LEASE.as_nanos() as u64);
        end.checked_sub(self.now_ns())
            .filter(|&left| left > 0)
            .map(Duration::from_nanos)
    }

    /// Registers the calling application thread as a poller of the socket.
    pub(crate) fn start_polling(&self) {
        self.pollers.fetch_add(1, Ordering::AcqRel);
    }

    /// Unregisters a poller; the last one hands the socket back to the progress thread —
    /// unless a spinner's lease holds it: the progress thread then sleeps no longer than the
    /// lease, and waking it for nothing would cost the spinner a context switch per wait.
    pub(crate) fn stop_polling(&self) {
        if self.pollers.fetch_sub(1, Ordering::AcqRel) == 1 && self.spin_lease_left().is_none() {
            self.wake.signal();
        }
    }
}

/// When [`Inner::with_core_then`] transmits what the engine has queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    Never,
    After,
    BeforeAndAfter,
}

/// The progress thread: runs until `inner.stop`.
pub(crate) fn run(inner: Arc<Inner>) {
    let mut wakers = Vec::new();
    loop {
        if inner.stop.load(Ordering::Acquire) {
            break;
        }
        if inner.drive() {
            continue;
        }
        let lease = inner.spin_lease_left();
        let socket = inner.pollers.load(Ordering::Acquire) == 0 && lease.is_none();
        // Busy polling spins on the socket — unless an application thread already does (it
        // spins in its own wait): two spinners per device would only fight for the cores.
        if inner.busy_poll && socket {
            std::hint::spin_loop();
            continue;
        }
        // A spinner's lease ends by itself: look again then.
        let timeout = match (inner.until_next_timer(), lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if timeout.is_some_and(|t| t.is_zero()) {
            continue;
        }
        inner.sleep(timeout, socket);
        inner.lock().io.wakeups += 1;
    }
    // Shutdown: what is queued (held ACKs above all) goes out, then anything still connected
    // goes to ERR so its work completes with flush errors.
    let mut core = inner.lock();
    let now = core.now();
    core.flush(now);
    let qpns: Vec<u32> = core.engine.qpns().collect();
    for qpn in qpns {
        let attr = softrdma_proto::QpAttr {
            qp_state: Some(softrdma_proto::QpState::Err),
            ..Default::default()
        };
        let _ = core.engine.modify_qp(qpn, &attr);
    }
    core.notify_cqs(&mut wakers);
    drop(core);
    for w in wakers.drain(..) {
        w.wake();
    }
}
