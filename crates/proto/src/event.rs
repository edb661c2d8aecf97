//! Asynchronous events (ibverbs `ibv_get_async_event`): what the device reports outside any
//! completion, because no work request is there to carry it.

use crate::cq::CqHandle;
use crate::srq::SrqHandle;

/// An asynchronous event (ibverbs `ibv_event_type`), with the object it concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// A completion did not fit its CQ (`IBV_EVENT_CQ_ERR`); the QP that produced it is now
    /// in the error state, as on rxe.
    CqError(CqHandle),
    /// A QP broke down without a work request to report it on (`IBV_EVENT_QP_FATAL`).
    QpFatal(u32),
    /// An incoming request was invalid and moved the responder QP to the error state
    /// (`IBV_EVENT_QP_REQ_ERR`, IBTA's "invalid request local work queue error").
    QpRequestError(u32),
    /// An incoming request violated access rights and moved the responder QP to the error
    /// state (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessError(u32),
    /// A QP attached to an SRQ entered the error state and will take no further receive
    /// WQE from it (`IBV_EVENT_QP_LAST_WQE_REACHED`): its in-progress WQE has completed.
    QpLastWqeReached(u32),
    /// An SRQ's WQE count dropped below its armed limit (`IBV_EVENT_SRQ_LIMIT_REACHED`); the
    /// limit is disarmed until set again.
    SrqLimitReached(SrqHandle),
    /// The port became active (`IBV_EVENT_PORT_ACTIVE`): reported once when a device opens.
    PortActive,
    /// The port went down (`IBV_EVENT_PORT_ERR`): the device is closing.
    PortError,
}

impl AsyncEvent {
    /// The ibverbs name, as `ibv_event_type_str` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            AsyncEvent::CqError(_) => "CQ error",
            AsyncEvent::QpFatal(_) => "local work queue catastrophic error",
            AsyncEvent::QpRequestError(_) => "invalid request local work queue error",
            AsyncEvent::QpAccessError(_) => "local access violation work queue error",
            AsyncEvent::QpLastWqeReached(_) => "last WQE reached",
            AsyncEvent::SrqLimitReached(_) => "SRQ limit reached",
            AsyncEvent::PortActive => "port active",
            AsyncEvent::PortError => "port error",
        }
    }
}
