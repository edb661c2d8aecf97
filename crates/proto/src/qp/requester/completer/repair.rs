//! Selective repeat: one lost packet sent again alone while new ones keep going, and what
//! its answer says about the responder (keeps or drops what follows a gap).

use softrdma_wire::Psn;

use crate::qp::requester::state::RepairKind;
use crate::qp::{Ctx, QpContext};

impl QpContext {
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
    pub(super) fn start_repair(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> bool {
        let req = &self.req;
        if !ctx.config.selective_repeat
            || req.peer_reorders() == Some(false)
            || req.unacked_psn() != psn
        {
            return false;
        }
        if req.cursor_psn().is_before(req.sent_high()) {
            return false;
        }
        if self.wqe_index(psn).is_none() {
            return false;
        }
        self.repair(psn, RepairKind::Gap);
        ctx.stats.selective_repeats += 1;
        true
    }

    pub(super) fn repair(&mut self, psn: Psn, kind: RepairKind) {
        self.repair_keeping_sample(psn, kind);
        self.req.drop_rtt_sample();
    }

    /// [`repair`](Self::repair) without dropping the round-trip sample (see `tail_probe`).
    pub(super) fn repair_keeping_sample(&mut self, psn: Psn, kind: RepairKind) {
        self.req.start_repair(psn, kind);
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
    pub(super) fn response_answers_repair(&mut self) {
        let Some(r) = self.req.repair() else {
            return;
        };
        let unacked = self.req.unacked_psn();
        if !r.psn.is_before(unacked) {
            return;
        }
        if r.kind == RepairKind::Await && self.req.peer_reorders().is_none() {
            // The awaited request was not sent again: the responder kept it.
            self.req.peer_keeps_early_packets();
        }
        let at = self.req.wqe_at(unacked);
        if at.is_some_and(|w| w.started && w.first_psn != unacked) {
            return; // the middle of a READ's responses
        }
        if !unacked.is_before(r.horizon) || self.req.peer_reorders() == Some(true) {
            self.req.end_repair();
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
    pub(super) fn repair_answered(&mut self, psn: Psn) {
        let Some(r) = self.req.repair() else {
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
            _ if psn.is_after(r.psn) => self.req.peer_keeps_early_packets(),
            RepairKind::Gap if self.req.peer_reorders().is_none() && !request_next => {
                self.req.peer_drops_early_packets();
            }
            _ => {}
        }
        if !psn.next().is_before(r.horizon) {
            self.req.end_repair();
            return;
        }
        // Packets between the answer and the horizon are missing at the responder.
        let nothing_kept = r.kind == RepairKind::Next && psn == r.psn && !request_next;
        let kept = match self.req.peer_reorders() {
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
            self.req.await_repair(psn);
        }
    }

    /// Resends from the oldest unacknowledged PSN after an RNR or sequence NAK. That is the
    /// NAK's PSN unless a READ or atomic before it is still waiting for its response: the
    /// responder executed it (it NAKed a later PSN), so the response was lost, and the request
    /// must go again to have it replayed.
    pub(super) fn resume_after_nak(&mut self) {
        let resume = self.req.unacked_psn();
        self.req.resume_from(resume);
    }
}
