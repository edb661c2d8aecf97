//! Posting work requests: `ibv_context_ops.post_send` and `.post_recv` (the inline
//! `ibv_post_send` / `ibv_post_recv`). The C linked list is translated request by request into
//! softrdma's [`SendWr`] / [`RecvWr`] and posted in one batch under the device lock; on an
//! error `*bad_wr` names the first request not posted and the return value is its errno
//! (`EINVAL` for a malformed request or a QP state that refuses it, `ENOMEM` for a full
//! queue), as rdma-core documents.

use std::ffi::c_int;

use softrdma::{
    AccessFlags, MwBind, PostErrorKind, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge,
};

use crate::ah::Ah;

use crate::abi::*;
use crate::pd::Mr;
use crate::qp_object::Qp;
use crate::util::{is_live, set_errno, Kind};

/// The errno of a refused post.
pub(crate) fn post_errno(kind: &PostErrorKind) -> c_int {
    match kind {
        PostErrorKind::QueueFull => libc::ENOMEM,
        PostErrorKind::InvalidState(_)
        | PostErrorKind::InvalidArgument(_)
        | PostErrorKind::MessageTooLong(_) => libc::EINVAL,
    }
}

/// The scatter/gather list of a C request.
///
/// # Safety
/// `sg_list` must point to `num_sge` readable `ibv_sge`s when `num_sge > 0`.
pub(crate) unsafe fn sg_list(sg_list: *const ibv_sge, num_sge: c_int) -> Result<Vec<Sge>, c_int> {
    let n = usize::try_from(num_sge).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if sg_list.is_null() || n > softrdma::MAX_SGE as usize {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller guarantees `n` readable elements.
    let sges = unsafe { std::slice::from_raw_parts(sg_list, n) };
    Ok(sges
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

/// Copies the bytes an inline request's SGEs name (plain addresses: inline data need not be
/// registered), at most `max` of them.
///
/// # Safety
/// Each SGE must name readable memory, as `IBV_SEND_INLINE` requires.
pub(crate) unsafe fn inline_bytes(sges: &[Sge], max: u32) -> Result<Box<[u8]>, c_int> {
    let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
    if total > u64::from(max) {
        return Err(libc::EINVAL);
    }
    let mut data = Vec::with_capacity(total as usize);
    for s in sges {
        if s.length == 0 {
            continue;
        }
        if s.addr == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller guarantees the SGE names `length` readable bytes.
        let bytes =
            unsafe { std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize) };
        data.extend_from_slice(bytes);
    }
    Ok(data.into_boxed_slice())
}

/// Send flags from `ibv_send_flags`.
pub(crate) fn send_flags(flags: u32) -> Result<SendFlags, c_int> {
    if flags
        & !(IBV_SEND_FENCE
            | IBV_SEND_SIGNALED
            | IBV_SEND_SOLICITED
            | IBV_SEND_INLINE
            | IBV_SEND_IP_CSUM)
        != 0
    {
        return Err(libc::EINVAL);
    }
    if flags & IBV_SEND_IP_CSUM != 0 {
        // Checksum offload is for raw packet and UD QPs on NICs that compute IP checksums.
        return Err(libc::EINVAL);
    }
    let mut f = SendFlags::empty();
    for (bit, flag) in [
        (IBV_SEND_FENCE, SendFlags::FENCE),
        (IBV_SEND_SIGNALED, SendFlags::SIGNALED),
        (IBV_SEND_SOLICITED, SendFlags::SOLICITED),
        (IBV_SEND_INLINE, SendFlags::INLINE),
    ] {
        if flags & bit != 0 {
            f = f | flag;
        }
    }
    Ok(f)
}

/// softrdma's form of one C send request.
///
/// # Safety
/// `wr` must be a readable request whose SGL (and inline data) are readable.
unsafe fn send_wr(qp: &Qp, wr: &ibv_send_wr) -> Result<SendWr, c_int> {
    // SAFETY: forwarded.
    let sgl = unsafe { sg_list(wr.sg_list, wr.num_sge) }?;
    // SAFETY: the union member read is the one the opcode selects; all members are plain
    // integers and pointers, so any bits are valid values.
    let (rdma, atomic) = unsafe { (wr.wr.rdma, wr.wr.atomic) };
    let op = match wr.opcode {
        IBV_WR_RDMA_WRITE => SendOp::RdmaWrite {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::RdmaWriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm: u32::from_be(wr.imm_data),
        },
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm {
            imm: u32::from_be(wr.imm_data),
        },
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv { rkey: wr.imm_data },
        IBV_WR_RDMA_READ => SendOp::RdmaRead {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::AtomicCmpSwap {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::AtomicFetchAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        // 8 bytes from the SGL (or inline), stored at once at the aligned target.
        IBV_WR_ATOMIC_WRITE => SendOp::AtomicWrite {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        // `invalidate_rkey` shares the word of `imm_data`, in host order.
        IBV_WR_LOCAL_INV => SendOp::LocalInv { rkey: wr.imm_data },
        IBV_WR_BIND_MW => {
            // SAFETY: the member the opcode selects; plain integers and pointers.
            let b = unsafe { wr.ext.bind_mw };
            bind_op(b.mw.cast(), b.rkey, &b.bind_info)?
        }
        // TSO, driver opcodes: not softrdma operations.
        _ => return Err(libc::EINVAL),
    };
    let flags = send_flags(wr.send_flags)?;
    let inline = flags.contains(SendFlags::INLINE) && !op.writes_locally();
    let (sg_list, inline_data) = if inline {
        // Inline or not, a request names at most max_send_sge SGEs (rxe checks the count
        // before it looks at the flags); the engine, given the bytes, would not see them.
        if sgl.len() > qp.qp.cap().max_send_sge as usize {
            return Err(libc::EINVAL);
        }
        // SAFETY: IBV_SEND_INLINE's contract: the SGEs name readable memory.
        (
            Vec::new(),
            Some(unsafe { inline_bytes(&sgl, qp.max_inline) }?),
        )
    } else {
        (sgl, None)
    };
    let ud = if qp.qp.qp_type() == QpType::Ud {
        // SAFETY: on a UD QP the `ud` member of the union is the one the program filled.
        let ud = unsafe { wr.wr.ud };
        let ah = Ah::from_wr(ud.ah)?;
        Some(ah.ah.dest(ud.remote_qpn, ud.remote_qkey))
    } else {
        None
    };
    Ok(SendWr {
        wr_id: wr.wr_id,
        op,
        sg_list,
        flags,
        inline_data,
        ud,
        // `qp_type.xrc.remote_srqn`: meaningful on an XRC initiator only.
        xrc_srqn: (qp.qp.qp_type() == QpType::XrcIni).then_some(wr.remote_srqn),
    })
}

/// Posts the requests of a C list: 0, or the errno of the first request not posted, which
/// `*bad` then names.
fn post_list<W, T>(
    first: *mut W,
    bad: *mut *mut W,
    next: impl Fn(&W) -> *mut W + Copy,
    convert: impl Fn(&W) -> Result<T, c_int>,
    post: impl FnOnce(&mut dyn Iterator<Item = T>) -> Result<(), (usize, c_int)>,
) -> c_int {
    match convert_and_post(first, next, convert, post) {
        Ok(()) => 0,
        Err((index, errno)) => {
            set_bad(first, index, next, bad);
            set_errno(errno);
            errno
        }
    }
}

/// The work of [`post_list`]; on error, the index of the first request not posted.
fn convert_and_post<W, T>(
    first: *mut W,
    next: impl Fn(&W) -> *mut W,
    convert: impl Fn(&W) -> Result<T, c_int>,
    post: impl FnOnce(&mut dyn Iterator<Item = T>) -> Result<(), (usize, c_int)>,
) -> Result<(), (usize, c_int)> {
    let mut converted_err: Option<(usize, c_int)> = None;
    {
        let mut cur = first;
        let mut index = 0;
        let mut iter = std::iter::from_fn(|| {
            if cur.is_null() || converted_err.is_some() {
                return None;
            }
            // SAFETY: the program passes a list of readable requests.
            let w = unsafe { &*cur };
            match convert(w) {
                Ok(t) => {
                    cur = next(w);
                    index += 1;
                    Some(t)
                }
                Err(e) => {
                    converted_err = Some((index, e));
                    None
                }
            }
        });
        post(&mut iter)?;
    }
    match converted_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Sets `*bad` to the `index`-th request of the list (or the first, if the list is shorter).
fn set_bad<W>(first: *mut W, index: usize, next: impl Fn(&W) -> *mut W, bad: *mut *mut W) {
    if bad.is_null() {
        return;
    }
    let mut cur = first;
    for _ in 0..index {
        if cur.is_null() {
            break;
        }
        // SAFETY: the program's list of readable requests.
        cur = next(unsafe { &*cur });
    }
    // SAFETY: the program passes a writable out-pointer.
    unsafe { bad.write(if cur.is_null() { first } else { cur }) };
}

/// `ibv_context_ops.post_send`.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: reached through the QP's context table: a boxed Qp of this library.
    let q = unsafe { &*qp.cast::<Qp>() };
    let next = |w: &ibv_send_wr| w.next;
    // SAFETY: each request is the program's readable work request.
    let convert = |w: &ibv_send_wr| unsafe { send_wr(q, w) };
    post_list(wr, bad_wr, next, convert, |it| {
        q.qp.post_send(it)
            .map_err(|e| (e.bad_wr, post_errno(&e.kind)))
    })
}

/// `ibv_context_ops.post_srq_recv` (the inline `ibv_post_srq_recv`).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: reached through the SRQ's context table: a boxed Srq of this library.
    let s = unsafe { &*srq.cast::<crate::srq::Srq>() };
    post_list(
        wr,
        bad_wr,
        |w: &ibv_recv_wr| w.next,
        recv_wr,
        |it| {
            s.srq
                .post_recv(it)
                .map_err(|e| (e.bad_wr, post_errno(&e.kind)))
        },
    )
}

/// One receive work request of the program's list.
fn recv_wr(w: &ibv_recv_wr) -> Result<RecvWr, c_int> {
    // SAFETY: the program's readable request and SGL.
    let sg_list = unsafe { sg_list(w.sg_list, w.num_sge) }?;
    Ok(RecvWr {
        wr_id: w.wr_id,
        sg_list,
    })
}

/// `ibv_context_ops.post_recv`.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: as in post_send.
    let q = unsafe { &*qp.cast::<Qp>() };
    let next = |w: &ibv_recv_wr| w.next;
    post_list(wr, bad_wr, next, recv_wr, |it| {
        q.qp.post_recv(it)
            .map_err(|e| (e.bad_wr, post_errno(&e.kind)))
    })
}

/// The operation of an `IBV_WR_BIND_MW` request (`mw` the window, `rkey` the new rkey).
pub(crate) fn bind_op(
    mw: *mut ibv_mw,
    rkey: u32,
    info: &ibv_mw_bind_info,
) -> Result<SendOp, c_int> {
    if !is_live(mw, Kind::Mw) {
        return Err(libc::EINVAL);
    }
    // SAFETY: live MW handles are boxed `Mw`s until dealloc_mw.
    let mw_rkey = unsafe { (*mw).rkey };
    if info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
        return Err(libc::EINVAL);
    }
    let mr_lkey = if info.mr.is_null() {
        if info.addr != 0 || info.length != 0 {
            return Err(libc::EINVAL);
        }
        0
    } else {
        if !is_live(info.mr, Kind::Mr) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live MR handles are boxed `Mr`s until ibv_dereg_mr.
        unsafe { (*info.mr.cast::<Mr>()).ibv.lkey }
    };
    Ok(SendOp::BindMw(MwBind {
        mw_rkey,
        new_rkey: rkey,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        // Rights beyond remote read/write/atomic make the bind fail (MW_BIND_ERR), as rxe.
        access: AccessFlags::from_bits_truncate(info.mw_access_flags),
    }))
}
