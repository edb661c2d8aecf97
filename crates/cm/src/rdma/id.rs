//! The handle a consumer holds for an rdma_cm identifier.

/// An rdma_cm identifier (`struct rdma_cm_id`). Handles are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RdmaId(pub(crate) u64);
