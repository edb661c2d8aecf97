//! Atomic compare-and-swap and fetch-and-add on an aligned 8-byte word. Executed exactly once:
//! the original value is kept as a responder resource and replayed for duplicates.

use softrdma_wire::{OpKind, PacketRepr};

use super::{check_remote, RespError};
use crate::access::AccessFlags;
use crate::qp::responder::state::{Output, Resource};
use crate::qp::{Ctx, QpContext};

impl QpContext {
    pub(super) fn execute_atomic(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
        kind: OpKind,
    ) -> Result<(), RespError> {
        let eth = pkt.ext.atomic_eth.ok_or(RespError::InvalidRequest)?;
        let (mr, off) = check_remote(
            self,
            ctx.mrs,
            eth.rkey,
            eth.va,
            8,
            AccessFlags::REMOTE_ATOMIC,
        )?;
        // A misaligned atomic target is an invalid request, not an access error; checked after
        // the key, as rxe does. Both the virtual address (IBTA) and the host word behind it
        // (rxe) must be aligned: a region registered zero-based or at an iova of its own may
        // map an aligned address to a misaligned one.
        if eth.va % 8 != 0 || !mr.memory.is_atomic_word(off) {
            return Err(RespError::InvalidRequest);
        }
        if !self.resp.reserve(self.cfg.max_dest_rd_atomic) {
            return Err(RespError::InvalidRequest);
        }
        let orig = match kind {
            OpKind::CompareSwap => mr.memory.compare_swap(off, eth.compare, eth.swap_add),
            _ => mr.memory.fetch_add(off, eth.swap_add),
        }
        .map_err(|_| RespError::RemoteAccess)?;
        ctx.stats.atomics_executed += 1;
        let psn = pkt.bth.psn;
        self.resp.expected_psn = psn.next();
        self.resp.msn = (self.resp.msn + 1) & 0x00ff_ffff;
        let msn = self.resp.msn;
        self.resp
            .resources
            .push_back(Resource::Atomic { psn, orig, msn });
        self.resp
            .output
            .push_back(Output::AtomicAck { psn, orig, msn });
        Ok(())
    }
}
