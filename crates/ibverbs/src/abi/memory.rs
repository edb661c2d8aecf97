//! Device memory, thread and parent domains, and the memory-region access and re-registration
//! flags: what the extended context adds around protection domains and MRs.

use std::ffi::{c_int, c_void};

use super::context::{ibv_context, ibv_pd};

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
pub(crate) struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

pub(crate) type MemcpyToDmFn =
    unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, usize) -> c_int;
pub(crate) type MemcpyFromDmFn =
    unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, usize) -> c_int;

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
