//! The service's side of an id (`Endpoint`): how the CM thread hands it connect requests
//! (a new id each), events, the peer's parameters and the moves of its QP. Kept apart from
//! the application's side, the verbs of `CmId`, which the service never calls.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};

use softrdma::QpState;
use softrdma_cm::rdma::{ConnParam, RdmaCm, RdmaId};

use crate::error::CmError;
use crate::event::CmEventKind;
use crate::service::Endpoint;

use super::channel::{lock, IdInner, IdState, Queued};
use super::qp::move_qp;

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
