//! The retransmit and RNR timers, and the tail-loss probe that a silence sends before the
//! retransmit timer would.

use crate::qp::requester::state::RepairKind;
use crate::qp::timers::Timer;
use crate::qp::{Ctx, QpContext, QpState};
use crate::time::Duration;
use crate::wr::WcStatus;

impl QpContext {
    /// Keeps the retransmit timer armed exactly while request packets are unacknowledged. A
    /// started message whose sent packets are all acknowledged has nothing to time out: its
    /// next packet waits for the QP's turn or the device budget, and arms the timer when it
    /// goes. (Timing it anyway made a QP that waited its turn behind hundreds of others
    /// "time out", halve the device budget and spend a retry on a peer that had answered
    /// everything.)
    pub(super) fn rearm_retransmit(&mut self, ctx: &mut Ctx<'_>) {
        let outstanding = self.req.outstanding() > 0;
        if !outstanding || self.req.waiting_out_rnr() {
            self.timers.stop(Timer::Retransmit);
            self.timers.stop(Timer::TailProbe);
        } else {
            if !self.timers.is_armed(Timer::Retransmit) {
                if let Some(timeout) = self.retransmit_timeout() {
                    self.timers.set(Timer::Retransmit, ctx.now + timeout);
                }
            }
            self.arm_tail_probe(ctx);
        }
    }

    /// Arms the tail-loss probe (from now) unless it is armed. The retransmit timer cannot
    /// fire before the local ACK timeout T (IBTA 9.7.6.1.3; 67 ms at perftest's timeout 14),
    /// hundreds of round trips on a LAN: when the last packets of a burst are lost, or a NAK
    /// or the repair it asked for, nothing more makes the responder answer, and the QP would
    /// sit idle that long. After [`tail_probe_delay`] without an ACK a packet goes once more,
    /// asking for an ACK (see [`QpContext::tail_probe`] for which). Each further probe of the
    /// same silence waits twice as long as the one before, while that is shorter than the
    /// retransmit timeout: a lost probe (1 % loss loses one in a hundred) does not leave the
    /// QP to the timer. Probes cost no retry and leave the budget alone. Towards responders
    /// of both kinds: one that drops early packets (rxe) answers the oldest packet as well,
    /// and the T that rdma_cm gives RoCE QPs is 2.1 s (timeout 19), which each tail loss cost
    /// in full when only the timer recovered towards it (the NVMe-oF target's READs of write
    /// data, towards a host taken for such a responder: a dozen times a thousand writes at
    /// 3 % loss).
    pub(crate) fn arm_tail_probe(&mut self, ctx: &Ctx<'_>) {
        if self.timers.is_armed(Timer::TailProbe) || !ctx.config.selective_repeat {
            return;
        }
        let Some(rto) = self.retransmit_timeout() else {
            return;
        };
        // Before the first round trip is measured (the first ACKs lost), the floor alone.
        let first = tail_probe_delay(self.req.srtt().unwrap_or_default());
        let delay = first * (1u32 << self.req.tail_probes().min(16));
        if delay < rto {
            self.timers.set(Timer::TailProbe, ctx.now + delay);
        }
    }

    /// The local ACK timeout, adapted to the measured round trip (see `rtt.rs`) and doubled
    /// for each retry since the last progress, within the 4T IBTA allows.
    pub(crate) fn retransmit_timeout(&self) -> Option<Duration> {
        let backoff = self.req.retries_without_progress(&self.cfg);
        self.req.rtt().rto(self.cfg.ack_timeout(), backoff)
    }

    /// Runs expired timers.
    pub(crate) fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        self.handle_cc_timeout(ctx);
        if self.timers.take_expired(Timer::RnrWait, ctx.now) {
            self.req.rnr_wait_over();
            // The retransmit timer was stopped for the wait; outstanding work needs it again.
            self.rearm_retransmit(ctx);
        }
        if self.timers.take_expired(Timer::TailProbe, ctx.now)
            && self.req.outstanding() > 0
            && !self.req.resend_pending()
            && self.state != QpState::Err
        {
            self.tail_probe(ctx);
        }
        if self.timers.take_expired(Timer::Retransmit, ctx.now) {
            self.timers.stop(Timer::TailProbe);
            if self.req.outstanding() == 0 || self.state == QpState::Err {
                return;
            }
            ctx.stats.retransmit_timeouts += 1;
            self.req.time_out();
            if let Some(rto) = self.retransmit_timeout() {
                ctx.budget.on_timeout(ctx.now, rto);
            }
            if !self.req.spend_retry() {
                self.fail_wqe(ctx, 0, WcStatus::RetryExcErr);
                return;
            }
            let copies = self.retry_copies();
            let front_is_read = self
                .req
                .front()
                .is_some_and(|w| w.wr.op.is_read_or_atomic());
            if ctx.config.selective_repeat && !front_is_read {
                // Probe with the oldest unacknowledged packet alone: if only ACKs were lost,
                // its answer acknowledges everything; otherwise it says where to go back to.
                // (A repair under way is that packet: it or its answer was lost, and sent
                // again it may arrive as a duplicate, which teaches nothing about the
                // responder's kind either.)
                self.repair(self.req.unacked_psn(), RepairKind::Probe);
                self.req.repeat_resend(copies - 1);
                return;
            }
            let resume = match self.req.front() {
                Some(w) if w.wr.op.is_read_or_atomic() => {
                    w.first_psn.add(w.read_done / w.mtu.max(1))
                }
                _ => self.req.unacked_psn(),
            };
            // The request just resent asks for everything from `resume`: a gap at `resume`
            // seen before its replay arrives is the old response still draining, not a new
            // loss (rxe's `started_retry`). Asking again for it made a slow responder run
            // several replays of a long READ at once, and lose packets of all of them.
            self.req.resume_from(resume);
            if copies > 1 {
                // The cursor sends `resume` once more, then what follows it.
                self.req.resend_next(resume, copies - 2);
            }
        }
    }

    /// How many times a retransmit timeout resends the packet it resumes from: once at the
    /// first timeout, then twice as often with each further timeout that saw no progress, up
    /// to [`MAX_RETRY_COPIES`].
    ///
    /// IBTA's retry counter counts retries without forward progress (9.7.5.1.3), and what a
    /// retry sends is the requester's choice. One packet is what a lost ACK needs, and keeps a
    /// lightly lossy path cheap; but a path that lost the packet, its answer, or both, several
    /// times in a row is one where a single packet is as likely to be lost again, and retries
    /// spent on such probes end the QP in `RETRY_EXC_ERR` on a path that still delivers most
    /// packets (at 20 % loss each way a lone probe's round trip fails 40 % of the time, and
    /// one QP in a few hundred lost eight in a row). Copies of the one packet that unblocks
    /// the responder each have their own chance: a responder executes the first to arrive
    /// and answers every later one as a duplicate (rxe does the same; IBTA 9.7.5.1.4).
    pub(crate) fn retry_copies(&self) -> u32 {
        let spent = u32::from(self.req.retries_without_progress(&self.cfg));
        (1u32 << spent.saturating_sub(1).min(8)).min(MAX_RETRY_COPIES)
    }

    /// Sends the tail-loss probe (see [`QpContext::arm_tail_probe`]) after a silence: the
    /// repair under way, if any (it or its answer was lost); otherwise, towards a responder
    /// whose kind is known, or when a probe of this silence went unanswered, the oldest
    /// unacknowledged packet as a probe; otherwise the newest packet. A responder NAKs a gap
    /// once (rxe too: `sent_psn_nak`), and silently keeps or drops whatever follows: when
    /// that NAK is lost, the newest packet gets no answer, while the oldest always does (it
    /// fills the gap, or is a duplicate, which is acknowledged). Before the responder's kind
    /// was known, the newest went again at every probe, unanswered, until the retransmit
    /// timer.
    /// READ and atomic PSNs are the responder's to send (a response), so they are not probes
    /// of their own — except a READ or atomic request that is the oldest unacknowledged and
    /// got no answer at all: a silence means it or its whole answer was lost (a responder
    /// answering it makes no silence), and it goes again (the responder executes a duplicate
    /// READ again, and answers a duplicate atomic from its replay cache), before the newest
    /// packet is tried: behind a lost READ request whose NAK was lost too, the newest is a
    /// packet the responder drops without a word (the NVMe-oF target's response capsules
    /// probed so, unanswered, until the timer, at 3 % loss a dozen times a thousand writes).
    /// Left to the retransmit timer, a lone lost READ at the end of the queue cost 67 ms. So does a READ
    /// answered in part, its responses stopped: the rest of its answer was lost, and the
    /// request goes again for the rest (from the first missing response PSN) — the timer
    /// took T, 2.1 s at the timeout rdma_cm gives RoCE, for each lost last response.
    fn tail_probe(&mut self, ctx: &mut Ctx<'_>) {
        let unacked = self.req.unacked_psn();
        let newest = self.req.sent_high().sub(1);
        // The round-trip sample stays: an ACK covering it is timed from the packet's first
        // transmission, so a probe can make the sample longer, never shorter (what Karn's rule
        // is about). Dropping it left a path slower than the probe's delay unmeasured for
        // ever, every message probed (a 10 ms round trip: each of 20 WRITEs sent twice). It
        // is marked, so that only the estimate takes it (`RttEstimator::on_ack`).
        match self.req.repair() {
            // Sent again, the repair may arrive as a duplicate, whose answer says where the
            // responder's run stopped but not what it kept: a probe.
            Some(r) if !r.psn.is_before(unacked) => {
                self.repair_keeping_sample(r.psn, RepairKind::Probe);
            }
            _ if self.req.answered_by_response(unacked)
                || ((self.req.peer_reorders().is_some() || self.req.tail_probes() > 0)
                    && self.req.resendable_alone(unacked)) =>
            {
                self.repair_keeping_sample(unacked, RepairKind::Probe);
            }
            _ if self.req.resendable_alone(newest) => {
                self.req.resend_next(newest, 0);
            }
            _ => return,
        }
        self.req.tail_probe_sent();
        ctx.stats.tail_probes += 1;
    }
}

/// Most copies one retransmit timeout sends of the packet it resumes from (see
/// [`QpContext::retry_copies`]): from the fourth timeout without progress on.
pub(crate) const MAX_RETRY_COPIES: u32 = 8;

/// How long a silence lasts before the tail-loss probe: four smoothed round trips, at least
/// 5 ms. A spurious probe costs only a duplicate packet, but a host short of CPU stalls a
/// peer for milliseconds at a time (1 ms made duplicates routine on a loaded 2-core CI
/// machine); 5 ms is still a thirteenth of perftest's 67 ms timeout.
fn tail_probe_delay(srtt: Duration) -> Duration {
    (srtt * 4).max(Duration::from_millis(5))
}
