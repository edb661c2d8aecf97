//! The states of an IB CM connection, as IBTA and Linux name them.

use std::fmt;

/// The states of a connection (IBTA Figure 173, Linux's `enum ib_cm_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CmState {
    /// No connection (new, rejected, timed out, or after time-wait).
    Idle,
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Passive: REQ received, the consumer has not answered.
    ReqRcvd,
    /// Passive: the consumer asked for time (an MRA is sent, or armed for a duplicate REQ).
    MraReqSent,
    /// Active: the passive side asked for time; the REQ waits longer.
    MraReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, the consumer has not sent the RTU.
    RepRcvd,
    /// Active: the consumer asked for time before the RTU.
    MraRepSent,
    /// Passive: the active side asked for time; the REP waits longer.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, the consumer has not sent the DREP.
    DreqRcvd,
    /// Disconnected; stray packets of the old connection may still arrive.
    Timewait,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received, the consumer has not answered.
    SidrReqRcvd,
}

impl CmState {
    /// Linux's name, e.g. `IB_CM_REQ_SENT`.
    pub fn name(self) -> &'static str {
        match self {
            CmState::Idle => "IB_CM_IDLE",
            CmState::ReqSent => "IB_CM_REQ_SENT",
            CmState::ReqRcvd => "IB_CM_REQ_RCVD",
            CmState::MraReqSent => "IB_CM_MRA_REQ_SENT",
            CmState::MraReqRcvd => "IB_CM_MRA_REQ_RCVD",
            CmState::RepSent => "IB_CM_REP_SENT",
            CmState::RepRcvd => "IB_CM_REP_RCVD",
            CmState::MraRepSent => "IB_CM_MRA_REP_SENT",
            CmState::MraRepRcvd => "IB_CM_MRA_REP_RCVD",
            CmState::Established => "IB_CM_ESTABLISHED",
            CmState::DreqSent => "IB_CM_DREQ_SENT",
            CmState::DreqRcvd => "IB_CM_DREQ_RCVD",
            CmState::Timewait => "IB_CM_TIMEWAIT",
            CmState::SidrReqSent => "IB_CM_SIDR_REQ_SENT",
            CmState::SidrReqRcvd => "IB_CM_SIDR_REQ_RCVD",
        }
    }
}

impl fmt::Display for CmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
