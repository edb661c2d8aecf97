//! Handles the consumer holds: a connection and a listening service.

/// A connection (Linux's `ib_cm_id`). Handles are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CmId(pub(crate) u64);

/// A listening service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenId(pub(crate) u64);
