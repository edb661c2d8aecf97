//! Protection domains and memory regions: `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_reg_mr`,
//! `ibv_reg_mr_iova`, `ibv_reg_mr_iova2`, `ibv_rereg_mr`, `ibv_dereg_mr`.
//!
//! The program's own memory is registered with [`ProtectionDomain::reg_mr_raw_iova`]: the
//! program promises (as with any RDMA device) that the buffer stays allocated until
//! `ibv_dereg_mr`, after which softrdma never touches it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use softrdma::{AccessFlags, MemoryRegion, ProtectionDomain, RegMrError};

use crate::abi::*;
use crate::context::Context;
use crate::util::{
    creating_user, fail_errno, fail_null, is_live, register, set_errno, take_unused, unregister,
    Kind,
};

/// A protection domain: the C struct first, then softrdma's handle and a count of the
/// objects created in it (MRs, QPs, parent domains), which must be gone before it may be
/// deallocated. A parent domain (`crate::domain`) is one too, over its protection domain's
/// softrdma handle, so every verb that takes a PD takes it.
#[repr(C)]
pub(crate) struct Pd {
    pub ibv: ibv_pd,
    pub pd: ProtectionDomain,
    pub users: AtomicUsize,
    /// For a parent domain: what it was made of, each counting it as a user.
    pub parent: Option<ParentOf>,
}

/// What a parent domain (`crate::domain`) was made of: its protection domain and thread
/// domain (by its count of users), each counting it as a user while it lives.
pub(crate) struct ParentOf {
    pub pd: *mut Pd,
    /// The thread domain's count of users, or null.
    pub td_users: *const AtomicUsize,
    /// Kept for the program's sake (`ibv_parent_domain_init_attr`); see `crate::domain`.
    pub _allocators: Option<(PdAllocFn, PdFreeFn, *mut c_void)>,
}

impl ParentOf {
    /// The parent domain is gone: its protection and thread domains may go too.
    fn release(&self) {
        // SAFETY: both stay allocated while they count the parent domain as a user
        // (their deallocation answers EBUSY until then).
        unsafe {
            (*self.pd).users.fetch_sub(1, Ordering::AcqRel);
            if let Some(td_users) = self.td_users.as_ref() {
                td_users.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Pd {
    /// The PD behind a live handle, or `EINVAL`.
    pub(crate) fn from_handle<'a>(pd: *mut ibv_pd) -> Result<&'a Pd, c_int> {
        if !is_live(pd, Kind::Pd) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live PD handles are boxed `Pd`s (the ibv_pd first) until ibv_dealloc_pd.
        Ok(unsafe { &*pd.cast::<Pd>() })
    }
}

/// A memory region; `mr` changes on `ibv_rereg_mr`.
#[repr(C)]
pub(crate) struct Mr {
    pub ibv: ibv_mr,
    pub mr: Mutex<MemoryRegion>,
    pub pd: *mut Pd,
    /// Registered with `IBV_ACCESS_ON_DEMAND`: its pages need not be there until used, and
    /// `ibv_advise_mr` may prefetch them.
    pub on_demand: bool,
    /// A region on device memory (`crate::dm`): that memory's count of users, else null.
    pub dm_users: *const AtomicUsize,
}

impl Mr {
    /// A new handle for `mr`, registered in `p` (`pd` is its handle), which counts it as a
    /// user; `dm_users`, if not null, counts it too and is released with it.
    pub(crate) fn hand_out(
        p: &Pd,
        pd: *mut ibv_pd,
        mr: MemoryRegion,
        addr: *mut c_void,
        length: usize,
        on_demand: bool,
        dm_users: *const AtomicUsize,
    ) -> *mut ibv_mr {
        p.users.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the caller passes a live count or null.
        if let Some(u) = unsafe { dm_users.as_ref() } {
            u.fetch_add(1, Ordering::AcqRel);
        }
        let m = Box::into_raw(Box::new(Mr {
            ibv: ibv_mr {
                context: p.ibv.context,
                pd,
                addr,
                length,
                handle: mr.lkey(),
                lkey: mr.lkey(),
                rkey: mr.rkey(),
            },
            mr: Mutex::new(mr),
            pd: pd.cast(),
            on_demand,
            dm_users,
        }));
        let h = m.cast::<ibv_mr>();
        register(h, Kind::Mr, p.ibv.context);
        h
    }
}

/// `ibv_alloc_pd`.
pub(crate) unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_null(e),
    };
    let pd = ctx.device.alloc_pd();
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    let p = Box::into_raw(Box::new(Pd {
        ibv: ibv_pd {
            context,
            handle: NEXT.fetch_add(1, Ordering::Relaxed) as u32,
        },
        pd,
        users: AtomicUsize::new(0),
        parent: None,
    }));
    let h = p.cast::<ibv_pd>();
    register(h, Kind::Pd, context);
    h
}

/// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs or parent domains of the PD exist.
pub(crate) unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: live PD handles are boxed `Pd`s.
    match unsafe { take_unused(pd, Kind::Pd, |p: &Pd| p.users.load(Ordering::Acquire)) } {
        Ok(p) => {
            if let Some(parent) = &p.parent {
                parent.release();
            }
            0
        }
        Err(e) => fail_errno(e),
    }
}

/// The access flags softrdma can grant, from `ibv_access_flags`; `EINVAL` for unknown bits.
pub(crate) fn access_flags(access: u32) -> Result<AccessFlags, c_int> {
    // Optional-range bits are hints a device may ignore.
    let access = access & !IBV_ACCESS_OPTIONAL_RANGE;
    // A zero-based region is just iova 0 with ibv_reg_mr_iova2; huge pages change nothing
    // for softrdma; on-demand paging is what softrdma always does (it pins nothing: a page is
    // touched when an operation reaches it, and one that is not there is an access error).
    let known = 0xf
        | IBV_ACCESS_MW_BIND
        | IBV_ACCESS_ZERO_BASED
        | IBV_ACCESS_HUGETLB
        | IBV_ACCESS_ON_DEMAND;
    if access & !known != 0 {
        return Err(libc::EINVAL);
    }
    Ok(AccessFlags::from_bits_truncate(
        access & (0xf | IBV_ACCESS_MW_BIND),
    ))
}

fn reg_errno(e: &RegMrError) -> c_int {
    match e {
        RegMrError::AccessNeedsLocalWrite | RegMrError::InvalidRange(_) => libc::EINVAL,
        RegMrError::OutOfMemory(_) | RegMrError::TooMany => libc::ENOMEM,
    }
}

/// Registers `[addr, addr + length)` of the program at `iova`.
///
/// # Safety
/// The program promises the memory stays allocated until the region is deregistered.
unsafe fn register_memory(
    pd: &Pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> Result<MemoryRegion, c_int> {
    let flags = access_flags(access)?;
    let on_demand = access & IBV_ACCESS_ON_DEMAND != 0;
    if on_demand && addr.is_null() && length == usize::MAX {
        // Implicit on-demand paging: the whole address space, at its own addresses.
        // SAFETY: nothing is touched until an operation names an address, and every access
        // goes through the fault-catching copies (an unmapped address is an access error).
        return unsafe { pd.pd.reg_mr_implicit(flags) }.map_err(|e| reg_errno(&e));
    }
    if addr.is_null() || length == 0 {
        return Err(libc::EINVAL);
    }
    if !on_demand {
        // Pinning's checks (see `mapping`); an on-demand region's pages may come later.
        crate::mapping::check_buffer(addr as usize, length, access)?;
    }
    let iova = if access & IBV_ACCESS_ZERO_BASED != 0 {
        0
    } else {
        iova
    };
    // SAFETY: forwarded from this function's contract (ibv_reg_mr's: the buffer is the
    // program's and outlives the registration).
    unsafe { pd.pd.reg_mr_raw_iova(addr.cast(), length, iova, flags) }.map_err(|e| reg_errno(&e))
}

/// `ibv_reg_mr_iova2`: registers the program's memory at virtual address `iova`.
pub(crate) unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    let _users = creating_user();
    let p = match Pd::from_handle(pd) {
        Ok(p) => p,
        Err(e) => return fail_null(e),
    };
    // SAFETY: ibv_reg_mr's contract: the memory is the program's and outlives the region.
    let mr = match unsafe { register_memory(p, addr, length, iova, access) } {
        Ok(m) => m,
        Err(e) => return fail_null(e),
    };
    let on_demand = access & IBV_ACCESS_ON_DEMAND != 0;
    Mr::hand_out(p, pd, mr, addr, length, on_demand, std::ptr::null())
}

/// `ibv_reg_mr`: registers the program's memory at its own address.
pub(crate) unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as u32) }
}

/// `ibv_reg_mr_iova`.
pub(crate) unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as u32) }
}

/// `ibv_rereg_mr`: the region takes the new protection domain, rights or memory under the
/// keys it has (as on rxe and mlx5: peers go on using the rkey they were given). On failure
/// the region stays as it was and `IBV_REREG_MR_ERR_INPUT` is returned with `errno` set.
pub(crate) unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let fail = |e| {
        set_errno(e);
        IBV_REREG_MR_ERR_INPUT
    };
    let _users = creating_user();
    if !is_live(mr, Kind::Mr) {
        return fail(libc::EINVAL);
    }
    // SAFETY: live MR handles are boxed `Mr`s until ibv_dereg_mr.
    let m = unsafe { &mut *mr.cast::<Mr>() };
    let supported =
        IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
    if flags & !supported != 0 || flags == 0 {
        return fail(libc::EINVAL);
    }
    let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
    if translation && (addr.is_null() || length == 0) {
        return fail(libc::EINVAL);
    }
    if !m.dm_users.is_null() {
        // A region on device memory is not re-registered (the kernel: EINVAL).
        return fail(libc::EINVAL);
    }
    if access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0 {
        return fail(libc::EINVAL);
    }
    let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        match Pd::from_handle(pd) {
            // A PD of another context is not this one's to use (the kernel finds no such
            // handle in the caller's file); taken, closing that context would leave the region
            // in a PD whose context is gone.
            Ok(p) if p.ibv.context != m.ibv.context => return fail(libc::EINVAL),
            Ok(_) => pd.cast::<Pd>(),
            Err(e) => return fail(e),
        }
    } else {
        m.pd
    };
    let (new_addr, new_len) = if translation {
        (addr, length)
    } else {
        (m.ibv.addr, m.ibv.length)
    };
    let old = m.mr.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        access as u32
    } else if m.on_demand {
        old.access().bits() | IBV_ACCESS_ON_DEMAND
    } else {
        old.access().bits()
    };
    let iova = if translation { addr as u64 } else { old.addr() };
    // SAFETY: `new_pd` is live (checked above or the MR's own PD, which the MR keeps busy).
    let pd_ref = unsafe { &*new_pd };
    // SAFETY: ibv_rereg_mr's contract: the (new) memory is the program's and outlives the
    // registration.
    let region = match unsafe {
        reregister_memory(
            &old,
            pd_ref,
            new_addr,
            new_len,
            iova,
            new_access,
            translation,
        )
    } {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if new_pd != m.pd {
        pd_ref.users.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the old PD is live while this MR counts as its user.
        unsafe { &*m.pd }.users.fetch_sub(1, Ordering::AcqRel);
        m.pd = new_pd;
        m.ibv.pd = new_pd.cast();
    }
    m.ibv.addr = new_addr;
    m.ibv.length = new_len;
    m.on_demand = new_access & IBV_ACCESS_ON_DEMAND != 0;
    // The keys stay (as on rxe and mlx5); written again all the same, as rdma-core does with
    // the kernel's answer.
    m.ibv.lkey = region.lkey();
    m.ibv.rkey = region.rkey();
    m.ibv.handle = region.lkey();
    *m.mr.lock().unwrap_or_else(|e| e.into_inner()) = region;
    drop(old);
    0
}

/// Re-registers `old` in `pd` with `access`, over `[addr, addr + length)` at `iova` when
/// `translation` is set (checked as a new registration's memory is), else over its memory.
///
/// # Safety
/// With `translation`, the program promises the new memory stays allocated until the region is
/// deregistered.
unsafe fn reregister_memory(
    old: &MemoryRegion,
    pd: &Pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
    translation: bool,
) -> Result<MemoryRegion, c_int> {
    let flags = access_flags(access)?;
    // New rights over the same memory are checked too: write access to read-only pages is
    // EFAULT, as for a new registration (not for on-demand paging, whose pages come later).
    if access & IBV_ACCESS_ON_DEMAND == 0 {
        crate::mapping::check_buffer(addr as usize, length, access)?;
    }
    let iova = if access & IBV_ACCESS_ZERO_BASED != 0 {
        0
    } else {
        iova
    };
    // The same translation given again is none: the memory stays (windows bound to the
    // region do not stand in the way).
    let same = addr.cast() == old.as_ptr() && length == old.len() && iova == old.addr();
    let result = if translation && !same {
        // SAFETY: forwarded from this function's contract.
        unsafe { old.rereg_raw_iova(&pd.pd, addr.cast(), length, iova, flags) }
    } else {
        old.rereg(&pd.pd, flags)
    };
    result.map_err(|e| reg_errno(&e))
}

/// `ibv_dereg_mr`: after it returns, softrdma never touches the memory again. `EINVAL`
/// while memory windows are bound to the region (IBTA 10.6.7.2.6, as rxe).
pub(crate) unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    if is_live(mr, Kind::Mr) {
        // SAFETY: live MR handles are boxed `Mr`s until ibv_dereg_mr.
        let m = unsafe { &*mr.cast::<Mr>() };
        if m.mr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bound_windows()
            > 0
        {
            return fail_errno(libc::EINVAL);
        }
    }
    if !unregister(mr, Kind::Mr) {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: the handle was live (a boxed Mr) and is now unregistered: freed once.
    let m = unsafe { Box::from_raw(mr.cast::<Mr>()) };
    // SAFETY: the MR's PD (and device memory) cannot be freed while the MR counts as a user.
    unsafe {
        (*m.pd).users.fetch_sub(1, Ordering::AcqRel);
        if let Some(u) = m.dm_users.as_ref() {
            u.fetch_sub(1, Ordering::AcqRel);
        }
    }
    drop(m);
    0
}

/// `ibv_advise_mr` (the `advise_mr` slot of `verbs_context`): prefetches the pages of
/// on-demand regions, as a NIC with on-demand paging maps them ahead of use. Every SGE must
/// lie in an on-demand region of `pd` (`EINVAL` otherwise, as mlx5); `PREFETCH` and
/// `PREFETCH_WRITE` fault the pages in for reading or writing (`EFAULT` if one cannot be),
/// `PREFETCH_NO_FAULT` maps nothing new and always succeeds. The `FLUSH` flag (wait until
/// done) is how softrdma always does it.
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: u32,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    const PREFETCH: u32 = 0;
    const PREFETCH_WRITE: u32 = 1;
    const PREFETCH_NO_FAULT: u32 = 2;
    const FLAG_FLUSH: u32 = 1;
    let p = match Pd::from_handle(pd) {
        Ok(p) => p,
        Err(e) => return e,
    };
    // Fault the pages in for writing (Some(true)), for reading (Some(false)), or not at all.
    let fault_in = match advice {
        PREFETCH => Some(false),
        PREFETCH_WRITE => Some(true),
        PREFETCH_NO_FAULT => None,
        _ => return libc::EINVAL,
    };
    if flags & !FLAG_FLUSH != 0 || num_sge == 0 || sg_list.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller passes `num_sge` SGEs.
    let sges = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    let regions = crate::util::owned_by(p.ibv.context, Kind::Mr);
    for sge in sges {
        let end = sge.addr.checked_add(u64::from(sge.length));
        // The on-demand region of `pd` the SGE lies in, and where in it.
        let found = regions.iter().find_map(|&h| {
            // SAFETY: live MR handles are boxed `Mr`s.
            let m = unsafe { &*(h as *const Mr) };
            let start = m.ibv.addr as u64;
            let inside = m.on_demand
                && m.ibv.lkey == sge.lkey
                && std::ptr::eq(m.pd, p)
                && sge.addr >= start
                && end.is_some_and(|e| e - start <= m.ibv.length as u64);
            inside.then(|| (m, (sge.addr - start) as usize))
        });
        let Some((m, offset)) = found else {
            return libc::EINVAL;
        };
        if let Some(write) = fault_in {
            let mr = m.mr.lock().unwrap_or_else(|e| e.into_inner());
            if mr.prefetch(offset, sge.length as usize, write).is_err() {
                return libc::EFAULT;
            }
        }
    }
    0
}
