//! Bandwidth tests (perftest's `run_iter_bw` and `run_iter_bw_server`): the client keeps up
//! to `tx_depth` requests in flight per QP and asks for a completion every `cq_mod` of them;
//! the server is passive for WRITE, READ and atomics (the device answers without it) and
//! posts and re-posts receives for SEND.

use std::time::{Duration, Instant};

use softrdma::{wr, CompletionQueue, SendFlags, SendWr, WcStatus, WorkCompletion};

use super::args::{AtomicKind, Verb};
use super::check;
use super::layout::{pattern, split_id, wr_id};
use super::oob::Ctx;
use super::output::{PerfError, Progress};
use super::report::{self, Row};
use crate::transport::Transport;

/// Polls up to `max` completions into `out`; if there are none, sleeps on the CQ until some
/// arrive, failing after `ctx.stall()` without any. Completions are signs of life for the
/// watchdog.
pub(crate) fn poll_wait(
    ctx: &Ctx,
    cq: &CompletionQueue,
    max: usize,
    out: &mut Vec<WorkCompletion>,
    what: &str,
) -> Result<usize, PerfError> {
    let n = cq.poll(max, out);
    if n > 0 {
        ctx.beat();
        return Ok(n);
    }
    let stall = ctx.stall();
    let start = Instant::now();
    loop {
        cq.wait(Some(Duration::from_millis(100)));
        let n = cq.poll(max, out);
        if n > 0 {
            ctx.beat();
            return Ok(n);
        }
        if start.elapsed() > stall {
            return Err(PerfError::new(format!(
                "no completion for {} s while waiting for {what}: is the peer still running?",
                crate::limits::fmt_secs(stall.as_secs_f64())
            )));
        }
    }
}

/// Polls up to `max` completions into `out`, spinning until some arrive as perftest's
/// `ibv_poll_cq` loop does — and, like a NIC that needs no CPU, the spinning thread itself
/// moves the device's packets ([`CompletionQueue::poll_progress`]), so a reply is received,
/// completed and seen on one core without waking anyone. Fails after `ctx.stall()` without
/// any; completions are signs of life for the watchdog.
pub(crate) fn poll_spin(
    ctx: &Ctx,
    cq: &CompletionQueue,
    max: usize,
    out: &mut Vec<WorkCompletion>,
    what: &str,
) -> Result<usize, PerfError> {
    let stall = ctx.stall();
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let n = cq.poll_progress(max, out);
        if n > 0 {
            ctx.beat();
            return Ok(n);
        }
        spins = spins.wrapping_add(1);
        if spins % 4096 == 0 && start.elapsed() > stall {
            return Err(PerfError::new(format!(
                "no completion for {} s while waiting for {what}: is the peer still running?",
                crate::limits::fmt_secs(stall.as_secs_f64())
            )));
        }
        std::hint::spin_loop();
    }
}

/// Fails if a batch of completions polled from `cq` holds an error, naming its cause (see
/// [`super::watch::failure`]).
pub(crate) fn check_wcs(
    cq: &CompletionQueue,
    wcs: &[WorkCompletion],
    what: &str,
) -> Result<(), PerfError> {
    if wcs.iter().all(|wc| wc.status == WcStatus::Success) {
        return Ok(());
    }
    Err(super::watch::failure(cq, wcs, what))
}

/// Whether message `seq` of a run of `iters` (`None`: timed) is verified by the data check.
pub(crate) fn sampled(seq: u64, iters: Option<u64>) -> bool {
    seq % check::SAMPLE_EVERY == 0 || iters.is_some_and(|n| seq + 1 == n)
}

/// The send work request for message `seq` of QP `i`.
fn build_wr(
    ctx: &Ctx,
    i: usize,
    size: u64,
    seq: u64,
    inline: &[u8],
    sampled: bool,
) -> Result<SendWr, PerfError> {
    let rem = &ctx.rem[i];
    let off = ctx.cycle_off(size, seq);
    let len = size as u32;
    let local = (ctx.local_off(i) + off) as usize;
    let id = wr_id(i, seq);
    let mut w = match ctx.cfg.test.verb() {
        Verb::Write => wr::write(
            id,
            ctx.check_mem.stamped_sgl(&ctx.mr, i, seq, size, local)?,
            rem.vaddr + off,
            rem.rkey,
        ),
        Verb::Read => {
            let sge = match ctx.check_mem.landing_sge(i, seq, size, sampled)? {
                Some(sge) => sge,
                None => ctx.mr.sge(local, len),
            };
            wr::read(id, vec![sge], rem.vaddr + off, rem.rkey)
        }
        Verb::Atomic => match ctx.cfg.atomic {
            AtomicKind::FETCH_AND_ADD => {
                wr::fetch_add(id, ctx.mr.sge(local, 8), rem.vaddr + off, rem.rkey, 1)
            }
            AtomicKind::CMP_AND_SWAP => {
                wr::compare_swap(id, ctx.mr.sge(local, 8), rem.vaddr + off, rem.rkey, 0, 0)
            }
        },
        // SENDs always leave from the start of the slot, so a receiver can check them.
        Verb::Send => wr::send(
            id,
            ctx.check_mem
                .stamped_sgl(&ctx.mr, i, seq, size, ctx.local_off(i) as usize)?,
        ),
    };
    if !inline.is_empty() {
        w.sg_list.clear();
        w.inline_data = Some(inline.into());
        w.flags = w.flags | SendFlags::INLINE;
    }
    w.ud = ctx.ud.get(i).copied();
    Ok(w)
}

/// The payload of an inline message: what its SGL would gather (see [`check`]).
pub(crate) fn inline_payload(ctx: &Ctx, i: usize, seq: u64, size: u64, off: u64) -> Vec<u8> {
    if ctx.check_mem.stamping() {
        check::stamped_payload(i, seq, size, off)
    } else {
        pattern(off as usize, size as usize)
    }
}

#[derive(Default, Clone, Copy)]
struct QpState {
    posted: u64,
    completed: u64,
}

/// The client side of a bandwidth test for one message size.
pub(crate) fn client(ctx: &mut Ctx, size: u64, progress: &mut Progress) -> Result<Row, PerfError> {
    let cfg = ctx.cfg.clone();
    let q = ctx.qps.len();
    let iters = cfg.iters;
    // READs land in the data check's ring, one slot per outstanding READ.
    let depth = ctx
        .check_mem
        .landing_ring()
        .map_or(u64::from(cfg.tx_depth), |r| r.min(u64::from(cfg.tx_depth)));
    // A completion at least every `depth` requests, or a QP whose ring holds fewer READs
    // than `cq_mod` would wait for a completion nothing asked for (perftest keeps cq_mod
    // within tx_depth the same way).
    let cq_mod = u64::from(cfg.cq_mod).min(depth).max(1);
    let timed = cfg.duration;
    let mut pending_checks: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); q];
    let total = iters * q as u64;
    let inline_ok =
        size <= u64::from(cfg.inline) && matches!(cfg.test.verb(), Verb::Write | Verb::Send);
    let mut state = vec![QpState::default(); q];
    // perftest keeps a post and a completion time per message only to find the peak; without
    // a peak (timed or long runs) it keeps the first post and the last completion.
    let per_message = timed.is_none() && !cfg.no_peak;
    let (mut posted_at, mut completed_at) = if per_message {
        (
            Vec::with_capacity(total as usize),
            Vec::with_capacity(total as usize),
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let mut first_post = None;
    let mut last_completion = None;
    let mut batch = Vec::with_capacity(cfg.tx_depth as usize);
    let mut wcs = Vec::with_capacity(256);
    let mut done_msgs = 0u64;
    let start = Instant::now();
    let end = match timed {
        Some(d) => Some(start.checked_add(d).ok_or_else(|| {
            PerfError::new(
                "-D: the end of the run is beyond what this system's clock can represent",
            )
        })?),
        None => None,
    };
    let mut stopping = false;
    progress.start(&format!("{} {size} B", cfg.test.as_str()));
    loop {
        if let Some(end) = end {
            stopping = stopping || Instant::now() >= end;
        }
        for (i, st) in state.iter_mut().enumerate() {
            batch.clear();
            loop {
                let more = match timed {
                    None => st.posted < iters,
                    // A timed run stops right after a signaled request, so every request
                    // is accounted for by a completion.
                    Some(_) => !stopping || st.posted % cq_mod != 0,
                };
                if !more || st.posted - st.completed >= depth {
                    break;
                }
                let seq = st.posted;
                let inline = if inline_ok {
                    let off = if cfg.test.verb() == Verb::Send {
                        0
                    } else {
                        ctx.cycle_off(size, seq)
                    };
                    inline_payload(ctx, i, seq, size, off)
                } else {
                    Vec::new()
                };
                let check_it = ctx.check_mem.landing_ring().is_some()
                    && sampled(seq, timed.is_none().then_some(iters));
                if check_it {
                    pending_checks[i].push_back(seq);
                }
                let mut w = build_wr(ctx, i, size, seq, &inline, check_it)?;
                let last = timed.is_none() && seq + 1 == iters;
                w.flags = if seq % cq_mod == cq_mod - 1 || last {
                    w.flags | SendFlags::SIGNALED
                } else {
                    without_signaled(w.flags)
                };
                batch.push(w);
                if per_message {
                    posted_at.push(Instant::now());
                } else if first_post.is_none() {
                    first_post = Some(Instant::now());
                }
                st.posted += 1;
            }
            if !batch.is_empty() {
                ctx.qps[i].post_send(batch.drain(..))?;
            }
        }
        let all_done = state.iter().all(|s| s.completed == s.posted)
            && (timed.is_some() && stopping || timed.is_none() && done_msgs == total);
        if all_done {
            break;
        }
        wcs.clear();
        poll_wait(ctx, &ctx.send_cq, 256, &mut wcs, "send completions")?;
        let now = Instant::now();
        check_wcs(&ctx.send_cq, &wcs, op_name(ctx))?;
        for wc in &wcs {
            let (i, seq) = split_id(wc.wr_id);
            let st = &mut state[i];
            let covered = (seq + 1).saturating_sub(st.completed);
            st.completed = seq + 1;
            // Sampled READs up to this one have landed, and no later READ shares their slot.
            while let Some(&s) = pending_checks[i].front().filter(|&&s| s <= seq) {
                pending_checks[i].pop_front();
                ctx.check_mem
                    .verify_read(i, s, size, ctx.cycle_off(size, s))?;
                ctx.reads_verified += 1;
            }
            done_msgs += covered;
            if per_message {
                completed_at.extend(std::iter::repeat(now).take(covered as usize));
            }
            last_completion = Some(now);
        }
        progress.tick(done_msgs, timed.map_or(Some(total), |_| None));
    }
    progress.finish();
    ctx.sent = state.iter().map(|s| s.posted).collect();
    Ok(Row::Bw(match (timed, first_post, last_completion) {
        (None, _, _) if per_message => {
            report::bw_row(size, &posted_at, &completed_at, cfg.gbits, cq_mod as u32)
        }
        (None, Some(a), Some(b)) => report::bw_row_duration(size, done_msgs, b - a, cfg.gbits),
        _ => report::bw_row_duration(size, done_msgs, start.elapsed(), cfg.gbits),
    }))
}

fn without_signaled(f: SendFlags) -> SendFlags {
    if f.contains(SendFlags::INLINE) {
        SendFlags::INLINE
    } else {
        SendFlags::empty()
    }
}

fn op_name(ctx: &Ctx) -> &'static str {
    match ctx.cfg.test.verb() {
        Verb::Write => "RDMA WRITE",
        Verb::Read => "RDMA READ",
        Verb::Atomic => "atomic",
        Verb::Send => "SEND",
    }
}

/// Posts receives for messages of `size` on QP `i`, numbered from `from`.
pub(crate) fn post_recvs(
    ctx: &Ctx,
    i: usize,
    size: u64,
    from: u64,
    count: u64,
) -> Result<(), PerfError> {
    let slot = ctx.target_off(i);
    // UD: room for the GRH area before the message.
    let len = (size + ctx.grh) as u32;
    let wrs = (from..from + count).map(|seq| {
        let sge = match ctx.check_mem.recv_slot(i, seq) {
            Some((mr, at)) => mr.sge(at, len),
            None => ctx
                .mr
                .sge((slot + ctx.cycle_off(size + ctx.grh, seq)) as usize, len),
        };
        wr::recv(wr_id(i, seq), vec![sge])
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
    let got = match ctx.check_mem.recv_slot(i, seq) {
        Some((mr, at)) => mr.read_vec(at + ctx.grh as usize, size as usize)?,
        None => {
            let off = ctx.target_off(i) + ctx.cycle_off(size + ctx.grh, seq) + ctx.grh;
            ctx.mr.read_vec(off as usize, size as usize)?
        }
    };
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

/// The server side of `send-bw` for one size: receive every message, re-posting receives,
/// and measure. `preposted` receives per QP are already posted.
pub(crate) fn send_server(
    ctx: &mut Ctx,
    size: u64,
    preposted: u64,
    checks: &mut u64,
) -> Result<Row, PerfError> {
    let q = ctx.qps.len();
    let iters = ctx.cfg.iters;
    let timed = ctx.cfg.duration.is_some();
    let mut posted = vec![preposted; q];
    let mut received = vec![0u64; q];
    let total = iters * q as u64;
    let mut got = 0u64;
    let mut wcs = Vec::with_capacity(256);
    let start = Instant::now();
    let mut last = start;
    let mut idle_since = Instant::now();
    let mut draining = false;
    let unreliable = ctx.cfg.transport != Transport::RC;
    while timed || got < total {
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
                return Err(PerfError::new(format!(
                    "received {got} of {total} messages, then nothing for {} s",
                    crate::limits::fmt_secs(stall.as_secs_f64())
                )));
            }
            continue;
        }
        idle_since = Instant::now();
        last = idle_since;
        draining = false;
        ctx.beat();
        check_wcs(&ctx.recv_cq, &wcs, "receive")?;
        for wc in &wcs {
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
            let nth = received[j];
            // Checking every message would measure memcpy; check a sample.
            if nth % 16 == 0 || nth + 1 == iters {
                check_recv(ctx, wc, size, (j, nth))?;
                *checks += 1;
            } else if u64::from(wc.byte_len) != size + ctx.grh {
                check_recv(ctx, wc, size, (j, nth))?;
            }
            received[j] += 1;
            got += 1;
            if timed || posted[i] < iters {
                post_recvs(ctx, i, size, posted[i], 1)?;
                posted[i] += 1;
            }
        }
    }
    ctx.sent = received;
    let elapsed = last.duration_since(start);
    let row = report::bw_row_duration(size, got, elapsed, ctx.cfg.gbits);
    // Like perftest's server: no peak (0.00), the average over the receiving time.
    Ok(Row::Bw(row))
}
