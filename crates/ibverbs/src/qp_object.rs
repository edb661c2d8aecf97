//! The queue-pair object every QP verb shares: the C structs the program sees first, then
//! softrdma's QP and what the C side keeps to check work requests and release its PD and CQs.

use std::ffi::c_int;
use std::sync::Mutex;

use softrdma::{QueuePair, SendWr};

use crate::abi::*;
use crate::cq::Cq;
use crate::pd::Pd;
use crate::util::{is_live, Kind};

/// The operations a softrdma QP can post (`IBV_QP_EX_WITH_*`).
pub(crate) const DEFAULT_SEND_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_ATOMIC_WRITE;

/// The requests of one `ibv_wr_start` … `ibv_wr_complete` sequence, and the first error
/// found while building them.
#[derive(Debug, Default)]
pub(crate) struct WrBatch {
    pub wrs: Vec<SendWr>,
    pub error: Option<c_int>,
}

/// A queue pair: the `ibv_qp_ex` (whose first part is the `ibv_qp`), then softrdma's QP and
/// what the C side needs to check work requests and release its PD and CQs.
#[repr(C)]
pub(crate) struct Qp {
    pub ibv: ibv_qp_ex,
    pub qp: QueuePair,
    /// Null for an XRC target, which has no PD, CQs or SRQ.
    pub pd: *mut Pd,
    pub send_cq: *mut Cq,
    /// Null for an XRC initiator created without one (it receives nothing) and a target.
    pub recv_cq: *mut Cq,
    /// The XRC domain handle a target QP was made or opened through (null otherwise).
    pub xrcd: *mut crate::xrcd::Xrcd,
    pub sq_sig_all: bool,
    pub max_inline: u32,
    /// `send_ops_flags` of `ibv_create_qp_ex`: the `ibv_wr_*` operations allowed.
    pub send_ops: u64,
    /// The work requests an `ibv_wr_start` … `ibv_wr_complete` sequence builds.
    pub batch: Mutex<WrBatch>,
}

impl Qp {
    /// The QP behind a live handle, or `EINVAL`.
    pub(crate) fn from_handle<'a>(qp: *mut ibv_qp) -> Result<&'a Qp, c_int> {
        if !is_live(qp, Kind::Qp) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live QP handles are boxed `Qp`s (ibv_qp_ex, then ibv_qp, first) until
        // ibv_destroy_qp.
        Ok(unsafe { &*qp.cast::<Qp>() })
    }
}
