//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq` (the inline `ibv_post_srq_recv` is in `post.rs`), over softrdma's
//! [`SharedReceiveQueue`]. QPs created with an SRQ count as its users: destroying it while
//! one exists fails with `EBUSY`, as on rxe.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use softrdma::{SharedReceiveQueue, SrqAttr, SrqError};

use crate::abi::*;
use crate::context::Context;
use crate::pd::Pd;
use crate::util::{
    creating_user, destroying_used, fail_errno, fail_null, is_live, register, unregister, Kind,
};

/// `ibv_srq_attr_mask`: resize.
const IBV_SRQ_MAX_WR: c_int = 1 << 0;
/// `ibv_srq_attr_mask`: arm the limit.
const IBV_SRQ_LIMIT: c_int = 1 << 1;

/// A shared receive queue: the C struct first.
#[repr(C)]
pub(crate) struct Srq {
    pub ibv: ibv_srq,
    pub srq: SharedReceiveQueue,
    pub pd: *mut Pd,
    /// An XRC SRQ's domain and CQ handles, each counting it as a user.
    pub xrc: Option<XrcParts>,
    /// QPs created with this SRQ and not yet destroyed.
    pub users: AtomicUsize,
}

/// The C handles an XRC SRQ was made with (besides its PD).
pub(crate) struct XrcParts {
    pub xrcd: *mut crate::xrcd::Xrcd,
    pub cq: *mut crate::cq::Cq,
}

impl Srq {
    /// The SRQ behind a live handle, or `EINVAL`.
    pub(crate) fn from_handle<'a>(srq: *mut ibv_srq) -> Result<&'a Srq, c_int> {
        if !is_live(srq, Kind::Srq) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live SRQ handles are boxed `Srq`s (the ibv_srq first) until
        // ibv_destroy_srq.
        Ok(unsafe { &*srq.cast::<Srq>() })
    }
}

fn srq_errno(e: &SrqError) -> c_int {
    match e {
        SrqError::InvalidAttr(_) | SrqError::NoSuchPd => libc::EINVAL,
        _ => libc::EINVAL,
    }
}

fn write_attr(out: *mut ibv_srq_attr, a: SrqAttr) {
    // SAFETY: the callers checked `out` is the program's writable attributes.
    unsafe {
        out.write(ibv_srq_attr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        })
    };
}

/// `ibv_create_srq`. The attributes the SRQ got are written back, as the kernel does.
pub(crate) unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    let _users = creating_user();
    let p = match Pd::from_handle(pd) {
        Ok(p) => p,
        Err(e) => return fail_null(e),
    };
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable, writable init attributes.
    let init = unsafe { &mut *attr };
    let want = SrqAttr {
        max_wr: init.attr.max_wr,
        max_sge: init.attr.max_sge,
        srq_limit: init.attr.srq_limit,
    };
    let srq = match p.pd.create_srq(want) {
        Ok(s) => s,
        Err(e) => return fail_null(srq_errno(&e)),
    };
    write_attr(&mut init.attr, srq.query());
    p.users.fetch_add(1, Ordering::AcqRel);
    Srq::hand_out(p, pd, init.srq_context, srq, None)
}

impl Srq {
    /// A C handle for the new SRQ `srq` of `p` (already counted as the PD's user, and the
    /// XRC parts' if any).
    pub(crate) fn hand_out(
        p: &Pd,
        pd: *mut ibv_pd,
        srq_context: *mut std::ffi::c_void,
        srq: SharedReceiveQueue,
        xrc: Option<XrcParts>,
    ) -> *mut ibv_srq {
        let id = srq.id();
        let b = Box::into_raw(Box::new(Srq {
            ibv: ibv_srq {
                context: p.ibv.context,
                srq_context,
                pd,
                handle: id,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            srq,
            pd: pd.cast(),
            xrc,
            users: AtomicUsize::new(0),
        }));
        let h = b.cast::<ibv_srq>();
        if let Ok(ctx) = Context::from_handle(p.ibv.context) {
            Context::name_object(&ctx.srqs, id, Some(h as usize));
        }
        register(h, Kind::Srq, p.ibv.context);
        h
    }
}

/// `ibv_modify_srq`: `IBV_SRQ_MAX_WR` resizes, `IBV_SRQ_LIMIT` arms the limit event.
pub(crate) unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let s = match Srq::from_handle(srq) {
        Ok(s) => s,
        Err(e) => return fail_errno(e),
    };
    if attr.is_null() || mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: the caller passes readable attributes.
    let a = unsafe { &*attr };
    let max_wr = (mask & IBV_SRQ_MAX_WR != 0).then_some(a.max_wr);
    let limit = (mask & IBV_SRQ_LIMIT != 0).then_some(a.srq_limit);
    match s.srq.modify(max_wr, limit) {
        Ok(()) => 0,
        Err(e) => fail_errno(srq_errno(&e)),
    }
}

/// `ibv_query_srq`.
pub(crate) unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let s = match Srq::from_handle(srq) {
        Ok(s) => s,
        Err(e) => return fail_errno(e),
    };
    if attr.is_null() {
        return fail_errno(libc::EINVAL);
    }
    write_attr(attr, s.srq.query());
    0
}

/// `ibv_destroy_srq`: `EBUSY` while a QP uses it; its receives go without completions.
pub(crate) unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    let users = destroying_used();
    let s = match Srq::from_handle(srq) {
        Ok(s) => s,
        Err(e) => return fail_errno(e),
    };
    if s.users.load(Ordering::Acquire) > 0 {
        return fail_errno(libc::EBUSY);
    }
    if !unregister(srq, Kind::Srq) {
        return fail_errno(libc::EINVAL);
    }
    drop(users);
    // SAFETY: the handle was live and is now unregistered: no verb reaches it any more.
    let b = unsafe { Box::from_raw(srq.cast::<Srq>()) };
    if let Ok(ctx) = Context::from_handle(b.ibv.context) {
        Context::name_object(&ctx.srqs, b.srq.id(), None);
    }
    // SAFETY: the PD, and an XRC SRQ's domain and CQ, outlive it (they count it as a user).
    unsafe {
        (*b.pd).users.fetch_sub(1, Ordering::AcqRel);
        if let Some(x) = &b.xrc {
            (*x.xrcd).users.fetch_sub(1, Ordering::AcqRel);
            (*x.cq).users.fetch_sub(1, Ordering::AcqRel);
        }
    }
    drop(b);
    0
}
