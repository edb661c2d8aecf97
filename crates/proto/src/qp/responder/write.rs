//! RDMA WRITE: the RETH on the first packet names the target; every packet's payload is placed
//! at the next address. WRITE with immediate also consumes a receive WQE on its last packet.

use softrdma_wire::{PacketRepr, Position};

use super::{check_remote, RespError};
use crate::access::AccessFlags;
use crate::qp::responder_state::{SendInProgress, WriteInProgress};
use crate::qp::{Ctx, QueuePair};
use crate::wr::{RecvWr, WcStatus};

impl QueuePair {
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
        if len > 0 {
            // Again per packet: the region may have been deregistered meanwhile.
            let (mr, off) =
                check_remote(self, ctx.mrs, w.rkey, w.va, len, AccessFlags::REMOTE_WRITE)?;
            mr.memory
                .write(off, pkt.payload)
                .map_err(|_| RespError::RemoteAccess)?;
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
}
