//! The I/O half of a device: the engine and its backend (the UDP socket, or a
//! [`LocalFabric`](crate::LocalFabric) port) behind the device mutex, moving datagrams between
//! them in batches (`recvmmsg` in, `sendmmsg` with UDP GSO out) and telling completion waiters
//! what arrived. Which thread runs it, and when, is `super`'s business.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Waker;

use softrdma_proto::{CqHandle, DatagramMeta, Engine, Instant};
use softrdma_udp::{Ecn, RecvArena, Transmit, BATCH_MAX};

use super::notify::CqNotify;
use crate::backend::Backend;
use crate::event::{AsyncEvent, AsyncEvents};
use crate::faults::{self, Faults, Route};
use crate::tap::Tap;

mod faulted;
mod placed;
mod transmit;

use self::faulted::received_with_faults;
use super::io_counters::IoCounters;

struct CqWatch {
    handle: CqHandle,
    notify: Arc<CqNotify>,
    seen: u64,
    /// The overrun was reported as an asynchronous event.
    overrun_reported: bool,
}

/// The engine, the backend, and the scratch the I/O needs: everything behind the device mutex.
pub(crate) struct Core {
    /// Outside `progress`, reached only through [`Inner::engine`](super::Inner::engine) (and the
    /// few calls beside it in `entry.rs`): the compiler holds every verb to that one entry.
    pub(super) engine: Engine,
    /// Where datagrams go: one virtual call per batch, nothing per packet.
    backend: Box<dyn Backend>,
    pub(super) epoch: std::time::Instant,
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
    /// The socket's own address. A datagram to it never leaves the host: the kernel carries it
    /// over `lo` and segments GSO itself, so it may be batched as loopback traffic is (programs
    /// sharing the host's address, `softrdma exec`'s default).
    local_ip: std::net::IpAddr,
    /// Requested UDP source port -> the port really used.
    ports: HashMap<u16, u16>,
    watches: Vec<CqWatch>,
    /// Receive buffers, used by whichever thread drives progress (under the lock).
    arena: RecvArena,
    /// The first datagram of the last receive not yet handed to the engine: message index
    /// and offset within it (a GRO message holds several). At `arena.len()` none is left.
    rx_next: (usize, usize),
    pub io: IoCounters,
    /// The pcap tap, if the device writes one.
    pub tap: Option<Tap>,
    /// Where asynchronous events go, once the application asked for them.
    pub async_events: Option<AsyncEvents>,
    /// Networks datagrams may come from (empty: any).
    pub allowed_peers: Vec<crate::IpNetwork>,
    /// Fault injection, if the device was opened with faults.
    pub faults: Option<Faults>,
    /// Where a received datagram is corrupted before the engine sees it.
    scratch: Vec<u8>,
    /// Where probes of the shared address go (see `crate::share`), if the device shares it.
    pub probes: Option<std::sync::Arc<crate::share::ProbeMailbox>>,
    /// Receive payloads straight into registered memory when the engine expects them (see
    /// `placed.rs`).
    pub placement: bool,
    /// A message whose placed receive failed (its memory vanished): received as usual.
    placement_off: Option<(u32, u32)>,
    /// The last placed receive placed something (or none was tried yet): ordinary receives
    /// take one datagram at a time, so that the first packet of the next WRITE (whose RETH
    /// says where the rest goes) is handled before the rest is received, into place (see
    /// `placed.rs`). A datagram that leaves nothing to place turns it off.
    placing: bool,
    /// Messages an ordinary receive takes otherwise.
    pub recv_batch: usize,
}

impl Core {
    pub(crate) fn new(
        engine: Engine,
        backend: Box<dyn Backend>,
        arena: RecvArena,
        gso: bool,
        epoch: std::time::Instant,
    ) -> Core {
        let gso = gso && backend.max_gso_segments() > 1;
        let local_ip = backend.local_addr().ip();
        // A backend that cannot receive in place never starts a placed receive: batches.
        let placing = backend.scatters();
        Core {
            engine,
            backend,
            epoch,
            last_now: 0,
            tx_bufs: (0..BATCH_MAX).map(|_| Vec::with_capacity(4200)).collect(),
            tx_meta: Vec::with_capacity(BATCH_MAX),
            gso,
            gso_any_destination: false,
            local_ip,
            ports: HashMap::new(),
            watches: Vec::new(),
            arena,
            rx_next: (0, 0),
            io: IoCounters::default(),
            tap: None,
            async_events: None,
            allowed_peers: Vec::new(),
            faults: None,
            scratch: Vec::new(),
            probes: None,
            placement: true,
            placement_off: None,
            placing,
            recv_batch: usize::MAX,
        }
    }

    /// When the device must next be looked at without a datagram arriving: the engine's next
    /// timer, or a datagram fault injection holds back falling due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let held = self.faults.as_ref().and_then(Faults::next_due);
        match (self.engine.poll_timeout(), held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
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
        self.backend.join_multicast(group)
    }

    /// Leaves multicast `group`.
    pub(crate) fn leave_multicast(&mut self, group: std::net::IpAddr) {
        self.backend.leave_multicast(group);
    }

    /// Closes the source-port pool socket of `sport` (a destroyed QP's) unless a live QP
    /// still sends from it. Without this every connection a long-lived device ever had kept
    /// a socket (one file descriptor per source port, up to the pool's bound of 1024 per
    /// device, after which new QPs fell back to the main port and an ICRC recomputed for
    /// every packet).
    pub(crate) fn release_source_port(&mut self, sport: u16) {
        let engine = &self.engine;
        let used = engine
            .qpns()
            .any(|q| engine.qp(q).is_some_and(|qp| qp.source_port() == sport));
        if !used {
            self.ports.remove(&sport);
            self.backend.release_source_port(sport);
        }
    }

    /// Sockets in the source-port pool.
    #[cfg(test)]
    pub(crate) fn source_ports(&self) -> usize {
        self.backend.source_ports()
    }

    pub(crate) fn unwatch_cq(&mut self, handle: CqHandle) {
        self.watches.retain(|w| w.handle != handle);
    }

    /// Hands the engine the datagrams left over from the last receive or, when none are
    /// left, receives a batch and hands it over; returns how many datagrams it handed over.
    ///
    /// With `until_completion` (a thread spinning on a CQ) it stops after the first datagram
    /// that completes work and leaves the rest for the next round of progress: in a
    /// ping-pong the answer and the ACK of the previous message arrive together, and
    /// handling the ACK first would put its cost between the answer and the application.
    pub(super) fn receive(&mut self, now: Instant, until_completion: bool) -> usize {
        let released = self.release_received(now);
        let (handed, stopped) = self.deliver(now, until_completion);
        let handed = handed + released;
        // Once those left over are all handed over, a batch from the socket as well: a round
        // of progress drains the socket as fast as before.
        if stopped {
            return handed;
        }
        if let Some(placed) = self.receive_placed(now) {
            return handed + placed + self.deliver(now, until_completion).0;
        }
        self.arena
            .set_limit(if self.placing { 1 } else { self.recv_batch });
        self.io.rx_calls += 1;
        match self.backend.try_recv(&mut self.arena) {
            Ok(_) => self.rx_next = (0, 0),
            Err(e) => {
                self.io.rx_errors += 1;
                tracing::debug!(error = %e, "receive failed");
                return handed;
            }
        }
        let handed = handed + self.deliver(now, until_completion).0;
        if self.placing && !self.arena.is_empty() && !self.engine.expects_placement() {
            // Not the start of another WRITE to place: back to batches.
            self.placing = false;
        }
        handed
    }

    /// Hands the engine the datagrams a [`receive`](Self::receive) until a completion left
    /// over, without receiving more.
    pub(super) fn receive_pending(&mut self, now: Instant) -> usize {
        self.deliver(now, false).0
    }

    pub(super) fn has_pending_datagrams(&self) -> bool {
        self.rx_next.0 < self.arena.len()
    }

    /// Hands the engine the datagrams not yet handed over, from `rx_next`; returns how many,
    /// and whether it stopped at a completion (`until_completion`).
    fn deliver(&mut self, now: Instant, until_completion: bool) -> (usize, bool) {
        let mut handed = 0;
        while let Some((meta, data)) = self.arena.get(self.rx_next.0) {
            let next_message = (self.rx_next.0 + 1, 0);
            if meta.truncated {
                self.io.rx_truncated += 1;
                self.rx_next = next_message;
                continue;
            }
            let stride = if meta.stride == 0 {
                data.len().max(1)
            } else {
                meta.stride
            };
            let mut dm = DatagramMeta {
                tos: meta.tos,
                ttl: meta.ttl,
                ..DatagramMeta::new(meta.src, meta.dst_ip)
            };
            let allowed = self.allowed_peers.is_empty()
                || self.allowed_peers.iter().any(|n| n.contains(meta.src.ip()));
            let mut at = self.rx_next.1;
            let mut segment = at / stride;
            while at < data.len() {
                let d = &data[at..(at + stride).min(data.len())];
                dm.segment = u16::try_from(segment).unwrap_or(u16::MAX);
                segment += 1;
                at += stride;
                if let Some(p) = &self.probes {
                    if p.take(meta.src.ip(), self.engine.config().local_ip, d) {
                        continue;
                    }
                }
                self.io.rx_datagrams += 1;
                if let Some(tap) = self.tap.as_mut() {
                    tap.received(meta.src, meta.dst_ip, dm.tos, d);
                }
                if !allowed {
                    self.io.rx_denied += 1;
                    continue;
                }
                if let Some(f) = self.faults.as_mut() {
                    let fate = f.draw(d.len(), false);
                    let copies = received_with_faults(f, &mut self.io, now, fate, dm, d);
                    let d = match fate.corrupt {
                        Some(bit) if copies > 0 => {
                            self.scratch.clear();
                            self.scratch.extend_from_slice(d);
                            faults::flip(&mut self.scratch, bit);
                            &self.scratch[..]
                        }
                        _ => d,
                    };
                    for _ in 0..copies {
                        self.engine.handle_datagram(now, &dm, d);
                    }
                    if copies == 0 {
                        continue;
                    }
                } else {
                    self.engine.handle_datagram(now, &dm, d);
                }
                handed += 1;
                if until_completion && fresh_completions(&self.watches, &self.engine) {
                    self.rx_next = if at < data.len() {
                        (self.rx_next.0, at)
                    } else {
                        next_message
                    };
                    return (handed, true);
                }
            }
            self.rx_next = next_message;
        }
        (handed, false)
    }

    /// Hands the engine the received datagrams fault injection held back that are due;
    /// returns how many.
    fn release_received(&mut self, now: Instant) -> usize {
        let Some(f) = self.faults.as_mut() else {
            return 0;
        };
        let due = f.take_due(now, false);
        let n = due.len();
        for mut h in due {
            let Route::In(meta) = h.route else {
                continue;
            };
            if let Some(bit) = h.corrupt {
                faults::flip(&mut h.bytes, bit);
            }
            self.engine.handle_datagram(now, &meta, &h.bytes);
        }
        n
    }

    /// Makes what the pcap tap has recorded visible in its file, after every round of I/O
    /// (a no-op when nothing new was recorded). Flushing only when the device went idle lost
    /// a capture's last packets whenever the process ended first: a device is not always
    /// dropped before exit (a handle held by a thread that is never joined), and `perf -R`'s
    /// capture lost its closing DREQ and DREP under load.
    pub(crate) fn flush_tap(&mut self) {
        if let Some(tap) = self.tap.as_mut() {
            tap.flush();
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
    pub(super) fn has_fresh_completions(&self) -> bool {
        fresh_completions(&self.watches, &self.engine)
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

/// [`Core::has_fresh_completions`] on the fields it reads (for use while a received batch is
/// borrowed).
fn fresh_completions(watches: &[CqWatch], engine: &Engine) -> bool {
    watches
        .iter()
        .any(|w| engine.cq(w.handle).is_some_and(|cq| cq.produced != w.seen))
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

impl TxGroup {
    /// The group as the socket sends it, its datagrams in `buf`.
    fn transmit<'a>((g, buf): (&TxGroup, &'a Vec<u8>)) -> Transmit<'a> {
        Transmit {
            dst: g.dst,
            src_port: g.src_port,
            ecn: Ecn::from_tos(g.ecn),
            segment_size: (g.count > 1).then_some(g.segment),
            contents: &buf[..g.len],
        }
    }
}
