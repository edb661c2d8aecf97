//! Why a host operation failed.

use crate::wire::cqe::Status;
use crate::wire::rdma_cm::RejectStatus;
use crate::wire::DecodeError;

/// Why a host operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// rdma_cm refused a call (no device on the source address, a bad state).
    #[error("rdma_cm: {0}")]
    Cm(#[from] softrdma_rdmacm::CmError),
    /// The target rejected the queue's connection with an NVMe-oF RDMA status.
    #[error("the target rejected the connection: {0:?}")]
    Rejected(RejectStatus),
    /// The connection was rejected without NVMe-oF private data (e.g. nobody listens: IB CM
    /// reason 8, invalid service ID).
    #[error("the connection was rejected: {0:?}")]
    CmRejected(softrdma_rdmacm::RejectReason),
    /// The target did not answer.
    #[error("no answer from the target: {0}")]
    Timeout(&'static str),
    /// A command completed with an error status.
    #[error("{command} failed: {status} (DW0 {dw0:#x})")]
    Status {
        /// The command.
        command: &'static str,
        /// Its status.
        status: Status,
        /// Its completion's dword 0 (for Connect: which parameter was wrong).
        dw0: u32,
    },
    /// The RDMA queue failed (a verbs call, a completion in error, the peer disconnecting).
    #[error("transport: {0}")]
    Transport(String),
    /// The target sent bytes that do not decode.
    #[error("bad data from the target: {0}")]
    Decode(#[from] DecodeError),
    /// A request the host cannot make (a length the queue cannot carry, no such namespace).
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl HostError {
    /// The NVMe status, if the failure was a command's.
    pub fn status(&self) -> Option<Status> {
        match self {
            HostError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}
