//! Thread domains and parent domains: `ibv_alloc_td`, `ibv_dealloc_td`,
//! `ibv_alloc_parent_domain` (behind their inline wrappers, through `verbs_context`), and a
//! parent domain's end in `ibv_dealloc_pd`.
//!
//! A thread domain is the program's promise that the objects made with it are used by one
//! thread at a time, which lets mlx5 drop locks; softrdma's objects are thread-safe in any
//! case, so the promise changes nothing here. A parent domain is a PD (`ibv_pd`, usable
//! wherever one is: QPs, SRQs, MRs, MWs, AHs, and the `parent_domain` of an extended CQ)
//! over a protection domain, with a thread domain and the program's buffer allocators.
//! Objects made on it belong to that protection domain: its keys are the protection
//! domain's, and softrdma's PD behind both is one. The allocators are accepted and kept,
//! never called: they serve the buffers a provider places in the program's memory (mlx5's
//! work queues and CQ rings), and softrdma's queues live in the library, which the verbs
//! allow (an allocator may as well answer `IBV_ALLOCATOR_USE_DEFAULT` every time).
//!
//! As with mlx5: a parent domain holds its protection domain and thread domain, so those
//! answer `EBUSY` to deallocation until it is gone; it answers `EBUSY` itself while objects
//! use it; unknown `comp_mask` bits, a protection domain that is itself a parent domain, and
//! a thread domain of another context are `EINVAL`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::abi::*;
use crate::context::Context;
use crate::pd::{ParentOf, Pd};
use crate::util::{creating_user, fail_errno, fail_null, is_live, register, take_unused, Kind};

/// A thread domain: the C struct first, then how many parent domains use it.
#[repr(C)]
pub(crate) struct Td {
    pub ibv: ibv_td,
    pub users: AtomicUsize,
}

impl Td {
    fn from_handle<'a>(td: *mut ibv_td) -> Result<&'a Td, c_int> {
        if !is_live(td, Kind::Td) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live TD handles are boxed `Td`s (the ibv_td first) until ibv_dealloc_td.
        Ok(unsafe { &*td.cast::<Td>() })
    }
}

/// Whether `pd` is a live parent domain.
pub(crate) fn is_parent_domain(pd: *mut ibv_pd) -> bool {
    Pd::from_handle(pd).is_ok_and(|p| p.parent.is_some())
}

/// `verbs_context.alloc_td` (the inline `ibv_alloc_td`).
pub(crate) unsafe extern "C" fn alloc_td(
    context: *mut ibv_context,
    init_attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    if let Err(e) = Context::from_handle(context) {
        return fail_null(e);
    }
    // SAFETY: the caller passes readable attributes or NULL.
    if init_attr.is_null() || unsafe { (*init_attr).comp_mask } != 0 {
        return fail_null(libc::EINVAL);
    }
    let td = Box::into_raw(Box::new(Td {
        ibv: ibv_td { context },
        users: AtomicUsize::new(0),
    }))
    .cast::<ibv_td>();
    register(td, Kind::Td, context);
    td
}

/// `verbs_context.dealloc_td` (the inline `ibv_dealloc_td`): `EBUSY` while a parent domain
/// uses it.
pub(crate) unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    // SAFETY: live TD handles are boxed `Td`s.
    match unsafe { take_unused(td, Kind::Td, |t: &Td| t.users.load(Ordering::Acquire)) } {
        Ok(_) => 0,
        Err(e) => fail_errno(e),
    }
}

/// `verbs_context.alloc_parent_domain` (the inline `ibv_alloc_parent_domain`).
pub(crate) unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    let _users = creating_user();
    if let Err(e) = Context::from_handle(context) {
        return fail_null(e);
    }
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable attributes.
    let a = unsafe { &*attr };
    let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    if a.comp_mask & !known != 0 {
        return fail_null(libc::EINVAL);
    }
    let parent = match Pd::from_handle(a.pd) {
        Ok(p) if p.parent.is_none() && p.ibv.context == context => p,
        Ok(_) => return fail_null(libc::EINVAL),
        Err(e) => return fail_null(e),
    };
    let td = if a.td.is_null() {
        None
    } else {
        match Td::from_handle(a.td) {
            Ok(t) if t.ibv.context == context => Some(t),
            Ok(_) => return fail_null(libc::EINVAL),
            Err(e) => return fail_null(e),
        }
    };
    let allocators = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0 {
        match (a.alloc, a.free) {
            (Some(alloc), Some(free)) => {
                let pd_context = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT != 0 {
                    a.pd_context
                } else {
                    std::ptr::null_mut()
                };
                Some((alloc, free, pd_context))
            }
            _ => return fail_null(libc::EINVAL),
        }
    } else {
        None
    };
    parent.users.fetch_add(1, Ordering::AcqRel);
    if let Some(t) = td {
        t.users.fetch_add(1, Ordering::AcqRel);
    }
    let p = Box::into_raw(Box::new(Pd {
        // The protection domain's handle, as mlx5 gives its parent domains.
        ibv: ibv_pd {
            context,
            handle: parent.ibv.handle,
        },
        pd: parent.pd.clone(),
        users: AtomicUsize::new(0),
        parent: Some(ParentOf {
            pd: std::ptr::from_ref(parent).cast_mut(),
            td_users: td.map_or(std::ptr::null(), |t| &t.users),
            _allocators: allocators,
        }),
    }));
    let h = p.cast::<ibv_pd>();
    register(h, Kind::Pd, context);
    h
}
