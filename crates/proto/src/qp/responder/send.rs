//! SEND (and SEND with immediate / with invalidate): consumes a receive WQE and places the
//! message into its scatter list, packet by packet.

use softrdma_wire::{PacketRepr, Position};

use super::RespError;
use crate::qp::responder::state::SendInProgress;
use crate::qp::{Ctx, QpContext};
use crate::wr::{WcOpcode, WcStatus, WorkCompletion};

impl QpContext {
    pub(super) fn execute_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
        position: Position,
    ) -> Result<(), RespError> {
        let mtu = u64::from(self.cfg.path_mtu.bytes());
        let len = pkt.payload.len() as u64;
        // IBTA 9.7.4.1.5: FIRST and MIDDLE carry exactly one MTU; LAST at most one and at
        // least one byte (rxe refuses an empty LAST), ONLY at most one.
        let len_ok = match position {
            Position::Only => len <= mtu,
            Position::Last => len > 0 && len <= mtu,
            Position::First | Position::Middle => len == mtu,
        };
        if !len_ok {
            return Err(RespError::InvalidRequest);
        }
        if position.starts() {
            // C9-38: no receive WQE means Receiver Not Ready; nothing is consumed.
            let Some(wr) = self.take_recv(ctx) else {
                return Err(RespError::ReceiverNotReady);
            };
            self.resp.send = Some(SendInProgress { wr, offset: 0 });
        }
        let Some(mut msg) = self.resp.send.take() else {
            return Err(RespError::InvalidRequest);
        };
        if msg.offset + len > msg.wr.capacity() {
            // The message does not fit. The WQE stays with the message: RC completes it with
            // a local length error, UC gives it back (see `TooLong`).
            self.resp.send = Some(msg);
            return Err(RespError::TooLong);
        }
        if ctx
            .mrs
            .scatter(self.pd, &msg.wr.sg_list, msg.offset, pkt.payload)
            .is_err()
        {
            self.complete_recv(ctx, &msg, WcStatus::LocProtErr, pkt);
            return Err(RespError::RemoteOperational);
        }
        msg.offset += len;
        if !position.ends() {
            self.resp.send = Some(msg);
            self.request_done(pkt, 1, false);
            return Ok(());
        }
        let invalidated = match pkt.ext.ieth {
            Some(ieth) => {
                let by = crate::mw::Invalidator::Remote {
                    pd: self.pd,
                    qpn: self.qpn,
                };
                ctx.mrs.invalidate(ieth.rkey, by).is_ok()
            }
            None => true,
        };
        if invalidated {
            self.complete_recv(ctx, &msg, WcStatus::Success, pkt);
            self.request_done(pkt, 1, true);
        } else {
            // SEND_WITH_INV naming something that cannot be invalidated (no bound type 2
            // window: a region, a type 1 window, a free or foreign key). As rxe (IBTA class
            // J): the data is placed, the receive completes with a remote invalid request
            // error, the message is acknowledged — the sender's SEND succeeds — and this QP
            // then enters the error state.
            ctx.stats.invalid_invalidations += 1;
            self.complete_recv(ctx, &msg, WcStatus::RemInvReqErr, pkt);
            self.request_done(pkt, 1, true);
            self.resp
                .push_ack(pkt.bth.psn, softrdma_wire::Syndrome::ACK);
            self.resp.fatal = true;
        }
        Ok(())
    }

    /// Completes the receive WQE of a SEND (or of a WRITE with immediate).
    pub(super) fn complete_recv(
        &mut self,
        ctx: &mut Ctx<'_>,
        msg: &SendInProgress,
        status: WcStatus,
        pkt: &PacketRepr<'_>,
    ) {
        let is_write = pkt
            .bth
            .opcode
            .info()
            .is_some_and(|i| i.kind == softrdma_wire::OpKind::Write);
        let wc = WorkCompletion {
            wr_id: msg.wr.wr_id,
            status,
            opcode: if is_write {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            },
            byte_len: u32::try_from(msg.offset).unwrap_or(u32::MAX),
            imm_data: pkt.ext.imm_dt.map(|i| i.imm),
            invalidated_rkey: pkt.ext.ieth.map(|i| i.rkey),
            qp_num: self.qpn,
            src_qp: self.cfg.dest_qpn,
            grh: false,
            timestamp: crate::time::Instant::ZERO,
        };
        ctx.complete(self.recv_cq, wc);
    }
}
