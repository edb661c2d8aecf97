//! What comes out: MADs to send and events for the consumer (Linux's `struct ib_cm_event` and
//! its per-event parameters).

use softrdma_wire::mad::cm::private_data_len as pd;
use softrdma_wire::mad::cm::{RejectReason, SidrStatus, TransportType};
use softrdma_wire::mad::{PrivateData, MAD_LEN};
use softrdma_wire::{Gid, Psn};

use super::id::{IbCmId, ListenId};
use super::params::PathRecord;

/// A MAD to send on the GSI QP: a UD SEND to `dst_qpn` (always 1 here) at the port whose GID
/// is `dst`, with Q_Key 0x80010000 and P_Key 0xffff.
#[derive(Clone, PartialEq, Eq)]
pub struct OutMad {
    /// Destination GID (its IP address on RoCEv2).
    pub dst: Gid,
    /// Destination QP.
    pub dst_qpn: u32,
    /// The 256 bytes.
    pub mad: [u8; MAD_LEN],
}

impl std::fmt::Debug for OutMad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OutMad({} qp {}: {})",
            self.dst,
            self.dst_qpn,
            softrdma_wire::mad::describe(&self.mad)
        )
    }
}

/// A REQ arrived for a listening service (`ib_cm_req_event_param`), seen from this side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqReceived {
    /// The listener it matched.
    pub listen_id: ListenId,
    /// The sender's GID (where answers go).
    pub peer: Gid,
    /// The primary path, from this side: `sgid` ours, `dgid` the active side's.
    pub primary_path: PathRecord,
    /// The service ID asked for.
    pub service_id: u64,
    /// The active CA's GUID.
    pub remote_ca_guid: u64,
    /// The active QP's Q_Key.
    pub remote_qkey: u32,
    /// The active QP.
    pub remote_qpn: u32,
    /// RC, UC, ...
    pub transport: TransportType,
    /// The PSN the active side expects first (this side's send PSN).
    pub starting_psn: Psn,
    /// READ/atomic requests this side may accept (the REQ's initiator depth).
    pub responder_resources: u8,
    /// READ/atomic requests this side may issue (the REQ's responder resources).
    pub initiator_depth: u8,
    /// How long this CM may take to answer (the REQ's remote timeout).
    pub local_cm_response_timeout: u8,
    /// How long the active CM takes (the REQ's local timeout).
    pub remote_cm_response_timeout: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries for this side's QP.
    pub retry_count: u8,
    /// RNR retries for this side's QP.
    pub rnr_retry_count: u8,
    /// The active QP uses an SRQ.
    pub srq: bool,
    /// The REQ's private data (all 92 bytes).
    pub private_data: PrivateData<{ pd::REQ }>,
}

/// A REP arrived for a connection this side requested (`ib_cm_rep_event_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepReceived {
    /// The passive CA's GUID.
    pub remote_ca_guid: u64,
    /// The passive QP's Q_Key.
    pub remote_qkey: u32,
    /// The passive QP.
    pub remote_qpn: u32,
    /// The PSN the passive side expects first (this side's send PSN).
    pub starting_psn: Psn,
    /// READ/atomic requests this side may accept (the REP's initiator depth).
    pub responder_resources: u8,
    /// READ/atomic requests this side may issue (the REP's responder resources).
    pub initiator_depth: u8,
    /// The passive CA's ACK delay.
    pub target_ack_delay: u8,
    /// Failover.
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retries for this side's QP.
    pub rnr_retry_count: u8,
    /// The passive QP uses an SRQ.
    pub srq: bool,
    /// The REP's private data (all 196 bytes).
    pub private_data: PrivateData<{ pd::REP }>,
}

/// A SIDR_REQ arrived for a listening service (`ib_cm_sidr_req_event_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqReceived {
    /// The listener it matched.
    pub listen_id: ListenId,
    /// The sender's GID.
    pub peer: Gid,
    /// The service ID asked for.
    pub service_id: u64,
    /// The P_Key the request names.
    pub pkey: u16,
    /// The request's private data (all 216 bytes).
    pub private_data: PrivateData<{ pd::SIDR_REQ }>,
}

/// A SIDR_REP answered this side's SIDR_REQ (`ib_cm_sidr_rep_event_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepReceived {
    /// Outcome.
    pub status: SidrStatus,
    /// The UD QP serving the service.
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// Additional information (its used part).
    pub info: Vec<u8>,
    /// The reply's private data (all 136 bytes).
    pub private_data: PrivateData<{ pd::SIDR_REP }>,
}

/// Something the consumer must act on (Linux's `enum ib_cm_event_type`), for connection `id`.
///
/// Named for its layer: rdma_cm's events are [`crate::rdma::RdmaEvent`], and librdmacm's
/// `rdma_cm_event` is `softrdma_rdmacm::CmEvent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IbCmEvent {
    /// A new connection request; `id` is the passive side's new connection, in REQ_RCVD.
    /// Accept, reject or MRA it.
    ReqReceived {
        /// The new connection.
        id: IbCmId,
        /// What the REQ said.
        req: Box<ReqReceived>,
    },
    /// The REQ was answered: move the QP to RTR and RTS with [`super::IbCm::qp_attr`], then
    /// send the RTU ([`super::IbCm::send_rtu`]) — or reject.
    RepReceived {
        /// The connection.
        id: IbCmId,
        /// What the REP said.
        rep: Box<RepReceived>,
    },
    /// The RTU arrived (or the consumer reported the QP's first receive): the connection is
    /// established on the passive side.
    Established {
        /// The connection.
        id: IbCmId,
    },
    /// The other side rejected.
    RejReceived {
        /// The connection.
        id: IbCmId,
        /// Why.
        reason: RejectReason,
        /// Additional rejection information (its used part).
        ari: Vec<u8>,
        /// The REJ's private data (all 148 bytes).
        private_data: PrivateData<{ pd::REJ }>,
    },
    /// The other side needs more time (`service_timeout`, IBTA code); retransmissions wait.
    MraReceived {
        /// The connection.
        id: IbCmId,
        /// Time asked for.
        service_timeout: u8,
    },
    /// Every REQ went unanswered: the connection is back to idle (rdma_cm: UNREACHABLE).
    ReqError {
        /// The connection.
        id: IbCmId,
    },
    /// Every REP went unanswered: back to idle (rdma_cm: UNREACHABLE).
    RepError {
        /// The connection.
        id: IbCmId,
    },
    /// Every DREQ went unanswered: the connection is in time-wait anyway.
    DreqError {
        /// The connection.
        id: IbCmId,
    },
    /// The other side disconnects: move the QP to error and answer with
    /// [`super::IbCm::send_drep`].
    DreqReceived {
        /// The connection.
        id: IbCmId,
        /// The DREQ's private data (all 220 bytes).
        private_data: PrivateData<{ pd::DREQ }>,
    },
    /// The other side confirmed the disconnect; the connection is in time-wait.
    DrepReceived {
        /// The connection.
        id: IbCmId,
        /// The DREP's private data (all 224 bytes).
        private_data: PrivateData<{ pd::DREP }>,
    },
    /// Time-wait is over: the QP may be reused.
    TimewaitExit {
        /// The connection (now idle).
        id: IbCmId,
    },
    /// A SIDR_REQ for a listening service; `id` answers it with [`super::IbCm::sidr_reply`].
    SidrReqReceived {
        /// The new lookup.
        id: IbCmId,
        /// What it asked.
        req: Box<SidrReqReceived>,
    },
    /// The answer to this side's SIDR_REQ.
    SidrRepReceived {
        /// The lookup.
        id: IbCmId,
        /// The answer.
        rep: Box<SidrRepReceived>,
    },
    /// Every SIDR_REQ went unanswered.
    SidrReqError {
        /// The lookup.
        id: IbCmId,
    },
}

impl IbCmEvent {
    /// The connection the event is about.
    pub fn id(&self) -> IbCmId {
        match self {
            IbCmEvent::ReqReceived { id, .. }
            | IbCmEvent::RepReceived { id, .. }
            | IbCmEvent::Established { id }
            | IbCmEvent::RejReceived { id, .. }
            | IbCmEvent::MraReceived { id, .. }
            | IbCmEvent::ReqError { id }
            | IbCmEvent::RepError { id }
            | IbCmEvent::DreqError { id }
            | IbCmEvent::DreqReceived { id, .. }
            | IbCmEvent::DrepReceived { id, .. }
            | IbCmEvent::TimewaitExit { id }
            | IbCmEvent::SidrReqReceived { id, .. }
            | IbCmEvent::SidrRepReceived { id, .. }
            | IbCmEvent::SidrReqError { id } => *id,
        }
    }
}
