//! The QP state machine (IBTA 10.3, ibverbs `ibv_modify_qp`): which attributes each
//! transition requires and allows, the check of a `modify_qp` before anything changes, and
//! the application of the attributes after.

use super::attr::{QpAttr, QpConfig, QpState, QpType};

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
    use crate::access::AccessFlags;
    use softrdma_wire::Psn;

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
