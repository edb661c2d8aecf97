//! Handles the consumer holds: a connection and a listening service.

/// A connection (Linux's `ib_cm_id`). Handles are never reused.
///
/// Named for its layer: rdma_cm's id is [`crate::rdma::RdmaId`], and librdmacm's
/// `rdma_cm_id` is `softrdma_rdmacm::CmId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IbCmId(pub(crate) u64);

/// A listening service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenId(pub(crate) u64);
