//! QP types, states, attributes and the state machine (IBTA 10.3, ibverbs `ibv_modify_qp`).

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

/// Why a `modify_qp` was refused. Nothing changes when it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ModifyQpError {
    /// The transition is not in the IBTA state table.
    #[error("illegal QP state transition {from:?} -> {to:?}")]
    IllegalTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// The transition requires an attribute that was not given.
    #[error("QP transition {from:?} -> {to:?} requires attribute {attr}")]
    MissingAttribute {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// The attribute's ibverbs name.
        attr: &'static str,
    },
    /// An attribute is not allowed in this transition.
    #[error("attribute {attr} is not allowed in QP transition {from:?} -> {to:?}")]
    UnexpectedAttribute {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// The attribute's ibverbs name.
        attr: &'static str,
    },
    /// An attribute value is out of range.
    #[error("invalid value for QP attribute {attr}")]
    InvalidValue {
        /// The attribute's ibverbs name.
        attr: &'static str,
    },
    /// No QP with this number.
    #[error("no such QP")]
    NoSuchQp,
}

/// Attributes named by the transition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    AccessFlags,
    PkeyIndex,
    Port,
    Qkey,
    PathMtu,
    Av,
    DestQpn,
    RqPsn,
    MaxDestRdAtomic,
    MinRnrTimer,
    SqPsn,
    Timeout,
    RetryCnt,
    RnrRetry,
    MaxRdAtomic,
}

impl Field {
    const ALL: [Field; 15] = [
        Field::AccessFlags,
        Field::PkeyIndex,
        Field::Port,
        Field::Qkey,
        Field::PathMtu,
        Field::Av,
        Field::DestQpn,
        Field::RqPsn,
        Field::MaxDestRdAtomic,
        Field::MinRnrTimer,
        Field::SqPsn,
        Field::Timeout,
        Field::RetryCnt,
        Field::RnrRetry,
        Field::MaxRdAtomic,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::AccessFlags => "qp_access_flags",
            Field::PkeyIndex => "pkey_index",
            Field::Port => "port_num",
            Field::Qkey => "qkey",
            Field::PathMtu => "path_mtu",
            Field::Av => "ah_attr",
            Field::DestQpn => "dest_qp_num",
            Field::RqPsn => "rq_psn",
            Field::MaxDestRdAtomic => "max_dest_rd_atomic",
            Field::MinRnrTimer => "min_rnr_timer",
            Field::SqPsn => "sq_psn",
            Field::Timeout => "timeout",
            Field::RetryCnt => "retry_cnt",
            Field::RnrRetry => "rnr_retry",
            Field::MaxRdAtomic => "max_rd_atomic",
        }
    }

    fn given(self, a: &QpAttr) -> bool {
        match self {
            Field::AccessFlags => a.qp_access_flags.is_some(),
            Field::PkeyIndex => a.pkey_index.is_some(),
            Field::Port => a.port_num.is_some(),
            Field::Qkey => a.qkey.is_some(),
            Field::PathMtu => a.path_mtu.is_some(),
            Field::Av => a.ah_attr.is_some(),
            Field::DestQpn => a.dest_qp_num.is_some(),
            Field::RqPsn => a.rq_psn.is_some(),
            Field::MaxDestRdAtomic => a.max_dest_rd_atomic.is_some(),
            Field::MinRnrTimer => a.min_rnr_timer.is_some(),
            Field::SqPsn => a.sq_psn.is_some(),
            Field::Timeout => a.timeout.is_some(),
            Field::RetryCnt => a.retry_cnt.is_some(),
            Field::RnrRetry => a.rnr_retry.is_some(),
            Field::MaxRdAtomic => a.max_rd_atomic.is_some(),
        }
    }
}

/// Required and optional attributes of one transition.
type FieldRule = (&'static [Field], &'static [Field]);

/// Required and optional attributes of a transition, per QP type (IBTA 11.2.4.2 / the
/// `qp_state_table` of the Linux RDMA core). `None` means the transition is illegal.
fn transition_fields(qp_type: QpType, from: QpState, to: QpState) -> Option<FieldRule> {
    use Field::*;
    use QpState::*;
    const NONE: &[Field] = &[];
    let (rc_uc, ud): (FieldRule, FieldRule) = match (from, to) {
        (_, Reset) | (_, Err) => ((NONE, NONE), (NONE, NONE)),
        (Reset, Init) => (
            (&[PkeyIndex, Port, AccessFlags], NONE),
            (&[PkeyIndex, Port, Qkey], NONE),
        ),
        (Init, Init) => (
            (NONE, &[PkeyIndex, Port, AccessFlags]),
            (NONE, &[PkeyIndex, Port, Qkey]),
        ),
        (Init, Rtr) => (
            (
                &[Av, PathMtu, DestQpn, RqPsn, MaxDestRdAtomic, MinRnrTimer],
                &[AccessFlags, PkeyIndex],
            ),
            (NONE, &[PkeyIndex, Qkey]),
        ),
        (Rtr, Rts) => (
            (
                &[SqPsn, Timeout, RetryCnt, RnrRetry, MaxRdAtomic],
                &[AccessFlags, MinRnrTimer],
            ),
            (&[SqPsn], &[Qkey]),
        ),
        (Rts, Rts) | (Sqe, Rts) => (
            (
                NONE,
                &[AccessFlags, MinRnrTimer, Timeout, RetryCnt, RnrRetry],
            ),
            (NONE, &[Qkey]),
        ),
        (Rts, Sqd) => ((NONE, NONE), (NONE, NONE)),
        (Sqd, Rts) => (
            (
                NONE,
                &[AccessFlags, MinRnrTimer, Timeout, RetryCnt, RnrRetry],
            ),
            (NONE, &[Qkey]),
        ),
        (Sqd, Sqd) => (
            (
                NONE,
                &[
                    Av,
                    AccessFlags,
                    MinRnrTimer,
                    Timeout,
                    RetryCnt,
                    RnrRetry,
                    MaxRdAtomic,
                    MaxDestRdAtomic,
                    PathMtu,
                ],
            ),
            (NONE, &[PkeyIndex, Qkey]),
        ),
        _ => return None,
    };
    // RC has no Q_Key; UC has no READ/atomic or ACK-timer attributes; an XRC initiator has
    // no responder, an XRC target no requester.
    match qp_type {
        QpType::Rc => Some(rc_uc),
        QpType::Ud => Some(ud),
        QpType::Uc => Some(uc_filter(from, to).unwrap_or(rc_uc)),
        QpType::XrcIni | QpType::XrcTgt => Some(xrc_filter(qp_type, from, to).unwrap_or(rc_uc)),
    }
}

/// The XRC types' differences from RC (the Linux RDMA core's `qp_state_table`): an initiator
/// needs no responder attributes to reach RTR, a target no retry counts or READ credit to
/// reach RTS. What they do not need they may still be given (rdma-core's tests move both
/// with RC's attribute sets), and it is kept, unused.
fn xrc_filter(qp_type: QpType, from: QpState, to: QpState) -> Option<FieldRule> {
    use Field::*;
    use QpState::*;
    Some(match (qp_type, from, to) {
        (QpType::XrcIni, Init, Rtr) => (
            &[Av, PathMtu, DestQpn, RqPsn],
            &[AccessFlags, PkeyIndex, MaxDestRdAtomic, MinRnrTimer],
        ),
        (QpType::XrcTgt, Rtr, Rts) => (
            &[SqPsn, Timeout],
            &[AccessFlags, MinRnrTimer, RetryCnt, RnrRetry, MaxRdAtomic],
        ),
        _ => return None,
    })
}

/// UC differs from RC only in leaving out the attributes of reliability and READ/atomics.
fn uc_filter(from: QpState, to: QpState) -> Option<FieldRule> {
    use Field::*;
    use QpState::*;
    const NONE: &[Field] = &[];
    Some(match (from, to) {
        (Init, Rtr) => (&[Av, PathMtu, DestQpn, RqPsn], &[AccessFlags, PkeyIndex]),
        (Rtr, Rts) => (&[SqPsn], &[AccessFlags]),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (NONE, &[AccessFlags]),
        _ => return None,
    })
}

/// Validates `attr` for a transition of a `qp_type` QP from `from`, and returns the target
/// state. Pure: the caller applies the attributes only when this succeeds.
pub(crate) fn validate(
    qp_type: QpType,
    from: QpState,
    attr: &QpAttr,
) -> Result<QpState, ModifyQpError> {
    let to = attr.qp_state.unwrap_or(from);
    let (required, optional) = transition_fields(qp_type, from, to)
        .ok_or(ModifyQpError::IllegalTransition { from, to })?;
    for f in required {
        if !f.given(attr) {
            return Err(ModifyQpError::MissingAttribute {
                from,
                to,
                attr: f.name(),
            });
        }
    }
    for f in Field::ALL {
        if f.given(attr) && !required.contains(&f) && !optional.contains(&f) {
            return Err(ModifyQpError::UnexpectedAttribute {
                from,
                to,
                attr: f.name(),
            });
        }
    }
    let bad = |attr| Err(ModifyQpError::InvalidValue { attr });
    if attr.pkey_index.is_some_and(|i| i != 0) {
        return bad("pkey_index");
    }
    if attr.port_num.is_some_and(|p| p != 1) {
        return bad("port_num");
    }
    if attr.timeout.is_some_and(|t| t > 31) {
        return bad("timeout");
    }
    if attr.retry_cnt.is_some_and(|r| r > 7) {
        return bad("retry_cnt");
    }
    if attr.rnr_retry.is_some_and(|r| r > 7) {
        return bad("rnr_retry");
    }
    if attr.min_rnr_timer.is_some_and(|r| r > 31) {
        return bad("min_rnr_timer");
    }
    if attr
        .dest_qp_num
        .is_some_and(|q| q > softrdma_wire::QPN_MASK)
    {
        return bad("dest_qp_num");
    }
    if attr.max_rd_atomic.is_some_and(|r| r > crate::MAX_RD_ATOMIC) {
        return bad("max_rd_atomic");
    }
    if attr
        .max_dest_rd_atomic
        .is_some_and(|r| r > crate::MAX_RD_ATOMIC)
    {
        return bad("max_dest_rd_atomic");
    }
    Ok(to)
}

impl QpConfig {
    /// Applies the given attributes.
    pub(crate) fn apply(&mut self, a: &QpAttr) {
        if let Some(v) = a.qp_access_flags {
            self.access = v;
        }
        if let Some(v) = a.qkey {
            self.qkey = v;
        }
        if let Some(v) = a.path_mtu {
            self.path_mtu = v;
        }
        if let Some(v) = a.ah_attr {
            self.av = Some(v);
        }
        if let Some(v) = a.dest_qp_num {
            self.dest_qpn = v;
        }
        if let Some(v) = a.rq_psn {
            self.rq_psn = v;
        }
        if let Some(v) = a.max_dest_rd_atomic {
            self.max_dest_rd_atomic = v;
        }
        if let Some(v) = a.min_rnr_timer {
            self.min_rnr_timer = v;
        }
        if let Some(v) = a.sq_psn {
            self.sq_psn = v;
        }
        if let Some(v) = a.timeout {
            self.timeout = v;
        }
        if let Some(v) = a.retry_cnt {
            self.retry_cnt = v;
        }
        if let Some(v) = a.rnr_retry {
            self.rnr_retry = v;
        }
        if let Some(v) = a.max_rd_atomic {
            self.max_rd_atomic = v;
        }
    }

    /// The local ACK timeout as a duration (`None` = infinite, timeout 0).
    pub fn ack_timeout(&self) -> Option<core::time::Duration> {
        if self.timeout == 0 {
            None
        } else {
            Some(core::time::Duration::from_nanos(4096u64 << self.timeout))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_attr() -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(AccessFlags::all()),
            ..Default::default()
        }
    }

    #[test]
    fn test_rc_transitions() {
        assert_eq!(
            validate(QpType::Rc, QpState::Reset, &init_attr()),
            Ok(QpState::Init)
        );
        let rtr = QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        };
        assert_eq!(
            validate(QpType::Rc, QpState::Init, &rtr),
            Err(ModifyQpError::MissingAttribute {
                from: QpState::Init,
                to: QpState::Rtr,
                attr: "ah_attr"
            })
        );
        let rts = QpAttr {
            qp_state: Some(QpState::Rts),
            ..Default::default()
        };
        assert_eq!(
            validate(QpType::Rc, QpState::Init, &rts),
            Err(ModifyQpError::IllegalTransition {
                from: QpState::Init,
                to: QpState::Rts
            })
        );
        let mut bad = init_attr();
        bad.sq_psn = Some(Psn::ZERO);
        assert!(matches!(
            validate(QpType::Rc, QpState::Reset, &bad),
            Err(ModifyQpError::UnexpectedAttribute { attr: "sq_psn", .. })
        ));
        let err = QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        };
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Err,
        ] {
            assert_eq!(validate(QpType::Rc, s, &err), Ok(QpState::Err));
        }
        let mut retry = init_attr();
        retry.port_num = Some(2);
        assert_eq!(
            validate(QpType::Rc, QpState::Reset, &retry),
            Err(ModifyQpError::InvalidValue { attr: "port_num" })
        );
    }

    #[test]
    fn test_ack_timeout() {
        let mut c = QpConfig::default();
        assert_eq!(c.ack_timeout(), None);
        c.timeout = 14;
        assert_eq!(
            c.ack_timeout(),
            Some(core::time::Duration::from_nanos(4096 << 14))
        );
    }
}
