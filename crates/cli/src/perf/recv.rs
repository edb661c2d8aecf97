//! The receiving side of SEND bandwidth tests (perftest's `run_iter_bw_server`, and the
//! receive side of `run_iter_bi`): receives posted before the size's sync, each re-posted as
//! its message arrives until the run's count is posted, and a sample of the messages checked
//! against the sender's stamps.

use std::time::{Duration, Instant};

use softrdma::{wr, MemoryRegion, WorkCompletion};

use super::bw::check_wcs;
use super::check;
use super::layout::{pattern, split_id, wr_id};
use super::oob::Ctx;
use super::output::PerfError;
use super::report::{self, Row};
use crate::transport::Transport;

/// Where receive `seq` of QP `i` puts a message of `size`: the region and the offset in it.
fn recv_place(ctx: &Ctx, i: usize, size: u64, seq: u64) -> (&MemoryRegion, usize) {
    match ctx.check_mem.recv_slot(i, seq) {
        Some(place) => place,
        None => (
            &ctx.mr,
            (ctx.target_off(i) + ctx.cycle_off(size + ctx.grh, seq)) as usize,
        ),
    }
}

/// Whether receives `a` and `b` of QP `i` put their messages in different buffers: the
/// message of `a` can still be read after `b`'s has arrived.
pub(crate) fn recv_lands_apart(ctx: &Ctx, i: usize, size: u64, a: u64, b: u64) -> bool {
    let ((mr_a, at_a), (mr_b, at_b)) = (recv_place(ctx, i, size, a), recv_place(ctx, i, size, b));
    let len = (size + ctx.grh) as usize;
    !std::ptr::eq(mr_a, mr_b) || at_a.abs_diff(at_b) >= len
}

/// Posts receives for messages of `size` on QP `i`, numbered from `from`.
pub(crate) fn post_recvs(
    ctx: &Ctx,
    i: usize,
    size: u64,
    from: u64,
    count: u64,
) -> Result<(), PerfError> {
    // UD: room for the GRH area before the message.
    let len = (size + ctx.grh) as u32;
    let wrs = (from..from + count).map(|seq| {
        let (mr, at) = recv_place(ctx, i, size, seq);
        wr::recv(wr_id(i, seq), vec![mr.sge(at, len)])
    });
    match &ctx.srq {
        Some(srq) => srq.post_recv(wrs)?,
        None => ctx.qps[i].post_recv(wrs)?,
    }
    Ok(())
}

/// Receives the server posts before the sync that starts each size of `ib_send_bw` (and of
/// `ib_send_lat`, on both sides). Returns how many per QP.
pub(crate) fn prepost(ctx: &Ctx, size: u64) -> Result<u64, PerfError> {
    let n = u64::from(report::rx_depth(&ctx.cfg));
    let n = ctx.check_mem.recv_ring().map_or(n, |r| n.min(r));
    for i in 0..ctx.qps.len() {
        post_recvs(ctx, i, size, 0, n)?;
    }
    Ok(n)
}

/// Checks a received message against the pattern a softrdma sender uses: the message is
/// QP `qp`'s `nth` (counted by the QP it arrived on), in the buffer its receive named (with
/// `--use-srq` any QP's message may land in any QP's receive).
pub(crate) fn check_recv(
    ctx: &Ctx,
    wc: &WorkCompletion,
    size: u64,
    (qp, nth): (usize, u64),
) -> Result<(), PerfError> {
    // A UD completion counts the GRH area too.
    if u64::from(wc.byte_len) != size + ctx.grh {
        return Err(PerfError::new(format!(
            "received {} bytes, expected {}",
            wc.byte_len,
            size + ctx.grh
        )));
    }
    if !ctx.softrdma_check() {
        return Ok(());
    }
    let (i, seq) = split_id(wc.wr_id);
    let (mr, at) = recv_place(ctx, i, size, seq);
    let got = mr.read_vec(at + ctx.grh as usize, size as usize)?;
    // A softrdma sender stamps each message with its sequence number: the n-th receive must
    // hold message n (none lost, duplicated or reordered). UC and UD may lose messages, so
    // there the n-th receive holds message n or a later one, intact.
    let mut message = nth;
    if ctx.stamped() && ctx.cfg.transport != Transport::RC && got.len() >= 8 {
        let m = u64::from_le_bytes(got[..8].try_into().expect("8 bytes"));
        if m > nth {
            message = m;
        }
    }
    let want = if ctx.stamped() {
        check::stamped_payload(qp, message, size, 0)
    } else {
        pattern(0, size as usize)
    };
    if got != want {
        let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        let what = if ctx.stamped() && at < check::STAMP_LEN.min(got.len()) && got.len() >= 8 {
            let other = u64::from_le_bytes(got[..8].try_into().expect("8 bytes"));
            format!("it carries message {other}'s stamp")
        } else {
            format!("byte {at} differs from what was sent")
        };
        return Err(PerfError::check(format!(
            "message {nth} on QP index {qp}: {what}"
        )));
    }
    Ok(())
}

/// The receiving half of a SEND run of one size: re-posts a receive for each message that
/// arrives (until the run's count is posted: a timed run always) and checks a sample of them.
/// The caller polls the receive CQ and hands the completions to [`Receiver::take`], so one
/// loop can drive a sender as well (`-b`).
pub(crate) struct Receiver {
    size: u64,
    iters: u64,
    timed: bool,
    /// Receives posted per QP (slot), received per QP the messages came on.
    posted: Vec<u64>,
    received: Vec<u64>,
    got: u64,
    total: u64,
    /// When the last batch of messages was taken.
    last: Option<Instant>,
}

impl Receiver {
    /// A receiver of messages of `size` on QPs that have `preposted` receives each.
    pub(crate) fn new(ctx: &Ctx, size: u64, preposted: u64) -> Receiver {
        let q = ctx.qps.len();
        Receiver {
            size,
            iters: ctx.cfg.iters,
            timed: ctx.cfg.duration.is_some(),
            posted: vec![preposted; q],
            received: vec![0; q],
            got: 0,
            total: ctx.cfg.iters * q as u64,
            last: None,
        }
    }

    /// Takes a batch of receive completions: fails on an error among them, checks every
    /// length and a sample of the payloads, and re-posts the receives.
    pub(crate) fn take(
        &mut self,
        ctx: &Ctx,
        wcs: &[WorkCompletion],
        checks: &mut u64,
    ) -> Result<(), PerfError> {
        self.last = Some(Instant::now());
        check_wcs(&ctx.recv_cq, wcs, "receive")?;
        let size = self.size;
        for wc in wcs {
            // The receive's QP slot (`i`) and the QP the message came on (`j`): the same but
            // with `--use-srq`, where any QP's message takes the SRQ's next receive.
            let (i, _) = split_id(wc.wr_id);
            let j = if ctx.srq.is_some() {
                ctx.qps
                    .iter()
                    .position(|qp| qp.qp_num() == wc.qp_num)
                    .ok_or_else(|| {
                        PerfError::new(format!("a message on unknown QP {:#x}", wc.qp_num))
                    })?
            } else {
                i
            };
            let nth = self.received[j];
            // Checking every message would measure memcpy; check a sample.
            if nth % 16 == 0 || nth + 1 == self.iters {
                check_recv(ctx, wc, size, (j, nth))?;
                *checks += 1;
            } else if u64::from(wc.byte_len) != size + ctx.grh {
                check_recv(ctx, wc, size, (j, nth))?;
            }
            self.received[j] += 1;
            self.got += 1;
            if self.timed || self.posted[i] < self.iters {
                post_recvs(ctx, i, size, self.posted[i], 1)?;
                self.posted[i] += 1;
            }
        }
        Ok(())
    }

    /// Whether every message of a counted run arrived.
    pub(crate) fn all_in(&self) -> bool {
        !self.timed && self.got >= self.total
    }

    /// Messages received so far, and how many a counted run expects.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.got, self.total)
    }

    /// When the last message arrived, if one did.
    pub(crate) fn last(&self) -> Option<Instant> {
        self.last
    }

    /// Records what arrived on each QP in `ctx.received` (the data check's counts).
    pub(crate) fn finish(self, ctx: &mut Ctx) {
        ctx.received = self.received;
    }
}

/// The server side of `send-bw` for one size: receive every message, re-posting receives,
/// and measure. `preposted` receives per QP are already posted.
pub(crate) fn send_server(
    ctx: &mut Ctx,
    size: u64,
    preposted: u64,
    checks: &mut u64,
) -> Result<Row, PerfError> {
    let mut rx = Receiver::new(ctx, size, preposted);
    let timed = ctx.cfg.duration.is_some();
    let mut wcs = Vec::with_capacity(256);
    let start = Instant::now();
    let mut idle_since = Instant::now();
    let mut draining = false;
    let unreliable = ctx.cfg.transport != Transport::RC;
    while timed || !rx.all_in() {
        wcs.clear();
        let n = ctx.recv_cq.poll(256, &mut wcs);
        if n == 0 {
            if timed {
                // The client ends a timed run on its own clock; it then goes on to the
                // next out-of-band step, which is how this side learns the run is over.
                // Its last messages completed here before it saw them acknowledged: one
                // more poll collects what arrived since the last one.
                if draining {
                    break;
                }
                if ctx.peer_moved_on() {
                    draining = true;
                    continue;
                }
                ctx.recv_cq.wait(Some(Duration::from_millis(20)));
                continue;
            }
            if unreliable {
                // UC and UD lose messages silently, so the count may never be reached: once
                // the client has moved on to the next out-of-band step, what has not arrived
                // after one more short wait is lost.
                if draining {
                    break;
                }
                if ctx.peer_moved_on() {
                    draining = true;
                    ctx.recv_cq.wait(Some(Duration::from_millis(50)));
                    continue;
                }
            }
            ctx.recv_cq.wait(Some(Duration::from_millis(100)));
            let stall = ctx.stall();
            if idle_since.elapsed() > stall {
                let (got, total) = rx.counts();
                return Err(PerfError::new(format!(
                    "received {got} of {total} messages, then nothing for {} s",
                    crate::limits::fmt_secs(stall.as_secs_f64())
                )));
            }
            continue;
        }
        idle_since = Instant::now();
        draining = false;
        ctx.beat();
        rx.take(ctx, &wcs, checks)?;
    }
    let got = rx.counts().0;
    let elapsed = rx.last().unwrap_or(start).duration_since(start);
    rx.finish(ctx);
    // Like perftest's server: no peak (0.00), the average over the receiving time.
    Ok(Row::Bw(report::bw_row_duration(
        size,
        got,
        elapsed,
        ctx.cfg.gbits,
    )))
}
