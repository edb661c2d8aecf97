//! The engine's XRC objects: domains, XRC SRQs and XRC target QPs (see [`crate::xrc`]).

use super::Engine;
use crate::cq::CqHandle;
use crate::error::EngineError;
use crate::mr::PdHandle;
use crate::qp::{QpCaps, QpContext, QpType};
use crate::srq::{SharedReceiveQueue, SrqAttr, SrqHandle};
use crate::xrc::{XrcSrq, XrcdHandle};

impl Engine {
    /// Opens an XRC domain (ibverbs `ibv_open_xrcd`).
    pub fn open_xrcd(&mut self) -> XrcdHandle {
        let h = self.next_xrcd;
        self.next_xrcd += 1;
        self.xrcds.insert(h);
        XrcdHandle(h)
    }

    /// Closes an XRC domain that no SRQ and no target QP belongs to (`Busy` otherwise, as
    /// ibverbs refuses with `EBUSY`).
    pub fn close_xrcd(&mut self, xrcd: XrcdHandle) -> Result<(), EngineError> {
        if !self.xrcds.contains(&xrcd.0) {
            return Err(EngineError::InvalidArgument("no such XRC domain"));
        }
        let in_use = self.qps.values().any(|q| q.xrcd == Some(xrcd))
            || self
                .shared
                .srqs
                .values()
                .any(|s| s.xrc.is_some_and(|x| x.xrcd == xrcd));
        if in_use {
            return Err(EngineError::Busy);
        }
        self.xrcds.remove(&xrcd.0);
        Ok(())
    }

    /// Creates an XRC SRQ (ibverbs `ibv_create_srq_ex` with `IBV_SRQT_XRC`): receives for
    /// messages the domain's target QPs take, whose data may touch memory of `pd` and whose
    /// completions go to `cq`. Its number ([`SrqHandle`]'s) is what initiators put in their
    /// XRCETH.
    pub fn create_xrc_srq(
        &mut self,
        pd: PdHandle,
        xrcd: XrcdHandle,
        cq: CqHandle,
        attr: SrqAttr,
    ) -> Result<SrqHandle, EngineError> {
        self.check_srq(pd, &attr)?;
        if !self.xrcds.contains(&xrcd.0) {
            return Err(EngineError::InvalidArgument("no such XRC domain"));
        }
        if !self.shared.cqs.contains_key(&cq) {
            return Err(EngineError::NoSuchCq);
        }
        let xrc = XrcSrq { xrcd, cq };
        self.insert_srq(SharedReceiveQueue::new(pd, attr, Some(xrc)))
    }

    /// Creates an XRC target QP of `xrcd` in the RESET state (ibverbs `ibv_create_qp_ex` with
    /// `IBV_QPT_XRC_RECV`); returns its number. It has no send or receive queue, no PD and no
    /// CQ of its own: each message takes those of the XRC SRQ it names.
    pub fn create_xrc_tgt_qp(&mut self, xrcd: XrcdHandle) -> Result<u32, EngineError> {
        if !self.xrcds.contains(&xrcd.0) {
            return Err(EngineError::InvalidArgument("no such XRC domain"));
        }
        let qpn = self.alloc_qpn()?;
        let caps = QpCaps {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        let mut qp = QpContext::new(
            qpn,
            QpType::XrcTgt,
            PdHandle(0),
            CqHandle(0),
            CqHandle(0),
            caps,
        );
        qp.xrcd = Some(xrcd);
        Ok(self.insert_qp(qp))
    }
}
