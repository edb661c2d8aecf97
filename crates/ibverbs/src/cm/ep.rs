//! librdmacm's convenience layer: `rdma_getaddrinfo`, endpoints (`rdma_create_ep`,
//! `rdma_get_request`, `rdma_destroy_ep`), the device list and event names.

use std::ffi::{c_char, c_int, CStr};

use softrdma_rdmacm::RdmaQpType;

use super::abi::*;
use super::channel::Channel;
use super::connect::{ack_kept, result};
use super::device::cm_device;
use super::id::{lock, port_space, Id};
use crate::abi::*;
use crate::util::{fail_minus_one, is_live, register, set_errno, unregister, Kind};

/// What `rdma_getaddrinfo` returns: the C struct first, then the addresses it points to.
#[repr(C)]
struct AddrInfo {
    raw: rdma_addrinfo,
    src: libc::sockaddr_storage,
    dst: libc::sockaddr_storage,
}

/// `rdma_getaddrinfo`: the system resolver's first answer (`getaddrinfo(3)` with the hints
/// translated as librdmacm translates them), as the source (`RAI_PASSIVE`) or destination;
/// a resolver failure returns its `EAI_*` code, as librdmacm does.
pub(crate) unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: the caller passes hints or NULL.
    let h = unsafe { hints.as_ref() };
    let flags = h.map_or(0, |h| h.ai_flags);
    // SAFETY: all-zero is a valid addrinfo (no flags, null pointers).
    let mut ai_hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    if let Some(h) = h {
        if h.ai_flags & RAI_PASSIVE != 0 {
            ai_hints.ai_flags |= libc::AI_PASSIVE;
        }
        if h.ai_flags & RAI_NUMERICHOST != 0 {
            ai_hints.ai_flags |= libc::AI_NUMERICHOST;
        }
        ai_hints.ai_family = h.ai_family;
        ai_hints.ai_socktype = match h.ai_qp_type {
            IBV_QPT_RC | IBV_QPT_UC => libc::SOCK_STREAM,
            IBV_QPT_UD => libc::SOCK_DGRAM,
            _ => 0,
        };
        ai_hints.ai_protocol = match h.ai_port_space {
            RDMA_PS_TCP => libc::IPPROTO_TCP,
            RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
            _ => 0,
        };
    }
    // SAFETY: all-zero is a valid rdma_addrinfo and sockaddr_storage.
    let out = Box::into_raw(Box::new(unsafe { std::mem::zeroed::<AddrInfo>() }));
    // SAFETY: just allocated, ours alone until returned.
    let o = unsafe { &mut *out };
    if let Some(h) = h {
        o.raw.ai_flags = h.ai_flags;
        o.raw.ai_family = h.ai_family;
        o.raw.ai_qp_type = h.ai_qp_type;
        o.raw.ai_port_space = h.ai_port_space;
    }
    if !node.is_null() || !service.is_null() {
        let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
        let hp = if h.is_some() {
            &ai_hints
        } else {
            std::ptr::null()
        };
        // SAFETY: C strings or NULL from the caller, our hints, a result pointer.
        let ret = unsafe { libc::getaddrinfo(node, service, hp, &mut ai) };
        if ret != 0 {
            // SAFETY: ours, never published.
            drop(unsafe { Box::from_raw(out) });
            return ret;
        }
        // SAFETY: getaddrinfo succeeded: `ai` is a valid list of at least one entry.
        let a = unsafe { &*ai };
        if o.raw.ai_qp_type == 0 {
            o.raw.ai_qp_type = if a.ai_socktype == libc::SOCK_DGRAM {
                IBV_QPT_UD
            } else {
                IBV_QPT_RC
            };
        }
        if o.raw.ai_port_space == 0 {
            o.raw.ai_port_space = if a.ai_protocol == libc::IPPROTO_UDP {
                RDMA_PS_UDP
            } else {
                RDMA_PS_TCP
            };
        }
        o.raw.ai_family = a.ai_family;
        let len = (a.ai_addrlen as usize).min(size_of::<libc::sockaddr_storage>());
        let passive = a.ai_flags & libc::AI_PASSIVE != 0 || flags & RAI_PASSIVE != 0;
        let (slot, addr, alen) = if passive {
            o.raw.ai_flags |= RAI_PASSIVE;
            (&mut o.src, &mut o.raw.ai_src_addr, &mut o.raw.ai_src_len)
        } else {
            (&mut o.dst, &mut o.raw.ai_dst_addr, &mut o.raw.ai_dst_len)
        };
        // SAFETY: copies `len` bytes of the resolver's address into our storage.
        unsafe {
            std::ptr::copy_nonoverlapping(
                a.ai_addr.cast::<u8>(),
                std::ptr::from_mut(slot).cast::<u8>(),
                len,
            );
            libc::freeaddrinfo(ai);
        }
        *addr = std::ptr::from_mut(slot).cast();
        *alen = len as libc::socklen_t;
    } else if let Some(h) = h.filter(|h| h.ai_dst_len != 0 && !h.ai_dst_addr.is_null()) {
        copy_addr(
            &mut o.dst,
            &mut o.raw.ai_dst_addr,
            &mut o.raw.ai_dst_len,
            h.ai_dst_addr,
            h.ai_dst_len,
        );
    }
    if let Some(h) = h.filter(|h| h.ai_src_len != 0 && !h.ai_src_addr.is_null()) {
        if o.raw.ai_src_len == 0 {
            copy_addr(
                &mut o.src,
                &mut o.raw.ai_src_addr,
                &mut o.raw.ai_src_len,
                h.ai_src_addr,
                h.ai_src_len,
            );
        }
    }
    register(out, Kind::AddrInfo, std::ptr::null_mut::<()>());
    // SAFETY: the caller passes a writable pointer.
    unsafe { *res = out.cast() };
    0
}

fn copy_addr(
    slot: &mut libc::sockaddr_storage,
    addr: &mut *mut libc::sockaddr,
    alen: &mut libc::socklen_t,
    from: *const libc::sockaddr,
    len: libc::socklen_t,
) {
    let len = (len as usize).min(size_of::<libc::sockaddr_storage>());
    // SAFETY: the hints' address, of the length the hints give (capped to the storage).
    unsafe {
        std::ptr::copy_nonoverlapping(
            from.cast::<u8>(),
            std::ptr::from_mut(slot).cast::<u8>(),
            len,
        )
    };
    *addr = std::ptr::from_mut(slot).cast();
    *alen = len as libc::socklen_t;
}

/// `rdma_freeaddrinfo`.
pub(crate) unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() && is_live(p, Kind::AddrInfo) {
        // SAFETY: a live list entry of ours.
        let next = unsafe { (*p).ai_next };
        unregister(p, Kind::AddrInfo);
        // SAFETY: a boxed `AddrInfo`, now unregistered: freed once.
        drop(unsafe { Box::from_raw(p.cast::<AddrInfo>()) });
        p = next;
    }
}

/// `rdma_create_ep`: a synchronous id for `res` — bound (`RAI_PASSIVE`; the QP attributes
/// are kept for the ids `rdma_get_request` returns), or resolved to the destination with a
/// QP if `qp_init_attr` is given.
pub(crate) unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || res.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: the caller passes an rdma_addrinfo (ours or its own).
    let r = unsafe { &*res };
    let Some((ps, qp_type)) = port_space(r.ai_port_space) else {
        return fail_minus_one(libc::EINVAL);
    };
    let qp_type = match r.ai_qp_type {
        IBV_QPT_UD => RdmaQpType::Ud,
        IBV_QPT_UC => RdmaQpType::Uc,
        IBV_QPT_RC => RdmaQpType::Rc,
        _ => qp_type,
    };
    let new = match super::connect::create(
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        r.ai_port_space,
        ps,
        qp_type,
    ) {
        Ok(p) => p,
        Err(e) => return fail_minus_one(e),
    };
    let fail = |e: c_int| {
        let _ = super::id::destroy(new);
        fail_minus_one(e)
    };
    // SAFETY: just created.
    let i = unsafe { &*new.cast::<Id>() };
    if r.ai_flags & RAI_PASSIVE != 0 {
        // SAFETY: our own call with the caller's address.
        if unsafe { super::connect::rdma_bind_addr(new, r.ai_src_addr) } != 0 {
            return fail(crate::util::last_errno());
        }
        if !qp_init_attr.is_null() {
            // SAFETY: the caller passes readable init attributes.
            let a = unsafe { &mut *qp_init_attr };
            a.qp_type = r.ai_qp_type;
            lock(&i.extra).ep_qp = Some((pd as usize, ibv_qp_init_attr { ..*a }));
        }
    } else {
        // SAFETY: our own calls with the caller's addresses.
        let ok = unsafe {
            super::connect::rdma_resolve_addr(new, r.ai_src_addr, r.ai_dst_addr, 2000) == 0
                && super::connect::rdma_resolve_route(new, 2000) == 0
        };
        if !ok {
            return fail(crate::util::last_errno());
        }
        if !qp_init_attr.is_null() {
            // SAFETY: the caller passes writable init attributes.
            let a = unsafe { &mut *qp_init_attr };
            a.qp_type = r.ai_qp_type;
            if let Err(e) = super::qp::create_qp(i, pd, a) {
                return fail(e);
            }
        }
    }
    // SAFETY: the caller passes a writable pointer.
    unsafe { *id = new };
    0
}

/// `rdma_destroy_ep`: the QP, SRQ and id.
pub(crate) unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    let Ok(i) = Id::from_handle(id) else {
        set_errno(libc::EINVAL);
        return;
    };
    if !i.raw().qp.is_null() {
        // SAFETY: our own calls on a live id.
        unsafe { super::qp::rdma_destroy_qp(id) };
    }
    if !i.raw().srq.is_null() {
        // SAFETY: as above.
        unsafe { super::qp::rdma_destroy_srq(id) };
    }
    if let Err(e) = super::id::destroy(id) {
        set_errno(e);
    }
}

/// `rdma_get_request`: the next connect request of a synchronous listener, as a new
/// synchronous id with the request in `id->event` (and the QP `rdma_create_ep` was given).
pub(crate) unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    let l = match Id::from_handle(listen) {
        Ok(l) => l,
        Err(e) => return fail_minus_one(e),
    };
    if id.is_null() || !l.is_sync() {
        return fail_minus_one(libc::EINVAL);
    }
    result((|| {
        let ch = Channel::from_handle(l.raw().channel)?;
        let e = ch.next(true)?;
        let p = super::id::hand_out(e);
        // SAFETY: just handed out.
        let (kind, status, new) = unsafe { ((*p).event, (*p).status, (*p).id) };
        if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
            // SAFETY: ours, acknowledged once.
            let _ = unsafe { super::id::ack(p) };
            return Err(if status < 0 { -status } else { libc::EINVAL });
        }
        let n = Id::from_handle(new)?;
        // SAFETY: just created.
        super::id::migrate(n, unsafe { &*Channel::create(true)? });
        n.raw_mut().event = p;
        let ep = lock(&l.extra)
            .ep_qp
            .as_ref()
            .map(|(pd, a)| (*pd, ibv_qp_init_attr { ..*a }));
        if let Some((pd, mut attr)) = ep {
            if let Err(e) = super::qp::create_qp(n, pd as *mut ibv_pd, &mut attr) {
                ack_kept(n);
                let _ = n.cm.reject(&[]);
                let _ = super::id::destroy(new);
                return Err(e);
            }
        }
        // SAFETY: the caller passes a writable pointer.
        unsafe { *id = new };
        Ok(())
    })())
}

/// `rdma_get_devices`: the one context rdma_cm uses (the device's, opened once).
pub(crate) unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    let ctx = cm_device().map_or(std::ptr::null_mut(), |d| d.ctx);
    let list = Box::into_raw(Box::new([ctx, std::ptr::null_mut()]));
    if !num.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num = c_int::from(!ctx.is_null()) };
    }
    list.cast()
}

/// `rdma_free_devices`.
pub(crate) unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    if !list.is_null() {
        // SAFETY: lists come from rdma_get_devices, which boxes a two-element array.
        drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_context; 2]>()) });
    }
}

/// `rdma_event_str`.
pub(crate) unsafe extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    let s: &'static CStr = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}
