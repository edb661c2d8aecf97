//! The UC responder (IBTA 9.7.7–9.8): the same SEND and WRITE execution as RC, none of its
//! reliability. Nothing is ever acknowledged, NAKed or replayed; a message that cannot be
//! received whole is dropped, silently but counted, and the QP stays as it was.
//!
//! - A packet behind the expected PSN is a duplicate the network made: dropped (executing it
//!   again would deliver a message twice).
//! - A gap (a packet after the expected PSN) means packets were lost: the message in progress
//!   is abandoned. A packet that starts a message (FIRST/ONLY) resynchronises the receiver and
//!   is taken as the start of a new message; any other packet is dropped, and so is the rest
//!   of its message, because nothing is in progress for it to continue.
//! - An abandoned SEND gives its receive WQE back, at the head of the receive queue, for the
//!   next message (rxe's "class D1" rewind): a partial message never completes. The bytes it
//!   placed stay in the buffer, unreported, as on hardware.
//! - No receive WQE, an R_Key or length violation, a message longer than its receive buffer:
//!   the message is dropped and counted by reason (`NoReceiveWqe`, `RemoteAccess`,
//!   `InvalidRequest`, `TooLong`).
//!
//! rxe differs in one place, on the receive side only: after a lost LAST it also drops the
//! FIRST that follows (and so the whole next message), where this responder starts the next
//! message with it. Senders cannot tell the difference except by losing less.

use softrdma_wire::{OpKind, PacketRepr};

use super::RespError;
use crate::qp::{Ctx, QpContext};
use crate::stats::DropReason;

impl QpContext {
    /// Handles a request packet addressed to this UC QP (state already checked by the engine).
    pub(crate) fn handle_uc_request(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) {
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        let psn = pkt.bth.psn;
        let d = psn.distance(self.resp.expected_psn);
        if d < 0 {
            ctx.stats.duplicate_requests += 1;
            ctx.stats.drop(DropReason::Duplicate);
            return;
        }
        // From here on the receiver follows the sender's PSNs, whatever happens to the packet.
        self.resp.expected_psn = psn.next();
        let in_message = self.resp.send.is_some() || self.resp.write.is_some();
        if info.position.starts() {
            if in_message {
                // The rest of the message in progress was lost.
                self.abandon_uc_message(ctx);
                ctx.stats.drop(DropReason::OutOfSequence);
            }
        } else {
            let continues = match info.kind {
                OpKind::Send => self.resp.send.is_some(),
                OpKind::Write => self.resp.write.is_some(),
                _ => false,
            };
            if d > 0 || !continues {
                // A gap inside the message, or the start of this message was lost or
                // dropped: the whole message is gone.
                self.abandon_uc_message(ctx);
                ctx.stats.drop(DropReason::OutOfSequence);
                return;
            }
        }
        if !self.takes_op(pkt, info.kind) {
            // A WRITE into a QP that takes none: the message is dropped (rxe: drop_msg).
            self.abandon_uc_message(ctx);
            ctx.stats.drop(DropReason::RemoteAccess);
            return;
        }
        let result = match info.kind {
            OpKind::Send => self.execute_send(ctx, pkt, info.position),
            OpKind::Write => self.execute_write(ctx, pkt, info.position),
            _ => Err(RespError::InvalidRequest),
        };
        let reason = match result {
            Ok(()) => return,
            Err(RespError::ReceiverNotReady) => DropReason::NoReceiveWqe,
            Err(RespError::InvalidRequest) => DropReason::InvalidRequest,
            Err(RespError::RemoteAccess) => DropReason::RemoteAccess,
            Err(RespError::TooLong) => DropReason::TooLong,
            Err(RespError::RemoteOperational) => {
                // The receive WQE's own buffers are bad (it completed with a local protection
                // error): a local error of this QP, fatal as on RC (rxe: class A).
                self.enter_error(ctx);
                return;
            }
        };
        self.abandon_uc_message(ctx);
        ctx.stats.drop(reason);
    }

    /// Forgets the message in progress; a SEND's receive WQE goes back to the head of the
    /// receive queue for the next message.
    fn abandon_uc_message(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(msg) = self.resp.send.take() {
            self.give_back_recv(ctx, msg.wr);
        }
        self.resp.write = None;
    }
}
