//! What the caller passes in: the path a connection takes and the parameters of REQ, REP and
//! the SIDR messages (Linux's `struct sa_path_rec` reduced to RoCE, `ib_cm_req_param`,
//! `ib_cm_rep_param`, `ib_cm_sidr_req_param`, `ib_cm_sidr_rep_param`).

use softrdma_wire::mad::cm::path::PERMISSIVE_LID;
use softrdma_wire::mad::cm::{CmPath, SidrStatus, TransportType};
use softrdma_wire::{Gid, Psn};

use super::timers::ack_timeout;

/// The packet life time rdma_cm assumes on RoCE (`CMA_IBOE_PACKET_LIFETIME`, 2^18 × 4.096 µs):
/// with rxe's ACK delay of 15 it gives the local ACK timeout 19 that rxe's REQs carry.
pub const ROCE_PACKET_LIFE_TIME: u8 = 18;
/// rdma_cm's CM response timeout, both directions (`CMA_CM_RESPONSE_TIMEOUT`): ~4 s.
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// rdma_cm's CM retries (`CMA_MAX_CM_RETRIES`).
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// rdma_cm's MRA service timeout (`CMA_CM_MRA_SETTING` without its delay flag): ~69 s.
pub const CMA_MRA_SERVICE_TIMEOUT: u8 = 24;

/// A path between two RoCE ports: the fields of a path record a REQ needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathRecord {
    /// This side's GID (its IP address).
    pub sgid: Gid,
    /// The other side's GID.
    pub dgid: Gid,
    /// GRH flow label (rdma_cm: a hash of the ports).
    pub flow_label: u32,
    /// Traffic class (rdma_cm: the ToS, 0 by default).
    pub traffic_class: u8,
    /// Hop limit (the route's TTL; 64 in the captures).
    pub hop_limit: u8,
    /// Service level.
    pub sl: u8,
    /// Static rate code (rxe reports none: 0).
    pub rate: u8,
    /// Path MTU, IBTA encoding (3 = 1024, 5 = 4096).
    pub mtu: u8,
    /// Partition key (0xffff on RoCE).
    pub pkey: u16,
    /// Packet life time code (see [`ROCE_PACKET_LIFE_TIME`]).
    pub packet_life_time: u8,
}

impl PathRecord {
    /// A RoCEv2 path as rdma_cm resolves it: hop limit 64, traffic class 0, P_Key 0xffff,
    /// packet life time 18.
    pub fn roce(sgid: Gid, dgid: Gid, mtu: u8, flow_label: u32) -> PathRecord {
        PathRecord {
            sgid,
            dgid,
            flow_label,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            rate: 0,
            mtu,
            pkey: 0xffff,
            packet_life_time: ROCE_PACKET_LIFE_TIME,
        }
    }

    /// The path as the REQ carries it (`cm_format_req`): permissive LIDs when the hop limit
    /// exceeds one (always on RoCEv2), the ACK timeout from the CA's ACK delay and the packet
    /// life time.
    pub(crate) fn to_cm_path(self, ca_ack_delay: u8) -> CmPath {
        let routed = self.hop_limit > 1;
        CmPath {
            local_lid: if routed { PERMISSIVE_LID } else { 0 },
            remote_lid: if routed { PERMISSIVE_LID } else { 0 },
            local_gid: self.sgid,
            remote_gid: self.dgid,
            flow_label: self.flow_label & 0xf_ffff,
            packet_rate: self.rate & 0x3f,
            traffic_class: self.traffic_class,
            hop_limit: self.hop_limit,
            sl: self.sl & 0xf,
            subnet_local: !routed,
            local_ack_timeout: ack_timeout(ca_ack_delay, self.packet_life_time),
        }
    }

    /// The path a received REQ describes, seen from the receiver (`cm_format_paths_from_req`):
    /// GIDs swapped, packet life time one below the REQ's ACK timeout.
    pub(crate) fn from_req(p: &CmPath, pkey: u16, mtu: u8) -> PathRecord {
        PathRecord {
            sgid: p.remote_gid,
            dgid: p.local_gid,
            flow_label: p.flow_label,
            traffic_class: p.traffic_class,
            hop_limit: p.hop_limit,
            sl: p.sl,
            rate: p.packet_rate,
            mtu,
            pkey,
            packet_life_time: p.local_ack_timeout.saturating_sub(1),
        }
    }
}

/// Parameters of a connection request (`ib_cm_req_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqParams {
    /// The path: where the REQ goes and what the QPs will use.
    pub primary_path: PathRecord,
    /// The service connected to.
    pub service_id: u64,
    /// This side's QP.
    pub qpn: u32,
    /// RC or UC.
    pub transport: TransportType,
    /// The PSN this side expects first (`None`: a random one, as rdma_cm draws it).
    pub starting_psn: Option<Psn>,
    /// READ/atomic requests this side accepts.
    pub responder_resources: u8,
    /// READ/atomic requests this side issues.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries the other side should use (0..=7).
    pub retry_count: u8,
    /// RNR retries the other side should use (0..=7, 7 = infinite).
    pub rnr_retry_count: u8,
    /// How long the passive CM may take (code, 4.096 µs × 2^n).
    pub remote_cm_response_timeout: u8,
    /// How long this CM takes (code).
    pub local_cm_response_timeout: u8,
    /// How often to resend (0..=15).
    pub max_cm_retries: u8,
    /// This QP uses an SRQ.
    pub srq: bool,
    /// Private data, at most 92 bytes.
    pub private_data: Vec<u8>,
}

impl ReqParams {
    /// rdma_cm's REQ for an RC connection on `path` (`cma_connect_ib`): response timeouts 20,
    /// 15 CM retries, transport and RNR retries 7, one READ each way, no private data.
    pub fn rdma_cm(path: PathRecord, service_id: u64, qpn: u32) -> ReqParams {
        ReqParams {
            primary_path: path,
            service_id,
            qpn,
            transport: TransportType::Rc,
            starting_psn: None,
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
            remote_cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            local_cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            max_cm_retries: CMA_MAX_CM_RETRIES,
            srq: false,
            private_data: Vec::new(),
        }
    }
}

/// Parameters of the reply to a request (`ib_cm_rep_param`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RepParams {
    /// This side's QP.
    pub qpn: u32,
    /// The PSN this side expects first (`None`: random).
    pub starting_psn: Option<Psn>,
    /// READ/atomic requests this side accepts.
    pub responder_resources: u8,
    /// READ/atomic requests this side issues.
    pub initiator_depth: u8,
    /// Failover (0: accepted).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retries the active side should use (0..=7).
    pub rnr_retry_count: u8,
    /// This QP uses an SRQ.
    pub srq: bool,
    /// Private data, at most 196 bytes.
    pub private_data: Vec<u8>,
}

/// Parameters of a service ID resolution (`ib_cm_sidr_req_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqParams {
    /// Where to ask.
    pub path: PathRecord,
    /// The service to resolve.
    pub service_id: u64,
    /// Wait per attempt (rdma_cm: 2^(20 − 8) ms).
    pub timeout_ms: u32,
    /// Resends (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// Private data, at most 216 bytes.
    pub private_data: Vec<u8>,
}

/// Parameters of the answer to a SIDR_REQ (`ib_cm_sidr_rep_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepParams {
    /// Outcome.
    pub status: SidrStatus,
    /// The UD QP serving the service.
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// Additional information, at most 72 bytes.
    pub info: Vec<u8>,
    /// Private data, at most 136 bytes.
    pub private_data: Vec<u8>,
}

impl SidrRepParams {
    /// A refusal with `status` and no data.
    pub fn refuse(status: SidrStatus) -> SidrRepParams {
        SidrRepParams {
            status,
            qpn: 0,
            qkey: 0,
            info: Vec::new(),
            private_data: Vec::new(),
        }
    }
}
