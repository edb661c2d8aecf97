//! The sending side of bandwidth tests (perftest's `run_iter_bw`, and `perform_warm_up`):
//! the client — with `-b` both sides — keeps up to `tx_depth` requests in flight per QP and
//! asks for a completion every `cq_mod` of them; the server is passive for WRITE, READ and
//! atomics (the device answers without it). The receiving side of SEND tests is in
//! [`super::recv`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use softrdma::{wr, CompletionQueue, SendFlags, SendWr, WcStatus, WorkCompletion};

use super::args::{AtomicKind, Verb};
use super::check;
use super::layout::{pattern, split_id, wr_id};
use super::oob::Ctx;
use super::output::{PerfError, Progress};
use super::report::{self, Row};

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

/// Polls up to `max` completions into `out` as the run waits for them: asleep on the CQ with
/// `-e` ([`poll_wait`], perftest's `ibv_get_cq_event`), else spinning ([`poll_spin`]).
pub(crate) fn poll_for(
    ctx: &Ctx,
    cq: &CompletionQueue,
    max: usize,
    out: &mut Vec<WorkCompletion>,
    what: &str,
) -> Result<usize, PerfError> {
    if ctx.cfg.events {
        poll_wait(ctx, cq, max, out, what)
    } else {
        poll_spin(ctx, cq, max, out, what)
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

/// The sending half of a bandwidth run of one size (perftest's `run_iter_bw`, and the send
/// side of `run_iter_bi`): keeps up to `tx_depth` requests in flight per QP, asks for a
/// completion every `cq_mod` of them, and keeps the times the report needs. The caller
/// polls the send CQ and hands the completions to [`Sender::complete`], so one loop can
/// drive a receiver as well (`-b`).
pub(crate) struct Sender {
    size: u64,
    iters: u64,
    timed: Option<Duration>,
    /// Outstanding requests per QP.
    depth: u64,
    cq_mod: u64,
    inline_ok: bool,
    state: Vec<QpState>,
    /// Sampled READs waiting for their completion, per QP.
    pending_checks: Vec<VecDeque<u64>>,
    /// A post and a completion time per message (only to find the peak: perftest keeps the
    /// first post and the last completion otherwise).
    per_message: bool,
    posted_at: Vec<Instant>,
    completed_at: Vec<Instant>,
    first_post: Option<Instant>,
    last_completion: Option<Instant>,
    done_msgs: u64,
    total: u64,
    start: Instant,
    end: Option<Instant>,
    stopping: bool,
    batch: Vec<SendWr>,
}

impl Sender {
    /// A sender of messages of `size`, starting its clock now.
    pub(crate) fn new(ctx: &Ctx, size: u64) -> Result<Sender, PerfError> {
        let cfg = &ctx.cfg;
        let q = ctx.qps.len();
        // Sampled READs land in the data check's ring, in slot `seq % ring`: with no more
        // than `ring` READs outstanding, no two outstanding ones share a slot.
        let depth = ctx
            .check_mem
            .landing_ring()
            .map_or(u64::from(cfg.tx_depth), |r| r.min(u64::from(cfg.tx_depth)));
        // A completion at least every `depth` requests, or a QP whose ring holds fewer READs
        // than `cq_mod` would wait for a completion nothing asked for (perftest keeps cq_mod
        // within tx_depth the same way).
        let cq_mod = u64::from(cfg.cq_mod).min(depth).max(1);
        let timed = cfg.duration;
        let total = cfg.iters * q as u64;
        let per_message = timed.is_none() && !cfg.no_peak;
        let capacity = if per_message { total as usize } else { 0 };
        let start = Instant::now();
        let end = match timed {
            Some(d) => Some(start.checked_add(d).ok_or_else(|| {
                PerfError::new(
                    "-D: the end of the run is beyond what this system's clock can represent",
                )
            })?),
            None => None,
        };
        Ok(Sender {
            size,
            iters: cfg.iters,
            timed,
            depth,
            cq_mod,
            inline_ok: size <= u64::from(cfg.inline)
                && matches!(cfg.test.verb(), Verb::Write | Verb::Send),
            state: vec![QpState::default(); q],
            pending_checks: vec![VecDeque::new(); q],
            per_message,
            posted_at: Vec::with_capacity(capacity),
            completed_at: Vec::with_capacity(capacity),
            first_post: None,
            last_completion: None,
            done_msgs: 0,
            total,
            start,
            end,
            stopping: false,
            batch: Vec::with_capacity(cfg.tx_depth as usize),
        })
    }

    /// Fills every QP's window with new requests (a timed run past its end posts only up to
    /// the next signaled request).
    pub(crate) fn post(&mut self, ctx: &Ctx) -> Result<(), PerfError> {
        if let Some(end) = self.end {
            self.stopping = self.stopping || Instant::now() >= end;
        }
        let (size, iters, cq_mod) = (self.size, self.iters, self.cq_mod);
        for i in 0..self.state.len() {
            self.batch.clear();
            loop {
                let st = self.state[i];
                let more = match self.timed {
                    None => st.posted < iters,
                    // A timed run stops right after a signaled request, so every request
                    // is accounted for by a completion.
                    Some(_) => !self.stopping || st.posted % cq_mod != 0,
                };
                if !more || st.posted - st.completed >= self.depth {
                    break;
                }
                let seq = st.posted;
                let inline = if self.inline_ok {
                    let off = if ctx.cfg.test.verb() == Verb::Send {
                        0
                    } else {
                        ctx.cycle_off(size, seq)
                    };
                    inline_payload(ctx, i, seq, size, off)
                } else {
                    Vec::new()
                };
                let check_it = ctx.check_mem.landing_ring().is_some()
                    && sampled(seq, self.timed.is_none().then_some(iters));
                if check_it {
                    self.pending_checks[i].push_back(seq);
                }
                let mut w = build_wr(ctx, i, size, seq, &inline, check_it)?;
                let last = self.timed.is_none() && seq + 1 == iters;
                w.flags = if seq % cq_mod == cq_mod - 1 || last {
                    w.flags | SendFlags::SIGNALED
                } else {
                    without_signaled(w.flags)
                };
                self.batch.push(w);
                if self.per_message {
                    self.posted_at.push(Instant::now());
                } else if self.first_post.is_none() {
                    self.first_post = Some(Instant::now());
                }
                self.state[i].posted += 1;
            }
            if !self.batch.is_empty() {
                ctx.qps[i].post_send(self.batch.drain(..))?;
            }
        }
        Ok(())
    }

    /// Whether every request is posted and completed.
    pub(crate) fn finished(&self) -> bool {
        self.state.iter().all(|s| s.completed == s.posted)
            && match self.timed {
                Some(_) => self.stopping,
                None => self.done_msgs == self.total,
            }
    }

    /// Accounts for a batch of send completions that arrived at `now` (all successful: see
    /// [`check_wcs`]); verifies the sampled READs they cover.
    pub(crate) fn complete(
        &mut self,
        ctx: &mut Ctx,
        wcs: &[WorkCompletion],
        now: Instant,
    ) -> Result<(), PerfError> {
        let size = self.size;
        for wc in wcs {
            let (i, seq) = split_id(wc.wr_id);
            let st = &mut self.state[i];
            let covered = (seq + 1).saturating_sub(st.completed);
            st.completed = seq + 1;
            // Sampled READs up to this one have landed, and no later READ shares their slot.
            while let Some(&s) = self.pending_checks[i].front().filter(|&&s| s <= seq) {
                self.pending_checks[i].pop_front();
                ctx.check_mem
                    .verify_read(i, s, size, ctx.cycle_off(size, s))?;
                ctx.reads_verified += 1;
            }
            self.done_msgs += covered;
            if self.per_message {
                self.completed_at
                    .extend(std::iter::repeat(now).take(covered as usize));
            }
            self.last_completion = Some(now);
        }
        Ok(())
    }

    /// Messages completed so far, and of how many (`None`: a timed run).
    pub(crate) fn progress(&self) -> (u64, Option<u64>) {
        (
            self.done_msgs,
            self.timed.map_or(Some(self.total), |_| None),
        )
    }

    /// The report of the run; records what each QP posted in `ctx.sent`. `span`: the
    /// interval a run without a peak is measured over, if not from the first post to the
    /// last completion (perftest's bidirectional SEND counts from its start to the end of
    /// both directions).
    pub(crate) fn finish(self, ctx: &mut Ctx, span: Option<Duration>) -> Row {
        ctx.sent = self.state.iter().map(|s| s.posted).collect();
        let gbits = ctx.cfg.gbits;
        let (size, n) = (self.size, self.done_msgs);
        Row::Bw(
            match (self.timed, span, self.first_post, self.last_completion) {
                (None, _, _, _) if self.per_message => report::bw_row(
                    size,
                    &self.posted_at,
                    &self.completed_at,
                    gbits,
                    self.cq_mod as u32,
                ),
                (None, Some(d), _, _) => report::bw_row_duration(size, n, d, gbits),
                (None, None, Some(a), Some(b)) => report::bw_row_duration(size, n, b - a, gbits),
                _ => report::bw_row_duration(size, n, self.start.elapsed(), gbits),
            },
        )
    }
}

/// The client side of a bandwidth test for one message size (with `-b`, either side of a
/// WRITE, READ or atomic test).
pub(crate) fn client(ctx: &mut Ctx, size: u64, progress: &mut Progress) -> Result<Row, PerfError> {
    let mut tx = Sender::new(ctx, size)?;
    let mut wcs = Vec::with_capacity(256);
    progress.start(&format!("{} {size} B", ctx.cfg.test.as_str()));
    loop {
        tx.post(ctx)?;
        if tx.finished() {
            break;
        }
        wcs.clear();
        // Spinning, as perftest's `ibv_poll_cq` loop does (asleep with `-e`): this thread
        // receives the ACKs and sends what they let out itself, and the device's progress
        // thread sleeps. Asleep on the CQ, it left that to the progress thread, a third busy
        // thread that took the device mutex from it and, on two cores, a core from one of
        // the two threads that move the data (loopback `write-bw` and `read-bw`: 10-20 %).
        poll_for(ctx, &ctx.send_cq, 256, &mut wcs, "send completions")?;
        let now = Instant::now();
        check_wcs(&ctx.send_cq, &wcs, op_name(ctx))?;
        tx.complete(ctx, &wcs, now)?;
        let (done, of) = tx.progress();
        progress.tick(done, of);
    }
    progress.finish();
    Ok(tx.finish(ctx, None))
}

/// perftest's `perform_warm_up` (`--perform_warm_up`), before a size's measurement: each QP
/// in turn posts a send queue's worth (`-t`, at most `-n`) of the run's first message — same
/// addresses, unstamped, every one signaled (as perftest does since it stopped hanging on
/// unsignaled ones) — and waits for all of them. Nothing of it is measured; atomics among them are
/// counted for the data check ([`Ctx::warmed`]), as they change the peer's targets.
pub(crate) fn warm_up(ctx: &mut Ctx, size: u64) -> Result<(), PerfError> {
    // perftest lowers its send queue depth to the iterations of a counted run, and warms up
    // with that many.
    let depth = match ctx.cfg.duration {
        None => u64::from(ctx.cfg.tx_depth).min(ctx.cfg.iters),
        Some(_) => u64::from(ctx.cfg.tx_depth),
    };
    let verb = ctx.cfg.test.verb();
    let inline = size <= u64::from(ctx.cfg.inline) && verb == Verb::Write;
    let mut wcs = Vec::with_capacity(depth as usize);
    // Left over from an earlier size: nothing, as every size waits for its completions.
    ctx.send_cq.poll(depth as usize, &mut wcs);
    for i in 0..ctx.qps.len() {
        let rem = ctx.rem[i];
        let sge = ctx.mr.sge(ctx.local_off(i) as usize, size as u32);
        let wrs = (0..depth).map(|k| {
            let id = wr_id(i, k);
            let mut w = match (verb, ctx.cfg.atomic) {
                (Verb::Read, _) => wr::read(id, vec![sge], rem.vaddr, rem.rkey),
                (Verb::Atomic, AtomicKind::FETCH_AND_ADD) => {
                    wr::fetch_add(id, sge, rem.vaddr, rem.rkey, 1)
                }
                (Verb::Atomic, AtomicKind::CMP_AND_SWAP) => {
                    wr::compare_swap(id, sge, rem.vaddr, rem.rkey, 0, 0)
                }
                _ => wr::write(id, vec![sge], rem.vaddr, rem.rkey),
            };
            if inline {
                w.sg_list.clear();
                w.inline_data = Some(pattern(0, size as usize).into());
                w.flags = w.flags | SendFlags::INLINE;
            }
            w.flags = w.flags | SendFlags::SIGNALED;
            w
        });
        ctx.qps[i].post_send(wrs)?;
        let mut done = 0;
        while done < depth {
            wcs.clear();
            let n = poll_wait(
                ctx,
                &ctx.send_cq,
                depth as usize,
                &mut wcs,
                "warm-up completions",
            )?;
            check_wcs(&ctx.send_cq, &wcs, op_name(ctx))?;
            done += n as u64;
        }
        ctx.warmed[i] += depth;
    }
    Ok(())
}

fn without_signaled(f: SendFlags) -> SendFlags {
    if f.contains(SendFlags::INLINE) {
        SendFlags::INLINE
    } else {
        SendFlags::empty()
    }
}

pub(crate) fn op_name(ctx: &Ctx) -> &'static str {
    match ctx.cfg.test.verb() {
        Verb::Write => "RDMA WRITE",
        Verb::Read => "RDMA READ",
        Verb::Atomic => "atomic",
        Verb::Send => "SEND",
    }
}
