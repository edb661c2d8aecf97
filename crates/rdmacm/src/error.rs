//! Why an rdma_cm call failed.

use softrdma_cm::rdma::RdmaError;

/// Why an rdma_cm call failed (librdmacm returns -1 with `errno`; the closest errno is in
/// each variant's docs).
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// No softrdma device could be opened on the address (`EADDRNOTAVAIL`, or `EADDRINUSE`
    /// when something else holds its port 4791).
    #[error("no softrdma device on that address: {0}")]
    Device(#[source] softrdma::OpenDeviceError),
    /// The device's connection manager could not be set up.
    #[error("connection manager setup failed: {0}")]
    Setup(String),
    /// No route to the destination (`EHOSTUNREACH`).
    #[error("no route to the destination: {0}")]
    Route(#[source] std::io::Error),
    /// The call does not fit the id's state (`EINVAL`): e.g. connect before the route is
    /// resolved, accept on an id that did not come from a connect request.
    #[error("not allowed now: {0}")]
    InvalidState(&'static str),
    /// The QP could not be created or moved through its states.
    #[error("queue pair: {0}")]
    Qp(String),
    /// The peer rejected the connection (`RDMA_CM_EVENT_REJECTED`; `ECONNREFUSED`).
    #[error("rejected by the peer: {0:?}")]
    Rejected(softrdma_wire::mad::cm::RejectReason),
    /// The peer did not answer (`RDMA_CM_EVENT_UNREACHABLE`; `ETIMEDOUT`).
    #[error("the peer is unreachable")]
    Unreachable,
    /// The connection manager refused (address in use, bad state, private data too long…).
    #[error(transparent)]
    Cm(#[from] RdmaError),
}
