//! What direct placement (`crate::placement`) asks of a QP as requester: where the READ
//! responses it expects next go. (As responder, the rest of a WRITE: `../responder/write.rs`.)

use std::sync::Arc;

use softrdma_wire::{Opcode, Psn};

use crate::access::AccessFlags;
use crate::mr::{MrTable, RegionMemory};
use crate::qp::{QpContext, QpState, QpType};
use crate::wr::SendOp;

/// Where one expected READ response's payload goes.
pub(crate) struct ReadTarget {
    pub psn: Psn,
    /// The PSN after the READ's last response.
    pub message_end: Psn,
    /// The response opcode expected.
    pub opcode: Opcode,
    /// Payload bytes.
    pub len: u64,
    pub memory: Arc<dyn RegionMemory>,
    pub offset: usize,
    /// Where in the READ the payload starts.
    pub at_message: u64,
}

impl QpContext {
    /// The next READ responses this RC QP expects, if they may be received straight into
    /// the READs' local buffers (`crate::placement`): from the oldest unacknowledged PSN on,
    /// through the READ it belongs to and the READs after it whose PSNs follow on, at most
    /// `max`, up to the first whose payload does not lie in one SGE. Each as the response of
    /// a READ request of `chunk` packets would be. `None` when the oldest outstanding
    /// operation is not a READ.
    pub(crate) fn read_placement(
        &self,
        mrs: &MrTable,
        chunk: u32,
        max: usize,
    ) -> Option<Vec<ReadTarget>> {
        if self.qp_type != QpType::Rc || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return None;
        }
        let psn = self.req.unacked_psn();
        let idx = self.wqe_index(psn)?;
        let first = self.req.wqe(idx);
        if !matches!(first.wr.op, SendOp::RdmaRead { .. }) {
            return None;
        }
        let message_end = first.first_psn.add(first.npkts);
        let mut k0 = u32::try_from(psn.distance(first.first_psn)).ok()?;
        let mut next = first.first_psn;
        let mut out = Vec::new();
        // This READ's responses, then those of the READs posted after it, as long as their
        // PSNs follow on: a GRO batch may hold one READ's LAST and the next one's FIRST.
        'reads: for wqe in self.req.wqes().iter().skip(idx) {
            let is_read = matches!(wqe.wr.op, SendOp::RdmaRead { .. });
            if !is_read || !wqe.started || wqe.first_psn != next || wqe.len == 0 {
                break;
            }
            for k in k0..wqe.npkts {
                if out.len() == max {
                    break 'reads;
                }
                let offset = u64::from(k) * u64::from(wqe.mtu);
                let len = (u64::from(wqe.len) - offset).min(u64::from(wqe.mtu));
                let request_ends = k + 1 == wqe.npkts || (k + 1) % chunk == 0;
                let opcode = match (k % chunk == 0, request_ends) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                let sgl = &wqe.wr.sg_list;
                let need = AccessFlags::LOCAL_WRITE;
                let Some((memory, off)) = mrs.locate(self.pd, sgl, offset, len, need) else {
                    break 'reads;
                };
                out.push(ReadTarget {
                    psn: wqe.first_psn.add(k),
                    message_end,
                    opcode,
                    len,
                    memory,
                    offset: off,
                    at_message: offset,
                });
            }
            next = wqe.first_psn.add(wqe.npkts);
            k0 = 0;
        }
        Some(out)
    }

    /// Whether the response this QP expects next is `psn`, `at_message` bytes into the READ
    /// it answers (see [`QpContext::read_placement`]).
    pub(crate) fn expects_placed_response(&self, psn: Psn, at_message: u64) -> bool {
        self.qp_type == QpType::Rc
            && matches!(self.state, QpState::Rts | QpState::Sqd)
            && self.req.unacked_psn() == psn
            && self.wqe_index(psn).is_some_and(|i| {
                let w = self.req.wqe(i);
                matches!(w.wr.op, SendOp::RdmaRead { .. })
                    && u64::try_from(psn.distance(w.first_psn))
                        .is_ok_and(|k| k * u64::from(w.mtu) == at_message)
            })
    }
}
