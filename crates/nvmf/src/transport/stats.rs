//! What a target counts: connections, capsules, errors answered, transport failures, keep
//! alive expiries.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use crate::wire::rdma_cm::RejectStatus;

/// What the target counts.
#[derive(Debug, Default)]
pub(crate) struct StatsInner {
    pub(crate) accepted: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) capsules: AtomicU64,
    pub(crate) errors_answered: AtomicU64,
    pub(crate) short_capsules: AtomicU64,
    pub(crate) fatal_errors: AtomicU64,
    pub(crate) keep_alive_expired: AtomicU64,
    pub(crate) queues_closed: AtomicU64,
    pub(crate) last_reject: Mutex<Option<RejectStatus>>,
}

/// A snapshot of the target's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Connections (queues) accepted.
    pub accepted: u64,
    /// Connect requests rejected.
    pub rejected: u64,
    /// The last rejection's status.
    pub last_reject: Option<RejectStatus>,
    /// Command capsules received.
    pub capsules: u64,
    /// Commands answered with an error status.
    pub errors_answered: u64,
    /// Capsules shorter than a command (the queue was dropped).
    pub short_capsules: u64,
    /// Queues ended by a transport error.
    pub fatal_errors: u64,
    /// Controllers ended by their keep alive timeout.
    pub keep_alive_expired: u64,
    /// Queues served and closed.
    pub queues_closed: u64,
    /// Queues being served.
    pub queues_live: u64,
}
