//! Bidirectional bandwidth (`-b`, perftest's `duplex`): both sides send as a client does and
//! both measure their own sending. WRITE, READ and atomic tests run the client's loop on both
//! sides ([`super::bw::client`]: the device serves the peer's requests meanwhile); `send-bw`
//! sends and receives in one loop ([`send`], perftest's `run_iter_bi`). After each size the
//! two sides swap their reports and each prints the sum ([`exchange`]), so both print the
//! same row.

use std::time::{Duration, Instant};

use softrdma_oob::perftest::Role;

use super::bw::{check_wcs, op_name, Sender};
use super::check;
use super::oob::Ctx;
use super::output::{PerfError, Progress};
use super::recv::Receiver;
use super::report::{BwRow, Row};
use crate::transport::Transport;

/// UC and UD lose messages silently: once this side has sent everything and the peer's
/// messages have begun to arrive, this long without one means the rest are lost (unless the
/// peer moves on sooner).
const DRAIN_QUIET: Duration = Duration::from_millis(500);

/// One size of bidirectional `send-bw`: this side's SENDs and the peer's, at once, with
/// `preposted` receives per QP already posted. The row is this side's sending, as perftest's
/// `run_iter_bi` measures it (a run without a peak: from the start to the end of both
/// directions). Like perftest's, the server sends nothing before the client's first message
/// has arrived, so it cannot overrun a client that is not receiving yet.
pub(crate) fn send(
    ctx: &mut Ctx,
    size: u64,
    preposted: u64,
    checks: &mut u64,
    progress: &mut Progress,
) -> Result<Row, PerfError> {
    let start = Instant::now();
    let mut tx = Sender::new(ctx, size)?;
    let mut rx = Receiver::new(ctx, size, preposted);
    let mut sending = ctx.role == Role::Client;
    let unreliable = ctx.cfg.transport != Transport::RC;
    let mut wcs = Vec::with_capacity(256);
    let mut idle_since = Instant::now();
    progress.start(&format!("{} -b {size} B", ctx.cfg.test.as_str()));
    loop {
        if sending {
            tx.post(ctx)?;
        }
        let sent_all = sending && tx.finished();
        if sent_all && rx.all_in() {
            break;
        }
        wcs.clear();
        let received = ctx.recv_cq.poll(256, &mut wcs);
        if received > 0 {
            rx.take(ctx, &wcs, checks)?;
            sending = true;
        }
        wcs.clear();
        let completed = ctx.send_cq.poll(256, &mut wcs);
        if completed > 0 {
            let now = Instant::now();
            check_wcs(&ctx.send_cq, &wcs, op_name(ctx))?;
            tx.complete(ctx, &wcs, now)?;
        }
        if received + completed > 0 {
            ctx.beat();
            idle_since = Instant::now();
            let (done, of) = tx.progress();
            progress.tick(done + rx.counts().0, of.map(|n| n + rx.counts().1));
            continue;
        }
        // UC and UD: once the peer's messages have started and then stopped for a while (or
        // the peer moved on to the report), the missing ones are lost. A peer that never
        // sends is a stall, as in RC.
        let quiet = rx.counts().0 > 0 && idle_since.elapsed() >= DRAIN_QUIET;
        if unreliable && sent_all && (quiet || ctx.peer_moved_on()) {
            break;
        }
        // Any datagram wakes this wait: a message for the receive CQ or an ACK for the send CQ.
        ctx.send_cq.wait_activity(Some(Duration::from_millis(20)));
        let stall = ctx.stall();
        if idle_since.elapsed() > stall {
            let (got, total) = rx.counts();
            let (done, of) = tx.progress();
            return Err(PerfError::new(format!(
                "no completion for {} s: {done} of {} SENDs completed, {got} of {total} \
                 messages received: is the peer still running?",
                crate::limits::fmt_secs(stall.as_secs_f64()),
                of.unwrap_or(done)
            )));
        }
    }
    progress.finish();
    let span = start.elapsed();
    rx.finish(ctx);
    Ok(tx.finish(ctx, Some(span)))
}

/// The end of a size of a bidirectional run: swaps this side's report (`mine`) for the
/// peer's and returns both; the row both sides show is their sum ([`BwRow::plus`]).
pub(crate) fn exchange(ctx: &mut Ctx, mine: &Row) -> Result<(BwRow, BwRow), PerfError> {
    let Row::Bw(mine) = *mine else {
        return Err(PerfError::new("a bidirectional run measures bandwidth"));
    };
    let theirs = ctx.sess()?.exchange_bw_report(&mine.to_report())?;
    Ok((mine, BwRow::from(theirs)))
}

/// Between softrdma peers after perftest's close (see [`check`]): each side tells the other
/// how many messages each of its QPs posted (`mine`; the client first, the server answers)
/// and returns the peer's, which its own data check needs.
pub(crate) fn swap_counts(ctx: &mut Ctx, mine: &[u64]) -> Result<Vec<u64>, PerfError> {
    let wait = ctx.stall();
    let q = ctx.qps.len();
    if ctx.role == Role::Client {
        check::send_counts(&mut ctx.peek, mine)?;
        check::read_counts(&mut ctx.peek, q, wait)
    } else {
        let theirs = check::read_counts(&mut ctx.peek, q, wait)?;
        check::send_counts(&mut ctx.peek, mine)?;
        Ok(theirs)
    }
}
