//! Address handles and multicast: `ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`, `ibv_attach_mcast`, `ibv_detach_mcast`. softrdma's
//! [`AddressHandle`] checks the address at creation (port, source GID, family, route), as
//! rdma-core's `ibv_create_ah` does by resolving the neighbour.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use softrdma::{AddressHandle, AhAttr, CreateAhError, Gid, McastError, WcOpcode, WcStatus};

use crate::abi::*;
use crate::context::Context;
use crate::pd::Pd;
use crate::qp_object::Qp;
use crate::util::{
    creating_user, fail_errno, fail_minus_one, fail_null, register, unregister, Kind,
};

/// An address handle: the C struct first.
#[repr(C)]
pub(crate) struct Ah {
    pub ibv: ibv_ah,
    pub ah: AddressHandle,
    pub pd: *mut Pd,
}

impl Ah {
    /// The AH behind a handle a UD work request names (the hot path: not looked up).
    pub(crate) fn from_wr<'a>(ah: *mut ibv_ah) -> Result<&'a Ah, c_int> {
        if ah.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program passes an AH of this library in its UD work request; AHs are
        // boxed `Ah`s (the ibv_ah first) until ibv_destroy_ah.
        Ok(unsafe { &*ah.cast::<Ah>() })
    }
}

fn ah_errno(e: &CreateAhError) -> c_int {
    match e {
        CreateAhError::Unreachable { source, .. } => {
            source.raw_os_error().unwrap_or(libc::ENETUNREACH)
        }
        _ => libc::EINVAL,
    }
}

/// softrdma's attributes of an `ibv_ah_attr`: RoCE addresses are GIDs, so the GRH is required.
fn ah_attr(a: &ibv_ah_attr) -> Result<AhAttr, c_int> {
    if a.is_global == 0 {
        return Err(libc::EINVAL);
    }
    Ok(AhAttr {
        dgid: Gid(a.grh.dgid.raw),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        sl: a.sl,
        port_num: a.port_num,
    })
}

/// `ibv_create_ah`.
pub(crate) unsafe extern "C" fn ibv_create_ah(
    pd: *mut ibv_pd,
    attr: *mut ibv_ah_attr,
) -> *mut ibv_ah {
    let _users = creating_user();
    let p = match Pd::from_handle(pd) {
        Ok(p) => p,
        Err(e) => return fail_null(e),
    };
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable attributes.
    let attr = match ah_attr(unsafe { &*attr }) {
        Ok(a) => a,
        Err(e) => return fail_null(e),
    };
    let ah = match p.pd.create_ah(&attr) {
        Ok(a) => a,
        Err(e) => return fail_null(ah_errno(&e)),
    };
    p.users.fetch_add(1, Ordering::AcqRel);
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let b = Box::into_raw(Box::new(Ah {
        ibv: ibv_ah {
            context: p.ibv.context,
            pd,
            handle: NEXT.fetch_add(1, Ordering::Relaxed),
        },
        ah,
        pd: pd.cast(),
    }));
    let h = b.cast::<ibv_ah>();
    register(h, Kind::Ah, p.ibv.context);
    h
}

/// `ibv_destroy_ah`. Work requests already posted copied the address: they still go out.
pub(crate) unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    if !unregister(ah, Kind::Ah) {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: was live (a boxed Ah), now unregistered: freed once.
    let a = unsafe { Box::from_raw(ah.cast::<Ah>()) };
    // SAFETY: the PD cannot go while the AH counts as its user.
    unsafe { &*a.pd }.users.fetch_sub(1, Ordering::AcqRel);
    0
}

/// `ibv_init_ah_from_wc`: the attributes that answer the sender of a received UD datagram,
/// from the GRH area at the start of its receive buffer.
pub(crate) unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_minus_one(e),
    };
    if wc.is_null() || attr.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: the caller passes a readable completion.
    let w = unsafe { &*wc };
    let mut out = ibv_ah_attr {
        dlid: w.slid,
        sl: w.sl,
        src_path_bits: w.dlid_path_bits,
        port_num,
        ..Default::default()
    };
    if w.wc_flags & IBV_WC_GRH != 0 {
        if grh.is_null() {
            return fail_minus_one(libc::EINVAL);
        }
        // Only `grh` is read from the completion.
        let completion = softrdma::WorkCompletion {
            wr_id: w.wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: w.byte_len,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: w.qp_num,
            src_qp: w.src_qp,
            grh: true,
            timestamp: softrdma::DeviceTime::ZERO,
        };
        // SAFETY: with IBV_WC_GRH the program passes the 40-byte GRH area of the buffer.
        let area = unsafe { std::slice::from_raw_parts(grh.cast::<u8>(), softrdma::GRH_LEN) };
        let sgid_index = ctx.device.gid_index() as u8;
        let Some(a) = AhAttr::from_wc(&completion, area, sgid_index) else {
            return fail_minus_one(libc::EPROTONOSUPPORT);
        };
        out.is_global = 1;
        out.grh = ibv_global_route {
            dgid: ibv_gid { raw: a.dgid.0 },
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        };
    }
    // SAFETY: the caller passes writable attributes.
    unsafe { attr.write(out) };
    0
}

/// `ibv_create_ah_from_wc`.
pub(crate) unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    let p = match Pd::from_handle(pd) {
        Ok(p) => p,
        Err(e) => return fail_null(e),
    };
    let mut attr = ibv_ah_attr::default();
    // SAFETY: forwarded; `attr` is ours.
    if unsafe { ibv_init_ah_from_wc(p.ibv.context, port_num, wc, grh, &mut attr) } != 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: forwarded.
    unsafe { ibv_create_ah(pd, &mut attr) }
}

fn mcast_errno(e: &McastError) -> c_int {
    match e {
        McastError::Join(_) => libc::EADDRNOTAVAIL,
        _ => libc::EINVAL,
    }
}

fn mcast(qp: *mut ibv_qp, gid: *const ibv_gid, attach: bool) -> c_int {
    let q = match Qp::from_handle(qp) {
        Ok(q) => q,
        Err(e) => return fail_errno(e),
    };
    if gid.is_null() {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: the caller passes a readable GID.
    let g = Gid(unsafe { (*gid).raw });
    let r = if attach {
        q.qp.attach_mcast(&g)
    } else {
        q.qp.detach_mcast(&g)
    };
    match r {
        Ok(()) => 0,
        Err(e) => fail_errno(mcast_errno(&e)),
    }
}

/// `ibv_attach_mcast` (UD QPs; the LID is meaningless on RoCE).
pub(crate) unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
) -> c_int {
    let _ = lid;
    mcast(qp, gid, true)
}

/// `ibv_detach_mcast`.
pub(crate) unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
) -> c_int {
    let _ = lid;
    mcast(qp, gid, false)
}
