//! RDMA WRITE: the RETH on the first packet names the target; every packet's payload is placed
//! at the next address. WRITE with immediate also consumes a receive WQE on its last packet.

use softrdma_wire::{PacketRepr, Position};

use std::sync::Arc;

use softrdma_wire::Psn;

use super::{check_remote, RespError};
use crate::access::AccessFlags;
use crate::mr::{MrTable, RegionMemory};
use crate::qp::responder::state::{SendInProgress, WriteInProgress};
use crate::qp::{Ctx, QpContext, QpState, QpType};

/// Where the rest of an RDMA WRITE in progress goes: what direct placement may receive the
/// next packets into (see [`crate::placement`]).
pub(crate) struct WriteTarget {
    /// The PSN the responder expects next.
    pub psn: Psn,
    /// The target's memory, and the offset in it of the expected packet's payload.
    pub memory: Arc<dyn RegionMemory>,
    pub offset: usize,
    /// The virtual address of that payload (what the requester names).
    pub va: u64,
    /// Payload bytes the message has left, from there.
    pub remaining: u64,
    /// The path MTU: the payload of every packet but the last.
    pub mtu: u32,
}
use crate::wr::{RecvWr, WcStatus};

impl QpContext {
    pub(super) fn execute_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
        position: Position,
    ) -> Result<(), RespError> {
        let mtu = u64::from(self.cfg.path_mtu.bytes());
        let len = pkt.payload.len() as u64;
        let has_imm = pkt.ext.imm_dt.is_some();
        // A WRITE with immediate needs a receive WQE; check before placing anything so that an
        // RNR retry finds the QP exactly as it was.
        if has_imm && !self.has_recv(ctx) {
            return Err(RespError::ReceiverNotReady);
        }
        let mut w = if position.starts() {
            let Some(reth) = pkt.ext.reth else {
                return Err(RespError::InvalidRequest);
            };
            if reth.dma_len > super::MAX_DMA_LEN {
                return Err(RespError::InvalidRequest);
            }
            let total = u64::from(reth.dma_len);
            // The whole message is checked up front, so no packet of it lands out of bounds.
            // A WRITE of zero bytes names no memory: its R_Key and address are not checked
            // (IBTA C9-88; rxe: "a zero-byte op is not required to set an addr or rkey").
            if total > 0 {
                check_remote(
                    self,
                    ctx.mrs,
                    reth.rkey,
                    reth.va,
                    total,
                    AccessFlags::REMOTE_WRITE,
                )?;
            }
            WriteInProgress {
                rkey: reth.rkey,
                va: reth.va,
                remaining: total,
                total: reth.dma_len,
            }
        } else {
            self.resp.write.take().ok_or(RespError::InvalidRequest)?
        };
        // FIRST/MIDDLE: exactly one MTU with more to come; LAST/ONLY: exactly what remains.
        let len_ok = match position {
            Position::Only => len == w.remaining && len <= mtu,
            Position::Last => len == w.remaining && len > 0 && len <= mtu,
            Position::First | Position::Middle => len == mtu && w.remaining > mtu,
        };
        if !len_ok {
            return Err(RespError::InvalidRequest);
        }
        let placed = ctx.placed.take();
        if len > 0 {
            // Again per packet: the region may have been deregistered meanwhile.
            let (mr, off) =
                check_remote(self, ctx.mrs, w.rkey, w.va, len, AccessFlags::REMOTE_WRITE)?;
            match placed {
                // The payload is where it belongs already (see `crate::placement`).
                Some(p) if p.is_at(&mr.memory, off, len) => {}
                // Placed elsewhere (nothing makes this happen): moved where it belongs.
                Some(p) => p
                    .move_to(&*mr.memory, off)
                    .map_err(|_| RespError::RemoteAccess)?,
                None => mr
                    .memory
                    .write(off, pkt.payload)
                    .map_err(|_| RespError::RemoteAccess)?,
            }
        }
        w.va = w.va.wrapping_add(len);
        w.remaining -= len;
        if position.ends() {
            if has_imm {
                let wr: RecvWr = self.take_recv(ctx).ok_or(RespError::ReceiverNotReady)?;
                let msg = SendInProgress {
                    wr,
                    offset: u64::from(w.total),
                };
                self.complete_recv(ctx, &msg, WcStatus::Success, pkt);
            }
        } else {
            self.resp.write = Some(w);
        }
        self.request_done(pkt, 1, position.ends());
        Ok(())
    }

    /// The rest of the RDMA WRITE this RC QP is in the middle of, if its next packets may be
    /// placed where they go: the QP takes requests, runs them in order with nothing kept
    /// ahead or owed (no NAK outstanding, no early packets), and the rest of the message is
    /// inside a region the QP may write (checked as each packet will be).
    pub(crate) fn write_placement(&self, mrs: &MrTable) -> Option<WriteTarget> {
        if !self.takes_placement() {
            return None;
        }
        let w = self.resp.write.as_ref().filter(|w| w.remaining > 0)?;
        let (mr, offset) = check_remote(
            self,
            mrs,
            w.rkey,
            w.va,
            w.remaining,
            AccessFlags::REMOTE_WRITE,
        )
        .ok()?;
        Some(WriteTarget {
            psn: self.resp.expected_psn,
            memory: Arc::clone(&mr.memory),
            offset,
            va: w.va,
            remaining: w.remaining,
            mtu: self.cfg.path_mtu.bytes(),
        })
    }

    /// Whether the packet the QP expects next is `psn`, continuing a WRITE at `va`, and the
    /// QP may take it placed (see [`QpContext::write_placement`]).
    pub(crate) fn expects_placed(&self, psn: Psn, va: u64) -> bool {
        self.takes_placement()
            && self.resp.expected_psn == psn
            && self
                .resp
                .write
                .as_ref()
                .is_some_and(|w| w.va == va && w.remaining > 0)
    }

    fn takes_placement(&self) -> bool {
        self.qp_type == QpType::Rc
            && matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
            && !self.resp.fatal
            && !self.resp.nak_sent
            && self.resp.early.is_empty()
    }
}
