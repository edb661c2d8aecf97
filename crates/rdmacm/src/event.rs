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
    /// RDMA_CM_EVENT_CONNECT_RESPONSE: the peer's REP reached an id whose QP the consumer
    /// made itself (it connected with `ConnParam::qp_num` and no [`crate::CmId::create_qp`]):
    /// the consumer readies its QP with [`crate::CmId::qp_attr`] and completes the connection
    /// with [`crate::CmId::establish`], as with librdmacm.
    ConnectResponse {
        /// The peer's parameters and the REP's private data.
        param: ConnParam,
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

impl CmEventKind {
    /// The event's name as `rdma_event_str` gives it.
    pub fn name(&self) -> &'static str {
        match self {
            CmEventKind::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            CmEventKind::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            CmEventKind::ConnectRequest { .. } => "RDMA_CM_EVENT_CONNECT_REQUEST",
            CmEventKind::ConnectResponse { .. } => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            CmEventKind::Established { .. } => "RDMA_CM_EVENT_ESTABLISHED",
            CmEventKind::Rejected { .. } => "RDMA_CM_EVENT_REJECTED",
            CmEventKind::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            CmEventKind::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            CmEventKind::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            CmEventKind::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}
