//! The device's limits (rxe's values where softrdma has none of its own), checked by the
//! objects that enforce them and reported by `Device::query_device`.

/// Largest message one work request may move (rxe's `max_msg_sz`, 8 MiB).
pub const MAX_MSG_SZ: u32 = 0x80_0000;
/// Most scatter/gather elements per work request (rxe's `max_sge`).
pub const MAX_SGE: u32 = 32;
/// Most entries of one completion queue: mlx5's `max_cqe`, not rxe's 32 767. Entries take
/// memory only as completions wait, so the bound costs nothing, and libfabric's `ofi_rxm`
/// sizes its CQ as (receive + send queue) × universe size (98 560 with its defaults), which
/// rxe's bound refuses.
pub const MAX_CQE: u32 = 0x3f_ffff;
/// Most outstanding work requests per queue (rxe's `max_qp_wr`).
pub const MAX_QP_WR: u32 = 1 << 20;
/// Most work requests one shared receive queue holds (rxe's `max_srq_wr`).
pub(crate) const MAX_SRQ_WR: u32 = 1 << 20;
/// Most shared receive queues (rxe's `max_srq`).
pub(crate) const MAX_SRQ: u32 = 917_503;
/// Most SGEs per shared receive queue work request (rxe's `max_srq_sge`).
pub(crate) const MAX_SRQ_SGE: u32 = 27;
/// Most inline payload bytes per send WR.
pub const MAX_INLINE_DATA: u32 = 256;
