//! QP types, states, capabilities and attributes (IBTA 10.3, ibverbs `ibv_qp_attr`); the
//! state machine that checks and applies them is `qp/transition.rs`.

use std::net::IpAddr;

use softrdma_wire::Psn;

use crate::access::AccessFlags;

/// The Q_Key of QP1, the General Services Interface: the wire crate's, where MADs live.
pub use softrdma_wire::mad::GSI_QKEY;

/// Transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// XRC initiator (ibverbs `IBV_QPT_XRC_SEND`, IBTA Annex A14): RC's requester, each
    /// work request naming the shared receive queue at the target its message is for. It
    /// has no receive queue.
    XrcIni,
    /// XRC target (ibverbs `IBV_QPT_XRC_RECV`): RC's responder, owned by an XRC domain
    /// rather than a protection domain. Each message goes to the XRC SRQ of its domain that
    /// the packet names, completes on that SRQ's CQ and accesses memory of that SRQ's
    /// protection domain. It has no send queue.
    XrcTgt,
}

impl QpType {
    /// Whether the QP runs the reliable connected protocol (acknowledgements, retransmission,
    /// READ and atomics): RC and both XRC types.
    pub const fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcIni | QpType::XrcTgt)
    }

    /// Whether the QP is connected to one peer QP (RC, UC, XRC).
    pub const fn is_connected(self) -> bool {
        !matches!(self, QpType::Ud)
    }
}

/// QP states (ibverbs `ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpState {
    /// Just created or reset: nothing may be posted.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained: new sends are queued but not started.
    Sqd,
    /// Send queue error (UC/UD): the SQ stopped, the RQ works.
    Sqe,
    /// Error: all work requests flush.
    Err,
}

impl QpState {
    /// The ibverbs name, e.g. `IBV_QPS_RTS`.
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
}

/// Path MTU values (ibverbs `ibv_mtu`), i.e. the maximum payload per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes (`IBV_MTU_256` = 1).
    Mtu256,
    /// 512 bytes (2).
    Mtu512,
    /// 1024 bytes (3), what rxe picks on a 1500-byte Ethernet.
    Mtu1024,
    /// 2048 bytes (4).
    Mtu2048,
    /// 4096 bytes (5).
    Mtu4096,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::Mtu256 => 256,
            Mtu::Mtu512 => 512,
            Mtu::Mtu1024 => 1024,
            Mtu::Mtu2048 => 2048,
            Mtu::Mtu4096 => 4096,
        }
    }
    /// The ibverbs enum value (1..=5), as exchanged by perftest.
    pub const fn ibv_enum(self) -> u8 {
        match self {
            Mtu::Mtu256 => 1,
            Mtu::Mtu512 => 2,
            Mtu::Mtu1024 => 3,
            Mtu::Mtu2048 => 4,
            Mtu::Mtu4096 => 5,
        }
    }
    /// From the ibverbs enum value.
    pub const fn from_ibv_enum(v: u8) -> Option<Mtu> {
        match v {
            1 => Some(Mtu::Mtu256),
            2 => Some(Mtu::Mtu512),
            3 => Some(Mtu::Mtu1024),
            4 => Some(Mtu::Mtu2048),
            5 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
    /// From a byte count that is exactly one of the five sizes.
    pub const fn from_bytes(v: u32) -> Option<Mtu> {
        match v {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
}

/// Where a connected QP's packets go: the RoCEv2 address vector reduced to what UDP needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressVector {
    /// Destination IP (from the destination GID; IPv4-mapped GIDs give IPv4).
    pub dest_ip: IpAddr,
    /// Traffic class (DSCP and ECN bits are separate: DSCP here, ECN chosen by the engine).
    pub traffic_class: u8,
    /// Hop limit / TTL (informational: the kernel writes its own).
    pub hop_limit: u8,
}

/// Capacities fixed at QP creation (ibverbs `ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Maximum outstanding send WRs.
    pub max_send_wr: u32,
    /// Maximum outstanding receive WRs.
    pub max_recv_wr: u32,
    /// Maximum SGEs per send WR.
    pub max_send_sge: u32,
    /// Maximum SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Maximum inline payload.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> QpCaps {
        QpCaps {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
        }
    }
}

/// Attributes for [`crate::Engine::modify_qp`]: `Some` fields are the ibverbs attribute mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: Option<QpState>,
    /// Rights granted to incoming requests (REMOTE_WRITE/READ/ATOMIC).
    pub qp_access_flags: Option<AccessFlags>,
    /// P_Key index (only index 0, P_Key 0xffff, exists).
    pub pkey_index: Option<u16>,
    /// Port number (only port 1 exists).
    pub port_num: Option<u8>,
    /// Q_Key (UD).
    pub qkey: Option<u32>,
    /// Path MTU.
    pub path_mtu: Option<Mtu>,
    /// Remote address.
    pub ah_attr: Option<AddressVector>,
    /// Remote QP number.
    pub dest_qp_num: Option<u32>,
    /// Expected PSN of the first incoming request.
    pub rq_psn: Option<Psn>,
    /// Max incoming READ/atomic requests outstanding (responder resources).
    pub max_dest_rd_atomic: Option<u8>,
    /// RNR NAK timer code this QP sends in RNR NAKs (5 bits).
    pub min_rnr_timer: Option<u8>,
    /// PSN of the first outgoing request.
    pub sq_psn: Option<Psn>,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: Option<u8>,
    /// Transport retries before RETRY_EXC_ERR (0..=7).
    pub retry_cnt: Option<u8>,
    /// RNR retries before RNR_RETRY_EXC_ERR (0..=7; 7 = infinite).
    pub rnr_retry: Option<u8>,
    /// Max outgoing READ/atomic requests outstanding.
    pub max_rd_atomic: Option<u8>,
}

impl QpAttr {
    /// RESET → INIT of a connected QP: P_Key index 0, port 1, the rights incoming requests get.
    pub fn rc_init(access: AccessFlags) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(access),
            ..QpAttr::default()
        }
    }

    /// INIT → RTR of an RC QP: where the peer is and what it will send (its first PSN), how
    /// many of its READ/atomic requests to hold resources for, and the RNR timer to answer with.
    pub fn rc_rtr(
        path_mtu: Mtu,
        dest: AddressVector,
        dest_qpn: u32,
        rq_psn: Psn,
        max_dest_rd_atomic: u8,
        min_rnr_timer: u8,
    ) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(path_mtu),
            ah_attr: Some(dest),
            dest_qp_num: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(max_dest_rd_atomic),
            min_rnr_timer: Some(min_rnr_timer),
            ..QpAttr::default()
        }
    }

    /// RTR → RTS of an RC QP: the first PSN to send, the ACK timeout exponent, the retry
    /// budgets, and how many READ/atomic requests may be outstanding.
    pub fn rc_rts(
        sq_psn: Psn,
        timeout: u8,
        retry_cnt: u8,
        rnr_retry: u8,
        max_rd_atomic: u8,
    ) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(timeout),
            retry_cnt: Some(retry_cnt),
            rnr_retry: Some(rnr_retry),
            max_rd_atomic: Some(max_rd_atomic),
            ..QpAttr::default()
        }
    }
}

impl QpAttr {
    /// RESET → INIT of a UD QP: P_Key index 0, port 1, and the Q_Key senders must present.
    pub fn ud_init(qkey: u32) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(qkey),
            ..QpAttr::default()
        }
    }

    /// INIT → RTR of a UD QP: nothing to say (there is no peer).
    pub fn ud_rtr() -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Rtr),
            ..QpAttr::default()
        }
    }

    /// RTR → RTS of a UD or UC QP: the first PSN to send with.
    pub fn unreliable_rts(sq_psn: Psn) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            ..QpAttr::default()
        }
    }

    /// INIT → RTR of a UC QP: where the peer is and the first PSN it sends with.
    pub fn uc_rtr(path_mtu: Mtu, dest: AddressVector, dest_qpn: u32, rq_psn: Psn) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(path_mtu),
            ah_attr: Some(dest),
            dest_qp_num: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            ..QpAttr::default()
        }
    }
}

/// Fully resolved attributes of a QP (defaults where never set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConfig {
    /// Rights for incoming requests.
    pub access: AccessFlags,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Remote address.
    pub av: Option<AddressVector>,
    /// Remote QP number.
    pub dest_qpn: u32,
    /// Initial expected request PSN.
    pub rq_psn: Psn,
    /// Responder resources.
    pub max_dest_rd_atomic: u8,
    /// RNR timer code for RNR NAKs we send.
    pub min_rnr_timer: u8,
    /// Initial send PSN.
    pub sq_psn: Psn,
    /// ACK timeout exponent.
    pub timeout: u8,
    /// Transport retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Outstanding READ/atomic limit.
    pub max_rd_atomic: u8,
}

impl Default for QpConfig {
    fn default() -> QpConfig {
        QpConfig {
            access: AccessFlags::empty(),
            qkey: 0,
            path_mtu: Mtu::Mtu1024,
            av: None,
            dest_qpn: 0,
            rq_psn: Psn::ZERO,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            sq_psn: Psn::ZERO,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            max_rd_atomic: 0,
        }
    }
}
