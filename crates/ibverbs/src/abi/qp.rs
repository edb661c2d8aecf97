//! The attributes of QPs, SRQs and XRC domains (create, open, modify), the extended QP's
//! `ibv_wr_*` builder table, and their enumerations and masks: what creating and moving a QP
//! takes, apart from the objects themselves (in `context`), which the inline verbs reach.

use std::ffi::{c_int, c_void};

use super::context::{ibv_ah, ibv_context, ibv_cq, ibv_mw, ibv_mw_bind_info, ibv_pd, ibv_qp};
use super::context::{ibv_sge, ibv_srq};
use super::device::{ibv_gid, Slot};

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub(crate) struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
pub(crate) struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
pub(crate) struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

type QpExFn<A> = A;

/// `struct ibv_data_buf`.
#[repr(C)]
pub(crate) struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_qp_ex`: `ibv_qp` followed by the `ibv_wr_*` work-request builder table.
#[repr(C)]
pub(crate) struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: Option<QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_tso: Slot,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

/// `struct ibv_tm_cap` (tag matching, which softrdma does not offer; layout only).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
pub(crate) struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

pub(crate) const IBV_SRQT_BASIC: c_int = 0;
pub(crate) const IBV_SRQT_XRC: c_int = 1;
pub(crate) const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
pub(crate) const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
pub(crate) const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
pub(crate) const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
pub(crate) const IBV_SRQ_INIT_ATTR_TM: u32 = 1 << 4;
pub(crate) const IBV_SRQ_INIT_ATTR_RESERVED: u32 = 1 << 5;

/// `struct ibv_xrcd`.
#[repr(C)]
pub(crate) struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
pub(crate) struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

pub(crate) const IBV_XRCD_INIT_ATTR_FD: u32 = 1 << 0;
pub(crate) const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
pub(crate) const IBV_XRCD_INIT_ATTR_RESERVED: u32 = 1 << 2;

/// `struct ibv_qp_open_attr`.
#[repr(C)]
pub(crate) struct ibv_qp_open_attr {
    pub comp_mask: u32,
    pub qp_num: u32,
    pub xrcd: *mut ibv_xrcd,
    pub qp_context: *mut c_void,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
}

pub(crate) const IBV_QP_OPEN_ATTR_NUM: u32 = 1 << 0;
pub(crate) const IBV_QP_OPEN_ATTR_XRCD: u32 = 1 << 1;
pub(crate) const IBV_QP_OPEN_ATTR_CONTEXT: u32 = 1 << 2;
pub(crate) const IBV_QP_OPEN_ATTR_TYPE: u32 = 1 << 3;
pub(crate) const IBV_QP_OPEN_ATTR_RESERVED: u32 = 1 << 4;

/// `struct ibv_srq_attr`.
#[repr(C)]
pub(crate) struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub(crate) struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_ece`.
#[repr(C)]
pub(crate) struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

pub(crate) const IBV_QPT_RC: c_int = 2;
pub(crate) const IBV_QPT_UC: c_int = 3;
pub(crate) const IBV_QPT_UD: c_int = 4;
pub(crate) const IBV_QPT_XRC_SEND: c_int = 9;
pub(crate) const IBV_QPT_XRC_RECV: c_int = 10;

pub(crate) const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
pub(crate) const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;
pub(crate) const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub(crate) const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

pub(crate) const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub(crate) const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub(crate) const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub(crate) const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub(crate) const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub(crate) const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub(crate) const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
pub(crate) const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
pub(crate) const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
pub(crate) const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
pub(crate) const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;

pub(crate) const IBV_QP_STATE: c_int = 1 << 0;
pub(crate) const IBV_QP_CUR_STATE: c_int = 1 << 1;
pub(crate) const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub(crate) const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub(crate) const IBV_QP_PORT: c_int = 1 << 5;
pub(crate) const IBV_QP_QKEY: c_int = 1 << 6;
pub(crate) const IBV_QP_AV: c_int = 1 << 7;
pub(crate) const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub(crate) const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub(crate) const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub(crate) const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub(crate) const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub(crate) const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub(crate) const IBV_QP_ALT_PATH: c_int = 1 << 14;
pub(crate) const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub(crate) const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub(crate) const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub(crate) const IBV_QP_PATH_MIG_STATE: c_int = 1 << 18;
pub(crate) const IBV_QP_CAP: c_int = 1 << 19;
pub(crate) const IBV_QP_DEST_QPN: c_int = 1 << 20;
pub(crate) const IBV_QP_RATE_LIMIT: c_int = 1 << 25;
