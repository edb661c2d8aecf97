//! The completer: consumes ACKs, NAKs, READ responses and atomic ACKs, retires send WQEs in
//! posting order, and runs the retransmit and RNR timers (IBTA 9.7.5 requester side).
//!
//! The PSN bookkeeping is one number, `unacked_psn`: every PSN before it is acknowledged,
//! explicitly (ACK) or implicitly (a READ response or atomic ACK for a later PSN, or a NAK's
//! PSN). Responses come back in PSN order, so an ACK or response beyond an unfinished READ or
//! atomic means that operation's responses were lost — an implicit NAK that restarts it.
//!
//! By concern: ACKs and retirement here, the selective repair in [`repair`], READ responses
//! and atomic ACKs in [`response`], the timers and the tail-loss probe in [`timeout`].

mod repair;
mod response;
mod timeout;

use softrdma_wire::{rnr_timer_us, NakCode, OpKind, PacketRepr, Psn, Syndrome};

use crate::qp::requester::state::RepairKind;
use crate::qp::timers::Timer;
use crate::qp::{Ctx, QpContext, QpState};
use crate::stats::{DropReason, NakKind};
use crate::time::Duration;
use crate::wr::{SendFlags, WcStatus};

impl QpContext {
    /// Handles a response packet (ACK, ATOMIC ACK, READ response) addressed to this QP.
    pub(crate) fn handle_response(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) {
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        let psn = pkt.bth.psn;
        // A response must acknowledge something sent: within [unacked - 1, sent_high).
        let oldest = self.req.unacked_psn().sub(1);
        if psn.is_before(oldest) || !psn.is_before(self.req.sent_high()) {
            ctx.stats.drop(if psn.is_before(oldest) {
                DropReason::Duplicate
            } else {
                DropReason::UnexpectedResponse
            });
            return;
        }
        let nak_inside = pkt
            .ext
            .aeth
            .is_some_and(|a| !matches!(a.syndrome, Syndrome::Ack { .. }));
        match info.kind {
            OpKind::Acknowledge => {
                let Some(aeth) = pkt.ext.aeth else { return };
                self.handle_ack(ctx, psn, aeth.syndrome);
            }
            OpKind::ReadResponse | OpKind::AtomicAcknowledge if nak_inside => {
                // A READ response's or ATOMIC ACKNOWLEDGE's AETH acknowledges; a NAK there is
                // a malformed response, which fails its WQE (rxe's `check_ack`: an error),
                // rather than completing it with data the responder disowned.
                match self.wqe_index(psn) {
                    Some(idx) => self.fail_wqe(ctx, idx, WcStatus::BadRespErr),
                    None => ctx.stats.drop(DropReason::UnexpectedResponse),
                }
            }
            OpKind::ReadResponse => {
                self.handle_read_response(ctx, pkt, info.position);
                self.response_answers_repair();
            }
            OpKind::AtomicAcknowledge => {
                let Some(ack) = pkt.ext.atomic_ack_eth else {
                    return;
                };
                self.handle_atomic_ack(ctx, psn, ack.orig);
                self.response_answers_repair();
            }
            _ => ctx.stats.drop(DropReason::UnexpectedResponse),
        }
        self.retire_completed(ctx);
        self.rearm_retransmit(ctx);
        self.req.debug_check();
    }

    fn handle_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn, syndrome: Syndrome) {
        // A NAK names the first PSN the responder has not executed. One for a PSN already
        // acknowledged is stale (duplicated or overtaken in the network): acting on it would
        // rewind to a PSN no WQE owns any more.
        if !matches!(syndrome, Syndrome::Ack { .. }) && psn.is_before(self.req.unacked_psn()) {
            ctx.stats.drop(DropReason::Duplicate);
            return;
        }
        match syndrome {
            Syndrome::Ack { .. } => {
                self.ack_through(ctx, psn);
                self.repair_answered(psn);
            }
            Syndrome::RnrNak { timer } => {
                ctx.stats.nak_received(NakKind::Rnr);
                self.ack_through(ctx, psn.sub(1));
                if self.state == QpState::Err {
                    return;
                }
                if !self.req.spend_rnr_retry() {
                    let idx = self.wqe_index(psn).unwrap_or(0);
                    self.fail_wqe(ctx, idx, WcStatus::RnrRetryExcErr);
                    return;
                }
                self.resume_after_nak();
                self.req.wait_for_rnr();
                self.timers.stop(Timer::Retransmit);
                let wait = Duration::from_micros(u64::from(rnr_timer_us(timer)));
                self.timers.set(Timer::RnrWait, ctx.now + wait);
            }
            Syndrome::Nak(code) => {
                let (kind, status) = match code {
                    NakCode::PsnSequenceError => (NakKind::PsnSequence, None),
                    NakCode::InvalidRequest => {
                        (NakKind::InvalidRequest, Some(WcStatus::RemInvReqErr))
                    }
                    NakCode::RemoteAccessError => {
                        (NakKind::RemoteAccess, Some(WcStatus::RemAccessErr))
                    }
                    NakCode::RemoteOperationalError => {
                        (NakKind::RemoteOperational, Some(WcStatus::RemOpErr))
                    }
                    NakCode::InvalidRdRequest | NakCode::Reserved(_) => {
                        (NakKind::RemoteOperational, Some(WcStatus::RemOpErr))
                    }
                };
                ctx.stats.nak_received(kind);
                self.ack_through(ctx, psn.sub(1));
                if self.state == QpState::Err {
                    return;
                }
                match status {
                    None => {
                        // PSN sequence error: resend from the PSN the responder expects.
                        if self
                            .req
                            .repair()
                            .is_some_and(|r| r.psn == psn && r.kind != RepairKind::Await)
                        {
                            return; // the repair is on its way
                        }
                        if !self.req.spend_retry() {
                            let idx = self.wqe_index(psn).unwrap_or(0);
                            self.fail_wqe(ctx, idx, WcStatus::RetryExcErr);
                            return;
                        }
                        if let Some(r) = self.req.repair() {
                            if psn.is_after(r.psn) {
                                // It ran what it kept past the repaired packet: it reorders.
                                self.req.peer_keeps_early_packets();
                            }
                        }
                        if !self.start_repair(ctx, psn) {
                            self.resume_after_nak();
                        }
                    }
                    Some(status) => {
                        // Class B/C/D errors complete the WQE in error and stop the QP.
                        let idx = self.wqe_index(psn).unwrap_or(0);
                        self.fail_wqe(ctx, idx, status);
                    }
                }
            }
            Syndrome::Reserved(_) => ctx.stats.drop(DropReason::Malformed),
        }
    }

    /// Index in the send queue of the started WQE that owns `psn`.
    pub(in crate::qp) fn wqe_index(&self, psn: Psn) -> Option<usize> {
        self.req.wqes().iter().position(|w| w.contains(psn))
    }

    /// Acknowledges every PSN up to and including `psn`: SEND and WRITE WQEs entirely at or
    /// before it are done. A READ or atomic still waiting for its response at or before `psn`
    /// lost that response: resend it (the responder answers from its resources).
    pub(crate) fn ack_through(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if !psn.is_after(self.req.unacked_psn().sub(1)) {
            return;
        }
        if self.req.responder_executed_through(psn) {
            // The responder executed further than before: the connection is alive, whatever
            // is still missing. Sequence NAKs of a busy, lossy path must not drain the retry
            // budget meant for a peer that answers nothing (IBTA: retries count attempts
            // without forward progress).
            let cfg = self.cfg;
            self.req.reset_retry_counters(&cfg);
        }
        let mut new_unacked = self.req.unacked_psn();
        for idx in 0..self.req.wqes().len() {
            let wqe = self.req.wqe(idx);
            if !wqe.started || wqe.first_psn.is_after(psn) {
                break;
            }
            if wqe.status.is_some() {
                continue;
            }
            if wqe.wr.op.is_read_or_atomic() {
                // Implicit NAK: the response for this WQE never arrived.
                let resume = wqe.first_psn.add(wqe.read_done / wqe.mtu.max(1));
                self.req.retry_gap_at(resume);
                break;
            }
            let last = wqe.last_psn();
            if last.is_after(psn) {
                // Partially acknowledged multi-packet message.
                new_unacked = psn.next();
                break;
            }
            self.req.wqe_succeeded(idx);
            new_unacked = last.next();
        }
        if new_unacked != self.req.unacked_psn() && new_unacked.is_after(self.req.unacked_psn()) {
            self.acknowledge_to(ctx, new_unacked);
        }
    }

    /// The peer acknowledged everything before `next` (an ACK, or a response that implies
    /// one). The device budget grows by the packets newly acknowledged: an acknowledgment is
    /// the only evidence that the path absorbed them. (Packets that leave the budget any other
    /// way — a UC message completed on send, a flush, a timeout giving up on a window — say
    /// nothing about the path, and must not grow it.)
    fn acknowledge_to(&mut self, ctx: &mut Ctx<'_>, next: Psn) {
        let acked = self.req.acknowledged_before(next);
        ctx.budget.on_acked(acked);
        self.progress(ctx);
    }

    /// Forward progress: the retry counters start over and the cursor skips acknowledged
    /// packets it might have been about to resend.
    fn progress(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(rtt) = self.req.time_ack(ctx.now) {
            ctx.budget.on_rtt(ctx.now, rtt, self.cfg.ack_timeout());
            self.on_rtt_sample(ctx, rtt);
        }
        let cfg = self.cfg;
        self.req.reset_retry_counters(&cfg);
        let acked = self.req.unacked_psn().sub(1);
        self.req.responder_executed_through(acked);
        self.req.skip_acknowledged();
        // Both timers measure a silence: it ended (the caller re-arms them from now).
        self.timers.stop(Timer::Retransmit);
        self.timers.stop(Timer::TailProbe);
    }

    /// Pops finished WQEs off the front of the send queue and reports them, in order.
    pub(crate) fn retire_completed(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(wqe) = self.req.front() {
            let Some(status) = wqe.status else { break };
            if status != WcStatus::Success {
                break; // errors retire through enter_error's flush
            }
            let wqe = self.req.retire_front().expect("front exists");
            if wqe.wr.flags.contains(SendFlags::SIGNALED) {
                ctx.complete(self.send_cq, wqe.completion(self.qpn, WcStatus::Success));
            }
        }
    }
}
