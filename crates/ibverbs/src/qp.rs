//! Queue pairs: `ibv_create_qp`, `ibv_create_qp_ex`, `ibv_qp_to_qp_ex`, `ibv_modify_qp`,
//! `ibv_query_qp`, `ibv_destroy_qp`. The attribute masks are translated into softrdma's
//! [`QpAttr`] (its `Some` fields are the mask); the transition rules are the engine's.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use softrdma::{
    AccessFlags, AddressVector, CreateQpError, Gid, ModifyQpError, Mtu, Psn, QpAttr, QpCaps,
    QpInitAttr, QpState, QpType,
};

use crate::abi::*;
use crate::context::Context;
use crate::cq::Cq;
use crate::pd::Pd;
use crate::qp_object::{Qp, WrBatch, DEFAULT_SEND_OPS};
use crate::util::{creating_user, fail_errno, fail_null, is_live, register, unregister, Kind};

/// The `ibv_qp_state` of a softrdma state, and back.
pub(crate) fn qp_state_code(s: QpState) -> c_int {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

pub(crate) fn qp_state_of(code: c_int) -> Result<QpState, c_int> {
    Ok(match code {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return Err(libc::EINVAL),
    })
}

/// What both creation verbs share.
struct CreateArgs {
    pd: *mut ibv_pd,
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: *mut ibv_qp_cap,
    qp_type: c_int,
    sq_sig_all: c_int,
    send_ops: u64,
}

fn create(args: &CreateArgs) -> Result<*mut Qp, c_int> {
    let _users = creating_user();
    let pd = Pd::from_handle(args.pd)?;
    let send_cq = Cq::usable(args.send_cq)?;
    // An XRC initiator receives nothing: its receive CQ may be left out (it is then the send
    // CQ for softrdma, and not counted).
    let xrc_ini = args.qp_type == IBV_QPT_XRC_SEND;
    let recv_cq = if xrc_ini && args.recv_cq.is_null() {
        send_cq
    } else {
        Cq::usable(args.recv_cq)?
    };
    let srq = if args.srq.is_null() {
        None
    } else {
        Some(crate::srq::Srq::from_handle(args.srq)?)
    };
    // A CQ or SRQ of another context is not this context's to use (the kernel finds no such
    // handle in the caller's file): accepted, closing that other context would leave the QP
    // with a CQ whose `context` points at freed memory.
    let context = pd.ibv.context;
    if send_cq.ibv.cq.context != context
        || recv_cq.ibv.cq.context != context
        || srq.is_some_and(|s| s.ibv.context != context)
    {
        return Err(libc::EINVAL);
    }
    let qp_type = match args.qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        IBV_QPT_XRC_SEND if srq.is_none() => QpType::XrcIni,
        // A target belongs to an XRC domain (`ibv_create_qp_ex` with IBV_QP_INIT_ATTR_XRCD).
        IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => return Err(libc::EINVAL),
        // Raw packet and driver QPs: not softrdma's.
        8 | 0xff => return Err(libc::EOPNOTSUPP),
        _ => return Err(libc::EINVAL),
    };
    if args.cap.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's init attributes hold the capabilities.
    let cap = unsafe { *args.cap };
    let init = QpInitAttr {
        send_cq: send_cq.cq.clone(),
        recv_cq: recv_cq.cq.clone(),
        qp_type,
        cap: QpCaps {
            max_send_wr: cap.max_send_wr,
            max_recv_wr: cap.max_recv_wr,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            max_inline_data: cap.max_inline_data,
        },
        sq_sig_all: args.sq_sig_all != 0,
        srq: srq.map(|s| s.srq.clone()),
    };
    let qp = pd.pd.create_qp(&init).map_err(|e| match e {
        CreateQpError::InvalidCaps(_) | CreateQpError::WrongDevice => libc::EINVAL,
    })?;
    let c = qp.cap();
    // The program learns the capabilities it got, as from the kernel.
    // SAFETY: as above, writable.
    unsafe {
        *args.cap = ibv_qp_cap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    };
    pd.users.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = srq {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    send_cq.users.fetch_add(1, Ordering::AcqRel);
    if !args.recv_cq.is_null() {
        recv_cq.users.fetch_add(1, Ordering::AcqRel);
    }
    let qpn = qp.qp_num();
    let p = Box::into_raw(Box::new(Qp {
        ibv: ibv_qp_ex {
            qp_base: ibv_qp {
                context: pd.ibv.context,
                qp_context: args.qp_context,
                pd: args.pd,
                send_cq: args.send_cq,
                recv_cq: args.recv_cq,
                srq: args.srq,
                handle: qpn,
                qp_num: qpn,
                state: 0,
                qp_type: args.qp_type,
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
        pd: args.pd.cast(),
        send_cq: args.send_cq.cast(),
        recv_cq: args.recv_cq.cast(),
        xrcd: std::ptr::null_mut(),
        sq_sig_all: args.sq_sig_all != 0,
        max_inline: c.max_inline_data,
        send_ops: args.send_ops,
        batch: Mutex::new(WrBatch::default()),
    }));
    if let Ok(ctx) = Context::from_handle(pd.ibv.context) {
        Context::name_object(&ctx.qps, qpn, Some(p as usize));
    }
    register(p.cast::<ibv_qp>(), Kind::Qp, pd.ibv.context);
    Ok(p)
}

/// `ibv_create_qp`.
pub(crate) unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable, writable init attributes.
    let a = unsafe { &mut *attr };
    let args = CreateArgs {
        pd,
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: &mut a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
        send_ops: DEFAULT_SEND_OPS,
    };
    match create(&args) {
        Ok(p) => p.cast(),
        Err(e) => fail_null(e),
    }
}

/// The `ibv_wr_*` operations a QP of type `qp_type` may be created with (`send_ops_flags`),
/// as rxe's provider allows them: UC has no READ and no atomics, and no local invalidate
/// either; UD only SENDs; any other type none (rxe refuses `send_ops_flags` with it, even
/// empty).
fn send_ops_of(qp_type: c_int) -> u64 {
    match qp_type {
        IBV_QPT_RC | IBV_QPT_XRC_SEND => DEFAULT_SEND_OPS,
        IBV_QPT_UC => {
            IBV_QP_EX_WITH_RDMA_WRITE
                | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                | IBV_QP_EX_WITH_SEND
                | IBV_QP_EX_WITH_SEND_WITH_IMM
                | IBV_QP_EX_WITH_BIND_MW
                | IBV_QP_EX_WITH_SEND_WITH_INV
        }
        IBV_QPT_UD => IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
        _ => 0,
    }
}

/// `verbs_context.create_qp_ex` (behind the inline `ibv_create_qp_ex` when more than the PD
/// is in `comp_mask`).
pub(crate) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if attr.is_null() || Context::from_handle(context).is_err() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes readable, writable init attributes.
    let a = unsafe { &mut *attr };
    let known = (1 << 7) - 1;
    if a.comp_mask & !known != 0 {
        return fail_null(libc::EINVAL);
    }
    let supported = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !supported != 0 {
        // TSO, RSS indirection: not softrdma's.
        return fail_null(libc::EOPNOTSUPP);
    }
    if a.qp_type == IBV_QPT_XRC_RECV {
        // A target: its XRC domain instead of a PD, and no work requests to build.
        if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 && a.send_ops_flags != 0 {
            return fail_null(libc::EINVAL);
        }
        return match crate::xrc::create_target(context, a) {
            Ok(p) => p,
            Err(e) => fail_null(e),
        };
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return fail_null(libc::EINVAL);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return fail_null(libc::EOPNOTSUPP);
    }
    let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        let allowed = send_ops_of(a.qp_type);
        if allowed == 0 || a.send_ops_flags & !allowed != 0 {
            return fail_null(libc::EOPNOTSUPP);
        }
        a.send_ops_flags
    } else {
        DEFAULT_SEND_OPS
    };
    // SAFETY: the PD handle is checked in `create`; its context must be this one.
    if is_live(a.pd, Kind::Pd) && unsafe { (*a.pd).context } != context {
        return fail_null(libc::EINVAL);
    }
    let args = CreateArgs {
        pd: a.pd,
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: &mut a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
        send_ops,
    };
    match create(&args) {
        Ok(p) => p.cast(),
        Err(e) => fail_null(e),
    }
}

/// `ibv_qp_to_qp_ex`: every softrdma QP has the `ibv_wr_*` table.
pub(crate) unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    match Qp::from_handle(qp) {
        Ok(_) => qp.cast(),
        Err(e) => fail_null(e),
    }
}

/// The destination of an address vector: RoCE needs the GRH (the destination GID is the
/// peer's IP address).
fn address_vector(ctx: &Context, ah: &ibv_ah_attr) -> Result<AddressVector, c_int> {
    if ah.is_global == 0 {
        return Err(libc::EINVAL);
    }
    if usize::from(ah.grh.sgid_index) >= ctx.device.gid_table().len() {
        return Err(libc::EINVAL);
    }
    if ah.port_num > 1 {
        return Err(libc::EINVAL);
    }
    let dest_ip = Gid(ah.grh.dgid.raw).to_ip().ok_or(libc::EINVAL)?;
    Ok(AddressVector {
        dest_ip,
        traffic_class: ah.grh.traffic_class,
        hop_limit: ah.grh.hop_limit,
    })
}

/// Translates `attr` under `mask` into softrdma's attributes.
fn qp_attr(ctx: &Context, qp: &Qp, attr: &ibv_qp_attr, mask: c_int) -> Result<QpAttr, c_int> {
    let known = ((1 << 21) - 1) | IBV_QP_RATE_LIMIT;
    if mask & !known != 0 {
        return Err(libc::EINVAL);
    }
    if mask & IBV_QP_RATE_LIMIT != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if mask & (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP) != 0 {
        // No automatic path migration; capabilities are fixed at creation.
        return Err(libc::EINVAL);
    }
    if mask & IBV_QP_CUR_STATE != 0 && qp_state_of(attr.cur_qp_state)? != qp.qp.state() {
        return Err(libc::EINVAL);
    }
    let has = |bit: c_int| mask & bit != 0;
    let mut a = QpAttr::default();
    if has(IBV_QP_STATE) {
        a.qp_state = Some(qp_state_of(attr.qp_state)?);
    }
    if has(IBV_QP_ACCESS_FLAGS) {
        // ON_DEMAND is a region's property; mlx5 and the kernel take it here and ignore it.
        if attr.qp_access_flags & !(0xf | IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND) != 0 {
            return Err(libc::EINVAL);
        }
        a.qp_access_flags = Some(AccessFlags::from_bits_truncate(attr.qp_access_flags & 0xf));
    }
    if has(IBV_QP_PKEY_INDEX) {
        a.pkey_index = Some(attr.pkey_index);
    }
    if has(IBV_QP_PORT) {
        a.port_num = Some(attr.port_num);
    }
    if has(IBV_QP_QKEY) {
        a.qkey = Some(attr.qkey);
    }
    if has(IBV_QP_AV) {
        a.ah_attr = Some(address_vector(ctx, &attr.ah_attr)?);
    }
    if has(IBV_QP_PATH_MTU) {
        let mtu = u8::try_from(attr.path_mtu)
            .ok()
            .and_then(Mtu::from_ibv_enum);
        a.path_mtu = Some(mtu.ok_or(libc::EINVAL)?);
    }
    if has(IBV_QP_TIMEOUT) {
        a.timeout = Some(attr.timeout);
    }
    if has(IBV_QP_RETRY_CNT) {
        a.retry_cnt = Some(attr.retry_cnt);
    }
    if has(IBV_QP_RNR_RETRY) {
        a.rnr_retry = Some(attr.rnr_retry);
    }
    if has(IBV_QP_RQ_PSN) {
        a.rq_psn = Some(Psn::new(attr.rq_psn & 0xff_ffff));
    }
    if has(IBV_QP_MAX_QP_RD_ATOMIC) {
        a.max_rd_atomic = Some(attr.max_rd_atomic);
    }
    if has(IBV_QP_MIN_RNR_TIMER) {
        a.min_rnr_timer = Some(attr.min_rnr_timer);
    }
    if has(IBV_QP_SQ_PSN) {
        a.sq_psn = Some(Psn::new(attr.sq_psn & 0xff_ffff));
    }
    if has(IBV_QP_MAX_DEST_RD_ATOMIC) {
        a.max_dest_rd_atomic = Some(attr.max_dest_rd_atomic);
    }
    if has(IBV_QP_DEST_QPN) {
        a.dest_qp_num = Some(attr.dest_qp_num);
    }
    // IBV_QP_EN_SQD_ASYNC_NOTIFY has no effect: softrdma has no SQ drain events.
    Ok(a)
}

/// `ibv_modify_qp`: 0, or an errno value (`EINVAL` for a transition or attribute the state
/// machine refuses, such as RESET → RTR).
pub(crate) unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let q = match Qp::from_handle(qp) {
        Ok(q) => q,
        Err(e) => return fail_errno(e),
    };
    if attr.is_null() {
        return fail_errno(libc::EINVAL);
    }
    let Ok(ctx) = Context::from_handle(q.ibv.qp_base.context) else {
        return fail_errno(libc::EINVAL);
    };
    // SAFETY: the caller passes readable attributes.
    let a = unsafe { &*attr };
    let converted = match qp_attr(ctx, q, a, mask) {
        Ok(c) => c,
        Err(e) => return fail_errno(e),
    };
    match q.qp.modify(&converted) {
        Ok(()) => {
            if let Some(s) = converted.qp_state {
                // SAFETY: the ibv_qp is ours; the program reads `state`.
                unsafe { (*qp).state = qp_state_code(s) };
            }
            0
        }
        Err(ModifyQpError::Transition(_))
        | Err(ModifyQpError::AddressFamily(_))
        | Err(ModifyQpError::MtuTooLarge)
        | Err(ModifyQpError::NoAddress(_)) => fail_errno(libc::EINVAL),
    }
}

fn ibv_qp_cap_of(c: QpCaps) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_query_qp`: the current attributes (all of them, whatever the mask) and the creation
/// attributes.
pub(crate) unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let q = match Qp::from_handle(qp) {
        Ok(q) => q,
        Err(e) => return fail_errno(e),
    };
    if attr.is_null() || init_attr.is_null() {
        return fail_errno(libc::EINVAL);
    }
    let Ok(ctx) = Context::from_handle(q.ibv.qp_base.context) else {
        return fail_errno(libc::EINVAL);
    };
    let info = q.qp.query();
    let cfg = info.config;
    let mut ah = ibv_ah_attr::default();
    if let Some(av) = cfg.av {
        ah.is_global = 1;
        ah.port_num = 1;
        ah.grh.dgid = ibv_gid {
            raw: Gid::from_ip(av.dest_ip).0,
        };
        ah.grh.sgid_index = ctx.device.gid_index() as u8;
        ah.grh.hop_limit = av.hop_limit;
        ah.grh.traffic_class = av.traffic_class;
    }
    let out = ibv_qp_attr {
        qp_state: qp_state_code(info.state),
        cur_qp_state: qp_state_code(info.state),
        path_mtu: c_int::from(cfg.path_mtu.ibv_enum()),
        path_mig_state: 0,
        qkey: cfg.qkey,
        rq_psn: cfg.rq_psn.value(),
        sq_psn: cfg.sq_psn.value(),
        dest_qp_num: cfg.dest_qpn,
        qp_access_flags: cfg.access.bits(),
        cap: ibv_qp_cap_of(info.cap),
        ah_attr: ah,
        alt_ah_attr: ibv_ah_attr::default(),
        pkey_index: 0,
        alt_pkey_index: 0,
        en_sqd_async_notify: 0,
        sq_draining: 0,
        max_rd_atomic: cfg.max_rd_atomic,
        max_dest_rd_atomic: cfg.max_dest_rd_atomic,
        min_rnr_timer: cfg.min_rnr_timer,
        port_num: 1,
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        rnr_retry: cfg.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    };
    let b = &q.ibv.qp_base;
    // SAFETY: the caller passes writable structs.
    unsafe {
        attr.write(out);
        init_attr.write(ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: b.srq,
            cap: ibv_qp_cap_of(info.cap),
            qp_type: b.qp_type,
            sq_sig_all: c_int::from(q.sq_sig_all),
        });
        if mask & IBV_QP_STATE != 0 {
            (*qp).state = out.qp_state;
        }
    }
    0
}

/// `ibv_destroy_qp`. softrdma flushes the QP's outstanding work first, so each posted work
/// request completes once (`IBV_WC_WR_FLUSH_ERR`) on its CQ.
pub(crate) unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    if !unregister(qp, Kind::Qp) {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: was live (a boxed Qp), now unregistered: freed once.
    let q = unsafe { Box::from_raw(qp.cast::<Qp>()) };
    if let Ok(ctx) = Context::from_handle(q.ibv.qp_base.context) {
        Context::name_object(&ctx.qps, q.ibv.qp_base.qp_num, None);
    }
    // SAFETY: the PD, CQs, SRQ and XRC domain handle cannot go while the QP counts as their
    // user; the ones it does not have are null.
    unsafe {
        let srq = q.ibv.qp_base.srq.cast::<crate::srq::Srq>();
        for users in [
            q.pd.as_ref().map(|p| &p.users),
            srq.as_ref().map(|s| &s.users),
            q.send_cq.as_ref().map(|c| &c.users),
            q.recv_cq.as_ref().map(|c| &c.users),
            q.xrcd.as_ref().map(|x| &x.users),
        ]
        .into_iter()
        .flatten()
        {
            users.fetch_sub(1, Ordering::AcqRel);
        }
    }
    drop(q);
    0
}
