//! Latency tests: `ib_send_lat` and `ib_write_lat` ping-pong (each side answers what it
//! receives; SEND is noticed by a receive completion, WRITE by polling the last byte of the
//! buffer, where the peer's counter lands), `ib_read_lat` and `ib_atomic_lat` round trips
//! from the client alone. The samples are the intervals between consecutive posts, as in
//! perftest.
//!
//! Who starts a ping-pong is perftest's, and differs between the two: in `send-lat` the
//! client sends first, in `write-lat` the *server* writes first (`run_iter_lat_send` and
//! `run_iter_lat_write`). Both orders are the same in every perftest that exchanges versions
//! (5.0 in 2013 up to 6.29; `ib_write_lat` last changed its order in 2010), so the peer's
//! version string decides nothing here. Getting it wrong does not fail cleanly: if both
//! sides write first, one side's second WRITE can overwrite the polled byte (1 → 2) before
//! the peer has seen the 1, and both wait forever; if both wait first, nothing moves.

use std::time::Instant;

use softrdma::{wr, SendFlags, WorkCompletion};
use softrdma_oob::perftest::Role;

use super::args::{AtomicKind, TestName, Verb};
use super::bw::{check_wcs, poll_for};
use super::layout::{pattern, split_id, wr_id};
use super::oob::Ctx;
use super::output::{PerfError, Progress};
use super::recv::{check_recv, post_recvs, recv_lands_apart};
use super::report::{one_way_factor, LatDurRow, LatRow, Row};

/// Whether this side of a ping-pong waits for the peer's first message before sending its
/// own: the server in `send-lat`, the client in `write-lat` (see the module docs).
fn waits_first(test: TestName, role: Role) -> bool {
    match test {
        TestName::WriteLat => role == Role::Client,
        _ => role == Role::Server,
    }
}

/// Send completions not yet reaped, and the cap before posting must wait for them.
struct SendSide {
    outstanding: u64,
    cap: u64,
    wcs: Vec<WorkCompletion>,
}

impl SendSide {
    fn new(ctx: &Ctx) -> SendSide {
        SendSide {
            outstanding: 0,
            cap: u64::from(ctx.cfg.tx_depth.max(64)),
            wcs: Vec::with_capacity(64),
        }
    }

    /// Reaps the sends finished so far without waiting: an error completion fails the run
    /// at once (the QP is then in the error state and the peer's next message cannot come).
    /// When there are none, the calling thread moves the device's packets itself (see
    /// [`poll_spin`](super::bw::poll_spin)): the WRITE a memory poller waits for lands without waking anyone.
    fn reap_ready(&mut self, ctx: &Ctx) -> Result<(), PerfError> {
        self.wcs.clear();
        let n = ctx.send_cq.poll_progress(64, &mut self.wcs);
        if n > 0 {
            ctx.beat();
        }
        check_wcs(&ctx.send_cq, &self.wcs, "send")?;
        self.outstanding -= n as u64;
        Ok(())
    }

    /// Reaps finished sends; waits for some if the queue is full (`block`) or until none is
    /// left (`drain`).
    fn reap(&mut self, ctx: &Ctx, drain: bool) -> Result<(), PerfError> {
        loop {
            self.wcs.clear();
            let must_wait = (drain && self.outstanding > 0) || self.outstanding >= self.cap;
            let n = if must_wait {
                poll_for(ctx, &ctx.send_cq, 64, &mut self.wcs, "send completions")?
            } else {
                ctx.send_cq.poll(64, &mut self.wcs)
            };
            check_wcs(&ctx.send_cq, &self.wcs, "send")?;
            self.outstanding -= n as u64;
            if n == 0 || !must_wait && !drain {
                return Ok(());
            }
            if drain && self.outstanding == 0 {
                return Ok(());
            }
        }
    }
}

/// Spins (then yields) until `f` holds; fails after `stall`.
fn spin_until(
    stall: std::time::Duration,
    mut f: impl FnMut() -> Result<bool, PerfError>,
    what: &str,
) -> Result<(), PerfError> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if f()? {
            return Ok(());
        }
        spins = spins.wrapping_add(1);
        if spins < 200 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
            if spins % 1024 == 0 && start.elapsed() > stall {
                return Err(PerfError::new(format!(
                    "nothing for {} s while waiting for {what}: is the peer still running?",
                    crate::limits::fmt_secs(stall.as_secs_f64())
                )));
            }
        }
    }
}

/// `run_iter_lat_send`, one size. Receives (`preposted` of them) were posted before the sync.
pub(crate) fn send_lat(
    ctx: &mut Ctx,
    size: u64,
    preposted: u64,
    progress: &mut Progress,
) -> Result<Row, PerfError> {
    let iters = ctx.cfg.iters;
    let waits_first = waits_first(TestName::SendLat, ctx.role);
    let inline = size <= u64::from(ctx.cfg.inline);
    let mut posted_at = Vec::with_capacity(iters as usize);
    let (mut scnt, mut rcnt, mut rposted) = (0u64, 0u64, preposted);
    let mut sends = SendSide::new(ctx);
    let mut rwc = Vec::with_capacity(1);
    progress.start(&format!("send-lat {size} B"));
    while scnt < iters || rcnt < iters {
        let mut unchecked = None;
        if rcnt < iters && (scnt > 0 || waits_first) {
            rwc.clear();
            wait_one(ctx, &mut rwc)?;
            check_wcs(&ctx.recv_cq, &rwc, "receive")?;
            let wc = rwc.swap_remove(0);
            // The check of the message is the tool's work, not the ping-pong's: it waits
            // until the answer is out, unless the peer's next message (which that answer
            // lets it send) lands where this one is.
            let seq = split_id(wc.wr_id).1;
            if recv_lands_apart(ctx, 0, size, seq, seq + 1) {
                unchecked = Some(wc);
            } else {
                check_recv(ctx, &wc, size, (0, seq))?;
            }
            rcnt += 1;
            if rposted < iters {
                post_recvs(ctx, 0, size, rposted, 1)?;
                rposted += 1;
            }
        }
        if scnt < iters {
            // Reaped first: the stamp slot of this message is free only once the send that
            // used it last has completed.
            sends.reap(ctx, false)?;
            let mut w = if inline {
                let mut w = wr::send_inline(wr_id(0, scnt), &[]);
                // The payload moves into the work request: no second copy.
                w.inline_data = Some(super::bw::inline_payload(ctx, 0, scnt, size, 0).into());
                w
            } else {
                let sgl =
                    ctx.check_mem
                        .stamped_sgl(&ctx.mr, 0, scnt, size, ctx.local_off(0) as usize)?;
                wr::send(wr_id(0, scnt), sgl)
            };
            w.ud = ctx.ud.first().copied();
            posted_at.push(Instant::now());
            ctx.qps[0].post_send([w])?;
            sends.outstanding += 1;
            scnt += 1;
        }
        if let Some(wc) = unchecked {
            check_recv(ctx, &wc, size, (0, split_id(wc.wr_id).1))?;
        }
        progress.tick(scnt, Some(iters));
    }
    sends.reap(ctx, true)?;
    progress.finish();
    Ok(Row::Lat(LatRow::from_posts(
        size,
        &posted_at,
        one_way_factor(ctx.cfg.test),
    )))
}

/// Waits for one receive completion, spinning as perftest does (the spinning thread moves
/// the packets itself, see [`poll_spin`](super::bw::poll_spin)), or asleep with `-e`.
fn wait_one(ctx: &Ctx, out: &mut Vec<WorkCompletion>) -> Result<(), PerfError> {
    poll_for(ctx, &ctx.recv_cq, 1, out, "the peer's message")?;
    Ok(())
}

/// `run_iter_lat_write`, one size: each side WRITEs `size` bytes whose last byte is its
/// message counter (1, 2, ... as a byte), and waits for the peer's counter to appear in the
/// last byte of its own target slot; the server writes first (see the module docs).
pub(crate) fn write_lat(
    ctx: &mut Ctx,
    size: u64,
    progress: &mut Progress,
) -> Result<Row, PerfError> {
    let iters = ctx.cfg.iters;
    let waits_first = waits_first(TestName::WriteLat, ctx.role);
    let last = size as usize - 1;
    let poll_at = ctx.target_off(0) as usize + last;
    let post_at = ctx.local_off(0) as usize + last;
    let inline = size <= u64::from(ctx.cfg.inline);
    let mut payload = pattern(0, size as usize);
    // A smaller size of an -a run left its counter inside this size's bytes.
    ctx.mr.write(ctx.local_off(0) as usize, &payload)?;
    let rem = ctx.rem[0];
    let mut posted_at = Vec::with_capacity(iters as usize);
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut sends = SendSide::new(ctx);
    progress.start(&format!("write-lat {size} B"));
    while scnt < iters || rcnt < iters {
        if rcnt < iters && (scnt > 0 || waits_first) {
            rcnt += 1;
            let want = rcnt as u8;
            let mut b = [0u8; 1];
            spin_until(
                ctx.stall(),
                || {
                    // Only the polled byte says the peer's WRITE landed; a failed WRITE of
                    // ours shows in the send queue (perftest polls it every round), and
                    // reaping it moves the device's packets.
                    ctx.mr.read(poll_at, &mut b)?;
                    if b[0] == want {
                        return Ok(true);
                    }
                    sends.reap_ready(ctx)?;
                    ctx.mr.read(poll_at, &mut b)?;
                    Ok(b[0] == want)
                },
                "the peer's WRITE",
            )?;
        }
        if scnt < iters {
            sends.reap(ctx, false)?;
            posted_at.push(Instant::now());
            scnt += 1;
            let counter = scnt as u8;
            let mut w = if inline {
                payload[last] = counter;
                let mut w = wr::write(wr_id(0, scnt), Vec::new(), rem.vaddr, rem.rkey);
                w.inline_data = Some(payload.as_slice().into());
                w.flags = SendFlags::SIGNALED | SendFlags::INLINE;
                w
            } else {
                ctx.mr.write(post_at, &[counter])?;
                wr::write(
                    wr_id(0, scnt),
                    vec![ctx.mr.sge(ctx.local_off(0) as usize, size as u32)],
                    rem.vaddr,
                    rem.rkey,
                )
            };
            w.flags = w.flags | SendFlags::SIGNALED;
            ctx.qps[0].post_send([w])?;
            sends.outstanding += 1;
        }
        progress.tick(scnt, Some(iters));
    }
    sends.reap(ctx, true)?;
    progress.finish();
    Ok(Row::Lat(LatRow::from_posts(
        size,
        &posted_at,
        one_way_factor(ctx.cfg.test),
    )))
}

/// What a write-lat side can verify after the last round: the peer's bytes before the
/// counter are its pattern.
pub(crate) fn check_write_lat(ctx: &Ctx, size: u64) -> Result<String, PerfError> {
    let n = size as usize - 1;
    let got = ctx.mr.read_vec(ctx.target_off(0) as usize, n)?;
    if got != pattern(0, n) {
        return Err(PerfError::check(format!(
            "the peer's last {size}-byte WRITE did not land intact"
        )));
    }
    Ok(format!("OK (last {size}-byte WRITE verified)"))
}

/// `run_iter_lat` for READ and atomics, one size: one request at a time, from the client.
pub(crate) fn read_lat(
    ctx: &mut Ctx,
    size: u64,
    progress: &mut Progress,
) -> Result<Row, PerfError> {
    let cfg = ctx.cfg.clone();
    let rem = ctx.rem[0];
    let local = ctx.local_off(0) as usize;
    let timed = cfg.duration;
    let mut posted_at = Vec::with_capacity(if timed.is_some() {
        0
    } else {
        cfg.iters as usize
    });
    let mut wcs = Vec::with_capacity(1);
    let start = Instant::now();
    let mut n = 0u64;
    progress.start(&format!("{} {size} B", cfg.test.as_str()));
    loop {
        match timed {
            Some(d) if start.elapsed() >= d => break,
            None if n >= cfg.iters => break,
            _ => {}
        }
        let id = wr_id(0, n);
        let check_it = ctx.check_mem.landing_ring().is_some()
            && super::bw::sampled(n, timed.is_none().then_some(cfg.iters));
        let w = match (cfg.test.verb(), cfg.atomic) {
            (Verb::Read, _) => {
                let sge = match ctx.check_mem.landing_sge(0, n, size, check_it)? {
                    Some(sge) => sge,
                    None => ctx.mr.sge(local, size as u32),
                };
                wr::read(id, vec![sge], rem.vaddr, rem.rkey)
            }
            (_, AtomicKind::FETCH_AND_ADD) => {
                wr::fetch_add(id, ctx.mr.sge(local, 8), rem.vaddr, rem.rkey, 1)
            }
            (_, AtomicKind::CMP_AND_SWAP) => {
                wr::compare_swap(id, ctx.mr.sge(local, 8), rem.vaddr, rem.rkey, 0, 0)
            }
        };
        if timed.is_none() {
            posted_at.push(Instant::now());
        }
        ctx.qps[0].post_send([w])?;
        wcs.clear();
        poll_for(ctx, &ctx.send_cq, 1, &mut wcs, "the reply")?;
        let what = if cfg.test.verb() == Verb::Read {
            "RDMA READ"
        } else {
            "atomic"
        };
        check_wcs(&ctx.send_cq, &wcs, what)?;
        let wc = &wcs[0];
        debug_assert_eq!(split_id(wc.wr_id).1, n);
        if check_it {
            ctx.check_mem.verify_read(0, n, size, 0)?;
            ctx.reads_verified += 1;
        }
        n += 1;
        progress.tick(n, timed.map_or(Some(cfg.iters), |_| None));
    }
    progress.finish();
    ctx.sent = vec![n];
    Ok(match timed {
        None => Row::Lat(LatRow::from_posts(size, &posted_at, 1)),
        Some(_) => {
            let secs = start.elapsed().as_secs_f64();
            Row::LatDur(LatDurRow {
                size,
                iters: n,
                avg: secs * 1e6 / n.max(1) as f64,
                tps: n as f64 / secs.max(1e-9),
            })
        }
    })
}
