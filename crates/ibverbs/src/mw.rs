//! Memory windows: the `alloc_mw`, `bind_mw` and `dealloc_mw` slots of `ibv_context_ops`
//! (reached by the inline `ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw`), and the
//! `IBV_WR_BIND_MW` / `IBV_WR_LOCAL_INV` work requests of `ibv_post_send`.
//!
//! As rdma-core's rxe provider: `ibv_bind_mw` (type 1 only, the inline checks that) posts a
//! BIND_MW work request with `ibv_inc_rkey(mw->rkey)` and stores that rkey in the `ibv_mw`
//! once posted; a type 2 window is bound by the program's own BIND_MW request, whose `rkey`
//! the program keeps. Zero-based windows are refused (`EINVAL`), as rxe's provider does.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use softrdma::{MemoryWindow, MwType};

use crate::abi::*;
use crate::pd::Pd;
use crate::qp_object::Qp;
use crate::util::{creating_user, fail_null, is_live, register, set_errno, unregister, Kind};

/// A memory window: the C struct first, then softrdma's handle and the PD it keeps busy.
#[repr(C)]
pub(crate) struct Mw {
    pub ibv: ibv_mw,
    pub mw: MemoryWindow,
    pub pd: *mut Pd,
}

/// `alloc_mw` of `ibv_context_ops`.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: c_int) -> *mut ibv_mw {
    let _users = creating_user();
    let p = match Pd::from_handle(pd) {
        Ok(p) => p,
        Err(e) => return fail_null(e),
    };
    let mw_type = match type_ {
        IBV_MW_TYPE_1 => MwType::Type1,
        IBV_MW_TYPE_2 => MwType::Type2,
        _ => return fail_null(libc::EINVAL),
    };
    let mw = match p.pd.alloc_mw(mw_type) {
        Ok(m) => m,
        Err(_) => return fail_null(libc::ENOMEM),
    };
    static NEXT: AtomicU32 = AtomicU32::new(1);
    p.users.fetch_add(1, Ordering::AcqRel);
    let m = Box::into_raw(Box::new(Mw {
        ibv: ibv_mw {
            context: p.ibv.context,
            pd,
            rkey: mw.rkey(),
            handle: NEXT.fetch_add(1, Ordering::Relaxed),
            type_,
        },
        mw,
        pd: pd.cast(),
    }));
    let h = m.cast::<ibv_mw>();
    register(h, Kind::Mw, p.ibv.context);
    h
}

/// `dealloc_mw` of `ibv_context_ops`: frees the window, bound or not. Returns 0 or an errno
/// (the inline `ibv_dealloc_mw` returns what the slot returns).
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    if !unregister(mw, Kind::Mw) {
        set_errno(libc::EINVAL);
        return libc::EINVAL;
    }
    // SAFETY: the handle was live (a boxed Mw) and is now unregistered: freed once.
    let m = unsafe { Box::from_raw(mw.cast::<Mw>()) };
    // SAFETY: the window's PD cannot be deallocated while the window counts as its user.
    unsafe { &*m.pd }.users.fetch_sub(1, Ordering::AcqRel);
    drop(m);
    0
}

/// `bind_mw` of `ibv_context_ops` (the inline `ibv_bind_mw`, type 1 windows): posts the
/// bind with the window's next rkey and stores that rkey in the `ibv_mw`. Returns 0 or an
/// errno.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    let fail = |e: c_int| {
        set_errno(e);
        e
    };
    let q = match Qp::from_handle(qp) {
        Ok(q) => q,
        Err(e) => return fail(e),
    };
    if bind.is_null() || !is_live(mw, Kind::Mw) {
        return fail(libc::EINVAL);
    }
    // SAFETY: checked non-null; the program's `struct ibv_mw_bind`.
    let b = unsafe { &*bind };
    // SAFETY: live MW handles are boxed `Mw`s until dealloc_mw.
    let old = unsafe { (*mw).rkey };
    let new_rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
    let op = match crate::post::bind_op(mw, new_rkey, &b.bind_info) {
        Ok(op) => op,
        Err(e) => return fail(e),
    };
    let flags = match crate::post::send_flags(b.send_flags) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let wr = softrdma::SendWr {
        wr_id: b.wr_id,
        op,
        sg_list: Vec::new(),
        flags,
        inline_data: None,
        ud: None,
        xrc_srqn: None,
    };
    if let Err(e) = q.qp.post_send([wr]) {
        return fail(crate::post::post_errno(&e.kind));
    }
    // SAFETY: as above; the program owns the struct and reads `rkey` from it.
    unsafe { (*mw).rkey = new_rkey };
    0
}
