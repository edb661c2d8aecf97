//! The IBTA 1.5 memory placement extensions, as rxe implements them (Linux 6.2 and later):
//! ATOMIC_WRITE stores 8 bytes at once, FLUSH makes earlier placements globally visible or
//! persistent. Both are answered by an empty READ RESPONSE ONLY and kept as responder
//! resources, so a duplicate gets its acknowledgement again and never re-executes.
//!
//! softrdma regions live in ordinary memory that softrdma writes with release stores, so a
//! completed placement is already globally visible; FLUSH is a full fence. There is no
//! persistent memory behind a region to write back: a persistent FLUSH on a region registered
//! for it is the same fence, as rxe's is on memory that is not pmem.

use softrdma_wire::PacketRepr;

use super::{check_remote, RespError};
use crate::access::AccessFlags;
use crate::qp::responder::state::{Output, Resource};
use crate::qp::{Ctx, QpContext};
use crate::wr::{FLUSH_GLOBAL, FLUSH_PERSISTENT};

impl QpContext {
    pub(super) fn execute_atomic_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RespError> {
        let reth = pkt.ext.reth.ok_or(RespError::InvalidRequest)?;
        if reth.dma_len != 8 || pkt.payload.len() != 8 || reth.va % 8 != 0 {
            // rxe: a misaligned target is an invalid request (oA19-28), like a wrong length.
            return Err(RespError::InvalidRequest);
        }
        let (mr, off) = check_remote(
            self,
            ctx.mrs,
            reth.rkey,
            reth.va,
            8,
            AccessFlags::REMOTE_WRITE,
        )?;
        // The host word must be aligned too, to be stored as one (see `execute_atomic`).
        if !mr.memory.is_atomic_word(off) {
            return Err(RespError::InvalidRequest);
        }
        if !self.resp.reserve(self.cfg.max_dest_rd_atomic) {
            return Err(RespError::InvalidRequest);
        }
        // Eight aligned bytes: one releasing word store in region memory.
        mr.memory
            .write(off, pkt.payload)
            .map_err(|_| RespError::RemoteAccess)?;
        self.placement_done(pkt);
        Ok(())
    }

    pub(super) fn execute_flush(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RespError> {
        let (Some(feth), Some(reth)) = (pkt.ext.feth, pkt.ext.reth) else {
            return Err(RespError::InvalidRequest);
        };
        let placement = feth.placement;
        if placement == 0 || placement & !(FLUSH_GLOBAL | FLUSH_PERSISTENT) != 0 {
            return Err(RespError::InvalidRequest);
        }
        let need = flush_rights(placement);
        match feth.selectivity {
            // The range in the RETH.
            0 => {
                check_remote(
                    self,
                    ctx.mrs,
                    reth.rkey,
                    reth.va,
                    u64::from(reth.dma_len),
                    need,
                )?;
            }
            // The whole region the R_Key names: its own bounds.
            1 => {
                let iova = ctx
                    .mrs
                    .get(reth.rkey)
                    .map(|mr| mr.iova)
                    .ok_or(RespError::RemoteAccess)?;
                check_remote(self, ctx.mrs, reth.rkey, iova, 0, need)?;
            }
            _ => return Err(RespError::InvalidRequest),
        }
        if !self.resp.reserve(self.cfg.max_dest_rd_atomic) {
            return Err(RespError::InvalidRequest);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.placement_done(pkt);
        Ok(())
    }

    fn placement_done(&mut self, pkt: &PacketRepr<'_>) {
        let psn = pkt.bth.psn;
        self.resp.expected_psn = psn.next();
        self.resp.msn = (self.resp.msn + 1) & 0x00ff_ffff;
        let msn = self.resp.msn;
        self.resp
            .resources
            .push_back(Resource::Placement { psn, msn });
        self.resp
            .output
            .push_back(Output::PlacementAck { psn, msn });
    }
}

/// The rights a FLUSH of `placement` types needs, of the QP and of the region.
pub(super) fn flush_rights(placement: u8) -> AccessFlags {
    let mut need = AccessFlags::empty();
    if placement & FLUSH_GLOBAL != 0 {
        need = need | AccessFlags::FLUSH_GLOBAL;
    }
    if placement & FLUSH_PERSISTENT != 0 {
        need = need | AccessFlags::FLUSH_PERSISTENT;
    }
    need
}
