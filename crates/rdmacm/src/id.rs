//! Event channels and CM ids: librdmacm's `rdma_event_channel` and `rdma_cm_id`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant as WallClock};

use softrdma::{ProtectionDomain, QpAttr, QpInitAttr, QpState, QueuePair};
use softrdma_cm::rdma::{ConnParam, RdmaCm, RdmaId, RdmaQpType, Route};
use softrdma_wire::mad::cma::PortSpace;

use crate::error::CmError;
use crate::event::CmEventKind;
use crate::service::{route_source, Endpoint, Service};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where a CM id's events are delivered (`rdma_create_event_channel`): a queue one or more
/// threads take events from, in order, blocking or not.
#[derive(Clone, Default)]
pub struct EventChannel {
    inner: Arc<ChannelInner>,
}

#[derive(Default)]
struct ChannelInner {
    queue: Mutex<VecDeque<Queued>>,
    ready: Condvar,
}

/// An event waiting in its channel. It refers to its ids without holding handles on them: an
/// id whose application handles are all dropped is destroyed at once, as by `rdma_destroy_id`,
/// and its unread events go with it ([`IdInner::destroy`]). Handles are taken when the event
/// is read ([`Queued::claim`]).
struct Queued {
    /// `None` once claimed.
    id: Option<Arc<IdInner>>,
    listen_id: Option<Arc<IdInner>>,
    kind: CmEventKind,
}

impl Queued {
    /// The event as the application gets it, with handles on its ids; `None` if one of them
    /// was destroyed after the event was queued.
    fn claim(mut self) -> Option<CmEvent> {
        // The listener first: a request that reaches a destroyed listener is dropped here,
        // and the drop rejects it.
        let listen_id = match &self.listen_id {
            Some(l) => Some(IdInner::claim(l)?),
            None => None,
        };
        let id = IdInner::claim(self.id.as_ref()?)?;
        self.id = None;
        Some(CmEvent {
            id,
            listen_id,
            kind: self.kind.clone(),
        })
    }

    fn is_about(&self, id: &IdInner) -> bool {
        [&self.id, &self.listen_id]
            .into_iter()
            .flatten()
            .any(|q| std::ptr::eq(Arc::as_ptr(q), id))
    }
}

/// A connect request that is never read (its listener was destroyed first, or the channel
/// dropped) destroys its new id, which no handle will ever reach: the CM rejects the request
/// at once, as the kernel does with a destroyed listener's unread requests.
impl Drop for Queued {
    fn drop(&mut self) {
        if let (Some(id), Some(_)) = (&self.id, &self.listen_id) {
            id.destroy();
        }
    }
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel")
            .field("pending", &lock(&self.inner.queue).len())
            .finish()
    }
}

impl EventChannel {
    /// A new channel.
    pub fn new() -> EventChannel {
        EventChannel::default()
    }

    /// The next event (`rdma_get_cm_event`), waiting up to `timeout` (`None`: forever);
    /// `None` when none came in time.
    pub fn get_event(&self, timeout: Option<Duration>) -> Option<CmEvent> {
        let deadline = timeout.map(|t| WallClock::now() + t);
        let mut q = lock(&self.inner.queue);
        loop {
            if let Some(e) = q.pop_front() {
                // Claimed without the queue's lock: claiming takes the id's, and an id's
                // lock is held while events are queued for it.
                drop(q);
                if let Some(e) = e.claim() {
                    return Some(e);
                }
                q = lock(&self.inner.queue);
                continue;
            }
            match deadline {
                None => q = self.inner.ready.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(WallClock::now());
                    if left.is_zero() {
                        return None;
                    }
                    q = self
                        .inner
                        .ready
                        .wait_timeout(q, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// The next event if one is waiting.
    pub fn try_get_event(&self) -> Option<CmEvent> {
        loop {
            let e = lock(&self.inner.queue).pop_front()?;
            if let Some(e) = e.claim() {
                return Some(e);
            }
        }
    }

    /// Whether an event is waiting: what polling a librdmacm channel's descriptor tells
    /// (except that an event about an id whose destruction is under way at that moment
    /// still counts; reading it then finds nothing).
    pub fn has_event(&self) -> bool {
        !lock(&self.inner.queue).is_empty()
    }

    fn push(&self, e: Queued) {
        lock(&self.inner.queue).push_back(e);
        self.inner.ready.notify_all();
    }

    /// Drops the unread events about `id` (destroyed), outside the queue's lock: a connect
    /// request's drop destroys its new id.
    fn discard(&self, id: &IdInner) {
        let mut q = lock(&self.inner.queue);
        let (gone, kept): (VecDeque<Queued>, VecDeque<Queued>) =
            q.drain(..).partition(|e| e.is_about(id));
        *q = kept;
        drop(q);
        drop(gone);
    }
}

/// An event (`struct rdma_cm_event`; librdmacm's acknowledgement is dropping it).
#[derive(Debug, Clone)]
pub struct CmEvent {
    /// The id it is about; for a connect request, the new id to accept or reject.
    pub id: CmId,
    /// For a connect request: the listener it came to.
    pub listen_id: Option<CmId>,
    /// What happened.
    pub kind: CmEventKind,
}

/// An rdma_cm identifier (`struct rdma_cm_id`): one endpoint of one connection, or a
/// listener. Cheap to clone; the connection is torn down (as `rdma_destroy_id`) when the
/// last handle is dropped — the handles the application holds, those in the events it has
/// read among them — at once, on the dropping thread: when that `drop` returns, a listener's
/// port is free to bind again, and the id's unread events are gone (a listener's unread
/// connect requests rejected), as after `rdma_destroy_id`.
pub struct CmId {
    pub(crate) inner: Arc<IdInner>,
}

impl CmId {
    /// A counted handle on `inner`, which is new or of which the caller holds a handle (the
    /// handle an event takes on an id the application may be dropping is
    /// [`IdInner::claim`]'s).
    fn handle(inner: Arc<IdInner>) -> CmId {
        inner.handles.fetch_add(1, Ordering::Relaxed);
        CmId { inner }
    }
}

impl Clone for CmId {
    fn clone(&self) -> CmId {
        CmId::handle(self.inner.clone())
    }
}

/// The service's own references to an id (to hand it an event, kept until its lock is
/// released) are not handles: one of them outliving the application's last handle delayed
/// the destruction to whenever the service thread ran again. A server that closed its
/// listener and listened again on the port at once found the port still taken (`perf -R`
/// under load, about 1 run in 200).
impl Drop for CmId {
    fn drop(&mut self) {
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.destroy();
        }
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.inner.state);
        f.debug_struct("CmId")
            .field("src", &s.src)
            .field("dst", &s.dst)
            .field("qp", &s.qp.as_ref().map(QueuePair::qp_num))
            .finish()
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &CmId) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for CmId {}

/// By identity, as equality: a consumer keys its own per-id state (a C library's
/// `struct rdma_cm_id`) by the id.
impl std::hash::Hash for CmId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.inner).hash(state);
    }
}

pub(crate) struct IdInner {
    channel: EventChannel,
    ps: PortSpace,
    qp_type: RdmaQpType,
    /// The application's handles ([`CmId`]s) on this id.
    handles: AtomicUsize,
    state: Mutex<IdState>,
}

#[derive(Default)]
struct IdState {
    service: Option<Arc<Service>>,
    rid: Option<RdmaId>,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    route: Option<Route>,
    qp: Option<QueuePair>,
    /// The peer's answer (REP), for `responder_resources`/`initiator_depth`.
    peer_param: Option<ConnParam>,
    /// The last handle is gone: the id gets no more events.
    destroyed: bool,
    /// Made for a connect request and not yet read: no handle yet, and not destroyed for it.
    unclaimed: bool,
    /// `RDMA_OPTION_ID_TOS`: the route's traffic class.
    tos: Option<u8>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout, instead of the CM's.
    ack_timeout: Option<u8>,
    /// While listening: the device's claim on the port's Service ID, which brings the
    /// address's connect requests for it to this process.
    listen_claim: Option<softrdma::ServiceClaim>,
    /// The consumer completed the connection itself ([`CmId::establish`]): the CM's
    /// `Established` for it is not an event of the id, as librdmacm gives none for
    /// `rdma_establish`.
    establish_quietly: bool,
}

impl IdInner {
    /// `rdma_destroy_id`: stops listening, releases the port, tears the connection down and
    /// drops the id's unread events — unless an event was read and took a handle in the
    /// meantime (see [`IdInner::claim`]): that handle's drop destroys it.
    fn destroy(&self) {
        let mut s = lock(&self.state);
        if s.destroyed || self.handles.load(Ordering::Acquire) != 0 {
            return;
        }
        s.destroyed = true;
        let (service, rid) = (s.service.take(), s.rid);
        let claim = s.listen_claim.take();
        drop(s);
        drop(claim);
        if let (Some(service), Some(rid)) = (service, rid) {
            service.with_cm(|st, now| {
                st.ids.remove(&rid);
                let _ = st.cm.destroy(now, rid);
            });
        }
        self.channel.discard(self);
    }

    /// Whether the id takes events: not destroyed, and a handle alive or yet to come.
    fn takes_events(&self, s: &IdState) -> bool {
        !s.destroyed && (s.unclaimed || self.handles.load(Ordering::Acquire) != 0)
    }

    /// A handle on `this` for an event the application reads, unless its last handle is
    /// gone (it is destroyed, or its destruction waits for the service's lock). Taken under
    /// the id's lock, which `destroy` checks under too: an id is never handed out again once
    /// its destruction has begun.
    fn claim(this: &Arc<IdInner>) -> Option<CmId> {
        let mut s = lock(&this.state);
        if !this.takes_events(&s) {
            return None;
        }
        s.unclaimed = false;
        this.handles.fetch_add(1, Ordering::AcqRel);
        Some(CmId {
            inner: this.clone(),
        })
    }
}

impl Endpoint for IdInner {
    fn connect_request(
        self: Arc<Self>,
        rid: RdmaId,
        kind: CmEventKind,
    ) -> Option<Weak<dyn Endpoint>> {
        // A listener whose last handle is being dropped (its destruction waits for the
        // service's lock, which the caller holds) takes no request: the CM rejects it. The
        // event is queued under the listener's lock, so a destruction that starts later
        // finds it to reject.
        let l = lock(&self.state);
        if !self.takes_events(&l) {
            return None;
        }
        let (service, src) = (l.service.clone(), l.src);
        let (dst, local) = match &kind {
            CmEventKind::ConnectRequest { peer, local, .. } => (Some(*peer), Some(*local)),
            _ => (None, src),
        };
        let id = Arc::new(IdInner {
            channel: self.channel.clone(),
            ps: self.ps,
            qp_type: self.qp_type,
            // Its first handle is the one its event takes when read.
            handles: AtomicUsize::new(0),
            state: Mutex::new(IdState {
                service,
                rid: Some(rid),
                src: local,
                dst,
                unclaimed: true,
                ..IdState::default()
            }),
        });
        let weak = Arc::downgrade(&id);
        self.channel.push(Queued {
            id: Some(id),
            listen_id: Some(self.clone()),
            kind,
        });
        drop(l);
        Some(weak)
    }

    fn post(self: Arc<Self>, kind: CmEventKind) {
        IdInner::post_event(&self, kind);
    }

    fn take_establish_quietly(&self) -> bool {
        std::mem::take(&mut lock(&self.state).establish_quietly)
    }

    fn set_peer_param(&self, param: ConnParam) {
        lock(&self.state).peer_param = Some(param);
    }

    fn ready_active_qp(&self, cm: &RdmaCm) -> Result<(), CmError> {
        let s = lock(&self.state);
        let (Some(qp), Some(rid)) = (s.qp.clone(), s.rid) else {
            return Err(CmError::InvalidState("no QP on the id"));
        };
        let ack_timeout = s.ack_timeout;
        drop(s);
        let steps = [QpState::Init, QpState::Rtr, QpState::Rts];
        move_qp(&qp, cm, rid, &steps, ack_timeout)
    }

    fn qp_to_error(&self) {
        IdInner::qp_to_error(self);
    }

    fn has_qp(&self) -> bool {
        lock(&self.state).qp.is_some()
    }
}

impl IdInner {
    /// Hands `kind` to the id's channel, unless the id's last handle is gone (an event the
    /// service queued before that must not bring it back) or its connect request is still
    /// unread: as the kernel does, a new id gets no events before the application has it (a
    /// second thread reading such an event and dropping it would destroy the id under the
    /// request). Queued under the id's lock, so that a `destroy` that begins after the check
    /// finds the event to discard.
    fn post_event(id: &Arc<IdInner>, kind: CmEventKind) {
        let s = lock(&id.state);
        if id.takes_events(&s) && !s.unclaimed {
            id.channel.push(Queued {
                id: Some(id.clone()),
                listen_id: None,
                kind,
            });
        }
    }

    fn qp_to_error(&self) {
        if let Some(qp) = lock(&self.state).qp.clone() {
            let _ = qp.modify(&QpAttr {
                qp_state: Some(QpState::Err),
                ..QpAttr::default()
            });
        }
    }
}

/// The CM's attributes for `target`, with the id's own ACK timeout at RTS if it set one.
fn qp_attr_for(
    cm: &RdmaCm,
    rid: RdmaId,
    target: QpState,
    ack_timeout: Option<u8>,
) -> Result<QpAttr, CmError> {
    let mut attr = cm.qp_attr(rid, target)?;
    if let (QpState::Rts, Some(t)) = (target, ack_timeout) {
        attr.timeout = Some(t);
    }
    Ok(attr)
}

fn move_qp(
    qp: &QueuePair,
    cm: &RdmaCm,
    rid: RdmaId,
    steps: &[QpState],
    ack_timeout: Option<u8>,
) -> Result<(), CmError> {
    for &target in steps {
        let attr = qp_attr_for(cm, rid, target, ack_timeout)?;
        qp.modify(&attr)
            .map_err(|e| CmError::Qp(format!("to {}: {e}", target.name())))?;
    }
    Ok(())
}

impl CmId {
    /// A new id on `channel` (`rdma_create_id`): `ps` is the port space (TCP for RC
    /// connections, UDP for UD), `qp_type` the QP it will carry.
    pub fn new(channel: &EventChannel, ps: PortSpace, qp_type: RdmaQpType) -> CmId {
        CmId::handle(Arc::new(IdInner {
            channel: channel.clone(),
            ps,
            qp_type,
            handles: AtomicUsize::new(0),
            state: Mutex::new(IdState::default()),
        }))
    }

    /// The id's service, for a call on the id. What the device's data path holds back goes
    /// out first ([`softrdma::Device::progress`]): the call's MADs must not overtake it.
    fn service(&self) -> Result<(Arc<Service>, RdmaId), CmError> {
        let s = lock(&self.inner.state);
        let r = match (&s.service, s.rid) {
            (Some(svc), Some(rid)) => Ok((svc.clone(), rid)),
            _ => Err(CmError::InvalidState("the id is not bound to an address")),
        };
        drop(s);
        if let Ok((svc, _)) = &r {
            svc.device.progress();
        }
        r
    }

    /// Binds the id to a local address (`rdma_bind_addr`): the softrdma device on that IP
    /// (opened now if this process has none there) and a port (0: an ephemeral one).
    /// Returns the address bound.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        if lock(&self.inner.state).service.is_some() {
            return Err(CmError::InvalidState("the id is bound already"));
        }
        let service = Service::for_ip(addr.ip())?;
        self.bind_on(service, addr)
    }

    /// Binds the id to `addr` on a device the caller opened (`addr.ip()` must be its
    /// address): how a program that also uses the device directly shares it with rdma_cm.
    pub fn bind_device(&self, device: &softrdma::Device, port: u16) -> Result<SocketAddr, CmError> {
        let service = Service::for_device(device)?;
        self.bind_on(service, SocketAddr::new(device.ip(), port))
    }

    fn bind_on(&self, service: Arc<Service>, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        let (ps, qp_type) = (self.inner.ps, self.inner.qp_type);
        let weak: Weak<dyn Endpoint> = Arc::downgrade(&self.inner) as Weak<dyn Endpoint>;
        let (rid, bound) = service.with_cm(|st, _| {
            let rid = st.cm.create_id(ps, qp_type);
            match st.cm.bind(rid, addr) {
                Ok(bound) => {
                    st.ids.insert(rid, weak);
                    Ok((rid, bound))
                }
                Err(e) => {
                    let _ = st.cm.destroy(softrdma_proto::Instant::ZERO, rid);
                    Err(e)
                }
            }
        })?;
        let mut s = lock(&self.inner.state);
        s.service = Some(service);
        s.rid = Some(rid);
        s.src = Some(bound);
        Ok(bound)
    }

    /// Resolves `dst` (`rdma_resolve_addr`): binds to `src`, or to the address the routing
    /// table would send from, if the id is not bound yet; then `AddrResolved` arrives.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), CmError> {
        if lock(&self.inner.state).service.is_none() {
            let src = match src {
                Some(s) => s,
                None => SocketAddr::new(route_source(dst)?, 0),
            };
            self.bind_addr(src)?;
        }
        // What the data path holds back goes out first (see `service`).
        self.service()?;
        lock(&self.inner.state).dst = Some(dst);
        IdInner::post_event(&self.inner, CmEventKind::AddrResolved);
        Ok(())
    }

    /// Resolves the route (`rdma_resolve_route`): RoCE needs no path query; the path MTU is
    /// the port's active MTU. Then `RouteResolved` arrives.
    pub fn resolve_route(&self) -> Result<(), CmError> {
        let (service, _) = self.service()?;
        let mtu = service
            .device
            .query_port(1)
            .map(|p| p.active_mtu)
            .map_err(|e| CmError::Qp(e.to_string()))?;
        let mut s = lock(&self.inner.state);
        if s.dst.is_none() {
            return Err(CmError::InvalidState("resolve the address first"));
        }
        s.route = Some(Route {
            mtu: mtu.ibv_enum(),
            traffic_class: s.tos.unwrap_or(0),
            ..Route::default()
        });
        drop(s);
        IdInner::post_event(&self.inner, CmEventKind::RouteResolved);
        Ok(())
    }

    /// The device the id is bound to (`id->verbs`).
    pub fn device(&self) -> Option<softrdma::Device> {
        lock(&self.inner.state)
            .service
            .as_ref()
            .map(|s| s.device.clone())
    }

    /// The device's protection domain that rdma_cm uses when none is given (`id->pd` after
    /// `rdma_create_qp(id, NULL, …)`).
    pub fn pd(&self) -> Option<ProtectionDomain> {
        lock(&self.inner.state)
            .service
            .as_ref()
            .map(|s| s.pd.clone())
    }

    /// The id's QP, once created.
    pub fn qp(&self) -> Option<QueuePair> {
        lock(&self.inner.state).qp.clone()
    }

    /// The local and remote addresses.
    pub fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let s = lock(&self.inner.state);
        (s.src, s.dst)
    }

    /// Creates the id's QP (`rdma_create_qp`) in `pd` (of the id's device) and moves it to
    /// INIT as rdma_cm does — a UD QP on to RTS, with rdma_cm's Q_Key (librdmacm's
    /// `ucma_init_ud_qp`): datagrams need no handshake.
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        init: &QpInitAttr,
    ) -> Result<QueuePair, CmError> {
        self.service()?;
        let qp = pd.create_qp(init).map_err(|e| CmError::Qp(e.to_string()))?;
        self.adopt_qp(&qp)?;
        Ok(qp)
    }

    /// Makes `qp` (new, in RESET, of the id's device) the id's QP, moved as
    /// [`CmId::create_qp`] moves the QPs it creates: how a library that creates QPs its own
    /// way (the C `rdma_create_qp`) hands them to rdma_cm.
    pub fn adopt_qp(&self, qp: &QueuePair) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        if lock(&self.inner.state).qp.is_some() {
            return Err(CmError::InvalidState("the id has a QP already"));
        }
        service.with_cm(|st, _| move_qp(qp, &st.cm, rid, &[QpState::Init], None))?;
        if self.inner.qp_type == RdmaQpType::Ud {
            qp.modify(&QpAttr::ud_rtr())
                .and_then(|()| qp.modify(&QpAttr::unreliable_rts(softrdma::Psn::new(0))))
                .map_err(|e| CmError::Qp(e.to_string()))?;
        }
        lock(&self.inner.state).qp = Some(qp.clone());
        Ok(())
    }

    /// Forgets the id's QP (`rdma_destroy_qp`): rdma_cm moves it no more.
    pub fn release_qp(&self) -> Option<QueuePair> {
        lock(&self.inner.state).qp.take()
    }

    /// The attributes that move a QP of this connection to `target` (`rdma_init_qp_attr`):
    /// for a consumer that created its QP itself and moves it with them.
    pub fn qp_attr(&self, target: QpState) -> Result<QpAttr, CmError> {
        let (service, rid) = self.service()?;
        let ack_timeout = lock(&self.inner.state).ack_timeout;
        service.with_cm(|st, _| qp_attr_for(&st.cm, rid, target, ack_timeout))
    }

    /// Completes an active connection whose QP the consumer readied after
    /// [`CmEventKind::ConnectResponse`] (`rdma_establish`): the RTU leaves, and the connection
    /// is established when this returns, with no `Established` event (as with librdmacm,
    /// whose programs wait for the next event, `Disconnected`).
    pub fn establish(&self) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        lock(&self.inner.state).establish_quietly = true;
        let done = service.with_cm(|st, now| st.cm.complete_connect(now, rid));
        if done.is_err() {
            lock(&self.inner.state).establish_quietly = false;
        }
        Ok(done?)
    }

    /// A passive connection's QP received traffic before the RTU (`rdma_notify` with
    /// `IBV_EVENT_COMM_EST`): the connection is established without waiting for it.
    pub fn notify_established(&self) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        Ok(service.with_cm(|st, now| st.cm.established(now, rid))?)
    }

    /// Sets the type of service (`RDMA_OPTION_ID_TOS`): the traffic class of the route
    /// resolved after it, hence of the connection's packets.
    pub fn set_tos(&self, tos: u8) {
        lock(&self.inner.state).tos = Some(tos);
    }

    /// Sets the local ACK timeout of the id's QP (`RDMA_OPTION_ID_ACK_TIMEOUT`: 4.096 µs ×
    /// 2^`timeout`), used instead of the one the CM derives from the path when the QP moves
    /// to RTS (and in [`CmId::qp_attr`]).
    pub fn set_ack_timeout(&self, timeout: u8) {
        lock(&self.inner.state).ack_timeout = Some(timeout.min(31));
    }

    /// The port space the id was created in.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }

    /// The QP type the id carries.
    pub fn qp_type(&self) -> RdmaQpType {
        self.inner.qp_type
    }

    /// The route, once resolved (or, for an id of a connect request, once accepted).
    pub fn route(&self) -> Option<Route> {
        lock(&self.inner.state).route
    }

    /// Listens for connect requests (`rdma_listen`) on the bound address.
    pub fn listen(&self) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        let port = lock(&self.inner.state).src.map_or(0, |a| a.port());
        // Other processes on the address may listen too: the port is taken host-wide first,
        // as the kernel's rdma_cm takes it.
        let claim = service
            .device
            .claim_service_id(self.inner.ps.service_id(port))
            .map_err(|e| match e {
                softrdma::ShareError::ServiceInUse(_) => {
                    CmError::Cm(softrdma_cm::rdma::RdmaError::AddressInUse)
                }
                other => CmError::Setup(other.to_string()),
            })?;
        service.with_cm(|st, _| st.cm.listen(rid))?;
        lock(&self.inner.state).listen_claim = Some(claim);
        Ok(())
    }

    /// Connects (`rdma_connect`) with `param` (its `qp_num` is the id's QP); `Established`
    /// follows, or `Rejected` / `Unreachable`.
    pub fn connect(&self, param: &ConnParam) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        let s = lock(&self.inner.state);
        let (Some(dst), Some(route)) = (s.dst, s.route) else {
            return Err(CmError::InvalidState("connect needs a resolved route"));
        };
        // The id's QP, or the consumer's own, named by `param.qp_num`.
        let qp_num = match &s.qp {
            Some(qp) => qp.qp_num(),
            None if param.qp_num != 0 => param.qp_num,
            None => return Err(CmError::InvalidState("connect needs a QP")),
        };
        drop(s);
        let param = ConnParam {
            qp_num,
            ..param.clone()
        };
        service.with_cm(|st, now| st.cm.connect(now, rid, dst, route, &param))?;
        Ok(())
    }

    /// Accepts a connect request (`rdma_accept`): the QP goes to RTR and RTS, then the REP
    /// leaves; `Established` follows the peer's RTU. For UD, the SIDR_REP carries the QP's
    /// number and Q_Key (`param.qkey`, 0 for rdma_cm's), and the id is ready at once.
    pub fn accept(&self, param: &ConnParam) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        let qp = self.qp();
        let ack_timeout = lock(&self.inner.state).ack_timeout;
        let qp_num = match &qp {
            Some(qp) => qp.qp_num(),
            None if param.qp_num != 0 => param.qp_num,
            None => return Err(CmError::InvalidState("accept needs a QP")),
        };
        let param = ConnParam {
            qp_num,
            ..param.clone()
        };
        let ud = self.inner.qp_type == RdmaQpType::Ud;
        service.with_cm(|st, now| {
            // rdma_cm readies its own QP; the consumer readied its own with `qp_attr`.
            if let (false, Some(qp)) = (ud, &qp) {
                let steps = [QpState::Init, QpState::Rtr, QpState::Rts];
                move_qp(qp, &st.cm, rid, &steps, ack_timeout)?;
            }
            st.cm.accept(now, rid, &param).map_err(CmError::from)
        })
    }

    /// Rejects a connect request (`rdma_reject`) with private data (at most 148 bytes).
    pub fn reject(&self, private_data: &[u8]) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        service.with_cm(|st, now| st.cm.reject(now, rid, private_data))?;
        Ok(())
    }

    /// Disconnects (`rdma_disconnect`): the QP goes to ERR (outstanding work flushes), the
    /// DREQ (or the DREP to the peer's) leaves; `Disconnected` follows.
    pub fn disconnect(&self) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        self.inner.qp_to_error();
        service.with_cm(|st, now| st.cm.disconnect(now, rid))?;
        Ok(())
    }

    /// The peer's parameters from its REP (active side), once connected.
    pub fn peer_param(&self) -> Option<ConnParam> {
        lock(&self.inner.state).peer_param.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The service's own reference to an id (kept while it hands the id an event, until it
    /// has released its lock) is not a handle: a listener whose last handle is dropped frees
    /// its port at once, and listening there again succeeds (it failed with "address in use"
    /// when the service thread was preempted holding such a reference).
    #[test]
    fn a_dropped_listener_frees_its_port_at_once() {
        let ch = EventChannel::new();
        let at: SocketAddr = "127.0.60.20:7471".parse().unwrap();
        // Keeps the address's service (and device) for the whole test.
        let keeper = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        keeper.bind_addr("127.0.60.20:0".parse().unwrap()).unwrap();
        let l = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        l.bind_addr(at).unwrap();
        l.listen().unwrap();
        let services_reference = l.inner.clone();
        drop(l);
        let again = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        assert_eq!(again.bind_addr(at).unwrap(), at);
        again.listen().unwrap();
        // A clone is a handle: dropping one of two leaves the listener listening.
        let other = again.clone();
        drop(again);
        let third = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        assert!(third.bind_addr(at).is_err(), "still taken by the listener");
        drop(other);
        let fourth = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        assert_eq!(fourth.bind_addr(at).unwrap(), at);
        drop(services_reference);
    }

    /// A new id whose connect request is unread takes no events: another reader could take
    /// one, drop it and so destroy the id before the request is read.
    #[test]
    fn an_unread_requests_id_takes_no_events_until_the_request_is_read() {
        let ch = EventChannel::new();
        let listener = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        let new = Arc::new(IdInner {
            channel: ch.clone(),
            ps: PortSpace::Tcp,
            qp_type: RdmaQpType::Rc,
            handles: AtomicUsize::new(0),
            state: Mutex::new(IdState {
                unclaimed: true,
                ..IdState::default()
            }),
        });
        ch.push(Queued {
            id: Some(new.clone()),
            listen_id: Some(listener.inner.clone()),
            kind: CmEventKind::Disconnected,
        });
        IdInner::post_event(&new, CmEventKind::TimewaitExit);
        let req = ch.try_get_event().expect("the request");
        assert_eq!(req.listen_id.as_ref(), Some(&listener));
        assert!(
            ch.try_get_event().is_none(),
            "nothing queued before the request was read"
        );
        IdInner::post_event(&new, CmEventKind::TimewaitExit);
        let e = ch
            .try_get_event()
            .expect("an event once the request is read");
        assert_eq!((e.id, e.kind), (req.id, CmEventKind::TimewaitExit));
    }

    /// An id dropped with an event unread in a channel the application also dropped is freed:
    /// the event held a handle on the id, the id its channel, the channel the event, and the
    /// three were never freed.
    #[test]
    fn an_id_dropped_with_an_unread_event_is_freed() {
        let ch = EventChannel::new();
        let id = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        id.resolve_addr(
            Some("127.0.60.23:0".parse().unwrap()),
            "127.0.60.24:7471".parse().unwrap(),
        )
        .unwrap();
        assert!(ch.has_event(), "AddrResolved is queued at once on loopback");
        let inner = Arc::downgrade(&id.inner);
        let channel = Arc::downgrade(&ch.inner);
        drop(id);
        assert!(!ch.has_event(), "the destroyed id's unread event is gone");
        drop(ch);
        assert!(inner.upgrade().is_none(), "the id is freed");
        assert!(channel.upgrade().is_none(), "the channel is freed");
    }
}
