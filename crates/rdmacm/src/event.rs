//! What happened to a CM id (`enum rdma_cm_event_type` with each event's data).

use std::net::SocketAddr;

use softrdma_cm::rdma::{ConnParam, UdParam};
use softrdma_wire::mad::cm::RejectReason;

/// `enum rdma_cm_event_type`, with each event's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEventKind {
    /// RDMA_CM_EVENT_ADDR_RESOLVED.
    AddrResolved,
    /// RDMA_CM_EVENT_ROUTE_RESOLVED.
    RouteResolved,
    /// RDMA_CM_EVENT_CONNECT_REQUEST: the peer's parameters and private data, its address
    /// and ours.
    ConnectRequest {
        /// The peer's parameters.
        param: ConnParam,
        /// The peer's address.
        peer: SocketAddr,
        /// Our address (the listener's port).
        local: SocketAddr,
    },
    /// RDMA_CM_EVENT_ESTABLISHED (for UD: the remote QPN and Q_Key).
    Established {
        /// UD only.
        ud: Option<UdParam>,
    },
    /// RDMA_CM_EVENT_REJECTED: the reason (`event->status`) and the REJ's private data.
    Rejected {
        /// Why.
        reason: RejectReason,
        /// The REJ's private data field (148 bytes).
        private_data: Vec<u8>,
    },
    /// RDMA_CM_EVENT_UNREACHABLE: no answer within the CM's retries.
    Unreachable,
    /// RDMA_CM_EVENT_CONNECT_ERROR: the local QP could not be readied for the peer's REP.
    ConnectError,
    /// RDMA_CM_EVENT_DISCONNECTED (the QP is already in the error state).
    Disconnected,
    /// RDMA_CM_EVENT_TIMEWAIT_EXIT.
    TimewaitExit,
}
