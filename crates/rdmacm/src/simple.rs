//! The blocking shortcut for programs that want a connected RC queue pair and no event loop:
//! [`connect`] on one side, [`Listener::accept`] on the other.

use std::net::SocketAddr;
use std::time::{Duration, Instant as WallClock};

use softrdma::{Device, QpInitAttr, QueuePair};
use softrdma_cm::rdma::{ConnParam, RdmaQpType};
use softrdma_wire::mad::cma::PortSpace;

use crate::error::CmError;
use crate::event::CmEventKind;
use crate::id::{CmEvent, CmId, EventChannel};

/// A connected RC queue pair and the CM id that owns the connection (drop both, or call
/// [`Connection::disconnect`], to end it).
#[derive(Debug)]
pub struct Connection {
    /// The connection's CM id.
    pub id: CmId,
    /// The QP, in RTS.
    pub qp: QueuePair,
    /// The peer's private data (from its REP, or its REQ for an accepted connection).
    pub private_data: Vec<u8>,
    channel: EventChannel,
}

impl Connection {
    /// Disconnects and waits (up to `timeout`) until the peer has answered.
    pub fn disconnect(self, timeout: Duration) -> Result<(), CmError> {
        self.id.disconnect()?;
        let id = &self.id;
        wait(&self.channel, timeout, |e| {
            (e.id == *id && e.kind == CmEventKind::Disconnected).then_some(())
        })
        .map(|(_, ())| ())
    }

    /// The channel the id's later events (e.g. the peer's disconnect) arrive on.
    pub fn events(&self) -> &EventChannel {
        &self.channel
    }
}

/// Waits for the event `pick` accepts; a rejection, an unreachable peer or a connect error
/// on the way is the error.
fn wait<T>(
    ch: &EventChannel,
    timeout: Duration,
    mut pick: impl FnMut(&CmEvent) -> Option<T>,
) -> Result<(CmEvent, T), CmError> {
    let deadline = WallClock::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(WallClock::now());
        let Some(e) = ch.get_event(Some(left)) else {
            return Err(CmError::InvalidState("no answer in time"));
        };
        if let Some(t) = pick(&e) {
            return Ok((e, t));
        }
        match &e.kind {
            CmEventKind::Rejected { reason, .. } => return Err(CmError::Rejected(*reason)),
            CmEventKind::Unreachable | CmEventKind::ConnectError => {
                return Err(CmError::Unreachable)
            }
            _ => {}
        }
    }
}

/// Connects an RC QP to `dst` (from `src`, or the address the routing table picks): address
/// and route resolution, the QP `init` describes (its CQs made on the device the id is
/// bound to), the connection with `param`; returns once it is established.
pub fn connect(
    src: Option<SocketAddr>,
    dst: SocketAddr,
    init: impl FnOnce(&Device) -> QpInitAttr,
    param: &ConnParam,
    timeout: Duration,
) -> Result<Connection, CmError> {
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
    id.resolve_addr(src, dst)?;
    wait(&ch, timeout, |e| {
        (e.kind == CmEventKind::AddrResolved).then_some(())
    })?;
    id.resolve_route()?;
    wait(&ch, timeout, |e| {
        (e.kind == CmEventKind::RouteResolved).then_some(())
    })?;
    let device = id.device().ok_or(CmError::InvalidState("no device"))?;
    let pd = id.pd().ok_or(CmError::InvalidState("no device"))?;
    let qp = id.create_qp(&pd, &init(&device))?;
    id.connect(param)?;
    wait(&ch, timeout, |e| {
        matches!(e.kind, CmEventKind::Established { .. }).then_some(())
    })?;
    let private_data = id.peer_param().map(|p| p.private_data).unwrap_or_default();
    Ok(Connection {
        id,
        qp,
        private_data,
        channel: ch,
    })
}

/// A listening CM id, accepting one connection at a time (events of other connections that
/// arrive meanwhile on its channel are dropped: use [`CmId`] for concurrent handshakes).
#[derive(Debug)]
pub struct Listener {
    id: CmId,
    channel: EventChannel,
}

impl Listener {
    /// Listens on `addr` (its IP selects the softrdma device).
    pub fn bind(addr: SocketAddr) -> Result<Listener, CmError> {
        let channel = EventChannel::new();
        let id = CmId::new(&channel, PortSpace::Tcp, RdmaQpType::Rc);
        id.bind_addr(addr)?;
        id.listen()?;
        Ok(Listener { id, channel })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.addrs().0
    }

    /// Waits for a connect request, accepts it on the QP `init` describes with `param`,
    /// and returns once the connection is established.
    pub fn accept(
        &self,
        init: impl FnOnce(&Device) -> QpInitAttr,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<Connection, CmError> {
        let (req, peer) = wait(&self.channel, timeout, |e| match &e.kind {
            CmEventKind::ConnectRequest { param, .. } => Some(param.clone()),
            _ => None,
        })?;
        let id = req.id;
        let device = id.device().ok_or(CmError::InvalidState("no device"))?;
        let pd = id.pd().ok_or(CmError::InvalidState("no device"))?;
        let qp = id.create_qp(&pd, &init(&device))?;
        id.accept(param)?;
        wait(&self.channel, timeout, |e| {
            (e.id == id && matches!(e.kind, CmEventKind::Established { .. })).then_some(())
        })?;
        Ok(Connection {
            id,
            qp,
            private_data: peer.private_data,
            channel: self.channel.clone(),
        })
    }
}
