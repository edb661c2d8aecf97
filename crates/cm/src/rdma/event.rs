//! rdma_cm's events (`struct rdma_cm_event`) and the connection parameters they and the calls
//! carry (`struct rdma_conn_param`, `struct rdma_ud_param`).

use std::net::{IpAddr, SocketAddr};

use softrdma_wire::mad::cm::{RejectReason, SidrStatus};

use super::id::RdmaId;

/// Connection parameters (`struct rdma_conn_param`): what `connect` and `accept` send, what
/// `ConnectRequest` and `ConnectResponse` report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnParam {
    /// The application's private data (sent: at most the message's limit; received: the whole
    /// field after rdma_cm's header).
    pub private_data: Vec<u8>,
    /// READ/atomic requests accepted.
    pub responder_resources: u8,
    /// READ/atomic requests issued.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries (capped at 7 when sent).
    pub retry_count: u8,
    /// RNR retries (capped at 7 when sent; 7 = infinite).
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// The QP number: ours when sent, the peer's when received.
    pub qp_num: u32,
    /// UD accept: the Q_Key to advertise (0: rdma_cm's 0x01234567).
    pub qkey: u32,
}

impl ConnParam {
    /// The parameters rping connects and accepts with: one READ/atomic each way, transport and
    /// RNR retries 7, no private data; `qp_num` is this side's QP.
    pub fn rc(qp_num: u32) -> ConnParam {
        ConnParam {
            qp_num,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }
    }
}

/// What the active side of a UD "connection" learns (`struct rdma_ud_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdParam {
    /// The remote UD QP.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// The remote address the datagrams go to.
    pub peer: Option<IpAddr>,
    /// The SIDR_REP's private data (all 136 bytes).
    pub private_data: Vec<u8>,
}

/// The route a connection takes, as address and route resolution found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// Path MTU, IBTA code (3 = 1024 on a 1500-byte Ethernet, 5 = 4096).
    pub mtu: u8,
    /// Hop limit (TTL).
    pub hop_limit: u8,
    /// Traffic class (rdma_cm's ToS).
    pub traffic_class: u8,
}

impl Default for Route {
    /// rxe's route on a 1500-byte Ethernet: MTU 1024, hop limit 64, traffic class 0.
    fn default() -> Route {
        Route {
            mtu: 3,
            hop_limit: 64,
            traffic_class: 0,
        }
    }
}

/// An rdma_cm event for `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaEvent {
    /// The id it is about (for `ConnectRequest`: the new id).
    pub id: RdmaId,
    /// What happened.
    pub kind: RdmaEventKind,
}

/// `enum rdma_cm_event_type`, as far as connections go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaEventKind {
    /// RDMA_CM_EVENT_CONNECT_REQUEST: a peer connects to a listener; `id` is new.
    ConnectRequest {
        /// The listener.
        listen_id: RdmaId,
        /// The peer's parameters (from its point of view swapped to ours: `responder_resources`
        /// are what we may accept) and private data.
        param: ConnParam,
        /// The peer's address and port.
        peer: SocketAddr,
        /// Our address and the listening port.
        local: SocketAddr,
    },
    /// RDMA_CM_EVENT_CONNECT_RESPONSE: the REP arrived (active side); ready the QP, then
    /// `complete_connect`.
    ConnectResponse {
        /// The peer's answer.
        param: ConnParam,
    },
    /// RDMA_CM_EVENT_ESTABLISHED (for UD: the SIDR_REP's QPN and Q_Key).
    Established {
        /// UD only.
        ud: Option<UdParam>,
    },
    /// RDMA_CM_EVENT_REJECTED: the REJ's reason (rdma_cm's `status`) and private data.
    Rejected {
        /// Why.
        reason: RejectReason,
        /// All 148 bytes.
        private_data: Vec<u8>,
    },
    /// RDMA_CM_EVENT_UNREACHABLE: no answer (ETIMEDOUT), or a SIDR_REP that is not success.
    Unreachable {
        /// The SIDR status, for UD.
        sidr_status: Option<SidrStatus>,
    },
    /// RDMA_CM_EVENT_DISCONNECTED: the peer's DREQ, or the DREP to ours (or no DREP at all).
    Disconnected,
    /// RDMA_CM_EVENT_TIMEWAIT_EXIT: the QP may be reused.
    TimewaitExit,
}
