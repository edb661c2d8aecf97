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
//! earlier than the one the thread sleeps for (or, without inline transmit, always). When
//! datagrams have been coming in quick succession, it spins on the socket a little before
//! it sleeps (`spin`: a passive responder then answers without a wake-up). With `busy_poll`
//! the thread never sleeps.
//!
//! Application threads waiting for completions run the same [`Inner::drive`] step and sleep
//! on the socket plus their CQ's event fd ([`CqNotify`]), which any thread producing
//! completions for that CQ writes while the waiter has armed it. While at least one such
//! poller exists the progress thread sleeps on timers and its eventfd only (one wake-up per
//! datagram, for the thread that wants it); the last poller to leave hands the socket back.
//!
//! The mutex is not fair, and a round of the progress thread can send a window's worth: when an
//! application thread waits for the mutex, the progress thread stops sending after the
//! `sendmmsg` batch under way and, after its round, yields until a waiter has had the mutex
//! (for at most [`YIELD_MAX`]), so a post or a poll on a busy device gets the mutex after one
//! batch, not after the stream.
//!
//! Time: `std::time::Instant` since the device opened, read *under the mutex* and clamped to
//! never go backwards, so the engine sees one monotonic clock whichever thread calls it.

mod core;
mod entry;
mod io_counters;
mod notify;
mod spin;

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use softrdma_proto::Instant;

pub(crate) use self::core::Core;
pub use self::io_counters::IoCounters;
pub(crate) use self::notify::CqNotify;
use self::spin::AdaptiveSpin;
pub(crate) use crate::wake::WakeFd;

/// How long a busy-polling application thread keeps the socket after its last poll.
const SPIN_LEASE: Duration = Duration::from_millis(2);

/// Longest the replies a spinner held back (see [`Inner::drive_inner`]) wait for it to come
/// back: then the progress thread sends them. A spinner that got its completion and went on
/// to something else (a parameter exchange's last message, then a connect) left the peer's
/// send unacknowledged for the whole lease before, and the peer, waiting for that send to
/// complete, was not listening yet when the next connection's REQ came (perftest's `-R`).
/// While a spinner holds the socket the progress thread looks this often (without the device
/// mutex unless replies are overdue).
const HOLD_MAX: Duration = Duration::from_micros(250);

/// How long the progress thread yields to threads waiting for the device mutex.
const YIELD_MAX: Duration = Duration::from_micros(200);

/// What the device's threads share.
pub(crate) struct Inner {
    core: Mutex<Core>,
    wake: WakeFd,
    sock_fd: RawFd,
    pub stop: AtomicBool,
    /// The deadline (engine ns) the progress thread sleeps until; `u64::MAX` = no timer.
    next_wake_ns: AtomicU64,
    pub busy_poll: bool,
    /// Spin a little before sleeping when requests come in quick succession (see `spin`).
    pub adaptive_spin: bool,
    pub inline_transmit: bool,
    epoch: std::time::Instant,
    /// Application threads driving progress while they wait for completions. While there is
    /// one, the progress thread leaves the socket to it and watches only timers and the wake
    /// fd, so an arriving packet wakes one thread — the one that wants the result.
    pollers: AtomicUsize,
    /// When (ns since `epoch`) an application thread last drove the device from a
    /// non-blocking poll ([`Access::Poll`]): while such a spinner is recent, the
    /// progress thread leaves the socket to it, as to a waiter.
    last_spin_ns: AtomicU64,
    /// When a spinner first held replies back that are still queued (ns since `epoch`), 0
    /// when none are: the progress thread sends them once they are [`HOLD_MAX`] old.
    held_since_ns: AtomicU64,
    /// When (ns since `epoch`) the progress thread looks at the device next unless woken:
    /// `u64::MAX` while it sleeps with no timeout, 0 while it runs. See
    /// [`Inner::progress_by`].
    progress_looks_ns: AtomicU64,
    /// Times the progress thread woke from sleep ([`IoCounters::wakeups`]): counted outside
    /// the device mutex, which a wake-up that finds nothing to do does not take.
    pub(crate) wakeups: AtomicU64,
    /// Threads waiting for `core` ([`Inner::lock`]).
    lock_waiters: AtomicUsize,
    /// Times a thread that had waited for `core` got it.
    lock_handoffs: AtomicU64,
    /// Tests: the progress thread pauses this long right after it decided to skip a round,
    /// as a preemption at that point would.
    #[cfg(test)]
    pub(crate) pause_after_skip_ns: AtomicU64,
    /// Tests: rounds the progress thread has finished.
    #[cfg(test)]
    progress_rounds: AtomicU64,
}

impl Inner {
    pub(crate) fn new(
        core: Core,
        sock_fd: RawFd,
        busy_poll: bool,
        adaptive_spin: bool,
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
            adaptive_spin,
            inline_transmit,
            epoch,
            pollers: AtomicUsize::new(0),
            last_spin_ns: AtomicU64::new(0),
            held_since_ns: AtomicU64::new(0),
            progress_looks_ns: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            lock_waiters: AtomicUsize::new(0),
            lock_handoffs: AtomicU64::new(0),
            #[cfg(test)]
            pause_after_skip_ns: AtomicU64::new(0),
            #[cfg(test)]
            progress_rounds: AtomicU64::new(0),
        })
    }

    /// Locks the core. A panic on another thread while it held the lock leaves the engine in
    /// whatever state it reached; carrying on is better than poisoning every later call.
    ///
    /// A thread that finds the mutex taken is counted in `lock_waiters` until it has it: the
    /// progress thread, which would otherwise take the mutex again before the woken waiter
    /// runs, yields to it (see [`run`]).
    fn lock(&self) -> MutexGuard<'_, Core> {
        match self.core.try_lock() {
            Ok(core) => core,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.lock_waiters.fetch_add(1, Ordering::SeqCst);
                let core = self.core.lock().unwrap_or_else(|e| e.into_inner());
                self.lock_handoffs.fetch_add(1, Ordering::SeqCst);
                self.lock_waiters.fetch_sub(1, Ordering::SeqCst);
                core
            }
        }
    }

    /// Whether a thread waits for the device mutex.
    fn lock_wanted(&self) -> bool {
        self.lock_waiters.load(Ordering::SeqCst) > 0
    }

    /// Lets a thread waiting for the device mutex have it before the caller takes it again:
    /// yields the core until one waiter has had it (not all: threads that keep posting keep
    /// the count of waiters up), for at most [`YIELD_MAX`] (a waiter that gets no core within
    /// that is left to the mutex).
    fn yield_to_waiters(&self) {
        if !self.lock_wanted() {
            return;
        }
        let handoffs = self.lock_handoffs.load(Ordering::SeqCst);
        let start = self.now_ns();
        while self.lock_wanted()
            && self.lock_handoffs.load(Ordering::SeqCst) == handoffs
            && self.now_ns().saturating_sub(start) < YIELD_MAX.as_nanos() as u64
        {
            std::thread::yield_now();
        }
    }

    /// Runs `f` on the core as an application thread, then transmits what it produced (inline
    /// mode) or wakes the progress thread, and wakes completion waiters; `flush` says when
    /// queued datagrams go out (see [`Access`]).
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
            // What a spinner left of its last batch (the ACK that came with the answer it
            // handed on, see `Core::receive`) is handled now, once the post has gone out.
            if core.receive_pending(now) > 0 {
                core.flush(now);
            }
            // What a spinner held back went out with the post.
            self.held_since_ns.store(0, Ordering::SeqCst);
        }
        core.notify_cqs(&mut wakers);
        core.flush_tap();
        // The progress thread must learn of a timer earlier than the one it sleeps for —
        // unless an application thread waits on the device: waiters run the timers themselves
        // (and the last one to leave wakes the progress thread), so a ping-pong does not wake
        // it for the retransmit timer every request arms.
        let earlier_timer = core
            .poll_timeout()
            .is_some_and(|d| d.as_nanos() < self.next_wake_ns.load(Ordering::Acquire));
        // Nor while a spinner holds its lease: it runs the timers on every poll, and the
        // progress thread looks again when the lease ends (a wake-up per post would cost the
        // spinner a context switch per message).
        let waiters = self.pollers.load(Ordering::Acquire) != 0;
        let lease = self.spin_lease_left();
        let wake_thread = !self.busy_poll
            && (!self.inline_transmit || (earlier_timer && !waiters && lease.is_none()));
        // But the thread must look when the lease ends: it may have gone to sleep on the
        // socket with no timer before the spinner came, and a spinner that stops polling (to
        // block in `ibv_get_cq_event`, as rping does) runs no timer at all. Then the timer of
        // a send whose ACK was lost never fired, and the QP waited forever for an answer (or,
        // its peer dead, never noticed). `progress_by` wakes the thread only if it would look
        // later, once per sleep.
        let look_at_lease_end =
            !self.busy_poll && self.inline_transmit && earlier_timer && !waiters && lease.is_some();
        drop(core);
        if wake_thread {
            self.wake.signal();
        } else if look_at_lease_end {
            let end = self
                .last_spin_ns
                .load(Ordering::SeqCst)
                .saturating_add(SPIN_LEASE.as_nanos() as u64);
            self.progress_by(end);
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
        if poll_two(self.sock_fd, cq.0, timeout)[1] {
            cq.drain();
        }
    }

    /// Sleeps until `cq` (a CQ's event fd) fires or `timeout` passes, leaving the socket to
    /// others (see `CompletionQueue::poll_blocking_passive`).
    pub(crate) fn sleep_for_cq_only(&self, cq: &WakeFd, timeout: Option<Duration>) {
        // ppoll ignores negative descriptors.
        if poll_two(-1, cq.0, timeout)[1] {
            cq.drain();
        }
    }

    /// Sleeps until a datagram arrives (if `socket`), the wake fd fires, or `timeout` passes.
    /// Returns whether something woke it (`false`: the timeout passed).
    pub(crate) fn sleep(&self, timeout: Option<Duration>, socket: bool) -> bool {
        // ppoll ignores negative descriptors.
        let sock = if socket { self.sock_fd } else { -1 };
        let [datagram, woken] = poll_two(sock, self.wake.0, timeout);
        if woken {
            self.wake.drain();
        }
        datagram || woken
    }
}

impl Inner {
    /// Whether the socket or the wake fd is readable now (a `poll` that does not wait, and
    /// takes no lock). A wake-up found is consumed, as [`Inner::sleep`] consumes it: the
    /// caller is about to look, and a wake fd left readable would end every later spin
    /// at once.
    fn readable_now(&self) -> bool {
        let [socket, wake] = poll_two(self.sock_fd, self.wake.0, Some(Duration::ZERO));
        if wake {
            self.wake.drain();
        }
        socket || wake
    }
}

/// `ppoll` on two descriptors for reading; returns which of them are readable.
fn poll_two(first: RawFd, second: RawFd, timeout: Option<Duration>) -> [bool; 2] {
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
    fds.map(|f| f.revents != 0)
}

impl Inner {
    /// One round of progress on the calling thread: receive what is queued, run due timers,
    /// transmit, wake completion waiters. Returns whether any datagram was received.
    pub(crate) fn drive(&self) -> bool {
        self.drive_inner(Round::Waiter, |_| ()).got
    }

    /// [`drive`](Self::drive) for `round`. For a spinner ([`Round::Spinner`]), what the
    /// received datagrams produced (their ACKs above all) stays queued when they also
    /// completed work: the spinner is about to hand those completions to an application that
    /// typically answers at once, and its post then sends the ACK and the answer in one
    /// `sendmmsg`. Sent first and on their own, the ACKs would put a system call (and, on
    /// loopback, the peer's whole receive path) between every message and its answer. The
    /// next round of progress on any thread — the spinner's next poll, its post, or the
    /// progress thread when the spinner's lease ends — sends them.
    ///
    /// The progress thread ([`Round::Progress`]) stops transmitting between `sendmmsg` batches
    /// when an application thread waits for the device mutex: the application's post or poll
    /// gets the mutex after the batch under way, and what is left goes out with its post (which
    /// sends all that is queued, as every post does) or in the thread's next round.
    ///
    /// `then` runs on the core at the end of the round, before the lock is released: a
    /// spinner polls its CQ there rather than taking the lock once more.
    fn drive_inner<R>(&self, round: Round, then: impl FnOnce(&mut Core) -> R) -> Driven<R> {
        let hold_replies = round == Round::Spinner;
        let mut wakers = Vec::new();
        let mut core = self.lock();
        let now = core.now();
        if hold_replies {
            // A spinner's lease starts at its last poll (the engine's clock and `now_ns`
            // count from the same epoch: one clock read per spin, not two).
            self.last_spin_ns
                .store(now.as_nanos().max(1), Ordering::SeqCst);
        }
        // A spinner stops at the first completion (see `Core::receive`): the rest waits for
        // its next poll or post, or for the progress thread when its lease ends. Not while a
        // thread sleeps in a wait: what is left is out of the socket, so nothing would wake it.
        let until_completion = hold_replies && self.pollers.load(Ordering::Acquire) == 0;
        let got = core.receive(now, until_completion);
        if core.engine.poll_timeout().is_some_and(|d| d <= now) {
            core.engine.handle_timeout(now);
        }
        let hold = hold_replies && got > 0 && core.has_fresh_completions();
        let unsent =
            !hold && core.flush_while(now, || round != Round::Progress || !self.lock_wanted());
        if hold {
            let _ = self.held_since_ns.compare_exchange(
                0,
                now.as_nanos().max(1),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        } else if !unsent {
            self.held_since_ns.store(0, Ordering::SeqCst);
        }
        // What a spinner leaves behind (held replies, datagrams after its completion) waits
        // for its next poll or post; if it stops, for the progress thread at the lease's end.
        let left_behind = hold || until_completion && core.has_pending_datagrams();
        core.notify_cqs(&mut wakers);
        let deadline = core.poll_timeout();
        core.flush_tap();
        self.next_wake_ns.store(
            deadline.map_or(u64::MAX, Instant::as_nanos),
            Ordering::Release,
        );
        let r = then(&mut core);
        drop(core);
        for w in wakers {
            w.wake();
        }
        if left_behind {
            // Held replies wait at most HOLD_MAX; datagrams after the completion, the lease.
            let within = if hold { HOLD_MAX } else { SPIN_LEASE };
            self.progress_by(now.as_nanos().saturating_add(within.as_nanos() as u64));
        }
        Driven {
            got: got > 0,
            unsent,
            then: r,
        }
    }

    /// Makes sure the progress thread looks at the device by `deadline_ns` (ns since
    /// `epoch`): wakes it if it sleeps past then. It may have gone to sleep before a spinner
    /// took the socket — on the socket, which the spinner now empties first, or on nothing
    /// while a waiter held the socket — and then only a timer would wake it: what a spinner
    /// left behind waited for the peer's tail-loss probe (5 ms and more), and a device whose
    /// spinner and waiters had both gone received nothing more at all.
    ///
    /// The thread publishes `u64::MAX` before it reads the lease and the pollers, and the
    /// callers change those before they read this (all sequentially consistent): either the
    /// thread sees the lease and sleeps no longer, or the caller sees it asleep and wakes it.
    fn progress_by(&self, deadline_ns: u64) {
        // A thread that looks a little after the deadline (its own clock read, a moment
        // after the spinner's) need not be woken for it.
        const SLACK_NS: u64 = 200_000;
        if self.progress_looks_ns.load(Ordering::SeqCst) > deadline_ns.saturating_add(SLACK_NS) {
            // One wake-up per sleep: the thread publishes again before it next sleeps.
            self.progress_looks_ns.store(deadline_ns, Ordering::SeqCst);
            self.wake.signal();
        }
    }

    /// Whether replies a spinner held back have waited [`HOLD_MAX`].
    fn held_overdue(&self) -> bool {
        let since = self.held_since_ns.load(Ordering::SeqCst);
        since != 0 && self.now_ns().saturating_sub(since) >= HOLD_MAX.as_nanos() as u64
    }

    /// Application threads driving the device while they wait (see `pollers`).
    #[cfg(test)]
    pub(crate) fn waiters_driving(&self) -> usize {
        self.pollers.load(Ordering::SeqCst)
    }

    /// Time until the engine's next timer, `None` if none is armed.
    pub(crate) fn until_next_timer(&self) -> Option<Duration> {
        let d = self.next_wake_ns.load(Ordering::Acquire);
        (d != u64::MAX).then(|| {
            let now_ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(d.saturating_sub(now_ns))
        })
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// How long the progress thread leaves the socket to a spinner that has stopped calling:
    /// `None` when no spinner is recent.
    fn spin_lease_left(&self) -> Option<Duration> {
        let last = self.last_spin_ns.load(Ordering::SeqCst);
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
    /// at once, or, while a spinner's lease holds the socket, by the lease's end (waking it
    /// for nothing would cost the spinner a context switch per wait).
    pub(crate) fn stop_polling(&self) {
        if self.pollers.fetch_sub(1, Ordering::SeqCst) == 1 {
            match self.spin_lease_left() {
                None => self.wake.signal(),
                Some(_) => self.progress_by(
                    self.last_spin_ns
                        .load(Ordering::SeqCst)
                        .saturating_add(SPIN_LEASE.as_nanos() as u64),
                ),
            }
        }
    }
}

/// Who runs a round of progress ([`Inner::drive_inner`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// The device's progress thread.
    Progress,
    /// An application thread spinning on a CQ ([`Access::Poll`]).
    Spinner,
    /// An application thread waiting for a completion ([`Inner::drive`]).
    Waiter,
}

/// What a round of progress did.
struct Driven<R> {
    /// Datagrams were received.
    got: bool,
    /// The round stopped transmitting for a thread waiting for the mutex, with more maybe
    /// left to send.
    unsent: bool,
    then: R,
}

/// What a verb does to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Looks, or creates or destroys an object that nothing is in flight on: the engine
    /// alone, nothing sent, nobody woken.
    Query,
    /// Posts work (a send, a modify): what it produced is transmitted at once (inline
    /// transmit) or the progress thread is woken for it, and completion waiters are woken.
    Post,
    /// Posts receives, which put nothing on the wire: datagrams queued stay queued, so the
    /// ACKs a spinner held back go out with the application's answer (ping-pong loops repost
    /// their receive first).
    PostReceive,
    /// May end a QP (to ERR, destroy): what is queued goes out first — ACKs a spinner held
    /// back must not die with the QP, or the peer retries into a void — then as [`Post`].
    ///
    /// [`Post`]: Access::Post
    Teardown,
    /// Polls a CQ from an application thread: one round of progress on the caller's thread
    /// first, the datagram it waits for received by itself instead of waking the progress
    /// thread, which would have to get the core first; it holds the socket for
    /// [`SPIN_LEASE`](super::SPIN_LEASE) after its last call.
    Poll,
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
    let mut spin = AdaptiveSpin::new();
    let mut timed_out = false;
    loop {
        // Awake: a spinner need not wake it (see `Inner::progress_by`).
        inner.progress_looks_ns.store(0, Ordering::SeqCst);
        if inner.stop.load(Ordering::Acquire) {
            break;
        }
        let spun_before = inner.last_spin_ns.load(Ordering::SeqCst);
        // The clock woke it to see whether a spinner's lease is over, and it is not: the
        // spinner receives, transmits and runs the timers, so there is nothing to do, and
        // the device mutex stays the spinner's. (A round here took the mutex about a
        // thousand times a second in a `send-lat`, each time on a core a spinner needed;
        // preempted while holding it, this thread would keep the spinner waiting.)
        let idle = std::mem::take(&mut timed_out)
            && inner.spin_lease_left().is_some()
            && !inner.until_next_timer().is_some_and(|t| t.is_zero())
            && !inner.held_overdue();
        #[cfg(test)]
        if idle {
            let ns = inner.pause_after_skip_ns.load(Ordering::Relaxed);
            if ns > 0 {
                std::thread::sleep(Duration::from_nanos(ns));
            }
        }
        if !idle {
            let round = inner.drive_inner(Round::Progress, |_| ());
            #[cfg(test)]
            inner.progress_rounds.fetch_add(1, Ordering::SeqCst);
            if round.got || round.unsent {
                if round.got {
                    spin.received(inner.now_ns());
                }
                // The mutex is unfair: taken again at once, it would be this thread's
                // again before a waiter woken by its release ran, round after round while
                // datagrams keep coming — an application posting to a busy device waited
                // milliseconds per post.
                inner.yield_to_waiters();
                continue;
            }
        }
        // Published before the lease and the pollers are read (see `Inner::progress_by`).
        inner.progress_looks_ns.store(u64::MAX, Ordering::SeqCst);
        let lease = inner.spin_lease_left();
        // A spinner that came and went since this thread's round (its lease already over:
        // this thread was preempted in between) may have left work behind, and saw this
        // thread awake: look again rather than sleep on it. So must a thread that skipped its
        // round for a lease that has ended since: the spinner's last poll may have left work
        // behind, and counted on this thread to look when the lease ended.
        if lease.is_none() && (idle || inner.last_spin_ns.load(Ordering::SeqCst) != spun_before) {
            continue;
        }
        let socket = inner.pollers.load(Ordering::SeqCst) == 0 && lease.is_none();
        // Busy polling spins on the socket — unless an application thread already does (it
        // spins in its own wait): two spinners per device would only fight for the cores.
        if inner.busy_poll && socket {
            std::hint::spin_loop();
            continue;
        }
        if !socket {
            spin.not_watching();
        } else if inner.adaptive_spin && spin.spin(inner.now_ns()) {
            // Spin on the descriptors, not on `drive`: a round holds the device mutex across
            // its `recvmmsg`, and the application's posts and polls on this device would
            // queue behind it. Until something arrives (a datagram, or the wake fd that a
            // spinner leaving work behind writes, this thread counting as asleep), a timer is
            // due, an application thread takes the socket, or the spin is over.
            while !inner.stop.load(Ordering::Acquire)
                && !inner.readable_now()
                && !inner.until_next_timer().is_some_and(|t| t.is_zero())
                && inner.pollers.load(Ordering::SeqCst) == 0
                && inner.spin_lease_left().is_none()
                && spin.spin(inner.now_ns())
            {
                std::hint::spin_loop();
            }
            continue;
        }
        // A spinner's lease ends by itself: look again then, and meanwhile every
        // [`HOLD_MAX`] for replies it held back and left.
        let lease = lease.map(|l| l.min(HOLD_MAX));
        let timeout = match (inner.until_next_timer(), lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if timeout.is_some_and(|t| t.is_zero()) {
            continue;
        }
        let looks = timeout.map_or(u64::MAX, |t| {
            inner
                .now_ns()
                .saturating_add(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
        });
        inner.progress_looks_ns.store(looks, Ordering::SeqCst);
        timed_out = !inner.sleep(timeout, socket);
        inner.wakeups.fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use crate::{Device, DeviceConfig};

    /// While a spinner holds the socket, the progress thread's looks at its lease do not take
    /// the device mutex: with the mutex held throughout, it still wakes every lease and goes
    /// back to sleep. (Before, each look took the mutex, and a look preempted while holding it
    /// stalled the spinner for a timeslice.)
    #[test]
    fn a_look_at_a_spinners_lease_leaves_the_device_mutex_alone() {
        let dev = Device::open(DeviceConfig::new("127.0.11.29".parse().unwrap())).unwrap();
        let inner = dev.inner();
        // A spinner that keeps polling: its lease is always fresh.
        let renew = || {
            inner
                .last_spin_ns
                .store(inner.now_ns().max(1), Ordering::SeqCst)
        };
        // Spins until `d` passed or `done` holds; returns the longest gap between renewals (a
        // loaded machine may take the core for longer than a lease, which then really ends).
        let spin_until = |d: Duration, done: &dyn Fn() -> bool| {
            let start = Instant::now();
            let (mut last, mut gap) = (start, Duration::ZERO);
            while start.elapsed() < d && !done() {
                renew();
                let now = Instant::now();
                gap = gap.max(now - last);
                last = now;
                std::hint::spin_loop();
            }
            gap
        };
        let lease = super::SPIN_LEASE;
        let mut disturbed = Vec::new();
        for _ in 0..10 {
            // The progress thread, woken, finds the lease and sleeps until it would end; it
            // has looked once by its clock when the wake-up count moved twice.
            renew();
            let woke = inner.wakeups.load(Ordering::Relaxed);
            inner.signal();
            let warm = spin_until(Duration::from_secs(1), &|| {
                inner.wakeups.load(Ordering::Relaxed) >= woke + 2
            });
            // The spinner holds the mutex (as for a round of its own) for 100 ms: 50 leases.
            let locking = Instant::now();
            let round = inner.lock();
            let waited = locking.elapsed();
            let before = inner.wakeups.load(Ordering::Relaxed);
            let gap = spin_until(Duration::from_millis(100), &|| false).max(waited);
            let looks = inner.wakeups.load(Ordering::Relaxed) - before;
            drop(round);
            if warm.max(gap) >= lease / 2 {
                disturbed.push((looks, warm.max(gap)));
                continue;
            }
            assert!(
                looks >= 3,
                "the progress thread looked {looks} times in 100 ms of a spinner's lease"
            );
            return;
        }
        panic!("every attempt lost the core for half a lease or more: {disturbed:?}");
    }

    /// A destroyed QP's UDP source-port socket is closed (unless another QP sends from that
    /// port): a device that outlives many connections keeps no socket of theirs. (Each one
    /// used to keep its socket, one file descriptor per connection the device ever had, up to
    /// the pool's 1024.)
    #[test]
    fn a_destroyed_qps_source_port_socket_is_closed() {
        use crate::{wr, AccessFlags, ConnectOptions, QpInitAttr};
        let open = |ip: &str| Device::open(DeviceConfig::new(ip.parse().unwrap())).unwrap();
        let (da, db) = (open("127.0.11.34"), open("127.0.11.35"));
        let (pa, pb) = (da.alloc_pd(), db.alloc_pd());
        let (ca, cb) = (da.create_cq(8).unwrap(), db.create_cq(8).unwrap());
        let (ma, mb) = (
            pa.reg_mr(8, AccessFlags::LOCAL_WRITE).unwrap(),
            pb.reg_mr(8, AccessFlags::LOCAL_WRITE).unwrap(),
        );
        let kept = pa.create_qp(&QpInitAttr::rc(&ca)).unwrap();
        let kept_peer = pb.create_qp(&QpInitAttr::rc(&cb)).unwrap();
        let opts = ConnectOptions::default();
        kept.connect(&kept_peer.endpoint(), &opts).unwrap();
        kept_peer.connect(&kept.endpoint(), &opts).unwrap();
        let mut wcs = Vec::new();
        let mut exchange = |qa: &crate::QueuePair, qb: &crate::QueuePair| {
            qb.post_recv([wr::recv(1, vec![mb.sge(0, 8)])]).unwrap();
            qa.post_send([wr::send(2, vec![ma.sge(0, 8)])]).unwrap();
            for cq in [&ca, &cb] {
                wcs.clear();
                cq.poll_blocking(1, &mut wcs, Some(Duration::from_secs(10)));
                assert_eq!(wcs.len(), 1);
                assert_eq!(wcs[0].status, crate::WcStatus::Success);
            }
        };
        exchange(&kept, &kept_peer);
        let ports = |d: &Device| d.inner().lock().source_ports();
        let (base_a, base_b) = (ports(&da), ports(&db));
        assert!(base_a >= 1 && base_b >= 1, "{base_a} {base_b}");
        for _ in 0..20 {
            let qa = pa.create_qp(&QpInitAttr::rc(&ca)).unwrap();
            let qb = pb.create_qp(&QpInitAttr::rc(&cb)).unwrap();
            qa.connect(&qb.endpoint(), &opts).unwrap();
            qb.connect(&qa.endpoint(), &opts).unwrap();
            exchange(&qa, &qb);
        }
        // The kept connection still sends from its port.
        exchange(&kept, &kept_peer);
        assert_eq!((ports(&da), ports(&db)), (base_a, base_b));
    }

    /// A progress thread kept busy by a stream of WRITEs (each batch of ACKs opens a window
    /// it then sends, with the device mutex held) lets a thread that waits for the mutex have
    /// it after the round under way, not after many. (The mutex is unfair: the thread took
    /// it again before the woken waiter ran, and a post to a device busy sending waited for
    /// milliseconds — 1000 QPs posting 60 WRITEs each over loopback took 1.8 s to post, 0.3 s
    /// after the change.)
    #[test]
    fn a_thread_waiting_for_the_device_mutex_gets_it_after_the_round_under_way() {
        use crate::{wr, AccessFlags, ConnectOptions, QpInitAttr, SendFlags};
        const SIZE: usize = 1 << 16;
        let open = |ip: &str| Device::open(DeviceConfig::new(ip.parse().unwrap())).unwrap();
        let (da, db) = (open("127.0.11.32"), open("127.0.11.33"));
        let (pa, pb) = (da.alloc_pd(), db.alloc_pd());
        let (ca, cb) = (da.create_cq(8).unwrap(), db.create_cq(8).unwrap());
        let mut attr = QpInitAttr::rc(&ca);
        attr.cap.max_send_wr = 4096;
        attr.sq_sig_all = false;
        let qa = pa.create_qp(&attr).unwrap();
        let qb = pb.create_qp(&QpInitAttr::rc(&cb)).unwrap();
        let opts = ConnectOptions::default();
        qa.connect(&qb.endpoint(), &opts).unwrap();
        qb.connect(&qa.endpoint(), &opts).unwrap();
        let ma = pa.reg_mr(SIZE, AccessFlags::LOCAL_WRITE).unwrap();
        let mb = pb
            .reg_mr(SIZE, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
        // 256 MiB, one completion at the end: nothing but a's progress thread moves it.
        let n = 4096;
        qa.post_send((0..n).map(|i| {
            let mut w = wr::write(i, vec![ma.sge(0, SIZE as u32)], mb.addr(), mb.rkey());
            if i + 1 < n {
                w.flags = SendFlags::empty();
            }
            w
        }))
        .unwrap();
        let inner = da.inner();
        let rounds = || inner.progress_rounds.load(Ordering::SeqCst);
        // Until the last WRITE completes, the CQ looked at without driving the device.
        let (mut waited, mut wcs) = (Vec::new(), Vec::new());
        let start = Instant::now();
        while ca.poll(1, &mut wcs) == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the WRITEs did not complete"
            );
            std::thread::sleep(Duration::from_micros(200));
            let before = rounds();
            let core = inner.lock();
            let after = rounds();
            drop(core);
            waited.push(after - before);
        }
        assert_eq!(wcs[0].status, crate::WcStatus::Success);
        // The round under way when the thread came, and one more each time the thread got no
        // core within the progress thread's yield (200 µs). Before, 20 to 165 rounds in the
        // worst wait of three runs; 3 or 4 after. (One QP's window fills no `sendmmsg` batch:
        // the stop between batches is not what this measures.)
        let worst = waited.iter().max().copied().unwrap_or(0);
        assert!(
            worst <= 12,
            "the progress thread ran {worst} rounds while a thread waited for the mutex"
        );
    }

    /// The spinner's last poll left a datagram of its batch behind (it stopped at its
    /// completion), and the spinner stops. The progress thread wakes by its timeout while the
    /// lease still holds, skips its round, and is preempted (here: paused) until the lease is
    /// over; it must still look before it sleeps on the socket without a timeout. (Without
    /// the look it slept, and the datagram waited for whatever came next: 8 failures in 8.)
    #[test]
    fn a_lease_that_ends_after_a_skipped_round_still_gets_its_round() {
        use crate::{wr, AccessFlags, AhAttr, QpInitAttr};
        const QKEY: u32 = 0x1111_1111;
        let ud = |ip: &str| {
            let dev = Device::open(DeviceConfig::new(ip.parse().unwrap())).unwrap();
            let pd = dev.alloc_pd();
            let cq = dev.create_cq(64).unwrap();
            let qp = pd.create_qp(&QpInitAttr::ud(&cq)).unwrap();
            qp.ready_ud(QKEY).unwrap();
            let mr = pd.reg_mr(1 << 14, AccessFlags::LOCAL_WRITE).unwrap();
            (dev, pd, cq, qp, mr)
        };
        let (a_dev, a_pd, _a_cq, a_qp, a_mr) = ud("127.0.11.30");
        let (b_dev, _b_pd, b_cq, b_qp, b_mr) = ud("127.0.11.31");
        let inner = b_dev.inner();
        // Longer than a lease: the lease ends while the thread is paused.
        inner
            .pause_after_skip_ns
            .store(6_000_000, Ordering::Relaxed);
        b_qp.post_recv((0..2).map(|i| wr::recv(i, vec![b_mr.sge(4096 * i as usize, 2048)])))
            .unwrap();
        let ah = a_pd
            .create_ah(&AhAttr::new(b_dev.gid(), a_dev.gid_index() as u8))
            .unwrap();
        let mut out = Vec::new();
        let spin = |d: Duration, out: &mut Vec<_>| {
            let start = Instant::now();
            while start.elapsed() < d {
                b_cq.poll_progress(8, out);
            }
        };
        // b spins; its progress thread, woken, sleeps until the lease would end.
        spin(Duration::from_millis(1), &mut out);
        // (Signalled again if a loaded machine let the lease lapse meanwhile.)
        let start = Instant::now();
        'asleep: loop {
            assert!(start.elapsed() < Duration::from_secs(5));
            let woke = inner.wakeups.load(Ordering::Relaxed);
            inner.signal();
            let signalled = Instant::now();
            while signalled.elapsed() < Duration::from_millis(20) {
                b_cq.poll_progress(8, &mut out);
                if inner.wakeups.load(Ordering::Relaxed) != woke
                    && !matches!(inner.progress_looks_ns.load(Ordering::SeqCst), 0 | u64::MAX)
                {
                    break 'asleep;
                }
            }
        }
        spin(Duration::from_micros(300), &mut out);
        // Two datagrams at once: the spinner stops at the first completion.
        a_qp.post_send(
            (0..2).map(|i| wr::ud_send(i, vec![a_mr.sge(0, 64)], &ah, b_qp.qp_num(), QKEY)),
        )
        .unwrap();
        let start = Instant::now();
        while out.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(5));
            b_cq.poll_progress(1, &mut out);
        }
        assert_eq!(out.len(), 1, "the spinner took one and left one");
        // b stops driving: it only looks at its CQ.
        let stopped = Instant::now();
        while out.len() < 2 && stopped.elapsed() < Duration::from_millis(300) {
            b_cq.poll(2, &mut out);
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(
            out.len(),
            2,
            "the second datagram was still not handled {:?} after the spinner stopped",
            stopped.elapsed()
        );
    }
}
