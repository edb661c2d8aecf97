//! READ responses and atomic ACKs: the data a READ asked for, placed in its scatter list in
//! PSN order, and the original value an atomic returns.

use softrdma_wire::{PacketRepr, Position, Psn};

use crate::access::AccessFlags;
use crate::qp::{Ctx, QpContext, QpState};
use crate::stats::DropReason;
use crate::wr::{SendOp, WcStatus};

impl QpContext {
    pub(super) fn handle_read_response(
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
        match self.req.wqe(idx).wr.op {
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
        let first = self.req.wqe(idx).first_psn;
        self.ack_through(ctx, first.sub(1));
        if self.state == QpState::Err {
            return;
        }
        let expected = self.req.unacked_psn();
        if psn != expected {
            if psn.is_after(expected) && self.wqe_index(expected).is_some() {
                // A response packet was lost: ask again from the first missing one, once.
                if self.req.retry_gap_at(expected) {
                    ctx.stats.drop(DropReason::OutOfSequence);
                    return;
                }
            }
            ctx.stats.drop(DropReason::Duplicate);
            return;
        }
        let pd = self.pd;
        let wqe = self.req.wqe(idx);
        let k = psn.distance(wqe.first_psn) as u32;
        let offset = u64::from(k) * u64::from(wqe.mtu);
        let expect_len =
            (u64::from(wqe.len).saturating_sub(offset)).min(u64::from(wqe.mtu)) as usize;
        let ends = k + 1 == wqe.npkts;
        // Each request (a chunk, or a restart inside one) is answered FIRST..LAST or ONLY, and
        // ends where its chunk ends; a restart begins with FIRST/ONLY at any k.
        let chunk = crate::qp::requester::read_chunk(ctx.config);
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
        let done = (offset as u32) + expect_len as u32;
        self.req.read_placed(idx, done);
        self.req.gap_filled();
        self.acknowledge_to(ctx, psn.next());
        if ends {
            self.req.wqe_succeeded(idx);
        } else if request_ends {
            // A chunk answered: its responder resource is free for the next chunk's request.
            self.req.release_rd_atomic();
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
        if !self.ack_before(ctx, psn) {
            return;
        }
        if position != Position::Only || payload_len != 0 {
            self.fail_wqe(ctx, idx, WcStatus::BadRespErr);
            return;
        }
        self.req.wqe_succeeded(idx);
        self.acknowledge_to(ctx, psn.next());
    }

    /// A one-PSN response (an atomic's, a placement's) at `psn` acknowledges every PSN before
    /// it; whether it is the response awaited now (false: the QP failed on the way, or it is
    /// a duplicate, counted).
    fn ack_before(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> bool {
        self.ack_through(ctx, psn.sub(1));
        if self.state == QpState::Err {
            return false;
        }
        if psn != self.req.unacked_psn() {
            ctx.stats.drop(DropReason::Duplicate);
            return false;
        }
        true
    }

    pub(super) fn handle_atomic_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn, orig: u64) {
        let Some(idx) = self.wqe_index(psn) else {
            ctx.stats.drop(DropReason::UnexpectedResponse);
            return;
        };
        if !self.req.wqe(idx).wr.op.is_atomic() {
            ctx.stats.drop(DropReason::UnexpectedResponse);
            return;
        }
        if !self.ack_before(ctx, psn) {
            return;
        }
        let wqe = self.req.wqe(idx);
        if ctx
            .mrs
            .scatter(self.pd, &wqe.wr.sg_list, 0, &orig.to_ne_bytes())
            .is_err()
        {
            self.fail_wqe(ctx, idx, WcStatus::LocProtErr);
            return;
        }
        self.req.wqe_succeeded(idx);
        self.acknowledge_to(ctx, psn.next());
    }
}
