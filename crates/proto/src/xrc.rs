//! XRC domains (IBTA Vol. 1 Annex A14, ibverbs `ibv_xrcd`): what ties an XRC target QP to the
//! shared receive queues it may deliver into.
//!
//! In the extended reliable connected transport a connection does not end in one receive
//! queue: an initiator's every request names an XRC SRQ at the target (the XRCETH), and the
//! target QP — which belongs to an XRC domain, not a protection domain — delivers the
//! message into that SRQ, provided the SRQ is of the same domain. The SRQ brings the rest:
//! the protection domain whose memory the message may touch and the CQ its receive completes
//! on. So one target QP per peer process serves every SRQ of the domain, and a process needs
//! one connection per peer rather than one per peer's receive queue.

use crate::cq::CqHandle;

/// An XRC domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XrcdHandle(pub u32);

/// What makes a shared receive queue an XRC SRQ (`IBV_SRQT_XRC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcSrq {
    /// The domain whose target QPs deliver into it.
    pub xrcd: XrcdHandle,
    /// Where its receives complete (the target QP has no CQ of its own).
    pub cq: CqHandle,
}
