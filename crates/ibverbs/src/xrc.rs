//! XRC: `ibv_open_xrcd`, `ibv_close_xrcd`, `ibv_create_srq_ex` for XRC SRQs, `ibv_get_srq_num`,
//! XRC target QPs (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`) and `ibv_open_qp`, over
//! softrdma's [`XrcDomain`]. All of them are inline in rdma-core's header, reached through
//! `verbs_context` slots; XRC initiator QPs are ordinary QPs of `qp.rs`.
//!
//! The kernel keys domains opened through a file descriptor by the file's inode, so that
//! processes opening one file share one domain. softrdma's device is the process's own, so the
//! key is kept per context: opening the same file again in the process gives another handle to
//! the same domain. Errnos follow the kernel's `ib_uverbs_open_xrcd` and rdma-core's command
//! checks: `EOPNOTSUPP` for unknown `comp_mask` bits, `EINVAL` without both the fd and the
//! flags, `EBADF` for a descriptor that is not open, `EAGAIN` when no domain is tied to the
//! file and `O_CREAT` is absent, `EINVAL` with `O_EXCL` when one is.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use softrdma::{SrqAttr, XrcDomain};

use crate::abi::*;
use crate::context::Context;
use crate::cq::Cq;
use crate::pd::Pd;
use crate::qp_object::{Qp, WrBatch};
use crate::srq::Srq;
use crate::util::{creating_user, fail_errno, fail_null, register, take_unused, Kind};
use crate::xrcd::{FileKey, Xrcd};

fn files(ctx: &Context) -> MutexGuard<'_, HashMap<FileKey, (XrcDomain, usize)>> {
    ctx.xrcd_files.lock().unwrap_or_else(|e| e.into_inner())
}

/// `verbs_context.open_xrcd` (`ibv_open_xrcd`).
pub(crate) unsafe extern "C" fn open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    let Ok(ctx) = Context::from_handle(context) else {
        return fail_null(libc::EINVAL);
    };
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable init attributes.
    let a = unsafe { &*attr };
    if a.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED {
        return fail_null(libc::EOPNOTSUPP);
    }
    let both = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    if a.comp_mask & both != both {
        return fail_null(libc::EINVAL);
    }
    let (xrcd, file) = if a.fd == -1 {
        (ctx.device.open_xrcd(), None)
    } else {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes a whole `stat` into the buffer when it returns 0.
        if unsafe { libc::fstat(a.fd, st.as_mut_ptr()) } != 0 {
            return fail_null(libc::EBADF);
        }
        // SAFETY: fstat succeeded.
        let st = unsafe { st.assume_init() };
        let key = (st.st_dev, st.st_ino);
        let mut f = files(ctx);
        match f.get_mut(&key) {
            Some(_) if a.oflags & libc::O_EXCL != 0 => return fail_null(libc::EINVAL),
            Some((d, handles)) => {
                *handles += 1;
                (d.clone(), Some(key))
            }
            None if a.oflags & libc::O_CREAT == 0 => return fail_null(libc::EAGAIN),
            None => {
                let d = ctx.device.open_xrcd();
                f.insert(key, (d.clone(), 1));
                (d, Some(key))
            }
        }
    };
    let b = Box::into_raw(Box::new(Xrcd {
        ibv: ibv_xrcd { context },
        xrcd,
        file,
        users: AtomicUsize::new(0),
    }));
    let h = b.cast::<ibv_xrcd>();
    register(h, Kind::Xrcd, context);
    h
}

/// `verbs_context.close_xrcd` (`ibv_close_xrcd`): `EBUSY` while SRQs or QPs made through the
/// handle exist.
pub(crate) unsafe extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    // SAFETY: live XRCD handles are boxed `Xrcd`s.
    let b = match unsafe {
        take_unused(xrcd, Kind::Xrcd, |x: &Xrcd| x.users.load(Ordering::Acquire))
    } {
        Ok(b) => b,
        Err(e) => return fail_errno(e),
    };
    if let (Some(key), Ok(ctx)) = (b.file, Context::from_handle(b.ibv.context)) {
        let mut f = files(ctx);
        if let Some((_, handles)) = f.get_mut(&key) {
            *handles -= 1;
            if *handles == 0 {
                f.remove(&key);
            }
        }
    }
    drop(b);
    0
}

/// `verbs_context.create_srq_ex` (`ibv_create_srq_ex` beyond a basic SRQ of a PD, which the
/// inline wrapper hands to `ibv_create_srq` itself): XRC SRQs, and basic SRQs asked for with
/// more of the mask. Tag-matching SRQs are not softrdma's (`EOPNOTSUPP`).
pub(crate) unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    if attr.is_null() || Context::from_handle(context).is_err() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable, writable init attributes.
    let a = unsafe { &mut *attr };
    if a.comp_mask >= IBV_SRQ_INIT_ATTR_RESERVED {
        return fail_null(libc::EOPNOTSUPP);
    }
    let srq_type = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
        a.srq_type
    } else {
        IBV_SRQT_BASIC
    };
    if a.comp_mask & IBV_SRQ_INIT_ATTR_TM != 0
        || !(IBV_SRQT_BASIC..=IBV_SRQT_XRC).contains(&srq_type)
    {
        return fail_null(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
        return fail_null(libc::EINVAL);
    }
    if srq_type == IBV_SRQT_BASIC {
        let mut basic = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: ibv_srq_attr {
                max_wr: a.attr.max_wr,
                max_sge: a.attr.max_sge,
                srq_limit: a.attr.srq_limit,
            },
        };
        // SAFETY: a live or rejected PD handle; `basic` is ours.
        let h = unsafe { crate::srq::ibv_create_srq(a.pd, &mut basic) };
        a.attr = basic.attr;
        return h;
    }
    let need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if a.comp_mask & need != need {
        return fail_null(libc::EINVAL);
    }
    match create_xrc_srq(context, a) {
        Ok(h) => h,
        Err(e) => fail_null(e),
    }
}

fn create_xrc_srq(
    context: *mut ibv_context,
    a: &mut ibv_srq_init_attr_ex,
) -> Result<*mut ibv_srq, c_int> {
    let _users = creating_user();
    let pd = Pd::from_handle(a.pd)?;
    let x = Xrcd::from_handle(a.xrcd)?;
    let cq = Cq::usable(a.cq)?;
    if pd.ibv.context != context || x.ibv.context != context || cq.ibv.cq.context != context {
        return Err(libc::EINVAL);
    }
    let want = SrqAttr {
        max_wr: a.attr.max_wr,
        max_sge: a.attr.max_sge,
        srq_limit: a.attr.srq_limit,
    };
    let srq = x
        .xrcd
        .create_srq(&pd.pd, &cq.cq, want)
        .map_err(|_| libc::EINVAL)?;
    let got = srq.query();
    a.attr = ibv_srq_attr {
        max_wr: got.max_wr,
        max_sge: got.max_sge,
        srq_limit: got.srq_limit,
    };
    pd.users.fetch_add(1, Ordering::AcqRel);
    x.users.fetch_add(1, Ordering::AcqRel);
    cq.users.fetch_add(1, Ordering::AcqRel);
    let xrc = crate::srq::XrcParts {
        xrcd: (x as *const Xrcd).cast_mut(),
        cq: (cq as *const Cq).cast_mut(),
    };
    Ok(Srq::hand_out(pd, a.pd, a.srq_context, srq, Some(xrc)))
}

/// `verbs_context.get_srq_num` (`ibv_get_srq_num`): the number initiators name.
pub(crate) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    let s = match Srq::from_handle(srq) {
        Ok(s) => s,
        Err(e) => return e,
    };
    if srq_num.is_null() {
        return libc::EINVAL;
    }
    if s.xrc.is_none() {
        // Only XRC SRQs have a number to give (mlx5 answers a basic one with EOPNOTSUPP).
        return libc::EOPNOTSUPP;
    }
    // SAFETY: the caller passes a writable u32.
    unsafe { srq_num.write(s.srq.id()) };
    0
}

/// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV` (from `qp.rs`): a target QP of the domain in
/// `a.xrcd`. It has no PD, CQs, SRQ or queues; its capabilities read back as 0.
pub(crate) fn create_target(
    context: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
) -> Result<*mut ibv_qp, c_int> {
    let _users = creating_user();
    if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
        return Err(libc::EINVAL);
    }
    let x = Xrcd::from_handle(a.xrcd)?;
    if x.ibv.context != context {
        return Err(libc::EINVAL);
    }
    let qp = x.xrcd.create_qp().map_err(|_| libc::EINVAL)?;
    a.cap = ibv_qp_cap::default();
    Ok(hand_out_target(context, x, a.xrcd, qp, a.qp_context))
}

/// A C handle for the target QP `qp` of `x`, counted as one of `x`'s users.
fn hand_out_target(
    context: *mut ibv_context,
    x: &Xrcd,
    xrcd: *mut ibv_xrcd,
    qp: softrdma::QueuePair,
    qp_context: *mut c_void,
) -> *mut ibv_qp {
    x.users.fetch_add(1, Ordering::AcqRel);
    let qpn = qp.qp_num();
    let p = Box::into_raw(Box::new(Qp {
        ibv: ibv_qp_ex {
            qp_base: ibv_qp {
                context,
                qp_context,
                pd: std::ptr::null_mut(),
                send_cq: std::ptr::null_mut(),
                recv_cq: std::ptr::null_mut(),
                srq: std::ptr::null_mut(),
                handle: qpn,
                qp_num: qpn,
                // A new QP is in RESET (IBV_QPS_RESET).
                state: 0,
                qp_type: IBV_QPT_XRC_RECV,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            comp_mask: 0,
            wr_id: 0,
            wr_flags: 0,
            ..crate::wr::builder_table()
        },
        qp,
        pd: std::ptr::null_mut(),
        send_cq: std::ptr::null_mut(),
        recv_cq: std::ptr::null_mut(),
        xrcd: xrcd.cast(),
        sq_sig_all: false,
        max_inline: 0,
        send_ops: 0,
        batch: Mutex::new(WrBatch::default()),
    }));
    if let Ok(ctx) = Context::from_handle(context) {
        Context::name_object(&ctx.qps, qpn, Some(p as usize));
    }
    register(p.cast::<ibv_qp>(), Kind::Qp, context);
    p.cast()
}

/// `verbs_context.open_qp` (`ibv_open_qp`): another handle to an XRC target QP of the domain,
/// by number. Destroying a handle leaves the QP to the others; the last one destroys it.
pub(crate) unsafe extern "C" fn open_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    if attr.is_null() || Context::from_handle(context).is_err() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable open attributes.
    let a = unsafe { &*attr };
    if a.comp_mask >= IBV_QP_OPEN_ATTR_RESERVED {
        return fail_null(libc::EOPNOTSUPP);
    }
    let need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if a.comp_mask & need != need || a.qp_type != IBV_QPT_XRC_RECV {
        return fail_null(libc::EINVAL);
    }
    let qp_context = if a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0 {
        a.qp_context
    } else {
        std::ptr::null_mut()
    };
    let _users = creating_user();
    let x = match Xrcd::from_handle(a.xrcd) {
        Ok(x) if x.ibv.context == context => x,
        _ => return fail_null(libc::EINVAL),
    };
    // The target QP of that number in this domain, through any live handle to it.
    let found = crate::util::owned_by(context, Kind::Qp)
        .into_iter()
        .find_map(|p| {
            // SAFETY: live QP handles of this context are boxed `Qp`s.
            let q = unsafe { &*(p as *const Qp) };
            let same = q.qp.xrc_domain().is_some_and(|d| d.same_as(&x.xrcd));
            (same && q.qp.qp_num() == a.qp_num).then(|| q.qp.clone())
        });
    match found {
        Some(qp) => hand_out_target(context, x, a.xrcd, qp, qp_context),
        None => fail_null(libc::EINVAL),
    }
}
