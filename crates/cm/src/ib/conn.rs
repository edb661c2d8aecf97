//! One connection's CM state (Linux's `struct cm_id_private`): the IBTA state, both
//! communication IDs, the negotiated QP parameters, the outstanding MAD and time-wait.

use softrdma_proto::{Duration, Instant};
use softrdma_wire::mad::cm::TransportType;
use softrdma_wire::{Gid, Psn};

use super::id::ListenId;
use super::params::PathRecord;
use super::state::CmState;
use super::timers::Pending;

/// Everything the CM keeps about one connection.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub(crate) state: CmState,
    /// Ours; never zero, unique among live connections.
    pub(crate) local_comm_id: u32,
    /// Theirs; zero until learnt (the active side learns it from the REP).
    pub(crate) remote_comm_id: u32,
    /// Transaction ID of the exchange in progress (our REQ's; the peer's REQ or DREQ).
    pub(crate) tid: u64,
    pub(crate) service_id: u64,
    /// Where MADs for this connection go.
    pub(crate) peer: Gid,
    /// The peer's CM QP (1).
    pub(crate) peer_qpn: u32,
    /// The primary path, from this side.
    pub(crate) path: PathRecord,
    /// ACK timeout code of the QP (Linux's `av.timeout`); sets time-wait's length.
    pub(crate) ack_timeout: u8,
    pub(crate) local_qpn: u32,
    pub(crate) remote_qpn: u32,
    pub(crate) transport: TransportType,
    /// First PSN this side sends.
    pub(crate) sq_psn: Psn,
    /// First PSN this side expects.
    pub(crate) rq_psn: Psn,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    pub(crate) flow_control: bool,
    pub(crate) srq: bool,
    pub(crate) target_ack_delay: u8,
    /// Wait per attempt for answers to this connection's MADs.
    pub(crate) timeout: Duration,
    pub(crate) max_cm_retries: u8,
    pub(crate) remote_ca_guid: u64,
    /// The MRA service timeout the consumer asked for.
    pub(crate) service_timeout: u8,
    /// Private data of our last RTU, DREP or MRA, resent with their duplicates.
    pub(crate) private_data: Vec<u8>,
    /// The listener a passive connection came from.
    pub(crate) listen_id: Option<ListenId>,
    pub(crate) pending: Option<Pending>,
    pub(crate) timewait_until: Option<Instant>,
    /// Indexed by (remote comm ID, remote CA GUID): finds duplicate REQs and REPs.
    pub(crate) in_remote_ids: bool,
    /// Indexed by (remote QPN, remote CA GUID): finds stale connections.
    pub(crate) in_remote_qpns: bool,
    /// Indexed by (SIDR request ID, peer): finds duplicate SIDR_REQs.
    pub(crate) in_remote_sidr: bool,
}

impl Conn {
    pub(crate) fn new(local_comm_id: u32, peer: Gid, path: PathRecord) -> Conn {
        Conn {
            state: CmState::Idle,
            local_comm_id,
            remote_comm_id: 0,
            tid: 0,
            service_id: 0,
            peer,
            peer_qpn: softrdma_wire::mad::GSI_QPN,
            path,
            ack_timeout: 0,
            local_qpn: 0,
            remote_qpn: 0,
            transport: TransportType::Rc,
            sq_psn: Psn::ZERO,
            rq_psn: Psn::ZERO,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            flow_control: false,
            srq: false,
            target_ack_delay: 0,
            timeout: Duration::ZERO,
            max_cm_retries: 0,
            remote_ca_guid: 0,
            service_timeout: 0,
            private_data: Vec::new(),
            listen_id: None,
            pending: None,
            timewait_until: None,
            in_remote_ids: false,
            in_remote_qpns: false,
            in_remote_sidr: false,
        }
    }

    /// The earliest of the retransmission deadline and the end of time-wait.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match (
            self.pending.as_ref().map(|p| p.deadline),
            self.timewait_until,
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A read-only view of a connection for the consumer (and for tests): its state and the
/// parameters negotiated so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// IBTA state.
    pub state: CmState,
    /// This side's communication ID.
    pub local_comm_id: u32,
    /// The other side's (zero until known).
    pub remote_comm_id: u32,
    /// The service ID.
    pub service_id: u64,
    /// Where MADs go.
    pub peer: Gid,
    /// The primary path, from this side.
    pub path: PathRecord,
    /// This side's QP.
    pub local_qpn: u32,
    /// The other side's QP.
    pub remote_qpn: u32,
    /// First PSN this side sends.
    pub sq_psn: Psn,
    /// First PSN this side expects.
    pub rq_psn: Psn,
    /// READ/atomic requests this side accepts.
    pub responder_resources: u8,
    /// READ/atomic requests this side issues.
    pub initiator_depth: u8,
    /// Transport retries of this side's QP.
    pub retry_count: u8,
    /// RNR retries of this side's QP.
    pub rnr_retry_count: u8,
    /// The QP's local ACK timeout code.
    pub ack_timeout: u8,
    /// The passive CA's ACK delay (from the REP; ours on the passive side is the config's).
    pub target_ack_delay: u8,
    /// RC or UC.
    pub transport: TransportType,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The other side's QP uses an SRQ (passive: the REQ's bit; active: ours).
    pub srq: bool,
    /// The other CA's GUID.
    pub remote_ca_guid: u64,
}

impl From<&Conn> for ConnInfo {
    fn from(c: &Conn) -> ConnInfo {
        ConnInfo {
            state: c.state,
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            service_id: c.service_id,
            peer: c.peer,
            path: c.path,
            local_qpn: c.local_qpn,
            remote_qpn: c.remote_qpn,
            sq_psn: c.sq_psn,
            rq_psn: c.rq_psn,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            ack_timeout: c.ack_timeout,
            target_ack_delay: c.target_ack_delay,
            transport: c.transport,
            flow_control: c.flow_control,
            srq: c.srq,
            remote_ca_guid: c.remote_ca_guid,
        }
    }
}
