//! Event channels and the ids' shared state: an id's lifetime (its handles, its destruction)
//! and its channel's queue are one module because they refer to each other in a circle — an
//! event names its id, an id posts to its channel, and destroying an id discards its unread
//! events. The verbs of an id (`address`, `qp`, `connection`, `attrs`) and the service's side
//! (`endpoint`) build on what is here.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant as WallClock};

use softrdma::QueuePair;
use softrdma_cm::rdma::{ConnParam, RdmaId, RdmaQpType, Route};
use softrdma_wire::mad::cma::PortSpace;

use crate::error::CmError;
use crate::event::CmEventKind;
use crate::service::Service;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
pub(super) struct Queued {
    /// `None` once claimed.
    pub(super) id: Option<Arc<IdInner>>,
    pub(super) listen_id: Option<Arc<IdInner>>,
    pub(super) kind: CmEventKind,
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

    pub(super) fn push(&self, e: Queued) {
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
    pub(super) channel: EventChannel,
    pub(super) ps: PortSpace,
    pub(super) qp_type: RdmaQpType,
    /// The application's handles ([`CmId`]s) on this id.
    pub(super) handles: AtomicUsize,
    pub(super) state: Mutex<IdState>,
}

#[derive(Default)]
pub(super) struct IdState {
    pub(super) service: Option<Arc<Service>>,
    pub(super) rid: Option<RdmaId>,
    pub(super) src: Option<SocketAddr>,
    pub(super) dst: Option<SocketAddr>,
    pub(super) route: Option<Route>,
    pub(super) qp: Option<QueuePair>,
    /// The peer's answer (REP), for `responder_resources`/`initiator_depth`.
    pub(super) peer_param: Option<ConnParam>,
    /// The last handle is gone: the id gets no more events.
    pub(super) destroyed: bool,
    /// Made for a connect request and not yet read: no handle yet, and not destroyed for it.
    pub(super) unclaimed: bool,
    /// `RDMA_OPTION_ID_TOS`: the route's traffic class.
    pub(super) tos: Option<u8>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout, instead of the CM's.
    pub(super) ack_timeout: Option<u8>,
    /// While listening: the device's claim on the port's Service ID, which brings the
    /// address's connect requests for it to this process.
    pub(super) listen_claim: Option<softrdma::ServiceClaim>,
    /// The consumer completed the connection itself ([`CmId::establish`]): the CM's
    /// `Established` for it is not an event of the id, as librdmacm gives none for
    /// `rdma_establish`.
    pub(super) establish_quietly: bool,
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
    pub(super) fn takes_events(&self, s: &IdState) -> bool {
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

impl IdInner {
    /// Hands `kind` to the id's channel, unless the id's last handle is gone (an event the
    /// service queued before that must not bring it back) or its connect request is still
    /// unread: as the kernel does, a new id gets no events before the application has it (a
    /// second thread reading such an event and dropping it would destroy the id under the
    /// request). Queued under the id's lock, so that a `destroy` that begins after the check
    /// finds the event to discard.
    pub(super) fn post_event(id: &Arc<IdInner>, kind: CmEventKind) {
        let s = lock(&id.state);
        if id.takes_events(&s) && !s.unclaimed {
            id.channel.push(Queued {
                id: Some(id.clone()),
                listen_id: None,
                kind,
            });
        }
    }
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
    pub(super) fn service(&self) -> Result<(Arc<Service>, RdmaId), CmError> {
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
