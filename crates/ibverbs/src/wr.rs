//! The `ibv_wr_*` work-request API of `struct ibv_qp_ex`: `ibv_wr_start`, one builder call
//! per request (`ibv_wr_rdma_write`, `ibv_wr_send`, … then `ibv_wr_set_sge` /
//! `ibv_wr_set_inline_data`), and `ibv_wr_complete`, which posts the whole batch (or
//! `ibv_wr_abort`, which drops it). The calls are the inline functions of the header, which
//! jump through the QP's table; the table is filled here.
//!
//! Errors found while building (an operation outside the QP's `send_ops_flags`, inline data
//! too long) are kept and returned by `ibv_wr_complete`, which then posts nothing.

use std::ffi::{c_int, c_void};

use softrdma::{SendFlags, SendOp, SendWr, Sge};

use crate::abi::*;
use crate::post::{inline_bytes, post_errno, send_flags};
use crate::qp_object::{Qp, WrBatch};

/// The builder entries of an `ibv_qp_ex` (the rest of the struct is filled by the caller).
pub(crate) fn builder_table() -> ibv_qp_ex {
    ibv_qp_ex {
        // SAFETY: ibv_qp is plain data (pointers, integers, pthread objects whose all-zero
        // form is their static initializer on Linux); the caller overwrites it anyway.
        qp_base: unsafe { std::mem::zeroed() },
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: Some(wr_atomic_cmp_swp),
        wr_atomic_fetch_add: Some(wr_atomic_fetch_add),
        wr_bind_mw: Some(wr_bind_mw),
        wr_local_inv: Some(wr_local_inv),
        wr_rdma_read: Some(wr_rdma_read),
        wr_rdma_write: Some(wr_rdma_write),
        wr_rdma_write_imm: Some(wr_rdma_write_imm),
        wr_send: Some(wr_send),
        wr_send_imm: Some(wr_send_imm),
        wr_send_inv: Some(wr_send_inv),
        wr_send_tso: None,
        wr_set_ud_addr: Some(wr_set_ud_addr),
        wr_set_xrc_srqn: Some(wr_set_xrc_srqn),
        wr_set_inline_data: Some(wr_set_inline_data),
        wr_set_inline_data_list: Some(wr_set_inline_data_list),
        wr_set_sge: Some(wr_set_sge),
        wr_set_sge_list: Some(wr_set_sge_list),
        wr_start: Some(wr_start),
        wr_complete: Some(wr_complete),
        wr_abort: Some(wr_abort),
        wr_atomic_write: Some(wr_atomic_write),
    }
}

fn qp_of<'a>(qp: *mut ibv_qp_ex) -> &'a Qp {
    // SAFETY: reached through the QP's own table: a boxed Qp of this library.
    unsafe { &*qp.cast::<Qp>() }
}

fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut WrBatch)) {
    let q = qp_of(qp);
    let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
    f(q, &mut b);
}

/// Starts a new request of `op`, allowed by `ops_bit`, with the QP's current `wr_id` and
/// `wr_flags`.
fn push(qp: *mut ibv_qp_ex, ops_bit: u64, op: SendOp) {
    with_batch(qp, |q, b| {
        if b.error.is_some() {
            return;
        }
        if q.send_ops & ops_bit == 0 {
            b.error = Some(libc::EINVAL);
            return;
        }
        let flags = match send_flags(q.ibv.wr_flags) {
            Ok(f) => f,
            Err(e) => {
                b.error = Some(e);
                return;
            }
        };
        b.wrs.push(SendWr {
            wr_id: q.ibv.wr_id,
            op,
            sg_list: Vec::new(),
            flags,
            inline_data: None,
            ud: None,
            xrc_srqn: None,
        });
    });
}

/// Applies `f` to the request being built (an error if there is none).
fn last(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut SendWr) -> Result<(), c_int>) {
    with_batch(qp, |q, b| {
        if b.error.is_some() {
            return;
        }
        let r = match b.wrs.last_mut() {
            Some(w) => f(q, w),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.error = Some(e);
        }
    });
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, b| {
        b.wrs.clear();
        b.error = None;
    });
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    let q = qp_of(qp);
    let (wrs, error) = {
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        (std::mem::take(&mut b.wrs), b.error.take())
    };
    if let Some(e) = error {
        return e;
    }
    // All or nothing (ibv_wr_post(3): on failure "the entire posting will be aborted").
    match q.qp.post_send_all(wrs) {
        Ok(()) => 0,
        Err(e) => post_errno(&e.kind),
    }
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, b| {
        b.wrs.clear();
        b.error = None;
    });
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    push(
        qp,
        IBV_QP_EX_WITH_RDMA_WRITE,
        SendOp::RdmaWrite { remote_addr, rkey },
    );
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    let imm = u32::from_be(imm);
    let op = SendOp::RdmaWriteWithImm {
        remote_addr,
        rkey,
        imm,
    };
    push(qp, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, op);
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    push(
        qp,
        IBV_QP_EX_WITH_RDMA_READ,
        SendOp::RdmaRead { remote_addr, rkey },
    );
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    push(qp, IBV_QP_EX_WITH_SEND, SendOp::Send);
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    let imm = u32::from_be(imm);
    push(
        qp,
        IBV_QP_EX_WITH_SEND_WITH_IMM,
        SendOp::SendWithImm { imm },
    );
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    push(
        qp,
        IBV_QP_EX_WITH_SEND_WITH_INV,
        SendOp::SendWithInv { rkey },
    );
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    push(qp, IBV_QP_EX_WITH_LOCAL_INV, SendOp::LocalInv { rkey });
}

/// `ibv_wr_bind_mw`: binds `mw` with the new `rkey` (the program keeps it, as with a
/// BIND_MW request).
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    if info.is_null() {
        with_batch(qp, |_, b| b.error = b.error.or(Some(libc::EINVAL)));
        return;
    }
    // SAFETY: checked non-null; the program's bind description.
    match crate::post::bind_op(mw, rkey, unsafe { &*info }) {
        Ok(op) => push(qp, IBV_QP_EX_WITH_BIND_MW, op),
        Err(e) => with_batch(qp, |_, b| b.error = b.error.or(Some(e))),
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let op = SendOp::AtomicCmpSwap {
        remote_addr,
        rkey,
        compare,
        swap,
    };
    push(qp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, op);
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    let op = SendOp::AtomicFetchAdd {
        remote_addr,
        rkey,
        add,
    };
    push(qp, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, op);
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    last(qp, |_, w| {
        w.sg_list = vec![Sge { addr, length, lkey }];
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    last(qp, |_, w| {
        let n = c_int::try_from(num_sge).map_err(|_| libc::EINVAL)?;
        // SAFETY: the program passes `num_sge` readable SGEs.
        w.sg_list = unsafe { crate::post::sg_list(sg_list, n) }?;
        Ok(())
    });
}

/// Makes the request being built inline with `data`.
fn set_inline(qp: *mut ibv_qp_ex, sges: &[Sge]) {
    last(qp, |q, w| {
        if w.op.writes_locally() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program's inline buffers are readable (IBV_SEND_INLINE's contract).
        w.inline_data = Some(unsafe { inline_bytes(sges, q.max_inline) }?);
        w.sg_list.clear();
        w.flags = w.flags | SendFlags::INLINE;
        Ok(())
    });
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let Ok(length) = u32::try_from(length) else {
        last(qp, |_, _| Err(libc::EINVAL));
        return;
    };
    let sge = Sge {
        addr: addr as u64,
        length,
        lkey: 0,
    };
    set_inline(qp, &[sge]);
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    if num_buf > 0 && buf_list.is_null() {
        last(qp, |_, _| Err(libc::EINVAL));
        return;
    }
    let bufs = if num_buf == 0 {
        &[][..]
    } else {
        // SAFETY: the program passes `num_buf` readable buffer descriptors.
        unsafe { std::slice::from_raw_parts(buf_list, num_buf) }
    };
    let mut sges = Vec::with_capacity(bufs.len());
    for b in bufs {
        let Ok(length) = u32::try_from(b.length) else {
            last(qp, |_, _| Err(libc::EINVAL));
            return;
        };
        sges.push(Sge {
            addr: b.addr as u64,
            length,
            lkey: 0,
        });
    }
    set_inline(qp, &sges);
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    last(qp, |q, w| {
        if q.qp.qp_type() != softrdma::QpType::Ud {
            return Err(libc::EINVAL);
        }
        w.ud = Some(crate::ah::Ah::from_wr(ah)?.ah.dest(remote_qpn, remote_qkey));
        Ok(())
    });
}

unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, remote_srqn: u32) {
    last(qp, |q, w| {
        if q.qp.qp_type() != softrdma::QpType::XrcIni {
            return Err(libc::EINVAL);
        }
        w.xrc_srqn = Some(remote_srqn);
        Ok(())
    });
}

unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    push(
        qp,
        IBV_QP_EX_WITH_ATOMIC_WRITE,
        SendOp::AtomicWrite { remote_addr, rkey },
    );
    // The 8 bytes travel as the request's payload, copied now (the caller's buffer is only
    // borrowed for the call).
    last(qp, |_, w| {
        if atomic_wr.is_null() {
            return Err(libc::EINVAL);
        }
        let mut data = [0u8; 8];
        // SAFETY: ibv_wr_atomic_write's contract: `atomic_wr` points to 8 readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(atomic_wr.cast::<u8>(), data.as_mut_ptr(), 8) };
        w.inline_data = Some(Box::new(data));
        w.flags = w.flags | SendFlags::INLINE;
        Ok(())
    });
}
