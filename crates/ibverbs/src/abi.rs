//! The C types of rdma-core 44's `<infiniband/verbs.h>` that cross the library boundary,
//! written from the header's semantics as `#[repr(C)]` Rust (x86-64 / LP64 layout). Field
//! order and types must match the header exactly: programs read these structs and jump
//! through their function tables directly (the inline verbs). `tests/layout.rs` compiles a C
//! program against the system header and compares every size and offset listed in
//! [`crate::layout`] with it.
//!
//! Function-pointer slots softrdma does not fill are `Option<unsafe extern "C" fn()>`: the same
//! size, null when `None`, which is what the header's inline wrappers test before calling.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// A slot of a function table softrdma leaves empty (null).
pub(crate) type Slot = Option<unsafe extern "C" fn()>;

/// `union ibv_gid`: 16 bytes (a GID, on RoCEv2 an IPv6 address), 8-byte aligned because the
/// union's other member is two `__be64`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct _ibv_device_ops` (obsolete, never used, present for layout).
#[repr(C)]
pub(crate) struct ibv_device_ops_compat {
    pub _dummy1: Slot,
    pub _dummy2: Slot,
}

pub(crate) const IBV_SYSFS_NAME_MAX: usize = 64;
pub(crate) const IBV_SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`.
#[repr(C)]
pub(crate) struct ibv_device {
    pub _ops: ibv_device_ops_compat,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

pub(crate) type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw;
pub(crate) type BindMwFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
pub(crate) type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;
pub(crate) type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub(crate) type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub(crate) type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub(crate) type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub(crate) type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub(crate) type QueryDeviceFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
pub(crate) type QueryPortCompatFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;

/// `struct ibv_context_ops`: the table the inline `ibv_poll_cq`, `ibv_req_notify_cq`,
/// `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv` and the memory-window inlines
/// jump through.
#[repr(C)]
pub(crate) struct ibv_context_ops {
    pub _compat_query_device: Option<QueryDeviceFn>,
    pub _compat_query_port: Option<QueryPortCompatFn>,
    pub _compat_alloc_pd: Slot,
    pub _compat_dealloc_pd: Slot,
    pub _compat_reg_mr: Slot,
    pub _compat_rereg_mr: Slot,
    pub _compat_dereg_mr: Slot,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: Slot,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    pub _compat_cq_event: Slot,
    pub _compat_resize_cq: Slot,
    pub _compat_destroy_cq: Slot,
    pub _compat_create_srq: Slot,
    pub _compat_modify_srq: Slot,
    pub _compat_query_srq: Slot,
    pub _compat_destroy_srq: Slot,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: Slot,
    pub _compat_query_qp: Slot,
    pub _compat_modify_qp: Slot,
    pub _compat_destroy_qp: Slot,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: Slot,
    pub _compat_destroy_ah: Slot,
    pub _compat_attach_mcast: Slot,
    pub _compat_detach_mcast: Slot,
    pub _compat_async_event: Slot,
}

/// `struct ibv_context`.
#[repr(C)]
pub(crate) struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    /// `__VERBS_ABI_IS_EXTENDED` (all ones): a `struct verbs_context` precedes the context.
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`.
pub(crate) const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `verbs_context::advise_mr`.
pub(crate) type AllocDmFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm;
pub(crate) type FreeDmFn = unsafe extern "C" fn(*mut ibv_dm) -> c_int;
pub(crate) type RegDmMrFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, u32) -> *mut ibv_mr;
pub(crate) type MemcpyToDmFn =
    unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> c_int;
pub(crate) type MemcpyFromDmFn =
    unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> c_int;

pub(crate) type AllocTdFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td;
pub(crate) type DeallocTdFn = unsafe extern "C" fn(*mut ibv_td) -> c_int;
pub(crate) type AllocParentDomainFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;

pub(crate) type AdviseMrFn =
    unsafe extern "C" fn(*mut ibv_pd, u32, u32, *mut ibv_sge, u32) -> c_int;

pub(crate) type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub(crate) type QueryRtValuesFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int;
pub(crate) type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
pub(crate) type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;
pub(crate) type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
pub(crate) type OpenQpFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp;
pub(crate) type GetSrqNumFn = unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int;
pub(crate) type CreateSrqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
pub(crate) type OpenXrcdFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
pub(crate) type CloseXrcdFn = unsafe extern "C" fn(*mut ibv_xrcd) -> c_int;

/// `struct verbs_context`: the extended table, which lives in memory right *before* the
/// `ibv_context` (`verbs_get_ctx` subtracts the offset of `context`). New members grow
/// upwards, so `sz` tells how much of it exists; the inlines check `sz` and the slot.
#[repr(C)]
pub(crate) struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    pub advise_mr: Option<AdviseMrFn>,
    pub alloc_null_mr: Slot,
    pub read_counters: Slot,
    pub attach_counters_point_flow: Slot,
    pub create_counters: Slot,
    pub destroy_counters: Slot,
    pub reg_dm_mr: Option<RegDmMrFn>,
    pub alloc_dm: Option<AllocDmFn>,
    pub free_dm: Option<FreeDmFn>,
    pub modify_flow_action_esp: Slot,
    pub destroy_flow_action: Slot,
    pub create_flow_action_esp: Slot,
    pub modify_qp_rate_limit: Slot,
    pub alloc_parent_domain: Option<AllocParentDomainFn>,
    pub dealloc_td: Option<DeallocTdFn>,
    pub alloc_td: Option<AllocTdFn>,
    pub modify_cq: Slot,
    pub post_srq_ops: Slot,
    pub destroy_rwq_ind_table: Slot,
    pub create_rwq_ind_table: Slot,
    pub destroy_wq: Slot,
    pub modify_wq: Slot,
    pub create_wq: Slot,
    pub query_rt_values: Option<QueryRtValuesFn>,
    pub create_cq_ex: Option<CreateCqExFn>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: Slot,
    pub abi_placeholder2: Slot,
    pub ibv_create_flow: Slot,
    pub abi_placeholder1: Slot,
    pub open_qp: Option<OpenQpFn>,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Option<GetSrqNumFn>,
    pub create_srq_ex: Option<CreateSrqExFn>,
    pub open_xrcd: Option<OpenXrcdFn>,
    pub close_xrcd: Option<CloseXrcdFn>,
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
pub(crate) struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_odp_caps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_device_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `struct ibv_tso_caps { max_tso, supported_qpts }`.
    pub tso_caps: [u32; 2],
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    /// `struct ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }`.
    pub packet_pacing_caps: [u32; 3],
    pub raw_packet_caps: u32,
    /// `struct ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }`.
    pub tm_caps: [u32; 5],
    /// `struct ibv_cq_moderation_caps { max_cq_count, max_cq_period }`.
    pub cq_mod_caps: [u16; 2],
    pub max_dm_size: u64,
    /// `struct ibv_pci_atomic_caps { fetch_add, swap, compare_swap }`.
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// Size of `struct _compat_ibv_port_attr`, what the exported `ibv_query_port` symbol fills
/// (the port attributes without `port_cap_flags2`).
pub(crate) const COMPAT_PORT_ATTR_SIZE: usize = 48;

/// `struct ibv_values_ex` (`ibv_query_rt_values_ex`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

/// `IBV_VALUES_MASK_RAW_CLOCK`: the one value `ibv_values_ex` has.
pub(crate) const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_pd`.
#[repr(C)]
pub(crate) struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub(crate) struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub(crate) struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq` (the first part of `struct ibv_cq_ex`).
#[repr(C)]
pub(crate) struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

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

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
pub(crate) struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

/// `struct ibv_dm`: device memory, with the functions the inline copies call.
#[repr(C)]
pub(crate) struct ibv_dm {
    pub context: *mut ibv_context,
    pub memcpy_to_dm: Option<MemcpyToDmFn>,
    pub memcpy_from_dm: Option<MemcpyFromDmFn>,
    pub comp_mask: u32,
    pub handle: u32,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
pub(crate) struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_td`: a thread domain.
#[repr(C)]
pub(crate) struct ibv_td {
    pub context: *mut ibv_context,
}

/// `ibv_parent_domain_init_attr.comp_mask` bits.
pub(crate) const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1 << 0;
pub(crate) const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;

/// A parent domain's allocator, and its free.
pub(crate) type PdAllocFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void;
pub(crate) type PdFreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
pub(crate) struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Option<PdAllocFn>,
    pub free: Option<PdFreeFn>,
    pub pd_context: *mut c_void,
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

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network order) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union send_wr_wr {
    pub rdma: wr_rdma,
    pub atomic: wr_atomic,
    pub ud: wr_ud,
}

/// `struct ibv_mw`.
#[repr(C)]
pub(crate) struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: c_int,
}

/// `struct ibv_mw_bind` (what `ibv_bind_mw` takes).
#[repr(C)]
pub(crate) struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: ibv_mw_bind_info,
}

pub(crate) const IBV_MW_TYPE_1: c_int = 1;
pub(crate) const IBV_MW_TYPE_2: c_int = 2;

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// `bind_mw` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct wr_bind_mw {
    pub mw: *mut c_void,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `tso` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The last union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union send_wr_ext {
    pub bind_mw: wr_bind_mw,
    pub tso: wr_tso,
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub(crate) struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    /// `imm_data` (network order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    pub ext: send_wr_ext,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub(crate) struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

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

/// `struct ibv_qp`.
#[repr(C)]
pub(crate) struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
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

/// `struct ibv_srq` (opaque to softrdma until shared receive queues exist; layout only).
#[repr(C)]
pub(crate) struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
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

/// `struct ibv_ah`.
#[repr(C)]
pub(crate) struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_async_event`.
#[repr(C)]
pub(crate) struct ibv_async_event {
    /// The `element` union: a CQ, QP, SRQ or WQ pointer, or a port number.
    pub element: *mut c_void,
    pub event_type: c_int,
}

/// `struct ibv_ece`.
#[repr(C)]
pub(crate) struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct ibv_grh`.
#[repr(C)]
pub(crate) struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`).
#[repr(C)]
pub(crate) struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_user_path_rec` (`<rdma/ib_user_sa.h>`, the kernel's form).
#[repr(C)]
pub(crate) struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_uverbs_global_route` + `struct ib_uverbs_ah_attr` (`<rdma/ib_user_verbs.h>`).
#[repr(C)]
pub(crate) struct ib_uverbs_ah_attr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved_grh: u8,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr`.
#[repr(C)]
pub(crate) struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
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
    pub reserved: [u8; 5],
}

// Enumerations and flags (values from the header).
pub(crate) const IBV_NODE_CA: c_int = 1;
pub(crate) const IBV_TRANSPORT_IB: c_int = 0;
pub(crate) const IBV_PORT_ACTIVE: c_int = 4;
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub(crate) const IBV_QPF_GRH_REQUIRED: u8 = 1;
pub(crate) const IBV_GID_TYPE_ROCE_V2: u32 = 2;
pub(crate) const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: c_int = 0;
pub(crate) const IBV_GID_TYPE_SYSFS_ROCE_V2: c_int = 1;
pub(crate) const IBV_ATOMIC_NONE: c_int = 0;
pub(crate) const IBV_ATOMIC_HCA: c_int = 1;
pub(crate) const IBV_ATOMIC_GLOB: c_int = 2;

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

pub(crate) const IBV_WR_RDMA_WRITE: c_int = 0;
pub(crate) const IBV_WR_RDMA_WRITE_WITH_IMM: c_int = 1;
pub(crate) const IBV_WR_SEND: c_int = 2;
pub(crate) const IBV_WR_SEND_WITH_IMM: c_int = 3;
pub(crate) const IBV_WR_RDMA_READ: c_int = 4;
pub(crate) const IBV_WR_ATOMIC_CMP_AND_SWP: c_int = 5;
pub(crate) const IBV_WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
pub(crate) const IBV_WR_LOCAL_INV: c_int = 7;
pub(crate) const IBV_WR_BIND_MW: c_int = 8;
pub(crate) const IBV_WR_SEND_WITH_INV: c_int = 9;
pub(crate) const IBV_WR_ATOMIC_WRITE: c_int = 15;

pub(crate) const IBV_SEND_FENCE: u32 = 1 << 0;
pub(crate) const IBV_SEND_SIGNALED: u32 = 1 << 1;
pub(crate) const IBV_SEND_SOLICITED: u32 = 1 << 2;
pub(crate) const IBV_SEND_INLINE: u32 = 1 << 3;
pub(crate) const IBV_SEND_IP_CSUM: u32 = 1 << 4;

pub(crate) const IBV_WC_GRH: u32 = 1 << 0;
pub(crate) const IBV_WC_WITH_IMM: u32 = 1 << 1;
pub(crate) const IBV_WC_WITH_INV: u32 = 1 << 3;

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

pub(crate) const IBV_ACCESS_MW_BIND: u32 = 1 << 4;
pub(crate) const IBV_ACCESS_ZERO_BASED: u32 = 1 << 5;
pub(crate) const IBV_ACCESS_ON_DEMAND: u32 = 1 << 6;
pub(crate) const IBV_ACCESS_HUGETLB: u32 = 1 << 7;
/// `IBV_ACCESS_OPTIONAL_RANGE`: bits 20..=29, hints a device may ignore.
pub(crate) const IBV_ACCESS_OPTIONAL_RANGE: u32 = ((1 << 29) << 1) - (1 << 20);

pub(crate) const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1 << 0;
pub(crate) const IBV_REREG_MR_CHANGE_PD: c_int = 1 << 1;
pub(crate) const IBV_REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
pub(crate) const IBV_REREG_MR_ERR_INPUT: c_int = -1;

pub(crate) const IBV_EVENT_CQ_ERR: c_int = 0;
pub(crate) const IBV_EVENT_QP_FATAL: c_int = 1;
pub(crate) const IBV_EVENT_QP_REQ_ERR: c_int = 2;
pub(crate) const IBV_EVENT_QP_ACCESS_ERR: c_int = 3;
pub(crate) const IBV_EVENT_PORT_ACTIVE: c_int = 9;
pub(crate) const IBV_EVENT_PORT_ERR: c_int = 10;
pub(crate) const IBV_EVENT_SRQ_LIMIT_REACHED: c_int = 15;
pub(crate) const IBV_EVENT_QP_LAST_WQE_REACHED: c_int = 16;

pub(crate) const IBV_FORK_UNNEEDED: c_int = 2;
