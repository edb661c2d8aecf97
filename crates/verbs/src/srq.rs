//! Shared receive queues (`ibv_srq`): one pool of receive work requests that many QPs of a
//! protection domain take from, in posting order, whichever QP a message arrives on.

use std::sync::Arc;

use softrdma_proto::{RecvWr, SrqAttr, SrqHandle};

use crate::error::{PostErrorKind, PostRecvError, SrqError};
use crate::progress::Access;
use crate::ProtectionDomain;

/// A shared receive queue (ibverbs `ibv_srq`). QPs created with it
/// ([`QpInitAttr::srq`](crate::QpInitAttr::srq)) take their receives from it and hold it
/// alive: the SRQ is destroyed when the last handle and the last such QP are gone, so it can
/// never be destroyed under a QP that uses it (ibverbs refuses that with `EBUSY`).
///
/// When its work requests drop below an armed limit ([`SharedReceiveQueue::arm_limit`]),
/// the device raises [`AsyncEvent::SrqLimitReached`](crate::AsyncEvent::SrqLimitReached)
/// once, and the limit goes back to 0.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
}

pub(crate) struct SrqInner {
    pd: ProtectionDomain,
    pub(crate) handle: SrqHandle,
    /// An XRC SRQ's domain and CQ, held so they outlive it (the engine names them by
    /// handle).
    xrc: Option<(crate::XrcDomain, crate::CompletionQueue)>,
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("id", &self.id())
            .finish()
    }
}

impl SharedReceiveQueue {
    pub(crate) fn new(
        pd: &ProtectionDomain,
        attr: SrqAttr,
    ) -> Result<SharedReceiveQueue, SrqError> {
        check_attr(&attr)?;
        let handle = pd
            .device()
            .inner()
            .engine(Access::Query, |e, _| e.create_srq(pd.handle(), attr))
            .map_err(SrqError::from_engine)?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd: pd.clone(),
                handle,
                xrc: None,
            }),
        })
    }

    /// An XRC SRQ of `xrcd` (see [`crate::XrcDomain::create_srq`]).
    pub(crate) fn new_xrc(
        xrcd: &crate::XrcDomain,
        pd: &ProtectionDomain,
        cq: &crate::CompletionQueue,
        attr: SrqAttr,
    ) -> Result<SharedReceiveQueue, SrqError> {
        check_attr(&attr)?;
        let device = xrcd.device();
        if !Arc::ptr_eq(&pd.device().shared, &device.shared)
            || !Arc::ptr_eq(&cq.device().shared, &device.shared)
        {
            return Err(SrqError::WrongDevice);
        }
        let handle = device
            .inner()
            .engine(Access::Query, |e, _| {
                e.create_xrc_srq(pd.handle(), xrcd.handle(), cq.inner.handle, attr)
            })
            .map_err(SrqError::from_engine)?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd: pd.clone(),
                handle,
                xrc: Some((xrcd.clone(), cq.clone())),
            }),
        })
    }

    /// The SRQ's number on its device: what
    /// [`AsyncEvent::SrqLimitReached`](crate::AsyncEvent::SrqLimitReached) names, and, for an
    /// XRC SRQ, what initiators put in their work requests to reach it
    /// ([`SendWr::to_xrc_srq`](crate::SendWr::to_xrc_srq); ibverbs `ibv_get_srq_num`).
    pub fn id(&self) -> u32 {
        self.inner.handle.0
    }

    /// The XRC domain of an XRC SRQ; `None` for a basic one.
    pub fn xrc_domain(&self) -> Option<&crate::XrcDomain> {
        self.inner.xrc.as_ref().map(|(d, _)| d)
    }

    /// The CQ an XRC SRQ's receives complete on; `None` for a basic SRQ, whose receives
    /// complete on the receive CQ of the QP each message arrived on.
    pub fn cq(&self) -> Option<&crate::CompletionQueue> {
        self.inner.xrc.as_ref().map(|(_, cq)| cq)
    }

    /// Its protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// Posts receive work requests (`ibv_post_srq_recv`); on failure the ones before
    /// `bad_wr` were posted.
    pub fn post_recv(&self, wrs: impl IntoIterator<Item = RecvWr>) -> Result<(), PostRecvError> {
        let h = self.inner.handle;
        self.inner
            .pd
            .device()
            .inner()
            .engine(Access::PostReceive, |e, _| {
                for (i, wr) in wrs.into_iter().enumerate() {
                    e.post_srq_recv(h, wr).map_err(|e| PostRecvError {
                        bad_wr: i,
                        kind: PostErrorKind::from_engine(e),
                    })?;
                }
                Ok(())
            })
    }

    /// Arms the limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): once fewer than `limit` work
    /// requests are left, the limit event is raised, once. 0 disarms it.
    pub fn arm_limit(&self, limit: u32) -> Result<(), SrqError> {
        self.modify(None, Some(limit))
    }

    /// Resizes the SRQ (`IBV_SRQ_MAX_WR`; never below the work requests it holds) and/or
    /// arms its limit.
    pub fn modify(&self, max_wr: Option<u32>, srq_limit: Option<u32>) -> Result<(), SrqError> {
        if max_wr.is_some_and(|m| m > crate::limits::MAX_SRQ_WR) {
            return Err(SrqError::InvalidAttr("max_wr beyond the device's limit"));
        }
        self.inner
            .pd
            .device()
            .inner()
            .engine(Access::Query, |e, _| {
                e.modify_srq(self.inner.handle, max_wr, srq_limit)
            })
            .map_err(SrqError::from_engine)
    }

    /// The current attributes (`ibv_query_srq`; the limit reads 0 once it fired).
    pub fn query(&self) -> SrqAttr {
        let h = self.inner.handle;
        self.inner
            .pd
            .device()
            .inner()
            .engine(Access::Query, |e, _| e.srq(h).map(|s| s.attr()))
            .unwrap_or_default()
    }

    /// Receive work requests posted and not yet taken.
    pub fn len(&self) -> usize {
        let h = self.inner.handle;
        self.inner
            .pd
            .device()
            .inner()
            .engine(Access::Query, |e, _| e.srq(h).map_or(0, |s| s.len()))
    }

    /// Whether no receive work request is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The device's limits on an SRQ's size.
fn check_attr(attr: &SrqAttr) -> Result<(), SrqError> {
    if attr.max_wr > crate::limits::MAX_SRQ_WR || attr.max_sge > crate::limits::MAX_SRQ_SGE {
        return Err(SrqError::InvalidAttr(
            "max_wr or max_sge beyond the device's limits",
        ));
    }
    Ok(())
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // No QP holds this SRQ any more (each holds a handle), so the engine cannot refuse;
        // the work requests still posted are discarded without completions, as ibverbs does.
        let _ = self
            .pd
            .device()
            .inner()
            .engine(Access::Query, |e, _| e.destroy_srq(self.handle));
    }
}
