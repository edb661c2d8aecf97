//! The XRC target's part of the responder (IBTA Annex A14): each request's XRCETH names the
//! XRC SRQ its message is for, and the message takes that SRQ's receive WQEs, protection
//! domain and CQ. Everything else is RC's responder unchanged.

use softrdma_wire::{Opcode, PacketRepr};

use super::RespError;
use crate::qp::requester::XRC_OPCODE_BASE;
use crate::qp::{Ctx, QpContext, QpType};
use crate::srq::SrqHandle;

impl QpContext {
    /// On an XRC target, makes the SRQ the packet names the QP's for this message: its
    /// WQEs, PD and CQ. The SRQ must be an XRC SRQ of the QP's domain, and a packet that
    /// continues a message must name the SRQ the message began with; anything else is an
    /// invalid request (softrdma's reading of A14: an XRCETH that names no SRQ the target may
    /// use is a malformed request, as a QPN or opcode it cannot serve would be). A no-op on
    /// every other QP.
    pub(super) fn enter_xrc_srq(
        &mut self,
        ctx: &Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RespError> {
        let Some(xrcd) = self.xrcd else {
            return Ok(());
        };
        let h = SrqHandle(pkt.ext.xrceth.ok_or(RespError::InvalidRequest)?.srqn);
        if self.resp.send.is_some() || self.resp.write.is_some() {
            return if self.srq == Some(h) {
                Ok(())
            } else {
                Err(RespError::InvalidRequest)
            };
        }
        let srq = ctx.srqs.get(&h).ok_or(RespError::InvalidRequest)?;
        let xrc = srq
            .xrc
            .filter(|x| x.xrcd == xrcd)
            .ok_or(RespError::InvalidRequest)?;
        self.srq = Some(h);
        self.pd = srq.pd;
        self.recv_cq = xrc.cq;
        Ok(())
    }

    /// The opcode of an answer: `rc` itself, or its XRC twin on an XRC target.
    pub(crate) fn response_opcode(&self, rc: Opcode) -> Opcode {
        if self.qp_type == QpType::XrcTgt {
            Opcode(rc.0 | XRC_OPCODE_BASE)
        } else {
            rc
        }
    }

    /// An XRC SRQ was destroyed: a target QP whose last message went to it lets go of it,
    /// and of its PD and CQ, which may now be freed too.
    pub(crate) fn forget_xrc_srq(&mut self, srq: SrqHandle) {
        if self.qp_type == QpType::XrcTgt && self.srq == Some(srq) {
            self.srq = None;
            self.pd = crate::mr::PdHandle(0);
            self.recv_cq = crate::cq::CqHandle(0);
        }
    }
}
