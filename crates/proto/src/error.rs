//! The engine's error type: why a verb was refused (ibverbs' errno returns). Nothing happened
//! when it is returned.

use crate::qp::attr::QpState;
use crate::qp::transition::ModifyQpError;

/// Why an object could not be created, modified or destroyed, or a WR posted. Like ibverbs'
/// errno returns: nothing happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// No such protection domain.
    #[error("no such protection domain")]
    NoSuchPd,
    /// No such completion queue.
    #[error("no such completion queue")]
    NoSuchCq,
    /// No such queue pair.
    #[error("no such queue pair")]
    NoSuchQp,
    /// No such memory region.
    #[error("no such memory region")]
    NoSuchMr,
    /// No such shared receive queue.
    #[error("no such shared receive queue")]
    NoSuchSrq,
    /// No such memory window.
    #[error("no such memory window")]
    NoSuchMw,
    /// The object is still used by others (QPs on a CQ, MRs or QPs in a PD).
    #[error("object still in use")]
    Busy,
    /// An argument is invalid; the string says which.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The QP's state does not allow the call.
    #[error("operation not allowed in QP state {0:?}")]
    InvalidState(QpState),
    /// The work queue is full.
    #[error("work queue full")]
    QueueFull,
    /// A table is full (its limit is in the docs of the object).
    #[error("too many {0}")]
    Exhausted(&'static str),
    /// The QP transition was refused.
    #[error(transparent)]
    Modify(#[from] ModifyQpError),
}
