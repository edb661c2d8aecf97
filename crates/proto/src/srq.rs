//! Shared receive queues (IBTA 10.2.9.4): one pool of receive WQEs that many QPs of a
//! protection domain take from, in posting order, whichever QP a message arrives on.

use std::collections::VecDeque;

use crate::mr::PdHandle;
use crate::wr::RecvWr;
use crate::xrc::XrcSrq;

/// A shared receive queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

/// Attributes of an SRQ (ibverbs `ibv_srq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SrqAttr {
    /// Most WQEs the SRQ holds.
    pub max_wr: u32,
    /// Most SGEs per WQE.
    pub max_sge: u32,
    /// When the WQE count drops below this, [`AsyncEvent::SrqLimitReached`](crate::AsyncEvent::SrqLimitReached) is raised once
    /// and the limit goes back to 0 (disarmed).
    pub srq_limit: u32,
}

/// One SRQ.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    pub(crate) pd: PdHandle,
    pub(crate) wrs: VecDeque<RecvWr>,
    pub(crate) attr: SrqAttr,
    /// Set for an XRC SRQ: its domain and CQ.
    pub(crate) xrc: Option<XrcSrq>,
}

impl SharedReceiveQueue {
    pub(crate) fn new(pd: PdHandle, attr: SrqAttr, xrc: Option<XrcSrq>) -> SharedReceiveQueue {
        SharedReceiveQueue {
            pd,
            wrs: VecDeque::new(),
            attr,
            xrc,
        }
    }

    /// The XRC domain and CQ of an XRC SRQ; `None` for a basic one.
    pub fn xrc(&self) -> Option<XrcSrq> {
        self.xrc
    }

    /// The current attributes (the limit reads 0 once it fired).
    pub fn attr(&self) -> SrqAttr {
        self.attr
    }

    /// WQEs posted and not yet taken.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether no WQE is posted.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// The protection domain.
    pub fn pd(&self) -> PdHandle {
        self.pd
    }

    /// Takes the oldest WQE; `true` beside it when that dropped the count below the armed
    /// limit, which disarms it (the caller raises the event).
    pub(crate) fn take(&mut self) -> Option<(RecvWr, bool)> {
        let wr = self.wrs.pop_front()?;
        let crossed =
            self.attr.srq_limit > 0 && (self.wrs.len() as u64) < u64::from(self.attr.srq_limit);
        if crossed {
            self.attr.srq_limit = 0;
        }
        Some((wr, crossed))
    }
}
