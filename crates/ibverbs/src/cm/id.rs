//! CM ids (`struct rdma_cm_id`): the C struct the program reads, the Rust [`CmId`] behind it,
//! and how the events of softrdma's rdma_cm become C events on the id's channel.
//!
//! The C struct is the program's to read at any time; the library writes it in calls on the
//! id (librdmacm's callers do not race calls on one id) and, for the new id of a connect
//! request, before the event that names it is queued.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use softrdma::Gid;
use softrdma_rdmacm::{CmEvent, CmEventKind, CmId, ConnParam, PortSpace, RdmaQpType};

use super::abi::*;
use super::channel::{Channel, Event};
use super::device::cm_device;
use crate::abi::*;
use crate::util::{is_live, owned_by, register, unregister, Kind};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An id: the C struct first (the pointer the program holds).
#[repr(C)]
pub(crate) struct Id {
    /// The C struct: the program reads it while the library writes it.
    cell: std::cell::UnsafeCell<rdma_cm_id>,
    pub cm: CmId,
    /// Events read and not yet acknowledged that count against this id (a connect request
    /// counts against its listener, as in librdmacm): it cannot be destroyed before.
    unacked: AtomicUsize,
    /// `route.path_rec` points here once the route is known.
    path: Box<std::cell::UnsafeCell<ibv_sa_path_rec>>,
    pub extra: Mutex<Extra>,
}

/// What the library keeps about an id beyond the C struct.
#[derive(Default)]
pub(crate) struct Extra {
    /// The address the program bound, when it is a wildcard (reported as bound).
    pub wildcard: Option<SocketAddr>,
    /// `rdma_create_ep` on a passive id: the QP each id `rdma_get_request` returns gets.
    pub ep_qp: Option<(usize, ibv_qp_init_attr)>,
    /// The library made the id's CQs and completion channels (destroyed with its QP).
    pub own_cqs: bool,
    /// Multicast groups joined, and whether the QP was attached to each.
    pub groups: Vec<(IpAddr, bool)>,
    /// `RDMA_OPTION_ID_TOS`, for the path record's traffic class.
    pub tos: Option<u8>,
}

// SAFETY: the raw pointers in the C struct name library objects that are thread-safe, and
// the Box'd path record is only written in calls on the id.
unsafe impl Send for Id {}
// SAFETY: as above.
unsafe impl Sync for Id {}

/// Every live id by its Rust id: where the events go. Its lock orders delivery against
/// destruction (an id removed here gets no more events) and comes before a channel's.
fn ids() -> MutexGuard<'static, HashMap<CmId, usize>> {
    static IDS: std::sync::OnceLock<Mutex<HashMap<CmId, usize>>> = std::sync::OnceLock::new();
    lock(IDS.get_or_init(Default::default))
}

/// The port space's Rust form and the QP type rdma_cm gives its ids (librdmacm's
/// `ucma_get_qp_type`).
pub(crate) fn port_space(ps: c_int) -> Option<(PortSpace, RdmaQpType)> {
    Some(match ps {
        RDMA_PS_TCP => (PortSpace::Tcp, RdmaQpType::Rc),
        RDMA_PS_IB => (PortSpace::Ib, RdmaQpType::Rc),
        RDMA_PS_UDP => (PortSpace::Udp, RdmaQpType::Ud),
        RDMA_PS_IPOIB => (PortSpace::Ipoib, RdmaQpType::Ud),
        _ => return None,
    })
}

fn qp_type_code(t: RdmaQpType) -> c_int {
    match t {
        RdmaQpType::Rc => IBV_QPT_RC,
        RdmaQpType::Uc => IBV_QPT_UC,
        RdmaQpType::Ud => IBV_QPT_UD,
    }
}

impl Id {
    /// The id behind a live handle, or `EINVAL`.
    pub(crate) fn from_handle<'a>(id: *mut rdma_cm_id) -> Result<&'a Id, c_int> {
        if !is_live(id, Kind::CmId) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live id handles are boxed `Id`s (raw first) until rdma_destroy_id.
        Ok(unsafe { &*id.cast::<Id>() })
    }

    /// Runs a call on the live id `id` (`EINVAL` otherwise) in librdmacm's convention: 0, or
    /// -1 and `errno`.
    pub(crate) fn call(id: *mut rdma_cm_id, f: impl FnOnce(&Id) -> Result<(), c_int>) -> c_int {
        match Id::from_handle(id).and_then(f) {
            Ok(()) => 0,
            Err(e) => crate::util::fail_minus_one(e),
        }
    }

    /// A new id on `channel`, registered and routed.
    pub(crate) fn create(
        channel: *mut rdma_event_channel,
        context: *mut c_void,
        ps: c_int,
        cm: CmId,
    ) -> *mut Id {
        let id = Box::into_raw(Box::new(Id {
            cell: std::cell::UnsafeCell::new(rdma_cm_id {
                verbs: std::ptr::null_mut(),
                channel,
                context,
                qp: std::ptr::null_mut(),
                route: rdma_route {
                    // SAFETY: all-zero bytes are a valid (AF_UNSPEC) sockaddr_storage.
                    addr: unsafe { std::mem::zeroed() },
                    path_rec: std::ptr::null_mut(),
                    num_paths: 0,
                },
                ps,
                port_num: 0,
                event: std::ptr::null_mut(),
                send_cq_channel: std::ptr::null_mut(),
                send_cq: std::ptr::null_mut(),
                recv_cq_channel: std::ptr::null_mut(),
                recv_cq: std::ptr::null_mut(),
                srq: std::ptr::null_mut(),
                pd: std::ptr::null_mut(),
                qp_type: qp_type_code(cm.qp_type()),
            }),
            cm: cm.clone(),
            unacked: AtomicUsize::new(0),
            // SAFETY: all-zero bytes are a valid path record (plain integers and GIDs).
            path: Box::new(std::cell::UnsafeCell::new(unsafe { std::mem::zeroed() })),
            extra: Mutex::new(Extra::default()),
        }));
        register(id, Kind::CmId, channel);
        ids().insert(cm, id as usize);
        id
    }

    pub(crate) fn handle(&self) -> *mut rdma_cm_id {
        self.cell.get()
    }

    /// The C struct, to read.
    pub(crate) fn raw(&self) -> &rdma_cm_id {
        // SAFETY: the module's rule: the library writes it only in calls on the id, which
        // the program does not race with other calls on it.
        unsafe { &*self.cell.get() }
    }

    /// The C struct, to write (see the module's note on who writes it when).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn raw_mut(&self) -> &mut rdma_cm_id {
        // SAFETY: the module's rule: written only in calls on the id, which the program does
        // not race, or before the id is published.
        unsafe { &mut *self.cell.get() }
    }

    /// Whether the id was made with a NULL channel: its calls wait for their outcome.
    pub(crate) fn is_sync(&self) -> bool {
        Channel::from_handle(self.raw().channel).is_ok_and(|c| c.private)
    }

    /// Records the id's addresses, device and PD once it is bound or resolved (what librdmacm
    /// reads back from the kernel as `ucma_query_addr`).
    pub(crate) fn set_addrs(&self, src: Option<SocketAddr>, dst: Option<SocketAddr>) {
        let wildcard = lock(&self.extra).wildcard;
        let raw = self.raw_mut();
        if let Some(src) = wildcard.or(src) {
            write_storage(&mut raw.route.addr.src_storage, src);
        }
        if let Some(dst) = dst {
            write_storage(&mut raw.route.addr.dst_storage, dst);
        }
        if let Some(src) = src.filter(|_| wildcard.is_none()) {
            if let Ok(dev) = cm_device() {
                // librdmacm gives an id its device's PD with the device: programs read
                // `id->pd` after binding or resolving (pyverbs makes its AHs and QPs on it).
                raw.verbs = dev.ctx;
                raw.pd = dev.pd;
                raw.port_num = 1;
            }
            raw.route.addr.ibaddr.sgid = ibv_gid {
                raw: Gid::from_ip(src.ip()).0,
            };
            raw.route.addr.ibaddr.pkey = 0xffff;
        }
        if let Some(dst) = dst {
            raw.route.addr.ibaddr.dgid = ibv_gid {
                raw: Gid::from_ip(dst.ip()).0,
            };
        }
    }

    /// Records the route (`rdma_resolve_route`, or a connect request's): one path record, as
    /// librdmacm gives for RoCE.
    pub(crate) fn set_route(&self, mtu: u8, hop_limit: u8, traffic_class: u8) {
        let raw = self.raw_mut();
        let p = &mut *self.path_mut();
        p.sgid = raw.route.addr.ibaddr.sgid;
        p.dgid = raw.route.addr.ibaddr.dgid;
        p.pkey = 0xffff;
        p.mtu_selector = 2;
        p.mtu = mtu;
        p.hop_limit = hop_limit;
        p.traffic_class = traffic_class;
        p.reversible = 1;
        p.numb_path = 1;
        p.rate_selector = 2;
        p.packet_life_time_selector = 2;
        raw.route.path_rec = self.path.get();
        raw.route.num_paths = 1;
    }

    #[allow(clippy::mut_from_ref)]
    fn path_mut(&self) -> &mut ibv_sa_path_rec {
        // SAFETY: as `raw_mut`.
        unsafe { &mut *self.path.get() }
    }
}

/// Writes `a` as a `sockaddr_in`/`sockaddr_in6` into `s`.
pub(crate) fn write_storage(s: &mut libc::sockaddr_storage, a: SocketAddr) {
    let a = socket2::SockAddr::from(a);
    // SAFETY: a sockaddr_storage holds any socket address; `a.len()` is at most its size.
    unsafe {
        std::ptr::copy_nonoverlapping(
            a.as_ptr().cast::<u8>(),
            std::ptr::from_mut(s).cast::<u8>(),
            a.len() as usize,
        );
    }
}

/// The IPv4 or IPv6 address at `p`, if it is one.
///
/// # Safety
/// `p` is NULL or points to a socket address of its family's size.
pub(crate) unsafe fn read_sockaddr(p: *const libc::sockaddr) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; the family says how much to read.
    let len = match c_int::from(unsafe { (*p).sa_family }) {
        libc::AF_INET => size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        _ => return None,
    };
    // SAFETY: reads `len` bytes the caller vouches for into a zeroed storage.
    let (_, a) = unsafe {
        socket2::SockAddr::try_init(|storage, l| {
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), storage.cast::<u8>(), len);
            *l = len as libc::socklen_t;
            Ok(())
        })
    }
    .ok()?;
    a.as_socket()
}

/// Number of ids on `channel`.
pub(crate) fn ids_on(channel: *mut rdma_event_channel) -> usize {
    owned_by(channel, Kind::CmId).len()
}

/// Moves `id` to `channel` (`rdma_migrate_id`), with its queued events.
pub(crate) fn migrate(id: &Id, to: &Channel) {
    let map = ids();
    let from = id.raw().channel;
    let me = id.handle();
    let moved = match Channel::from_handle(from) {
        Ok(ch) => ch.take_where(|e| e.raw.id == me || e.raw.listen_id == me),
        Err(_) => Vec::new(),
    };
    unregister(me, Kind::CmId);
    register(me, Kind::CmId, to.handle());
    id.raw_mut().channel = to.handle();
    for e in moved {
        to.push(e);
    }
    drop(map);
}

/// Destroys `id` (`rdma_destroy_id`): `EBUSY` while events that count against it are not
/// acknowledged (librdmacm would wait for them forever on the calling thread).
pub(crate) fn destroy(id: *mut rdma_cm_id) -> Result<(), c_int> {
    let i = Id::from_handle(id)?;
    // The event a synchronous call kept in `id->event` goes with the id.
    let kept = std::mem::replace(&mut i.raw_mut().event, std::ptr::null_mut());
    if !kept.is_null() {
        // SAFETY: an event this library handed out into `id->event`, acknowledged once.
        let _ = unsafe { ack(kept) };
    }
    let mut map = ids();
    if i.unacked.load(Ordering::Acquire) != 0 {
        return Err(libc::EBUSY);
    }
    map.remove(&i.cm);
    let queued = match Channel::from_handle(i.raw().channel) {
        Ok(ch) => ch.take_where(|e| e.raw.id == id || e.raw.listen_id == id),
        Err(_) => Vec::new(),
    };
    unregister(id, Kind::CmId);
    drop(map);
    // The unread connect requests of a listener: their new ids go too (rejected).
    for e in &queued {
        if e.raw.listen_id == id {
            let _ = destroy(e.raw.id);
        }
    }
    drop(queued);
    let channel = i.raw().channel;
    let private = i.is_sync();
    // SAFETY: unregistered above: a boxed `Id`, freed once. Its Rust handle goes with it.
    drop(unsafe { Box::from_raw(id.cast::<Id>()) });
    if private {
        super::channel::destroy_private(channel);
    }
    Ok(())
}

/// Counts an event the program now holds against its id (or its listener).
pub(crate) fn hand_out(e: Box<Event>) -> *mut rdma_cm_event {
    let counted = counted_id(&e.raw);
    if let Ok(i) = Id::from_handle(counted) {
        i.unacked.fetch_add(1, Ordering::AcqRel);
    }
    let p = Box::into_raw(e);
    register(p, Kind::CmEvent, std::ptr::null_mut::<()>());
    p.cast()
}

/// `rdma_ack_cm_event`: frees `event` and uncounts it.
///
/// # Safety
/// `event` is NULL or any pointer; only live event handles are touched.
pub(crate) unsafe fn ack(event: *mut rdma_cm_event) -> Result<(), c_int> {
    if !unregister(event, Kind::CmEvent) {
        return Err(libc::EINVAL);
    }
    // SAFETY: a live event handle, now unregistered: a boxed `Event`, freed once.
    let e = unsafe { Box::from_raw(event.cast::<Event>()) };
    if let Ok(i) = Id::from_handle(counted_id(&e.raw)) {
        i.unacked.fetch_sub(1, Ordering::AcqRel);
    }
    drop(e);
    Ok(())
}

fn counted_id(e: &rdma_cm_event) -> *mut rdma_cm_id {
    if e.listen_id.is_null() {
        e.id
    } else {
        e.listen_id
    }
}

/// Delivers an event of softrdma's rdma_cm to the C id it is about, on that id's channel now;
/// a connect request makes the new C id first. Events about ids already destroyed are
/// dropped (a connect request's drop rejects it).
pub(crate) fn deliver(e: CmEvent) {
    let mut map = ids();
    let Some(&target) = map.get(&e.id) else {
        if let (CmEventKind::ConnectRequest { peer, local, .. }, Some(l)) = (&e.kind, &e.listen_id)
        {
            if let Some(&listener) = map.get(l) {
                drop(map);
                let new = new_request_id(listener as *mut Id, &e, *peer, *local);
                map = ids();
                // The listener may have gone while the lock was released.
                if map.get(l) != Some(&listener) {
                    drop(map);
                    let _ = destroy(new.cast());
                    return;
                }
                push(c_event(new, listener as *mut Id, e));
            }
        }
        return;
    };
    push(c_event(target as *mut Id, std::ptr::null_mut(), e));
    drop(map);
}

/// Queues an event the library made itself (a multicast join) on its id's channel.
pub(crate) fn post(e: Box<Event>) {
    let map = ids();
    push(e);
    drop(map);
}

fn push(e: Box<Event>) {
    let ch = match Id::from_handle(e.raw.id) {
        Ok(i) => i.raw().channel,
        Err(_) => return,
    };
    if let Ok(c) = Channel::from_handle(ch) {
        c.push(e);
    }
}

/// The C id of a connect request, on its listener's channel with its listener's context
/// (librdmacm's), addresses and route filled in.
fn new_request_id(listener: *mut Id, e: &CmEvent, peer: SocketAddr, local: SocketAddr) -> *mut Id {
    // SAFETY: the listener is live (found in the map under its lock just now, and destroying
    // it takes that lock and cannot happen while its events are being made).
    let l = unsafe { &*listener };
    let id = Id::create(l.raw().channel, l.raw().context, l.raw().ps, e.id.clone());
    // SAFETY: just created, not yet published.
    let i = unsafe { &*id };
    i.set_addrs(Some(local), Some(peer));
    if let Ok(dev) = cm_device() {
        let mtu = dev
            .device
            .query_port(1)
            .map(|p| p.active_mtu.ibv_enum())
            .unwrap_or(3);
        i.set_route(mtu, 64, 0);
    }
    id
}

/// A C event from a Rust one.
fn c_event(id: *mut Id, listener: *mut Id, e: CmEvent) -> Box<Event> {
    // SAFETY: `id` is live: found in the map under its lock, or just made.
    let i = unsafe { &*id };
    let mut ev = Box::new(Event {
        raw: rdma_cm_event {
            id: i.handle(),
            listen_id: if listener.is_null() {
                std::ptr::null_mut()
            } else {
                // SAFETY: as `id`.
                unsafe { (*listener).handle() }
            },
            event: 0,
            status: 0,
            param: rdma_cm_event_param {
                // SAFETY: all-zero bytes are valid for both union members.
                conn: unsafe { std::mem::zeroed() },
            },
        },
        private_data: Vec::new(),
        rust: None,
    });
    let ud = i.cm.qp_type() == RdmaQpType::Ud;
    let (event, status) = match &e.kind {
        CmEventKind::AddrResolved => (RDMA_CM_EVENT_ADDR_RESOLVED, 0),
        CmEventKind::RouteResolved => (RDMA_CM_EVENT_ROUTE_RESOLVED, 0),
        CmEventKind::ConnectRequest { param, peer, .. } => {
            if ud {
                set_ud(
                    &mut ev,
                    param.qp_num,
                    param.qkey,
                    Some(peer.ip()),
                    &param.private_data,
                );
            } else {
                set_conn(&mut ev, param);
            }
            (RDMA_CM_EVENT_CONNECT_REQUEST, 0)
        }
        CmEventKind::ConnectResponse { param } => {
            set_conn(&mut ev, param);
            (RDMA_CM_EVENT_CONNECT_RESPONSE, 0)
        }
        CmEventKind::Established { ud: Some(u) } => {
            set_ud(&mut ev, u.qp_num, u.qkey, u.peer, &u.private_data);
            (RDMA_CM_EVENT_ESTABLISHED, 0)
        }
        CmEventKind::Established { ud: None } => {
            if let Some(p) = i.cm.peer_param() {
                set_conn(&mut ev, &p);
            }
            (RDMA_CM_EVENT_ESTABLISHED, 0)
        }
        CmEventKind::Rejected {
            reason,
            private_data,
        } => {
            set_conn(
                &mut ev,
                &ConnParam {
                    private_data: private_data.clone(),
                    ..ConnParam::default()
                },
            );
            (RDMA_CM_EVENT_REJECTED, c_int::from(reason.code()))
        }
        CmEventKind::Unreachable => (RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT),
        CmEventKind::ConnectError => (RDMA_CM_EVENT_CONNECT_ERROR, -libc::ECONNRESET),
        CmEventKind::Disconnected => (RDMA_CM_EVENT_DISCONNECTED, 0),
        CmEventKind::TimewaitExit => (RDMA_CM_EVENT_TIMEWAIT_EXIT, 0),
    };
    ev.raw.event = event;
    ev.raw.status = status;
    ev.rust = Some(e);
    ev
}

fn set_conn(ev: &mut Event, p: &ConnParam) {
    ev.private_data = p.private_data.clone();
    ev.raw.param.conn = rdma_conn_param {
        private_data: private_ptr(&ev.private_data),
        private_data_len: ev.private_data.len().min(255) as u8,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: u8::from(p.flow_control),
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: u8::from(p.srq),
        qp_num: p.qp_num,
    };
}

fn set_ud(ev: &mut Event, qp_num: u32, qkey: u32, peer: Option<IpAddr>, private_data: &[u8]) {
    ev.private_data = private_data.to_vec();
    let ah = peer.map_or_else(ibv_ah_attr::default, |ip| {
        global_ah(
            ibv_gid {
                raw: Gid::from_ip(ip).0,
            },
            64,
            0,
        )
    });
    ev.raw.param.ud = rdma_ud_param {
        private_data: private_ptr(&ev.private_data),
        private_data_len: ev.private_data.len().min(255) as u8,
        ah_attr: ah,
        qp_num,
        qkey,
    };
}

/// Address handle attributes for `dgid` from the device's GID, as rdma_cm gives them.
pub(crate) fn global_ah(dgid: ibv_gid, hop_limit: u8, traffic_class: u8) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid,
            flow_label: 0,
            sgid_index: cm_device().map_or(0, |d| d.device.gid_index() as u8),
            hop_limit,
            traffic_class,
        },
        is_global: 1,
        port_num: 1,
        ..ibv_ah_attr::default()
    }
}

fn private_ptr(v: &[u8]) -> *const c_void {
    if v.is_empty() {
        std::ptr::null()
    } else {
        v.as_ptr().cast()
    }
}
