//! The NVMe-oF RDMA transport (NVMe-oF 1.1 chapter 7) of the target, over softrdma's verbs
//! and rdma_cm: one listening rdma_cm id accepts a connection per queue (admin or I/O) with
//! the transport's private data; each queue is an RC QP whose receives take command capsules
//! (a 64-byte command, then in-capsule data) and whose sends carry 16-byte response capsules.
//! Data described by a keyed SGL is pulled from the host with RDMA READ (writes) or pushed
//! with RDMA WRITE ahead of the response (reads); a host that asks for its key's invalidation
//! gets its response as SEND with Invalidate, as nvmet-rdma does.
//!
//! [`Target`] runs the listener and one thread per queue; [`map_sgl`] is the transport's
//! decision about a command's data, kept pure so it is tested without a network.

mod pool;
mod queue;
mod sgl;
mod stats;
mod target;

pub use sgl::{map_sgl, DataPlan};
pub use stats::TargetStats;
pub use target::{Target, TargetConfig, TargetError, NVMF_PORT};
