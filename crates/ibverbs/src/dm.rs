//! Device memory: `ibv_alloc_dm`, `ibv_free_dm`, `ibv_reg_dm_mr` (behind their inline
//! wrappers, through `verbs_context`) and the `memcpy_to_dm`/`memcpy_from_dm` functions of
//! each `ibv_dm` (behind `ibv_memcpy_to_dm`/`ibv_memcpy_from_dm`), over softrdma's
//! [`DeviceMemory`] (see its docs for what the memory is).
//!
//! The errnos are mlx5's: an allocation with `comp_mask` bits or an alignment above a page
//! is `EINVAL`, one of no bytes or more than the device has left `ENOMEM`; a copy at an offset
//! or of a length that is not a multiple of 4 `EINVAL`, outside the allocation `EFAULT`; a
//! region without `IBV_ACCESS_ZERO_BASED` or beyond the allocation `EINVAL`;
//! `ibv_free_dm` `EBUSY` while regions on it exist.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use softrdma::{AllocDmError, DeviceMemory, DmCopyError};

use crate::abi::*;
use crate::context::Context;
use crate::pd::{access_flags, Mr, Pd};
use crate::util::{creating_user, fail_errno, fail_null, is_live, register, take_unused, Kind};

/// Device memory: the C struct first, then softrdma's handle and how many regions use it.
#[repr(C)]
pub(crate) struct Dm {
    pub ibv: ibv_dm,
    pub dm: DeviceMemory,
    pub users: AtomicUsize,
}

impl Dm {
    fn from_handle<'a>(dm: *mut ibv_dm) -> Result<&'a Dm, c_int> {
        if !is_live(dm, Kind::Dm) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live DM handles are boxed `Dm`s (the ibv_dm first) until ibv_free_dm.
        Ok(unsafe { &*dm.cast::<Dm>() })
    }
}

fn copy_errno(e: &DmCopyError) -> c_int {
    match e {
        DmCopyError::Unaligned { .. } => libc::EINVAL,
        DmCopyError::OutOfBounds { .. } => libc::EFAULT,
    }
}

/// `verbs_context.alloc_dm` (the inline `ibv_alloc_dm`).
pub(crate) unsafe extern "C" fn alloc_dm(
    context: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_null(e),
    };
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable attributes.
    let a = unsafe { &*attr };
    if a.comp_mask != 0 {
        return fail_null(libc::EINVAL);
    }
    let dm = match ctx.device.alloc_dm(a.length, a.log_align_req) {
        Ok(dm) => dm,
        Err(AllocDmError::NoSpace { .. }) => return fail_null(libc::ENOMEM),
        Err(AllocDmError::Alignment(_)) => return fail_null(libc::EINVAL),
    };
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let d = Box::into_raw(Box::new(Dm {
        ibv: ibv_dm {
            context,
            memcpy_to_dm: Some(memcpy_to_dm),
            memcpy_from_dm: Some(memcpy_from_dm),
            comp_mask: 0,
            handle: NEXT.fetch_add(1, Ordering::Relaxed),
        },
        dm,
        users: AtomicUsize::new(0),
    }))
    .cast::<ibv_dm>();
    register(d, Kind::Dm, context);
    d
}

/// `verbs_context.free_dm` (the inline `ibv_free_dm`): 0 or the errno; `EBUSY` while regions
/// on it exist.
pub(crate) unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    // SAFETY: live DM handles are boxed `Dm`s.
    match unsafe { take_unused(dm, Kind::Dm, |d: &Dm| d.users.load(Ordering::Acquire)) } {
        Ok(_) => 0,
        Err(e) => fail_errno(e),
    }
}

/// The device memory and offset a copy names, or the errno; `host_ok`: the program's buffer
/// is there (not NULL, or nothing to copy).
fn copy_target<'a>(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_ok: bool,
) -> Result<(&'a Dm, usize), c_int> {
    let d = Dm::from_handle(dm)?;
    let offset = usize::try_from(dm_offset).map_err(|_| libc::EFAULT)?;
    if !host_ok {
        return Err(libc::EINVAL);
    }
    Ok((d, offset))
}

/// `ibv_dm.memcpy_to_dm` (the inline `ibv_memcpy_to_dm`): 0 or the errno.
unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    let (d, offset) = match copy_target(dm, dm_offset, !host_addr.is_null() || length == 0) {
        Ok(t) => t,
        Err(e) => return fail_errno(e),
    };
    let data = if length == 0 {
        &[][..]
    } else {
        // SAFETY: the caller passes `length` readable bytes at `host_addr`.
        unsafe { std::slice::from_raw_parts(host_addr.cast::<u8>(), length) }
    };
    match d.dm.copy_to(offset, data) {
        Ok(()) => 0,
        Err(e) => fail_errno(copy_errno(&e)),
    }
}

/// `ibv_dm.memcpy_from_dm` (the inline `ibv_memcpy_from_dm`): 0 or the errno.
unsafe extern "C" fn memcpy_from_dm(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    let (d, offset) = match copy_target(dm, dm_offset, !host_addr.is_null() || length == 0) {
        Ok(t) => t,
        Err(e) => return fail_errno(e),
    };
    let buf = if length == 0 {
        &mut [][..]
    } else {
        // SAFETY: the caller passes `length` writable bytes at `host_addr`.
        unsafe { std::slice::from_raw_parts_mut(host_addr.cast::<u8>(), length) }
    };
    match d.dm.copy_from(offset, buf) {
        Ok(()) => 0,
        Err(e) => fail_errno(copy_errno(&e)),
    }
}

/// `verbs_context.reg_dm_mr` (the inline `ibv_reg_dm_mr`): a zero-based region on `length`
/// bytes of `dm` from `dm_offset`; `addr` in the `ibv_mr` is 0, its first address.
pub(crate) unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: u32,
) -> *mut ibv_mr {
    let _users = creating_user();
    let p = match Pd::from_handle(pd) {
        Ok(p) => p,
        Err(e) => return fail_null(e),
    };
    let d = match Dm::from_handle(dm) {
        Ok(d) if d.ibv.context == p.ibv.context => d,
        Ok(_) => return fail_null(libc::EINVAL),
        Err(e) => return fail_null(e),
    };
    if access & IBV_ACCESS_ZERO_BASED == 0 || access & IBV_ACCESS_ON_DEMAND != 0 {
        return fail_null(libc::EINVAL);
    }
    let flags = match access_flags(access) {
        Ok(f) => f,
        Err(e) => return fail_null(e),
    };
    let Ok(offset) = usize::try_from(dm_offset) else {
        return fail_null(libc::EINVAL);
    };
    let mr = match p.pd.reg_dm_mr(&d.dm, offset, length, flags) {
        Ok(m) => m,
        Err(_) => return fail_null(libc::EINVAL),
    };
    Mr::hand_out(p, pd, mr, std::ptr::null_mut(), length, false, &d.users)
}
