//! The calls on CM ids: create and destroy, bind, resolve, listen, connect, accept, reject,
//! disconnect, establish, notify, migrate, options and ports. Each translates its arguments
//! into `softrdma_rdmacm` and its result into librdmacm's convention (0, or -1 and `errno`);
//! on a synchronous id (made with a NULL channel) it then waits for its outcome, as
//! librdmacm's `ucma_complete` does, keeping the event in `id->event`.

use std::ffi::{c_int, c_void};
use std::net::SocketAddr;

use softrdma_rdmacm::{CmError, CmId, ConnParam, RdmaQpType};

use super::abi::*;
use super::channel::Channel;
use super::device::cm_device;
use super::id::{lock, port_space, read_sockaddr, Id};
use crate::util::{fail_minus_one, set_errno};

/// The errno librdmacm gives for what softrdma's rdma_cm refused.
pub(crate) fn cm_errno(e: &CmError) -> c_int {
    use softrdma_cm::rdma::RdmaError;
    match e {
        CmError::Device(_) => libc::EADDRNOTAVAIL,
        CmError::Setup(_) => libc::ENOMEM,
        CmError::Route(_) => libc::EHOSTUNREACH,
        CmError::InvalidState(_) => libc::EINVAL,
        CmError::Qp(_) => libc::EINVAL,
        CmError::Rejected(_) => libc::ECONNREFUSED,
        CmError::Unreachable => libc::ETIMEDOUT,
        CmError::Cm(RdmaError::AddressInUse) => libc::EADDRINUSE,
        CmError::Cm(RdmaError::Address) => libc::EADDRNOTAVAIL,
        CmError::Cm(_) => libc::EINVAL,
    }
}

/// 0, or -1 with `errno`.
pub(crate) fn result(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail_minus_one(e),
    }
}

/// librdmacm's `ucma_complete`: the next event of a synchronous id, kept in `id->event`
/// (the one kept before is acknowledged first); an error if it is not a success.
pub(crate) fn complete(i: &Id) -> Result<(), c_int> {
    if !i.is_sync() {
        return Ok(());
    }
    ack_kept(i);
    let ch = Channel::from_handle(i.raw().channel)?;
    let e = ch.next(true)?;
    let p = super::id::hand_out(e);
    i.raw_mut().event = p;
    // SAFETY: just handed out; acknowledged only through `id->event`.
    let e = unsafe { &*p };
    match (e.event, e.status) {
        (RDMA_CM_EVENT_REJECTED, _) => Err(libc::ECONNREFUSED),
        (_, 0) => Ok(()),
        (_, s) if s < 0 => Err(-s),
        (_, s) => Err(s),
    }
}

/// Acknowledges the event a synchronous call kept in `id->event`.
pub(crate) fn ack_kept(i: &Id) {
    let kept = std::mem::replace(&mut i.raw_mut().event, std::ptr::null_mut());
    if !kept.is_null() {
        // SAFETY: an event this library handed out into `id->event`, acknowledged once.
        let _ = unsafe { super::id::ack(kept) };
    }
}

/// `rdma_create_id`.
pub(crate) unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    let Some((ps_r, qp_type)) = port_space(ps) else {
        return fail_minus_one(libc::EINVAL);
    };
    match create(channel, context, ps, ps_r, qp_type) {
        Ok(p) => {
            // SAFETY: the caller passes a writable pointer.
            unsafe { *id = p };
            0
        }
        Err(e) => fail_minus_one(e),
    }
}

pub(crate) fn create(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    ps_r: softrdma_rdmacm::PortSpace,
    qp_type: RdmaQpType,
) -> Result<*mut rdma_cm_id, c_int> {
    super::dispatch::start();
    let ch = if channel.is_null() {
        Channel::create(true)?
    } else {
        std::ptr::from_ref(Channel::from_handle(channel)?).cast_mut()
    };
    // SAFETY: a live channel.
    let ch = unsafe { (*ch).handle() };
    let cm = CmId::new(super::dispatch::rust_channel(), ps_r, qp_type);
    let i = Id::create(ch, context, ps, cm);
    // SAFETY: just created.
    Ok(unsafe { (*i).handle() })
}

/// `rdma_destroy_id`.
pub(crate) unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    result(super::id::destroy(id))
}

/// Binds `i` to `a`: the device's own address, or a wildcard (then `id->verbs` stays NULL
/// until a connect request or a resolve names the device, as with librdmacm).
fn bind(i: &Id, a: SocketAddr) -> Result<(), c_int> {
    let dev = cm_device()?;
    let wildcard = a.ip().is_unspecified();
    if !wildcard && a.ip().to_canonical() != dev.ip() {
        return Err(libc::EADDRNOTAVAIL);
    }
    let bound =
        i.cm.bind_device(&dev.device, a.port())
            .map_err(|e| cm_errno(&e))?;
    if wildcard {
        lock(&i.extra).wildcard = Some(SocketAddr::new(a.ip(), bound.port()));
    }
    i.set_addrs(Some(bound), None);
    Ok(())
}

/// `rdma_bind_addr`: `EADDRNOTAVAIL` for an address that is not the device's (libfabric binds
/// every address of the host to find the devices).
pub(crate) unsafe extern "C" fn rdma_bind_addr(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    Id::call(id, |i| {
        // SAFETY: the caller passes a socket address or NULL.
        let Some(a) = (unsafe { read_sockaddr(addr) }) else {
            return Err(libc::EAFNOSUPPORT);
        };
        bind(i, a)
    })
}

/// `rdma_resolve_addr`: binds first if the id is not bound (to `src`, or the device's
/// address), then `RDMA_CM_EVENT_ADDR_RESOLVED` (RoCE needs no address query).
pub(crate) unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    Id::call(id, |i| {
        // SAFETY: the caller passes socket addresses or NULL.
        let (src, dst) = unsafe { (read_sockaddr(src), read_sockaddr(dst)) };
        let Some(dst) = dst else {
            return Err(libc::EINVAL);
        };
        let dev = cm_device()?;
        if i.cm.addrs().0.is_none() {
            bind(i, src.unwrap_or(SocketAddr::new(dev.ip(), 0)))?;
        }
        // Resolved, the id has a specific source: the device's.
        lock(&i.extra).wildcard = None;
        i.set_addrs(i.cm.addrs().0, Some(dst));
        i.cm.resolve_addr(None, dst).map_err(|e| cm_errno(&e))?;
        complete(i)
    })
}

/// `rdma_resolve_route`: the port's MTU; then `RDMA_CM_EVENT_ROUTE_RESOLVED`.
pub(crate) unsafe extern "C" fn rdma_resolve_route(
    id: *mut rdma_cm_id,
    _timeout_ms: c_int,
) -> c_int {
    Id::call(id, |i| {
        let dev = cm_device()?;
        if i.cm.addrs().1.is_none() {
            return Err(libc::EINVAL);
        }
        let mtu = dev
            .device
            .query_port(1)
            .map_err(|_| libc::EIO)?
            .active_mtu
            .ibv_enum();
        let tos = lock(&i.extra).tos.unwrap_or(0);
        i.set_route(mtu, 64, tos);
        i.cm.resolve_route().map_err(|e| cm_errno(&e))?;
        complete(i)
    })
}

/// `rdma_listen` (the backlog is not bounded).
pub(crate) unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    Id::call(id, |i| i.cm.listen().map_err(|e| cm_errno(&e)))
}

/// The READ/atomic depth softrdma's QPs take (what `ibv_query_device` reports).
const MAX_RD_ATOMIC: u8 = 16;

/// `struct rdma_conn_param` in Rust; NULL gives librdmacm's defaults. `RDMA_MAX_RESP_RES`
/// and `RDMA_MAX_INIT_DEPTH` (0xff) mean the device's maximum.
///
/// # Safety
/// `p` is NULL or a readable `rdma_conn_param` whose private data is readable.
unsafe fn rust_param(p: *const rdma_conn_param) -> ConnParam {
    if p.is_null() {
        return ConnParam {
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
    }
    // SAFETY: the caller's contract.
    let p = unsafe { &*p };
    let private_data = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's contract: `private_data_len` readable bytes.
        unsafe {
            std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into())
        }
        .to_vec()
    };
    ConnParam {
        private_data,
        responder_resources: p.responder_resources.min(MAX_RD_ATOMIC),
        initiator_depth: p.initiator_depth.min(MAX_RD_ATOMIC),
        flow_control: p.flow_control != 0,
        retry_count: p.retry_count.min(7),
        rnr_retry_count: p.rnr_retry_count.min(7),
        srq: p.srq != 0,
        qp_num: p.qp_num,
        qkey: 0,
    }
}

/// `rdma_connect`: the REQ (or SIDR_REQ) leaves; `RDMA_CM_EVENT_ESTABLISHED` follows (or
/// `CONNECT_RESPONSE` when the program made the QP itself and names it in `qp_num`).
pub(crate) unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    Id::call(id, |i| {
        // SAFETY: the caller passes a conn_param or NULL.
        let p = unsafe { rust_param(conn_param) };
        i.cm.connect(&p)
            .map_err(|e| cm_errno(&e))
            .and_then(|()| complete(i))
    })
}

/// `rdma_accept`: the id's QP goes to RTR and RTS and the REP leaves (a UD id's SIDR_REP);
/// `RDMA_CM_EVENT_ESTABLISHED` follows the RTU.
pub(crate) unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    Id::call(id, |i| {
        // SAFETY: the caller passes a conn_param or NULL.
        let p = unsafe { rust_param(conn_param) };
        ack_kept(i);
        let ud = i.cm.qp_type() == RdmaQpType::Ud;
        i.cm.accept(&p).map_err(|e| cm_errno(&e)).and_then(
            |()| {
                if ud {
                    Ok(())
                } else {
                    complete(i)
                }
            },
        )
    })
}

/// `rdma_reject` with private data.
pub(crate) unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    Id::call(id, |i| {
        let data = if private_data.is_null() {
            &[][..]
        } else {
            // SAFETY: the caller passes `private_data_len` readable bytes.
            unsafe {
                std::slice::from_raw_parts(private_data.cast::<u8>(), private_data_len.into())
            }
        };
        ack_kept(i);
        i.cm.reject(data).map_err(|e| cm_errno(&e))
    })
}

/// `rdma_disconnect`: the QP goes to the error state and the DREQ (or DREP) leaves.
pub(crate) unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    Id::call(id, |i| i.cm.disconnect().map_err(|e| cm_errno(&e)))
}

/// `rdma_establish`: after `CONNECT_RESPONSE`, with the program's QP readied, the RTU leaves.
/// The connection is established on return; as with librdmacm no `ESTABLISHED` event
/// follows (the program's next event is `DISCONNECTED`), synchronous ids included.
pub(crate) unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    Id::call(id, |i| {
        ack_kept(i);
        i.cm.establish().map_err(|e| cm_errno(&e))
    })
}

/// `IBV_EVENT_COMM_EST`.
const IBV_EVENT_COMM_EST: c_int = 6;

/// `rdma_notify`: `IBV_EVENT_COMM_EST` establishes a passive connection whose QP received
/// before the RTU; the kernel ignores other events, and so does this.
pub(crate) unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    Id::call(id, |i| {
        if event != IBV_EVENT_COMM_EST {
            return Ok(());
        }
        i.cm.notify_established().map_err(|e| cm_errno(&e))
    })
}

/// `rdma_migrate_id`: the id's next events (and those queued) go to `channel`; NULL makes the
/// id synchronous.
pub(crate) unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    Id::call(id, |i| {
        let old = i.raw().channel;
        let old_private = i.is_sync();
        let to = if channel.is_null() {
            // SAFETY: just created.
            unsafe { &*Channel::create(true)? }
        } else {
            Channel::from_handle(channel)?
        };
        if to.handle() == old {
            return Ok(());
        }
        super::id::migrate(i, to);
        if old_private {
            super::channel::destroy_private(old);
        }
        Ok(())
    })
}

/// `rdma_set_option`: the type of service (the route's traffic class) and the QP's ACK
/// timeout apply to the connection made after them; REUSEADDR and AFONLY are accepted (ports are per device here, and the device has
/// one family); IB path records are accepted and unused (RoCE resolves no paths).
pub(crate) unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    let i = match Id::from_handle(id) {
        Ok(i) => i,
        Err(e) => return fail_minus_one(e),
    };
    if optval.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    let byte = || {
        // SAFETY: the caller passes `optlen` (checked: 1) readable bytes.
        unsafe { *optval.cast::<u8>() }
    };
    match (level, optname, optlen) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, 1) => {
            lock(&i.extra).tos = Some(byte());
            i.cm.set_tos(byte());
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, 1) => i.cm.set_ack_timeout(byte()),
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY, 4) => {}
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, n) if n > 0 => {}
        (RDMA_OPTION_ID | RDMA_OPTION_IB, _, _) => return fail_minus_one(libc::EINVAL),
        _ => return fail_minus_one(libc::ENOPROTOOPT),
    }
    0
}

fn port_of(s: &libc::sockaddr_storage) -> u16 {
    match c_int::from(s.ss_family) {
        libc::AF_INET | libc::AF_INET6 => {
            // SAFETY: sin_port and sin6_port are at the same offset, after the family, and a
            // storage is large enough for either.
            unsafe { (*std::ptr::from_ref(s).cast::<libc::sockaddr_in>()).sin_port }
        }
        _ => 0,
    }
}

/// `rdma_get_src_port` (network byte order, as librdmacm).
pub(crate) unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    match Id::from_handle(id) {
        Ok(i) => port_of(&i.raw().route.addr.src_storage),
        Err(e) => {
            set_errno(e);
            0
        }
    }
}

/// `rdma_get_dst_port`.
pub(crate) unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    match Id::from_handle(id) {
        Ok(i) => port_of(&i.raw().route.addr.dst_storage),
        Err(e) => {
            set_errno(e);
            0
        }
    }
}
