//! Memory windows (`ibv_mw`): rkeys that expose part of a memory region, with their own
//! rights, bound and revoked through the send queue (see `softrdma_proto::mw` for what the
//! engine enforces).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use softrdma_proto::{AccessFlags, MwBind, MwType, SendFlags, SendOp, SendWr};

use crate::error::AllocMwError;
use crate::progress::Access;
use crate::{MemoryRegion, ProtectionDomain};

/// A memory window (ibverbs `ibv_mw`), allocated with
/// [`ProtectionDomain::alloc_mw`]. It grants nothing until bound: a type 1 window with
/// [`QueuePair::bind_mw`](crate::QueuePair::bind_mw), a type 2 window with the work request
/// [`MemoryWindow::bind_wr`] builds. A type 2 window serves only the QP that bound it and is
/// revoked by a LOCAL_INV ([`crate::wr::local_inv`]) or by the peer's SEND_WITH_INV
/// ([`crate::wr::send_with_inv`]).
///
/// Dropping the handle frees the window, bound or not. Dropping the region a window is bound
/// to revokes the window first (the C library refuses that instead, as rxe does).
pub struct MemoryWindow {
    inner: Arc<MwInner>,
}

struct MwInner {
    pd: ProtectionDomain,
    mw_type: MwType,
    /// What ibverbs keeps in `ibv_mw.rkey`: the rkey of the latest bind posted through this
    /// handle (it takes effect when the bind executes).
    rkey: AtomicU32,
}

impl Drop for MwInner {
    fn drop(&mut self) {
        let rkey = self.rkey.load(Ordering::Relaxed);
        let _ = self
            .pd
            .device()
            .inner()
            .engine(Access::Query, |e, _| e.dealloc_mw(rkey));
    }
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("type", &self.inner.mw_type)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

/// What a bind exposes: `len` bytes at `offset` of `mr`, with `access` (remote read, write,
/// atomic). `len` 0 unbinds a type 1 window.
#[derive(Debug, Clone, Copy)]
pub struct MwBindInfo<'a> {
    /// The region underneath (it needs [`AccessFlags::MW_BIND`]).
    pub mr: &'a MemoryRegion,
    /// Offset of the first byte exposed, in the region.
    pub offset: usize,
    /// Bytes exposed.
    pub len: usize,
    /// Rights granted to peers.
    pub access: AccessFlags,
}

impl MemoryWindow {
    pub(crate) fn new(
        pd: &ProtectionDomain,
        mw_type: MwType,
    ) -> Result<MemoryWindow, AllocMwError> {
        let rkey = pd
            .device()
            .inner()
            .engine(Access::Query, |e, _| e.alloc_mw(pd.handle(), mw_type))
            .map_err(|_| AllocMwError::TooMany)?;
        Ok(MemoryWindow {
            inner: Arc::new(MwInner {
                pd: pd.clone(),
                mw_type,
                rkey: AtomicU32::new(rkey),
            }),
        })
    }

    /// The rkey peers use: that of the latest bind posted through this handle (`ibv_mw.rkey`).
    pub fn rkey(&self) -> u32 {
        self.inner.rkey.load(Ordering::Relaxed)
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.inner.mw_type
    }

    /// Its protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// A signaled BIND_MW work request (`IBV_WR_BIND_MW`) giving the window the next rkey
    /// (rdma-core's `ibv_inc_rkey`: the key byte plus one), which [`MemoryWindow::rkey`]
    /// reports from now on. Post it on a QP of the window's domain; for a type 2 window, that
    /// QP is the only one the window then serves.
    pub fn bind_wr(&self, wr_id: u64, info: &MwBindInfo<'_>) -> SendWr {
        let old = self.rkey();
        let new_rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        self.inner.rkey.store(new_rkey, Ordering::Relaxed);
        SendWr {
            wr_id,
            op: SendOp::BindMw(MwBind {
                mw_rkey: old,
                new_rkey,
                mr_lkey: info.mr.lkey(),
                addr: info.mr.addr().wrapping_add(info.offset as u64),
                length: info.len as u64,
                access: info.access,
            }),
            sg_list: Vec::new(),
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
            xrc_srqn: None,
        }
    }
}

impl crate::QueuePair {
    /// Binds a memory window (`ibv_bind_mw`): posts the BIND_MW work request
    /// [`MemoryWindow::bind_wr`] builds, with `flags` (e.g. [`SendFlags::SIGNALED`]), and
    /// returns the window's new rkey, valid once the bind has executed (in order with the
    /// QP's other work). A failed bind completes with `MwBindErr` and moves the QP to the
    /// error state; the handle keeps the new rkey, as rdma-core leaves it to the caller to
    /// undo.
    pub fn bind_mw(
        &self,
        mw: &MemoryWindow,
        wr_id: u64,
        info: &MwBindInfo<'_>,
        flags: SendFlags,
    ) -> Result<u32, crate::PostSendError> {
        let old = mw.rkey();
        let mut wr = mw.bind_wr(wr_id, info);
        wr.flags = flags;
        let rkey = mw.rkey();
        if let Err(e) = self.post_send([wr]) {
            // Nothing was posted: the window keeps its rkey.
            mw.inner.rkey.store(old, Ordering::Relaxed);
            return Err(e);
        }
        Ok(rkey)
    }
}

impl ProtectionDomain {
    /// Allocates a memory window (`ibv_alloc_mw`).
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<MemoryWindow, AllocMwError> {
        MemoryWindow::new(self, mw_type)
    }
}
