//! XRC domains (`ibv_xrcd`, IBTA Vol. 1 Annex A14): shared receive queues that any number of
//! peer processes reach through one connection each.
//!
//! With RC, a process that wants to receive into N queues from each of M peers needs N × M
//! connections. With XRC it needs M: an initiator QP (`QpType::XrcIni`, made in a protection
//! domain like any QP) sends each message to an XRC SRQ of the target's domain that the work
//! request names ([`SendWr::to_xrc_srq`](crate::SendWr::to_xrc_srq)); the target QP
//! ([`XrcDomain::create_qp`]) belongs to the domain, has no queues of its own, and delivers
//! each message into the SRQ it names — which brings its own protection domain (whose memory
//! the message may touch, for RDMA operations too) and CQ (where the receive completes).
//! A target refuses, as an invalid request, a message for an SRQ of another domain.
//!
//! rdma-core lets processes share a domain by opening it through one file
//! (`ibv_open_xrcd` with a file descriptor). softrdma's devices are per process, so a domain
//! is shared by the handles of one process; the C library maps each file to one domain
//! there.

use std::sync::Arc;

use softrdma_proto::{EngineError, QpCaps, SrqAttr, XrcdHandle};

use crate::error::{CreateQpError, SrqError};
use crate::progress::Access;
use crate::{CompletionQueue, Device, ProtectionDomain, QueuePair, SharedReceiveQueue};

/// An XRC domain. A cheap handle: SRQs and target QPs made from it hold it, and it closes
/// when the last handle goes (nothing can be left in it then).
#[derive(Clone)]
pub struct XrcDomain {
    inner: Arc<XrcdInner>,
}

struct XrcdInner {
    device: Device,
    handle: XrcdHandle,
}

impl std::fmt::Debug for XrcDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrcDomain")
            .field("handle", &self.inner.handle.0)
            .finish()
    }
}

impl XrcDomain {
    pub(crate) fn new(device: Device) -> XrcDomain {
        let handle = device.inner().engine(Access::Query, |e, _| e.open_xrcd());
        XrcDomain {
            inner: Arc::new(XrcdInner { device, handle }),
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    pub(crate) fn handle(&self) -> XrcdHandle {
        self.inner.handle
    }

    /// Whether two handles name the same domain.
    pub fn same_as(&self, other: &XrcDomain) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Creates an XRC SRQ of this domain (`ibv_create_srq_ex` with `IBV_SRQT_XRC`): messages
    /// for it may access memory of `pd`, and their receives complete on `cq`. Its
    /// [`id`](SharedReceiveQueue::id) is the number initiators name.
    pub fn create_srq(
        &self,
        pd: &ProtectionDomain,
        cq: &CompletionQueue,
        attr: SrqAttr,
    ) -> Result<SharedReceiveQueue, SrqError> {
        SharedReceiveQueue::new_xrc(self, pd, cq, attr)
    }

    /// Creates an XRC target QP of this domain (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`),
    /// in RESET. Connect it to an initiator like an RC QP ([`QueuePair::connect`]); it sends
    /// nothing but answers, and posting to it is refused.
    pub fn create_qp(&self) -> Result<QueuePair, CreateQpError> {
        let created = self
            .inner
            .device
            .inner()
            .engine(Access::Query, |e, _| e.create_xrc_tgt_qp(self.inner.handle));
        let qpn = created.map_err(|e| match e {
            EngineError::InvalidArgument(s) => CreateQpError::InvalidCaps(s),
            _ => CreateQpError::InvalidCaps("refused by the engine"),
        })?;
        let cap = QpCaps {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        Ok(QueuePair::adopt_target(self.clone(), qpn, cap))
    }
}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        // Every SRQ and target QP of the domain holds a handle, so none is left: the engine
        // cannot refuse.
        let _ = self
            .device
            .inner()
            .engine(Access::Query, |e, _| e.close_xrcd(self.handle));
    }
}

impl Device {
    /// Opens an XRC domain (`ibv_open_xrcd`).
    pub fn open_xrcd(&self) -> XrcDomain {
        XrcDomain::new(self.clone())
    }
}
