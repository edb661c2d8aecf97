//! QPs and SRQs on CM ids: `rdma_create_qp` makes the QP with this library's own verbs (on
//! `id->pd`, with completion queues of the id's own when none are given, as librdmacm's
//! `ucma_create_cqs`) and hands it to softrdma's rdma_cm, which moves it through its states;
//! `rdma_init_qp_attr` gives a program that made its QP itself the attributes to move it.

use std::ffi::{c_int, c_void};

use softrdma::QpAttr;

use super::abi::*;
use super::connect::result;
use super::device::cm_device;
use super::id::{lock, Id};
use crate::abi::*;
use crate::qp_object::Qp;
use crate::util::fail_minus_one;

/// The id's own CQ and completion channel, of `cqe` entries, or an errno.
fn own_cq(
    ctx: *mut ibv_context,
    id: *mut rdma_cm_id,
    cqe: u32,
) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
    let errno = crate::util::last_errno;
    // SAFETY: our own verbs on our own context.
    unsafe {
        let ch = crate::cq::ibv_create_comp_channel(ctx);
        if ch.is_null() {
            return Err(errno());
        }
        let cq = crate::cq::ibv_create_cq(ctx, cqe.max(1) as c_int, id.cast::<c_void>(), ch, 0);
        if cq.is_null() {
            let e = errno();
            crate::cq::ibv_destroy_comp_channel(ch);
            return Err(e);
        }
        Ok((ch, cq))
    }
}

/// Destroys the CQs and channels the library made for `i`.
fn drop_own_cqs(i: &Id) {
    let mut x = lock(&i.extra);
    if !x.own_cqs {
        return;
    }
    x.own_cqs = false;
    drop(x);
    let raw = i.raw_mut();
    // SAFETY: our own verbs on the handles we created for this id; each is destroyed once and
    // its field cleared.
    unsafe {
        for cq in [raw.send_cq, raw.recv_cq] {
            if !cq.is_null() {
                crate::cq::ibv_destroy_cq(cq);
            }
        }
        for ch in [raw.send_cq_channel, raw.recv_cq_channel] {
            if !ch.is_null() {
                crate::cq::ibv_destroy_comp_channel(ch);
            }
        }
    }
    raw.send_cq = std::ptr::null_mut();
    raw.recv_cq = std::ptr::null_mut();
    raw.send_cq_channel = std::ptr::null_mut();
    raw.recv_cq_channel = std::ptr::null_mut();
}

/// Gives `qp` (just created) to the id's rdma_cm; destroys it if that fails.
fn adopt(i: &Id, qp: *mut ibv_qp) -> Result<(), c_int> {
    let q = Qp::from_handle(qp)?;
    if let Err(e) = i.cm.adopt_qp(&q.qp) {
        // SAFETY: our own QP, just created, destroyed once.
        unsafe { crate::qp::ibv_destroy_qp(qp) };
        return Err(super::connect::cm_errno(&e));
    }
    i.raw_mut().qp = qp;
    Ok(())
}

/// Fills in the id's own CQs where the attributes name none (librdmacm's `ucma_create_cqs`).
fn cqs_for(
    i: &Id,
    ctx: *mut ibv_context,
    send_cq: &mut *mut ibv_cq,
    recv_cq: &mut *mut ibv_cq,
    cap: &ibv_qp_cap,
) -> Result<(), c_int> {
    if !send_cq.is_null() && !recv_cq.is_null() {
        return Ok(());
    }
    let raw = i.raw_mut();
    lock(&i.extra).own_cqs = true;
    if recv_cq.is_null() {
        let (ch, cq) = own_cq(ctx, i.handle(), cap.max_recv_wr).inspect_err(|_| drop_own_cqs(i))?;
        raw.recv_cq_channel = ch;
        raw.recv_cq = cq;
        *recv_cq = cq;
    }
    if send_cq.is_null() {
        let (ch, cq) = own_cq(ctx, i.handle(), cap.max_send_wr).inspect_err(|_| drop_own_cqs(i))?;
        raw.send_cq_channel = ch;
        raw.send_cq = cq;
        *send_cq = cq;
    }
    Ok(())
}

/// `rdma_create_qp`: on `pd` (NULL: `id->pd`, the device's).
pub(crate) unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    let i = match Id::from_handle(id) {
        Ok(i) => i,
        Err(e) => return fail_minus_one(e),
    };
    if attr.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: the caller passes readable, writable init attributes.
    let a = unsafe { &mut *attr };
    result(create_qp(i, pd, a))
}

pub(crate) fn create_qp(i: &Id, pd: *mut ibv_pd, a: &mut ibv_qp_init_attr) -> Result<(), c_int> {
    let dev = cm_device()?;
    if !i.raw().qp.is_null() {
        return Err(libc::EINVAL);
    }
    let pd = if pd.is_null() { dev.pd } else { pd };
    i.raw_mut().pd = pd;
    let mut own = ibv_qp_init_attr { ..*a };
    cqs_for(i, dev.ctx, &mut own.send_cq, &mut own.recv_cq, &own.cap)?;
    // SAFETY: our own verb with writable attributes.
    let qp = unsafe { crate::qp::ibv_create_qp(pd, &mut own) };
    if qp.is_null() {
        let e = crate::util::last_errno();
        drop_own_cqs(i);
        return Err(e);
    }
    // The capacities the QP got, as ibv_create_qp reports them.
    a.cap = own.cap;
    adopt(i, qp).inspect_err(|_| drop_own_cqs(i))
}

/// `rdma_create_qp_ex`.
pub(crate) unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    let i = match Id::from_handle(id) {
        Ok(i) => i,
        Err(e) => return fail_minus_one(e),
    };
    if attr.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: the caller passes readable, writable init attributes.
    let a = unsafe { &mut *attr };
    result((|| {
        let dev = cm_device()?;
        if !i.raw().qp.is_null() {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            a.pd = dev.pd;
            a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        }
        i.raw_mut().pd = a.pd;
        let cap = a.cap;
        cqs_for(i, dev.ctx, &mut a.send_cq, &mut a.recv_cq, &cap)?;
        // SAFETY: our own verb with writable attributes.
        let qp = unsafe { crate::qp::create_qp_ex(dev.ctx, a) };
        if qp.is_null() {
            let e = crate::util::last_errno();
            drop_own_cqs(i);
            return Err(e);
        }
        adopt(i, qp).inspect_err(|_| drop_own_cqs(i))
    })())
}

/// `rdma_destroy_qp`: the QP, and the CQs the library made for it.
pub(crate) unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    let Ok(i) = Id::from_handle(id) else {
        crate::util::set_errno(libc::EINVAL);
        return;
    };
    i.cm.release_qp();
    let qp = std::mem::replace(&mut i.raw_mut().qp, std::ptr::null_mut());
    if !qp.is_null() {
        // SAFETY: our own verb on the id's QP, destroyed once (its field is cleared).
        unsafe { crate::qp::ibv_destroy_qp(qp) };
    }
    drop_own_cqs(i);
}

/// `rdma_create_srq`: on `pd` (NULL: `id->pd`).
pub(crate) unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    let i = match Id::from_handle(id) {
        Ok(i) => i,
        Err(e) => return fail_minus_one(e),
    };
    result((|| {
        let dev = cm_device()?;
        let pd = if pd.is_null() { dev.pd } else { pd };
        // SAFETY: our own verb; the caller passes init attributes.
        let srq = unsafe { crate::srq::ibv_create_srq(pd, attr) };
        if srq.is_null() {
            return Err(crate::util::last_errno());
        }
        let raw = i.raw_mut();
        raw.pd = pd;
        raw.srq = srq;
        Ok(())
    })())
}

/// `rdma_create_srq_ex`: XRC and tag-matching SRQs are not there.
pub(crate) unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    _attr: *mut c_void,
) -> c_int {
    if Id::from_handle(id).is_err() {
        return fail_minus_one(libc::EINVAL);
    }
    super::unsupported::say("rdma_create_srq_ex (extended SRQs: use rdma_create_srq)");
    fail_minus_one(libc::EOPNOTSUPP)
}

/// `rdma_destroy_srq`.
pub(crate) unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    let Ok(i) = Id::from_handle(id) else {
        crate::util::set_errno(libc::EINVAL);
        return;
    };
    let srq = std::mem::replace(&mut i.raw_mut().srq, std::ptr::null_mut());
    if !srq.is_null() {
        // SAFETY: our own verb on the id's SRQ, destroyed once.
        unsafe { crate::srq::ibv_destroy_srq(srq) };
    }
}

/// `attr` in `ibv_qp_attr` form, with the mask of what it sets.
fn c_qp_attr(attr: &QpAttr, out: &mut ibv_qp_attr) -> c_int {
    let mut mask = 0;
    // Each field the CM set: its value in C form, and its mask bit.
    macro_rules! field {
        ($($rust:ident => $c:ident, $bit:ident, |$v:ident| $conv:expr;)*) => {$(
            if let Some($v) = attr.$rust {
                out.$c = $conv;
                mask |= $bit;
            }
        )*};
    }
    field! {
        qp_state => qp_state, IBV_QP_STATE, |s| crate::qp::qp_state_code(s);
        qp_access_flags => qp_access_flags, IBV_QP_ACCESS_FLAGS, |a| a.bits();
        pkey_index => pkey_index, IBV_QP_PKEY_INDEX, |p| p;
        port_num => port_num, IBV_QP_PORT, |p| p;
        qkey => qkey, IBV_QP_QKEY, |q| q;
        path_mtu => path_mtu, IBV_QP_PATH_MTU, |m| c_int::from(m.ibv_enum());
        dest_qp_num => dest_qp_num, IBV_QP_DEST_QPN, |n| n;
        rq_psn => rq_psn, IBV_QP_RQ_PSN, |p| p.value();
        max_dest_rd_atomic => max_dest_rd_atomic, IBV_QP_MAX_DEST_RD_ATOMIC, |n| n;
        min_rnr_timer => min_rnr_timer, IBV_QP_MIN_RNR_TIMER, |n| n;
        sq_psn => sq_psn, IBV_QP_SQ_PSN, |p| p.value();
        timeout => timeout, IBV_QP_TIMEOUT, |n| n;
        retry_cnt => retry_cnt, IBV_QP_RETRY_CNT, |n| n;
        rnr_retry => rnr_retry, IBV_QP_RNR_RETRY, |n| n;
        max_rd_atomic => max_rd_atomic, IBV_QP_MAX_QP_RD_ATOMIC, |n| n;
    }
    if let Some(av) = attr.ah_attr {
        let dgid = ibv_gid {
            raw: softrdma::Gid::from_ip(av.dest_ip).0,
        };
        out.ah_attr = super::id::global_ah(dgid, av.hop_limit, av.traffic_class);
        mask |= IBV_QP_AV;
    }
    mask
}

/// `rdma_init_qp_attr`: the attributes (and mask) that move a QP of this connection to
/// `qp_attr->qp_state`.
pub(crate) unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    let i = match Id::from_handle(id) {
        Ok(i) => i,
        Err(e) => return fail_minus_one(e),
    };
    if qp_attr.is_null() || qp_attr_mask.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: the caller passes a readable, writable ibv_qp_attr and int.
    let (out, mask) = unsafe { (&mut *qp_attr, &mut *qp_attr_mask) };
    result((|| {
        let target = crate::qp::qp_state_of(out.qp_state)?;
        let attr =
            i.cm.qp_attr(target)
                .map_err(|e| super::connect::cm_errno(&e))?;
        *mask = c_qp_attr(&attr, out);
        Ok(())
    })())
}
