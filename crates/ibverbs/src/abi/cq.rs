//! The extended CQ (`ibv_create_cq_ex`, `ibv_start_poll` and the `ibv_wc_read_*` inlines):
//! a table of its own that programs jump through, apart from the context's.

use std::ffi::{c_int, c_void};

use super::context::{ibv_comp_channel, ibv_cq, ibv_pd};
use super::device::Slot;

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub(crate) struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

type CqExFn<R> = unsafe extern "C" fn(*mut ibv_cq_ex) -> R;

/// `struct ibv_cq_ex`: `ibv_cq` followed by the extended polling API.
#[repr(C)]
pub(crate) struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<CqExFn<c_int>>,
    pub end_poll: Option<CqExFn<()>>,
    pub read_opcode: Option<CqExFn<c_int>>,
    pub read_vendor_err: Option<CqExFn<u32>>,
    pub read_byte_len: Option<CqExFn<u32>>,
    pub read_imm_data: Option<CqExFn<u32>>,
    pub read_qp_num: Option<CqExFn<u32>>,
    pub read_src_qp: Option<CqExFn<u32>>,
    pub read_wc_flags: Option<CqExFn<u32>>,
    pub read_slid: Option<CqExFn<u32>>,
    pub read_sl: Option<CqExFn<u8>>,
    pub read_dlid_path_bits: Option<CqExFn<u8>>,
    pub read_completion_ts: Option<CqExFn<u64>>,
    pub read_cvlan: Slot,
    pub read_flow_tag: Slot,
    pub read_tm_info: Slot,
    pub read_completion_wallclock_ns: Option<CqExFn<u64>>,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub(crate) struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

pub(crate) const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
pub(crate) const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
pub(crate) const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
pub(crate) const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
pub(crate) const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
pub(crate) const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
pub(crate) const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
pub(crate) const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
pub(crate) const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
/// `IBV_WC_STANDARD_FLAGS`: the fields every completion has.
pub(crate) const IBV_WC_STANDARD_FLAGS: u64 = IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS;
/// `IBV_CREATE_CQ_SUP_WC_FLAGS`: every flag the header knows (12 bits).
pub(crate) const IBV_CREATE_CQ_SUP_WC_FLAGS: u64 = (1 << 12) - 1;
pub(crate) const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
pub(crate) const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
pub(crate) const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
pub(crate) const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;
