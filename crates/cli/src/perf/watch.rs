//! Bounding the wait for a silent peer (`--timeout`), and saying why a run failed.
//!
//! perftest waits for its peer without limit between the out-of-band steps: a passive server
//! whose client froze (SIGSTOP) during a `-D 30` run waits forever. softrdma does the same by
//! default; with `--timeout SECS` a [`Watchdog`] thread watches for signs of life — a step of
//! the out-of-band exchange, a completion, any RoCEv2 packet the device receives — and when
//! none came for SECS seconds it shuts the out-of-band connection down, which ends the wait
//! (blocked in a TCP read, never spinning) with an error that [`Watchdog::explain`] rewords.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use softrdma::{CompletionQueue, Device, WorkCompletion};

use super::control::Control;
use super::layout::split_id;
use super::output::PerfError;
use crate::limits::fmt_secs;

struct Shared {
    beats: AtomicU64,
    fired: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// Ends the run when the peer shows no sign of life for a while (see the module docs).
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    limit: Duration,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching: `device`'s received packets and [`Watchdog::beat`]s are signs of life;
    /// after `limit` without one, the control channel `stream` is shut down.
    pub(crate) fn start(
        limit: Duration,
        device: Device,
        stream: Control,
    ) -> std::io::Result<Watchdog> {
        let shared = Arc::new(Shared {
            beats: AtomicU64::new(0),
            fired: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let tick = (limit / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
        let thread = std::thread::Builder::new()
            .name("perf-watchdog".into())
            .spawn(move || {
                let signs = || {
                    (
                        s.beats.load(Ordering::Acquire),
                        device.stats().engine.rx_packets,
                    )
                };
                let mut last = signs();
                let mut since = Instant::now();
                let mut stop = s.stop.lock().unwrap_or_else(|e| e.into_inner());
                while !*stop {
                    stop = s
                        .wake
                        .wait_timeout(stop, tick)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    let now = signs();
                    if now != last {
                        last = now;
                        since = Instant::now();
                    } else if since.elapsed() >= limit {
                        s.fired.store(true, Ordering::Release);
                        stream.shutdown();
                        break;
                    }
                }
            })?;
        Ok(Watchdog {
            shared,
            limit,
            thread: Some(thread),
        })
    }

    /// This side made progress (an out-of-band step, completions).
    pub(crate) fn beat(&self) {
        self.shared.beats.fetch_add(1, Ordering::Release);
    }

    /// The error to report for `e`: the watchdog's reason if it ended the run.
    pub(crate) fn explain(&self, e: PerfError) -> PerfError {
        if self.shared.fired.load(Ordering::Acquire) {
            PerfError::new(format!(
                "the peer showed no sign of life for {} s (no out-of-band message, no RoCEv2 packet): gave up (--timeout)",
                fmt_secs(self.limit.as_secs_f64())
            ))
        } else {
            e
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The error for a batch of completions `seen` that holds an error: the other completions
/// waiting on `cq` are drained too, because a failing request completes *after* the older
/// requests it flushes, so the first error polled is usually a flush, not the cause.
pub(crate) fn failure(cq: &CompletionQueue, seen: &[WorkCompletion], what: &str) -> PerfError {
    let f = crate::completions::failure(cq, seen);
    match f.cause {
        Some(wc) => {
            let (qp, seq) = split_id(wc.wr_id);
            let also = match f.flushed {
                0 => String::new(),
                n => format!("; {n} other requests were flushed"),
            };
            PerfError::new(format!(
                "{what} failed: {} ({:?}), request {seq} of QP index {qp} (QP {:#x}){also}",
                wc.status.as_str(),
                wc.status,
                wc.qp_num
            ))
        }
        None => {
            let qpn = f.first.map_or(0, |w| w.qp_num);
            PerfError::new(format!(
                "{what} failed: {} requests were flushed (Work Request Flushed Error): QP {qpn:#x} \
                 entered the error state without a failed request of its own, so a packet it received \
                 ended the connection (the device counters show which)",
                f.flushed
            ))
        }
    }
}
