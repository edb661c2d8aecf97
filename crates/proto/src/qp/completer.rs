//! The completer: consumes ACKs, NAKs, READ responses and atomic ACKs, retires send WQEs in
//! posting order, and runs the retransmit and RNR timers (IBTA 9.7.5 requester side).
//!
//! The PSN bookkeeping is one number, `unacked_psn`: every PSN before it is acknowledged,
//! explicitly (ACK) or implicitly (a READ response or atomic ACK for a later PSN, or a NAK's
//! PSN). Responses come back in PSN order, so an ACK or response beyond an unfinished READ or
//! atomic means that operation's responses were lost — an implicit NAK that restarts it.

use softrdma_wire::{rnr_timer_us, NakCode, OpKind, PacketRepr, Position, Psn, Syndrome};

use super::send_queue::{Repair, RepairKind};
use super::timers::Timer;
use super::{Ctx, QueuePair};
use crate::access::AccessFlags;
use crate::stats::{DropReason, NakKind};
use crate::time::Duration;
use crate::wr::{SendFlags, SendOp, WcStatus};

impl QueuePair {
    /// Handles a response packet (ACK, ATOMIC ACK, READ response) addressed to this QP.
    pub(crate) fn handle_response(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) {
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        let psn = pkt.bth.psn;
        // A response must acknowledge something sent: within [unacked - 1, sent_high).
        let oldest = self.req.unacked_psn.sub(1);
        if psn.is_before(oldest) || !psn.is_before(self.req.sent_high) {
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
    }

    fn handle_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn, syndrome: Syndrome) {
        // A NAK names the first PSN the responder has not executed. One for a PSN already
        // acknowledged is stale (duplicated or overtaken in the network): acting on it would
        // rewind to a PSN no WQE owns any more.
        if !matches!(syndrome, Syndrome::Ack { .. }) && psn.is_before(self.req.unacked_psn) {
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
                if self.state == super::QpState::Err {
                    return;
                }
                if self.req.rnr_left == 0 {
                    let idx = self.wqe_index(psn).unwrap_or(0);
                    self.fail_wqe(ctx, idx, WcStatus::RnrRetryExcErr);
                    return;
                }
                if self.req.rnr_left != 7 {
                    self.req.rnr_left -= 1;
                }
                self.resume_after_nak();
                self.req.rnr_wait = true;
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
                if self.state == super::QpState::Err {
                    return;
                }
                match status {
                    None => {
                        // PSN sequence error: resend from the PSN the responder expects.
                        if self
                            .req
                            .repair
                            .is_some_and(|r| r.psn == psn && r.kind != RepairKind::Await)
                        {
                            return; // the repair is on its way
                        }
                        if self.req.retry_left == 0 {
                            let idx = self.wqe_index(psn).unwrap_or(0);
                            self.fail_wqe(ctx, idx, WcStatus::RetryExcErr);
                            return;
                        }
                        self.req.retry_left -= 1;
                        if let Some(r) = self.req.repair {
                            if psn.is_after(r.psn) {
                                // It ran what it kept past the repaired packet: it reorders.
                                self.req.peer_reorders = Some(true);
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

    /// Starts a selective repeat of `psn` if it can work: the engine allows it, the peer is not
    /// known to drop what follows a gap, `psn` is where the acknowledgements stopped (no READ
    /// or atomic before it still waits for its response) and no go-back-N is under way.
    /// Otherwise `false`.
    ///
    /// Selective repeat resends `psn` alone, asking for an ACK, while new packets keep going.
    /// A responder that kept the packets after the gap runs them once `psn` arrives and
    /// answers with one ACK (everything received) or a NAK of the next gap, which is repaired
    /// the same way. One that dropped them (IBTA's rule, Linux rxe) acknowledges `psn` alone:
    /// the requester learns that, goes back N from there, and uses go-back-N with it from
    /// then on (`repair_answered`).
    fn start_repair(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> bool {
        let req = &self.req;
        if !ctx.config.selective_repeat
            || req.peer_reorders == Some(false)
            || req.unacked_psn != psn
        {
            return false;
        }
        let cursor_psn = match req.sq.get(req.cursor) {
            Some(w) if w.started => w.first_psn.add(req.cursor_pkt),
            _ => req.next_psn,
        };
        if cursor_psn.is_before(req.sent_high) {
            return false;
        }
        if self.wqe_index(psn).is_none() {
            return false;
        }
        self.repair(psn, RepairKind::Gap);
        ctx.stats.selective_repeats += 1;
        true
    }

    fn repair(&mut self, psn: Psn, kind: RepairKind) {
        self.repair_keeping_sample(psn, kind);
        self.req.rtt.on_retransmit();
    }

    /// [`repair`](Self::repair) without dropping the round-trip sample (see `tail_probe`).
    fn repair_keeping_sample(&mut self, psn: Psn, kind: RepairKind) {
        self.req.repair = Some(Repair {
            psn,
            horizon: self.req.sent_high,
            kind,
        });
        self.req.resend = Some(psn);
        self.req.resend_copies = 0;
    }

    /// A READ response or atomic ACK moved the oldest unacknowledged PSN past the packet under
    /// repair: the responder executed it, and the answer ends the repair like an ACK — but
    /// teaches nothing of the responder's kind (an ATOMIC ACK is not merged into a later ACK
    /// or NAK as a plain ACK is, so a responder that kept the packets after it may still be
    /// answering them). Left standing, the repair kept the tail probe resending a PSN already
    /// acknowledged, that is nothing, until the retransmit timer. The middle of a READ's
    /// responses answers nothing yet: its request's PSN is done only with its last response.
    ///
    /// What follows goes again only towards a responder that drops early packets (rxe drops
    /// the WRITE after a lost atomic: it would wait for the timer). One that keeps them is
    /// replaying what it kept after the answer, and NAKs what it finds missing next (or the
    /// tail probe finds it): resending the next packet at once duplicated the WRITE after a
    /// repaired READ every time, its ACK one packet behind the READ's last response.
    fn response_answers_repair(&mut self) {
        let Some(r) = self.req.repair else {
            return;
        };
        let unacked = self.req.unacked_psn;
        if !r.psn.is_before(unacked) {
            return;
        }
        if r.kind == RepairKind::Await && self.req.peer_reorders.is_none() {
            // The awaited request was not sent again: the responder kept it.
            self.req.peer_reorders = Some(true);
        }
        let at = self.req.wqe_at(unacked);
        if at.is_some_and(|w| w.started && w.first_psn != unacked) {
            return; // the middle of a READ's responses
        }
        if !unacked.is_before(r.horizon) || self.req.peer_reorders == Some(true) {
            self.req.repair = None;
        } else {
            self.req.go_back(unacked);
        }
    }

    /// An ACK through `psn` came while a selective repeat is under way. The first answer to
    /// a gap's repair tells the responder's kind: more than the repaired packet acknowledged
    /// means it kept what followed the gap; the repaired packet alone means it dropped it
    /// (IBTA C9-92), and the rest goes again, go-back-N.
    ///
    /// An answer short of the horizon from a responder that keeps early packets repairs the
    /// next packet alone ([`RepairKind::Next`]) and goes back only if that answer shows
    /// nothing was kept. Going back at once resent a whole window (127 packets, 7 of them
    /// lost) each time the NAK of a second gap was lost under 1 % loss.
    fn repair_answered(&mut self, psn: Psn) {
        let Some(r) = self.req.repair else {
            return;
        };
        if psn.is_before(r.psn) {
            return; // an older ACK, overtaken by the NAK
        }
        // The answer stops at the repaired packet, and a READ or atomic request follows it:
        // that request's answer is a response of its own, which a responder that kept it
        // sends after this ACK. So the ACK shows neither that the responder dropped what
        // followed the gap nor that it kept it; the response will (or a silence, which the
        // tail probe ends). Taken for a drop, it made the NVMe-oF target, whose host keeps
        // early packets, go back over every READ after each gap: nine in ten of its READ
        // requests were sent twice at 3 % loss.
        let request_next = psn == r.psn && self.req.answered_by_response(psn.next());
        match r.kind {
            // What follows a probe may all have been lost; an awaited request was not resent.
            RepairKind::Probe | RepairKind::Await => {}
            _ if psn.is_after(r.psn) => self.req.peer_reorders = Some(true),
            RepairKind::Gap if self.req.peer_reorders.is_none() && !request_next => {
                self.req.peer_reorders = Some(false);
            }
            _ => {}
        }
        if !psn.next().is_before(r.horizon) {
            self.req.repair = None;
            return;
        }
        // Packets between the answer and the horizon are missing at the responder.
        let nothing_kept = r.kind == RepairKind::Next && psn == r.psn && !request_next;
        let kept = match self.req.peer_reorders {
            Some(true) => !nothing_kept,
            None => request_next,
            Some(false) => false,
        };
        if kept {
            self.repair_next(psn.next());
        } else {
            self.req.go_back(psn.next());
        }
    }

    /// Repairs `psn` alone towards a responder that keeps early packets. A READ or atomic
    /// request there may well have been kept and be being answered (the responder replays
    /// what it kept: the ACK before the READ goes out first, then the READ's responses):
    /// resent at once, its duplicate restarts the answer (16 duplicate READ responses for one
    /// 16 KiB READ). So its repair waits unsent ([`RepairKind::Await`]) — dropping it left a
    /// lost READ to the retransmit timer, as a READ is never a tail probe of its own.
    fn repair_next(&mut self, psn: Psn) {
        if self.req.resendable_alone(psn) {
            self.repair(psn, RepairKind::Next);
        } else {
            self.req.repair = Some(Repair {
                psn,
                horizon: self.req.sent_high,
                kind: RepairKind::Await,
            });
        }
    }

    /// Resends from the oldest unacknowledged PSN after an RNR or sequence NAK. That is the
    /// NAK's PSN unless a READ or atomic before it is still waiting for its response: the
    /// responder executed it (it NAKed a later PSN), so the response was lost, and the request
    /// must go again to have it replayed.
    fn resume_after_nak(&mut self) {
        let resume = self.req.unacked_psn;
        self.req.gap_retry_at = Some(resume);
        self.req.go_back(resume);
    }

    fn handle_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
        position: Position,
    ) {
        // A payload received straight into memory (`crate::placement`): for this response's
        // own placement below, or for nothing.
        let placed = ctx.placed.take();
        let psn = pkt.bth.psn;
        let Some(idx) = self.wqe_index(psn) else {
            ctx.stats.drop(DropReason::UnexpectedResponse);
            return;
        };
        match self.req.sq[idx].wr.op {
            SendOp::RdmaRead { .. } => {}
            SendOp::AtomicWrite { .. } | SendOp::Flush { .. } => {
                self.handle_placement_ack(ctx, idx, psn, position, pkt.payload.len());
                return;
            }
            _ => {
                ctx.stats.drop(DropReason::UnexpectedResponse);
                return;
            }
        }
        // Everything before this READ is implicitly acknowledged.
        let first = self.req.sq[idx].first_psn;
        self.ack_through(ctx, first.sub(1));
        if self.state == super::QpState::Err {
            return;
        }
        let expected = self.req.unacked_psn;
        if psn != expected {
            if psn.is_after(expected) && self.wqe_index(expected).is_some() {
                // A response packet was lost: ask again from the first missing one, once.
                if self.req.gap_retry_at != Some(expected) {
                    self.req.gap_retry_at = Some(expected);
                    self.req.go_back(expected);
                    ctx.stats.drop(DropReason::OutOfSequence);
                    return;
                }
            }
            ctx.stats.drop(DropReason::Duplicate);
            return;
        }
        let pd = self.pd;
        let wqe = &mut self.req.sq[idx];
        let k = psn.distance(wqe.first_psn) as u32;
        let offset = u64::from(k) * u64::from(wqe.mtu);
        let expect_len =
            (u64::from(wqe.len).saturating_sub(offset)).min(u64::from(wqe.mtu)) as usize;
        let ends = k + 1 == wqe.npkts;
        // Each request (a chunk, or a restart inside one) is answered FIRST..LAST or ONLY, and
        // ends where its chunk ends; a restart begins with FIRST/ONLY at any k.
        let chunk = super::requester::read_chunk(ctx.config);
        let request_ends = ends || (k + 1) % chunk == 0;
        let position_ok = position.ends() == request_ends && (position.starts() || k % chunk != 0);
        if pkt.payload.len() != expect_len || !position_ok {
            self.fail_wqe(ctx, idx, WcStatus::BadRespErr);
            return;
        }
        let sgl = &wqe.wr.sg_list;
        let placed_ok = match placed {
            None => ctx.mrs.scatter(pd, sgl, offset, pkt.payload).is_ok(),
            // Where it belongs already.
            Some(p)
                if ctx
                    .mrs
                    .locate(pd, sgl, offset, p.len, AccessFlags::LOCAL_WRITE)
                    .is_some_and(|(memory, off)| p.is_at(&memory, off, p.len)) =>
            {
                true
            }
            // Elsewhere (nothing makes this happen): moved where it belongs.
            Some(p) => p
                .bytes()
                .is_ok_and(|b| ctx.mrs.scatter(pd, sgl, offset, &b).is_ok()),
        };
        if !placed_ok {
            self.fail_wqe(ctx, idx, WcStatus::LocProtErr);
            return;
        }
        wqe.read_done = (offset as u32) + expect_len as u32;
        self.req.gap_retry_at = None;
        self.acknowledge_to(ctx, psn.next());
        if ends {
            self.req.sq[idx].status = Some(WcStatus::Success);
        } else if request_ends {
            // A chunk answered: its responder resource is free for the next chunk's request.
            self.req.rd_atomic_inflight = self.req.rd_atomic_inflight.saturating_sub(1);
        }
    }

    /// An ATOMIC_WRITE or FLUSH is acknowledged with an empty READ RESPONSE ONLY (IBTA 1.5,
    /// as rxe sends it): like an atomic ACK, it retires exactly its WQE.
    fn handle_placement_ack(
        &mut self,
        ctx: &mut Ctx<'_>,
        idx: usize,
        psn: Psn,
        position: Position,
        payload_len: usize,
    ) {
        self.ack_through(ctx, psn.sub(1));
        if self.state == super::QpState::Err {
            return;
        }
        if psn != self.req.unacked_psn {
            ctx.stats.drop(DropReason::Duplicate);
            return;
        }
        if position != Position::Only || payload_len != 0 {
            self.fail_wqe(ctx, idx, WcStatus::BadRespErr);
            return;
        }
        self.req.sq[idx].status = Some(WcStatus::Success);
        self.acknowledge_to(ctx, psn.next());
    }

    fn handle_atomic_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn, orig: u64) {
        let Some(idx) = self.wqe_index(psn) else {
            ctx.stats.drop(DropReason::UnexpectedResponse);
            return;
        };
        if !self.req.sq[idx].wr.op.is_atomic() {
            ctx.stats.drop(DropReason::UnexpectedResponse);
            return;
        }
        self.ack_through(ctx, psn.sub(1));
        if self.state == super::QpState::Err {
            return;
        }
        if psn != self.req.unacked_psn {
            ctx.stats.drop(DropReason::Duplicate);
            return;
        }
        let wqe = &self.req.sq[idx];
        if ctx
            .mrs
            .scatter(self.pd, &wqe.wr.sg_list, 0, &orig.to_ne_bytes())
            .is_err()
        {
            self.fail_wqe(ctx, idx, WcStatus::LocProtErr);
            return;
        }
        self.req.sq[idx].status = Some(WcStatus::Success);
        self.acknowledge_to(ctx, psn.next());
    }

    /// Acknowledges every PSN up to and including `psn`: SEND and WRITE WQEs entirely at or
    /// before it are done. A READ or atomic still waiting for its response at or before `psn`
    /// lost that response: resend it (the responder answers from its resources).
    pub(crate) fn ack_through(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if !psn.is_after(self.req.unacked_psn.sub(1)) {
            return;
        }
        if psn.is_after(self.req.peer_acked) {
            // The responder executed further than before: the connection is alive, whatever
            // is still missing. Sequence NAKs of a busy, lossy path must not drain the retry
            // budget meant for a peer that answers nothing (IBTA: retries count attempts
            // without forward progress).
            self.req.peer_acked = psn;
            let cfg = self.cfg;
            self.req.reset_retry_counters(&cfg);
        }
        let mut new_unacked = self.req.unacked_psn;
        for wqe in self.req.sq.iter_mut() {
            if !wqe.started || wqe.first_psn.is_after(psn) {
                break;
            }
            if wqe.status.is_some() {
                continue;
            }
            if wqe.wr.op.is_read_or_atomic() {
                // Implicit NAK: the response for this WQE never arrived.
                let resume = wqe.first_psn.add(wqe.read_done / wqe.mtu.max(1));
                if self.req.gap_retry_at != Some(resume) {
                    self.req.gap_retry_at = Some(resume);
                    self.req.go_back(resume);
                }
                break;
            }
            let last = wqe.last_psn();
            if last.is_after(psn) {
                // Partially acknowledged multi-packet message.
                new_unacked = psn.next();
                break;
            }
            wqe.status = Some(WcStatus::Success);
            new_unacked = last.next();
        }
        if new_unacked != self.req.unacked_psn && new_unacked.is_after(self.req.unacked_psn) {
            self.acknowledge_to(ctx, new_unacked);
        }
    }

    /// The peer acknowledged everything before `next` (an ACK, or a response that implies
    /// one). The device budget grows by the packets newly acknowledged: an acknowledgment is
    /// the only evidence that the path absorbed them. (Packets that leave the budget any other
    /// way — a UC message completed on send, a flush, a timeout giving up on a window — say
    /// nothing about the path, and must not grow it.)
    fn acknowledge_to(&mut self, ctx: &mut Ctx<'_>, next: Psn) {
        let acked = next.distance(self.req.unacked_psn).max(0).unsigned_abs();
        self.req.unacked_psn = next;
        ctx.budget.on_acked(acked);
        self.progress(ctx);
    }

    /// Forward progress: the retry counters start over and the cursor skips acknowledged
    /// packets it might have been about to resend.
    fn progress(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(rtt) = self.req.rtt.on_ack(self.req.unacked_psn, ctx.now) {
            ctx.budget.on_rtt(ctx.now, rtt, self.cfg.ack_timeout());
            self.on_rtt_sample(ctx, rtt);
        }
        let cfg = self.cfg;
        self.req.reset_retry_counters(&cfg);
        let acked = self.req.unacked_psn.sub(1);
        if acked.is_after(self.req.peer_acked) {
            self.req.peer_acked = acked;
        }
        if let Some(wqe) = self.req.sq.get(self.req.cursor) {
            if wqe.started && !wqe.wr.op.is_read_or_atomic() {
                let cursor_psn = wqe.first_psn.add(self.req.cursor_pkt);
                if cursor_psn.is_before(self.req.unacked_psn)
                    && self.req.unacked_psn.in_window(wqe.first_psn, wqe.npkts)
                {
                    self.req.cursor_pkt = self.req.unacked_psn.distance(wqe.first_psn) as u32;
                }
            }
        }
        // Both timers measure a silence: it ended (the caller re-arms them from now).
        self.timers.stop(Timer::Retransmit);
        self.timers.stop(Timer::TailProbe);
    }

    /// Pops finished WQEs off the front of the send queue and reports them, in order.
    pub(crate) fn retire_completed(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(wqe) = self.req.sq.front() {
            let Some(status) = wqe.status else { break };
            if status != WcStatus::Success {
                break; // errors retire through enter_error's flush
            }
            let wqe = self.req.sq.pop_front().expect("front exists");
            if wqe.wr.op.is_read_or_atomic() {
                self.req.rd_atomic_inflight = self.req.rd_atomic_inflight.saturating_sub(1);
            }
            if wqe.wr.flags.contains(SendFlags::SIGNALED) {
                ctx.complete(self.send_cq, wqe.completion(self.qpn, WcStatus::Success));
            }
            if self.req.cursor == 0 {
                self.req.cursor_pkt = 0;
            } else {
                self.req.cursor -= 1;
            }
        }
    }

    /// Keeps the retransmit timer armed exactly while request packets are unacknowledged. A
    /// started message whose sent packets are all acknowledged has nothing to time out: its
    /// next packet waits for the QP's turn or the device budget, and arms the timer when it
    /// goes. (Timing it anyway made a QP that waited its turn behind hundreds of others
    /// "time out", halve the device budget and spend a retry on a peer that had answered
    /// everything.)
    fn rearm_retransmit(&mut self, ctx: &mut Ctx<'_>) {
        let outstanding = self.req.outstanding() > 0;
        if !outstanding || self.req.rnr_wait {
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
    /// asking for an ACK (see [`QueuePair::tail_probe`] for which). Each further probe of the
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
        let first = tail_probe_delay(self.req.rtt.srtt().unwrap_or_default());
        let delay = first * (1u32 << self.req.tail_probes.min(16));
        if delay < rto {
            self.timers.set(Timer::TailProbe, ctx.now + delay);
        }
    }

    /// The local ACK timeout, adapted to the measured round trip (see `rtt.rs`) and doubled
    /// for each retry since the last progress, within the 4T IBTA allows.
    pub(crate) fn retransmit_timeout(&self) -> Option<Duration> {
        let backoff = self.req.retries_without_progress(&self.cfg);
        self.req.rtt.rto(self.cfg.ack_timeout(), backoff)
    }

    /// Index in the send queue of the started WQE that owns `psn`.
    pub(super) fn wqe_index(&self, psn: Psn) -> Option<usize> {
        self.req.sq.iter().position(|w| w.contains(psn))
    }

    /// Runs expired timers.
    pub(crate) fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        self.handle_cc_timeout(ctx);
        if self.timers.take_expired(Timer::RnrWait, ctx.now) {
            self.req.rnr_wait = false;
            // The retransmit timer was stopped for the wait; outstanding work needs it again.
            self.rearm_retransmit(ctx);
        }
        if self.timers.take_expired(Timer::TailProbe, ctx.now)
            && self.req.outstanding() > 0
            && self.req.resend.is_none()
            && self.state != super::QpState::Err
        {
            self.tail_probe(ctx);
        }
        if self.timers.take_expired(Timer::Retransmit, ctx.now) {
            self.timers.stop(Timer::TailProbe);
            if self.req.outstanding() == 0 || self.state == super::QpState::Err {
                return;
            }
            ctx.stats.retransmit_timeouts += 1;
            self.req.timed_out = true;
            if let Some(rto) = self.retransmit_timeout() {
                ctx.budget.on_timeout(ctx.now, rto);
            }
            if self.req.retry_left == 0 {
                self.fail_wqe(ctx, 0, WcStatus::RetryExcErr);
                return;
            }
            self.req.retry_left -= 1;
            let copies = self.retry_copies();
            let front_is_read = self
                .req
                .sq
                .front()
                .is_some_and(|w| w.wr.op.is_read_or_atomic());
            if ctx.config.selective_repeat && !front_is_read {
                // Probe with the oldest unacknowledged packet alone: if only ACKs were lost,
                // its answer acknowledges everything; otherwise it says where to go back to.
                // (A repair under way is that packet: it or its answer was lost, and sent
                // again it may arrive as a duplicate, which teaches nothing about the
                // responder's kind either.)
                self.repair(self.req.unacked_psn, RepairKind::Probe);
                self.req.resend_copies = copies - 1;
                return;
            }
            let resume = match self.req.sq.front() {
                Some(w) if w.wr.op.is_read_or_atomic() => {
                    w.first_psn.add(w.read_done / w.mtu.max(1))
                }
                _ => self.req.unacked_psn,
            };
            // The request just resent asks for everything from `resume`: a gap at `resume`
            // seen before its replay arrives is the old response still draining, not a new
            // loss (rxe's `started_retry`). Asking again for it made a slow responder run
            // several replays of a long READ at once, and lose packets of all of them.
            self.req.gap_retry_at = Some(resume);
            self.req.go_back(resume);
            if copies > 1 {
                // The cursor sends `resume` once more, then what follows it.
                self.req.resend = Some(resume);
                self.req.resend_copies = copies - 2;
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

    /// Sends the tail-loss probe (see [`QueuePair::arm_tail_probe`]) after a silence: the
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
        let unacked = self.req.unacked_psn;
        let newest = self.req.sent_high.sub(1);
        // The round-trip sample stays: an ACK covering it is timed from the packet's first
        // transmission, so a probe can make the sample longer, never shorter (what Karn's rule
        // is about). Dropping it left a path slower than the probe's delay unmeasured for
        // ever, every message probed (a 10 ms round trip: each of 20 WRITEs sent twice). It
        // is marked, so that only the estimate takes it (`RttEstimator::on_ack`).
        match self.req.repair {
            // Sent again, the repair may arrive as a duplicate, whose answer says where the
            // responder's run stopped but not what it kept: a probe.
            Some(r) if !r.psn.is_before(unacked) => {
                self.repair_keeping_sample(r.psn, RepairKind::Probe);
            }
            _ if self.req.answered_by_response(unacked)
                || ((self.req.peer_reorders.is_some() || self.req.tail_probes > 0)
                    && self.req.resendable_alone(unacked)) =>
            {
                self.repair_keeping_sample(unacked, RepairKind::Probe);
            }
            _ if self.req.resendable_alone(newest) => {
                self.req.resend = Some(newest);
                self.req.resend_copies = 0;
            }
            _ => return,
        }
        self.req.rtt.on_probe();
        self.req.tail_probes = self.req.tail_probes.saturating_add(1);
        ctx.stats.tail_probes += 1;
    }
}

/// Most copies one retransmit timeout sends of the packet it resumes from (see
/// [`QueuePair::retry_copies`]): from the fourth timeout without progress on.
pub(crate) const MAX_RETRY_COPIES: u32 = 8;

/// How long a silence lasts before the tail-loss probe: four smoothed round trips, at least
/// 5 ms. A spurious probe costs only a duplicate packet, but a host short of CPU stalls a
/// peer for milliseconds at a time (1 ms made duplicates routine on a loaded 2-core CI
/// machine); 5 ms is still a thirteenth of perftest's 67 ms timeout.
fn tail_probe_delay(srtt: Duration) -> Duration {
    (srtt * 4).max(Duration::from_millis(5))
}
