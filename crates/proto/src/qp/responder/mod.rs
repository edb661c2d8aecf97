//! The responder: executes incoming requests in PSN order and answers them (IBTA 9.7.4–9.7.6).
//!
//! Pipeline for each request packet, each step a function that either passes or answers:
//! 1. [`QpContext::handle_request`] checks the PSN: the expected one is executed; a later one is
//!    a sequence error (one NAK per error, IBTA C9-91ish: "NAK once, then silently drop until
//!    the expected PSN shows up"); an earlier one is a duplicate (see [`duplicate`]).
//! 2. The opcode must continue the message in progress (FIRST/MIDDLE/LAST order).
//! 3. The operation runs in its own file: [`send`], [`write`], [`read`], [`atomic`].
//!
//! Answers (ACKs, NAKs, READ responses, atomic ACKs) are queued as [`Output`] jobs in PSN
//! order and turned into packets lazily by `poll_responder_transmit`, so a 1 MiB READ is one
//! job, not a thousand buffered packets. Consecutive ACKs coalesce: only the newest is sent.
//! A fatal error (remote access, invalid request) queues its NAK and moves the QP to ERR once
//! that NAK is out, as rxe does.

mod atomic;
mod duplicate;
mod placement;
mod read;
mod receive;
pub(crate) mod reorder;
mod send;
pub(crate) mod state;
mod uc;
mod write;
mod xrc;

use softrdma_wire::{
    Aeth, AtomicAckEth, Bth, ExtHeaders, NakCode, OpKind, Opcode, PacketRepr, Position, Psn,
    Syndrome,
};

use super::attr::QpType;
use super::{Ctx, QpContext};
use crate::access::AccessFlags;
use crate::event::AsyncEvent;
use crate::io::DatagramOut;
use crate::stats::{DropReason, NakKind};
use crate::wr::WcStatus;
use state::Output;

/// The longest message IBTA allows (2^31 bytes): a READ or WRITE asking for more is
/// an invalid request (rxe's `check_length`). A longer READ would also span more than half the
/// PSN space, past what 24-bit sequence comparisons can order.
pub(super) const MAX_DMA_LEN: u32 = 1 << 31;

/// A request the responder refuses: which NAK to send (and, for a receive WQE in use, which
/// completion status the receiver reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RespError {
    /// No receive WQE: RNR NAK, not fatal.
    ReceiverNotReady,
    /// Malformed or out-of-order request, or a message longer than the receive buffer.
    InvalidRequest,
    /// R_Key, bounds, PD or rights.
    RemoteAccess,
    /// The responder's own failure (e.g. its receive WQE's buffers are not accessible).
    RemoteOperational,
    /// A SEND longer than its receive WQE; the WQE is still `resp.send`. RC completes it with
    /// a local length error and NAKs an invalid request; UC drops the message and the WQE
    /// waits for the next one.
    TooLong,
}

impl RespError {
    fn nak(self, min_rnr_timer: u8) -> (Syndrome, NakKind) {
        match self {
            RespError::ReceiverNotReady => (
                Syndrome::RnrNak {
                    timer: min_rnr_timer,
                },
                NakKind::Rnr,
            ),
            RespError::InvalidRequest | RespError::TooLong => (
                Syndrome::Nak(NakCode::InvalidRequest),
                NakKind::InvalidRequest,
            ),
            RespError::RemoteAccess => (
                Syndrome::Nak(NakCode::RemoteAccessError),
                NakKind::RemoteAccess,
            ),
            RespError::RemoteOperational => (
                Syndrome::Nak(NakCode::RemoteOperationalError),
                NakKind::RemoteOperational,
            ),
        }
    }
}

/// The one check every incoming RDMA access passes (IBTA 9.7.4.1.4/C9-88ff, 10.6.3): the QP
/// grants the right (`qp_access_flags`), the R_Key names a region of the QP's protection
/// domain that grants it, or a bound window of that domain serving this QP (see
/// [`crate::mw`]), and `[va, va + len)` lies inside the region or window. Any failure is a
/// remote access error, whatever the detail: the requester learns nothing more, as on rxe.
/// (An operation the QP does not take at all was refused before, Invalid Request: see
/// [`QpContext::takes_op`]; the QP's rights are checked here again because some callers
/// need more than the opcode says.)
pub(super) fn check_remote<'m>(
    qp: &QpContext,
    mrs: &'m crate::mr::MrTable,
    rkey: u32,
    va: u64,
    len: u64,
    right: crate::access::AccessFlags,
) -> Result<(&'m crate::mr::MrEntry, usize), RespError> {
    check_remote_in(qp, qp.pd, mrs, rkey, va, len, right)
}

/// [`check_remote`] in protection domain `pd`: where an answer made later (a READ's
/// response) must use the domain of its request, which an XRC target may have left since.
pub(super) fn check_remote_in<'m>(
    qp: &QpContext,
    pd: crate::mr::PdHandle,
    mrs: &'m crate::mr::MrTable,
    rkey: u32,
    va: u64,
    len: u64,
    right: crate::access::AccessFlags,
) -> Result<(&'m crate::mr::MrEntry, usize), RespError> {
    if !qp.cfg.access.contains(right) {
        return Err(RespError::RemoteAccess);
    }
    mrs.check_remote(pd, qp.qpn, rkey, va, len, right)
        .map_err(|_| RespError::RemoteAccess)
}

impl QpContext {
    /// Handles a request packet addressed to this QP (state already checked by the engine).
    pub(crate) fn handle_request(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) {
        // A payload placed straight into memory (see `crate::placement`) is for the expected
        // PSN's execution alone: anywhere else its packet's bytes (which do not hold the
        // payload) would be kept or answered from. `Engine::handle_placed` only ever places
        // the expected packet, so this refuses nothing in practice.
        let placed = ctx.placed.take();
        if self.qp_type == QpType::Uc {
            if placed.is_none() {
                self.handle_uc_request(ctx, pkt);
            }
            return;
        }
        if self.resp.fatal {
            ctx.stats.drop(DropReason::BadState);
            return;
        }
        let psn = pkt.bth.psn;
        let expected = self.resp.expected_psn;
        let d = psn.distance(expected);
        if d != 0 && placed.is_some() {
            ctx.stats.drop(DropReason::OutOfSequence);
            return;
        }
        if d > 0 {
            // IBTA C9-92: NAK the first out-of-sequence request, then (IBTA) drop the rest
            // until the expected PSN arrives; softrdma keeps them to run in order later (see
            // `qp::responder::reorder`), which the wire cannot tell apart except by smaller resends.
            if !self.hold_early(ctx, pkt) {
                ctx.stats.drop(DropReason::OutOfSequence);
            }
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                ctx.stats.nak_sent(NakKind::PsnSequence);
                self.resp
                    .push_ack(expected, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        }
        if d < 0 {
            ctx.stats.duplicate_requests += 1;
            self.handle_duplicate(ctx, pkt);
            return;
        }
        self.resp.nak_sent = false;
        ctx.placed = placed;
        self.execute_in_order(ctx, pkt);
        // Taken by the WRITE's execution, or refused before it: never another packet's.
        ctx.placed = None;
        if self.resp.early.is_empty() {
            return;
        }
        // The missing packet came: run the packets kept behind it, as far as they go.
        let mut ran = false;
        while !self.resp.fatal {
            let Some((bytes, freed)) = self.resp.early.take(self.resp.expected_psn) else {
                break;
            };
            *ctx.reorder_bytes -= freed;
            ctx.stats.reordered_requests += 1;
            if let Ok(early) = PacketRepr::parse(&bytes) {
                self.execute_in_order(ctx, &early);
                ran = true;
            }
        }
        if self.resp.fatal {
            *ctx.reorder_bytes -= self.resp.early.clear();
        } else if !self.resp.early.is_empty() {
            // Another gap, with packets kept beyond it: NAK it at once (which acknowledges
            // everything before it).
            self.resp.nak_sent = true;
            ctx.stats.nak_sent(NakKind::PsnSequence);
            let hole = self.resp.expected_psn;
            self.resp
                .push_ack(hole, Syndrome::Nak(NakCode::PsnSequenceError));
        } else if ran {
            // Tell the requester how far the run got, whatever the AckReq bits said.
            let last = self.resp.expected_psn.sub(1);
            self.resp.push_ack(last, Syndrome::ACK);
        }
    }

    /// Keeps a request that arrived ahead of the expected PSN, if there is room; `false`
    /// when it is dropped instead.
    fn hold_early(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) -> bool {
        let cap = ctx.config.reorder_packets;
        if cap == 0 || *ctx.reorder_bytes + pkt.buffer_len() > ctx.config.reorder_bytes {
            return false;
        }
        let mut bytes = vec![0u8; pkt.buffer_len()].into_boxed_slice();
        pkt.emit(&mut bytes);
        match self
            .resp
            .early
            .hold(self.resp.expected_psn, pkt.bth.psn, bytes, cap)
        {
            Some(n) => {
                *ctx.reorder_bytes += n;
                ctx.stats.requests_held += 1;
                true
            }
            None => false,
        }
    }

    /// Runs a request whose PSN is the expected one: message order check, then the operation.
    fn execute_in_order(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) {
        let psn = pkt.bth.psn;
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        if let Err(e) = self.check_op_sequence(info.kind, info.position) {
            self.respond_error(ctx, psn, e);
            return;
        }
        if let Err(e) = self.enter_xrc_srq(ctx, pkt) {
            self.respond_error(ctx, psn, e);
            return;
        }
        // rxe's `check_op_valid`, then `check_resource`: an operation the QP does not take,
        // or a READ or atomic where it keeps no responder resources at all, is refused before
        // anything else about the packet is looked at — a receive WQE, a zero length, the key.
        let needs_resource = matches!(
            info.kind,
            OpKind::ReadRequest | OpKind::CompareSwap | OpKind::FetchAdd | OpKind::AtomicWrite
        );
        if !self.takes_op(pkt, info.kind) || needs_resource && self.cfg.max_dest_rd_atomic == 0 {
            self.respond_error(ctx, psn, RespError::InvalidRequest);
            return;
        }
        let result = match info.kind {
            OpKind::Send => self.execute_send(ctx, pkt, info.position),
            OpKind::Write => self.execute_write(ctx, pkt, info.position),
            OpKind::ReadRequest => self.execute_read(ctx, pkt),
            OpKind::CompareSwap | OpKind::FetchAdd => self.execute_atomic(ctx, pkt, info.kind),
            OpKind::AtomicWrite => self.execute_atomic_write(ctx, pkt),
            OpKind::Flush => self.execute_flush(ctx, pkt),
            _ => Err(RespError::InvalidRequest),
        };
        if let Err(e) = result {
            if e == RespError::TooLong {
                if let Some(msg) = self.resp.send.take() {
                    self.complete_recv(ctx, &msg, WcStatus::LocLenErr, pkt);
                }
            }
            self.respond_error(ctx, psn, e);
        }
    }

    /// Whether the QP takes the operation at all (`qp_access_flags`, as rxe's
    /// `check_qp_attr_access`): READs need remote read, WRITEs and ATOMIC_WRITEs remote write,
    /// atomics remote atomic, a FLUSH the rights of its placement types. A WRITE of no bytes,
    /// which names no memory, still needs the QP's right to be written.
    pub(super) fn takes_op(&self, pkt: &PacketRepr<'_>, kind: OpKind) -> bool {
        let need = match kind {
            OpKind::ReadRequest => AccessFlags::REMOTE_READ,
            OpKind::Write | OpKind::AtomicWrite => AccessFlags::REMOTE_WRITE,
            OpKind::CompareSwap | OpKind::FetchAdd => AccessFlags::REMOTE_ATOMIC,
            OpKind::Flush => placement::flush_rights(pkt.ext.feth.map_or(0, |f| f.placement)),
            _ => return true,
        };
        self.cfg.access.contains(need)
    }

    /// IBTA 9.7.4.1.3: a message's packets come FIRST, MIDDLE*, LAST (or ONLY); nothing else
    /// may interleave on an RC QP.
    fn check_op_sequence(&self, kind: OpKind, position: Position) -> Result<(), RespError> {
        let in_send = self.resp.send.is_some();
        let in_write = self.resp.write.is_some();
        let continues = matches!(position, Position::Middle | Position::Last);
        let ok = match (in_send, in_write) {
            (true, _) => kind == OpKind::Send && continues,
            (_, true) => kind == OpKind::Write && continues,
            _ => !continues,
        };
        if ok {
            Ok(())
        } else {
            Err(RespError::InvalidRequest)
        }
    }

    /// Answers a refused request: an RNR NAK (the requester retries later) or a fatal NAK.
    fn respond_error(&mut self, ctx: &mut Ctx<'_>, psn: Psn, e: RespError) {
        let (syndrome, kind) = e.nak(self.cfg.min_rnr_timer);
        ctx.stats.nak_sent(kind);
        self.resp.push_ack(psn, syndrome);
        if e != RespError::ReceiverNotReady {
            self.resp.fatal = true;
            // IBTA 11.6.3.3: the responder's QP reports why it is going to the error state.
            match e {
                RespError::RemoteAccess => {
                    ctx.events.push_back(AsyncEvent::QpAccessError(self.qpn));
                }
                RespError::InvalidRequest | RespError::TooLong => {
                    ctx.events.push_back(AsyncEvent::QpRequestError(self.qpn));
                }
                RespError::ReceiverNotReady | RespError::RemoteOperational => {}
            }
        }
    }

    /// Advances past an executed request packet and ACKs it if asked.
    pub(crate) fn request_done(
        &mut self,
        pkt: &PacketRepr<'_>,
        psn_count: u32,
        ends_message: bool,
    ) {
        self.resp.expected_psn = pkt.bth.psn.add(psn_count);
        if ends_message {
            self.resp.msn = (self.resp.msn + 1) & 0x00ff_ffff;
        }
        if pkt.bth.ack_req && self.qp_type.is_reliable() {
            self.resp.push_ack(pkt.bth.psn, Syndrome::ACK);
        }
    }

    /// Produces the next answer packet.
    pub(crate) fn poll_responder_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
    ) -> Option<DatagramOut> {
        loop {
            let job = *self.resp.output.front()?;
            let t = match job {
                Output::Ack { psn, syndrome, msn } => {
                    self.resp.output.pop_front();
                    let ext = ExtHeaders {
                        aeth: Some(Aeth { syndrome, msn }),
                        ..ExtHeaders::default()
                    };
                    let bth = Bth::new(
                        self.response_opcode(Opcode::RC_ACKNOWLEDGE),
                        self.cfg.dest_qpn,
                        psn,
                    );
                    self.build_packet(ctx, out, bth, &ext, 0, |_, _, crc| Some(crc))
                }
                Output::AtomicAck { psn, orig, msn } => {
                    self.resp.output.pop_front();
                    let ext = ExtHeaders {
                        aeth: Some(Aeth {
                            syndrome: Syndrome::ACK,
                            msn,
                        }),
                        atomic_ack_eth: Some(AtomicAckEth { orig }),
                        ..ExtHeaders::default()
                    };
                    let bth = Bth::new(
                        self.response_opcode(Opcode::RC_ATOMIC_ACKNOWLEDGE),
                        self.cfg.dest_qpn,
                        psn,
                    );
                    self.build_packet(ctx, out, bth, &ext, 0, |_, _, crc| Some(crc))
                }
                Output::Read { .. } => self.next_read_response(ctx, out),
                Output::PlacementAck { psn, msn } => {
                    self.resp.output.pop_front();
                    let ext = ExtHeaders {
                        aeth: Some(Aeth {
                            syndrome: Syndrome::ACK,
                            msn,
                        }),
                        ..ExtHeaders::default()
                    };
                    let bth = Bth::new(
                        self.response_opcode(Opcode::RC_RDMA_READ_RESPONSE_ONLY),
                        self.cfg.dest_qpn,
                        psn,
                    );
                    self.build_packet(ctx, out, bth, &ext, 0, |_, _, crc| Some(crc))
                }
            };
            if self.resp.fatal && self.resp.output.is_empty() {
                self.enter_error(ctx);
            }
            if t.is_some() {
                return t;
            }
        }
    }
}
