//! `struct verbs_context`, the extended table that precedes the context, with its functions'
//! types: it names most of the other parts (extended CQs, QPs, SRQs, XRC domains, device
//! memory, domains), so it sits above them all.

use std::ffi::{c_int, c_void};

use super::context::{ibv_context, ibv_mr, ibv_pd, ibv_qp, ibv_sge, ibv_srq};
use super::cq::{ibv_cq_ex, ibv_cq_init_attr_ex};
use super::device::{
    ibv_device_attr_ex, ibv_port_attr, ibv_query_device_ex_input, ibv_values_ex, Slot,
};
use super::memory::{
    ibv_alloc_dm_attr, ibv_dm, ibv_parent_domain_init_attr, ibv_td, ibv_td_init_attr,
};
use super::qp::{
    ibv_qp_init_attr_ex, ibv_qp_open_attr, ibv_srq_init_attr_ex, ibv_xrcd, ibv_xrcd_init_attr,
};

pub(crate) type AllocDmFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm;
pub(crate) type FreeDmFn = unsafe extern "C" fn(*mut ibv_dm) -> c_int;
pub(crate) type RegDmMrFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, usize, u32) -> *mut ibv_mr;

pub(crate) type AllocTdFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td;
pub(crate) type DeallocTdFn = unsafe extern "C" fn(*mut ibv_td) -> c_int;
pub(crate) type AllocParentDomainFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;

/// `verbs_context::advise_mr`.
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
