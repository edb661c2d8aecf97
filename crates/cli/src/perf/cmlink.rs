//! perftest's rdma_cm mode (`-R`): the control QP and the test QPs, each connected through
//! rdma_cm on the port of the run (perftest 4.5's `rdma_client_connect` /
//! `rdma_server_connect` and `create_rdma_cm_connection`).
//!
//! The order is perftest's: the server listens on the port, accepts the control connection
//! (its receive posted before the accept) and closes the listener; versions, sys data and
//! MTU go over the control QP; one key exchange as a barrier; then the client connects one
//! rdma_cm id per test QP to the same port, where the server now listens again and accepts
//! them (a REQ that arrives before that listener is rejected: the client retries, 10 times
//! 100 ms apart, as perftest); another barrier. The test QPs are then connected: no QP
//! numbers or PSNs from the key exchanges are applied (perftest prints them only).

use std::net::SocketAddr;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use softrdma::{Device, ProtectionDomain, QpInitAttr, QueuePair};
use softrdma_rdmacm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RdmaQpType};

use super::control::CmControl;
use super::output::PerfError;

/// How long a connection step may take (Linux's rdma_cm gives up on an unanswered REQ
/// after about this long too).
const STEP: Duration = Duration::from_secs(30);
/// perftest's retries of a rejected test-QP connection, and the pause between them.
const RETRIES: u32 = 10;
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The test QPs' connections, kept until the run ends.
pub(crate) struct DataLinks {
    ids: Vec<CmId>,
    channel: EventChannel,
}

impl DataLinks {
    /// Ends the test QPs' connections as perftest's sides do: the client (`active`)
    /// disconnects each and waits for a `DISCONNECTED` per QP (`rdma_cm_disconnect_nodes`);
    /// the server waits for the client's DREQs and answers them, disconnecting itself only
    /// what the client left connected after a while (perftest's server destroys its ids,
    /// which disconnects them). Waits are bounded.
    pub(crate) fn close(self, active: bool) {
        let mut open = vec![true; self.ids.len()];
        if active {
            for id in &self.ids {
                let _ = id.disconnect();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while open.contains(&true) {
            let wait = deadline.saturating_duration_since(Instant::now());
            let Some(e) = self.channel.get_event(Some(wait)) else {
                break;
            };
            if e.kind == CmEventKind::Disconnected {
                if let Some(i) = self.ids.iter().position(|id| *id == e.id) {
                    open[i] = false;
                }
            }
        }
        for (id, _) in self.ids.iter().zip(&open).filter(|(_, o)| **o) {
            let _ = id.disconnect();
        }
    }
}

fn cm_error(what: &str, e: impl std::fmt::Display) -> PerfError {
    PerfError::new(format!("rdma_cm: {what}: {e}"))
}

/// Waits for the event on `id` that `pick` accepts; a rejection or an unreachable peer is the
/// error (`Err(Some(reason))` for a rejection, to retry it).
fn wait_for(
    ch: &EventChannel,
    id: &CmId,
    timeout: Duration,
    pick: impl Fn(&CmEventKind) -> bool,
) -> Result<CmEvent, (PerfError, bool)> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(e) = ch.get_event(Some(left)) else {
            return Err((
                PerfError::new("rdma_cm: the peer did not answer in time"),
                false,
            ));
        };
        if e.id != *id {
            continue;
        }
        if pick(&e.kind) {
            return Ok(e);
        }
        match &e.kind {
            CmEventKind::Rejected { reason, .. } => {
                return Err((
                    PerfError::new(format!(
                        "rdma_cm: the server rejected the connection ({reason:?}): is a server \
                         with -R listening on that port?"
                    )),
                    true,
                ))
            }
            CmEventKind::Unreachable | CmEventKind::ConnectError => {
                return Err((
                    PerfError::new("rdma_cm: the server is unreachable (no answer to the REQ)"),
                    false,
                ))
            }
            _ => {}
        }
    }
}

/// A new id on `device` resolved to `dst` (address and route), on channel `ch`.
fn resolved_id(ch: &EventChannel, device: &Device, dst: SocketAddr) -> Result<CmId, PerfError> {
    let id = CmId::new(ch, PortSpace::Tcp, RdmaQpType::Rc);
    id.bind_device(device, 0).map_err(|e| cm_error("bind", e))?;
    id.resolve_addr(None, dst)
        .map_err(|e| cm_error("resolve address", e))?;
    wait_for(ch, &id, STEP, |k| *k == CmEventKind::AddrResolved).map_err(|(e, _)| e)?;
    id.resolve_route()
        .map_err(|e| cm_error("resolve route", e))?;
    wait_for(ch, &id, STEP, |k| *k == CmEventKind::RouteResolved).map_err(|(e, _)| e)?;
    Ok(id)
}

/// An id listening on `port` of `device`, its events on `ch`.
fn listener(ch: &EventChannel, device: &Device, port: u16) -> Result<CmId, PerfError> {
    let listen = CmId::new(ch, PortSpace::Tcp, RdmaQpType::Rc);
    listen
        .bind_device(device, port)
        .map_err(|e| cm_error(&format!("bind to port {port}"), e))?;
    listen.listen().map_err(|e| cm_error("listen", e))?;
    Ok(listen)
}

/// The control QP's resources: `slot` bytes to send from and `slot` to receive into.
struct ControlQp {
    qp: QueuePair,
    cqs: (softrdma::CompletionQueue, softrdma::CompletionQueue),
    mr: softrdma::MemoryRegion,
}

fn control_qp(id: &CmId, slot: usize) -> Result<ControlQp, PerfError> {
    let device = id
        .device()
        .ok_or_else(|| PerfError::new("rdma_cm: the id has no device"))?;
    let pd = id
        .pd()
        .ok_or_else(|| PerfError::new("rdma_cm: the id has no device"))?;
    let send_cq = device.create_cq(2)?;
    let recv_cq = device.create_cq(2)?;
    let mut init = QpInitAttr::rc(&send_cq);
    init.recv_cq = recv_cq.clone();
    init.cap.max_send_wr = 2;
    init.cap.max_recv_wr = 2;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    let qp = id
        .create_qp(&pd, &init)
        .map_err(|e| cm_error("create the control QP", e))?;
    let mr = pd
        .reg_mr(2 * slot, softrdma::AccessFlags::LOCAL_WRITE)
        .map_err(|e| cm_error("register the control buffers", e))?;
    CmControl::post_first_recv(&qp, &mr, slot)?;
    Ok(ControlQp {
        qp,
        cqs: (send_cq, recv_cq),
        mr,
    })
}

/// perftest's control connection parameters: a SEND-only QP (no READ resources), transport
/// and RNR retries 7.
fn control_param() -> ConnParam {
    ConnParam {
        responder_resources: 0,
        initiator_depth: 0,
        ..ConnParam::rc(0)
    }
}

/// The client's control connection to `dst`.
pub(crate) fn control_client(
    device: &Device,
    dst: SocketAddr,
    slot: usize,
) -> Result<CmControl, PerfError> {
    let ch = EventChannel::new();
    let id = resolved_id(&ch, device, dst)?;
    let c = control_qp(&id, slot)?;
    id.connect(&control_param())
        .map_err(|e| cm_error("connect", e))?;
    wait_for(&ch, &id, STEP, |k| {
        matches!(k, CmEventKind::Established { .. })
    })
    .map_err(|(e, _)| e)?;
    Ok(CmControl::new(id, ch, c.qp, c.cqs, c.mr, slot))
}

/// The server's control connection: listens on `port` of `device` (telling `ready` once it
/// does), accepts one client, and closes the listener so the test QPs can use the port.
pub(crate) fn control_server(
    device: &Device,
    port: u16,
    slot: usize,
    ready: Option<Sender<()>>,
    timeout: Option<Duration>,
) -> Result<CmControl, PerfError> {
    let ch = EventChannel::new();
    let listen = listener(&ch, device, port)?;
    if let Some(r) = ready {
        let _ = r.send(());
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    let req = loop {
        let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let Some(e) = ch.get_event(wait) else {
            return Err(PerfError::new("no client connected (--timeout)"));
        };
        if matches!(e.kind, CmEventKind::ConnectRequest { .. }) {
            break e;
        }
    };
    let id = req.id.clone();
    drop(req);
    drop(listen);
    let c = control_qp(&id, slot)?;
    id.accept(&control_param())
        .map_err(|e| cm_error("accept", e))?;
    Ok(CmControl::new(id, ch, c.qp, c.cqs, c.mr, slot))
}

/// The test QPs' connection parameters: `out_reads` READ/atomic resources each way for READ
/// and atomic tests (0 otherwise), retries 7.
pub(crate) fn data_param(reads: Option<u16>) -> ConnParam {
    let r = reads.map_or(0, |r| r.min(u16::from(u8::MAX)) as u8);
    ConnParam {
        responder_resources: r,
        initiator_depth: r,
        ..ConnParam::rc(0)
    }
}

/// The client's test QPs: `n` connections to `dst`, each QP made by `init` in `pd`.
pub(crate) fn data_client(
    device: &Device,
    pd: &ProtectionDomain,
    dst: SocketAddr,
    n: usize,
    init: &QpInitAttr,
    param: &ConnParam,
) -> Result<(DataLinks, Vec<QueuePair>), PerfError> {
    let channel = EventChannel::new();
    let mut ids = Vec::with_capacity(n);
    let mut qps = Vec::with_capacity(n);
    for _ in 0..n {
        let mut attempt = 0;
        let (id, qp) = loop {
            attempt += 1;
            let id = resolved_id(&channel, device, dst)?;
            let qp = id
                .create_qp(pd, init)
                .map_err(|e| cm_error("create a test QP", e))?;
            id.connect(param).map_err(|e| cm_error("connect", e))?;
            match wait_for(&channel, &id, STEP, |k| {
                matches!(k, CmEventKind::Established { .. })
            }) {
                Ok(_) => break (id, qp),
                Err((_, true)) if attempt < RETRIES => std::thread::sleep(RETRY_PAUSE),
                Err((e, _)) => return Err(e),
            }
        };
        ids.push(id);
        qps.push(qp);
    }
    Ok((DataLinks { ids, channel }, qps))
}

/// The server's test QPs: listens on `port` again and accepts `n` connections, each QP made
/// by `init` in `pd`; then closes the listener.
pub(crate) fn data_server(
    device: &Device,
    pd: &ProtectionDomain,
    port: u16,
    n: usize,
    init: &QpInitAttr,
    param: &ConnParam,
) -> Result<(DataLinks, Vec<QueuePair>), PerfError> {
    let channel = EventChannel::new();
    let listen = listener(&channel, device, port)?;
    let mut ids = Vec::with_capacity(n);
    let mut qps = Vec::with_capacity(n);
    let deadline = Instant::now() + STEP;
    while ids.len() < n {
        let wait = deadline.saturating_duration_since(Instant::now());
        let Some(e) = channel.get_event(Some(wait)) else {
            return Err(PerfError::new(format!(
                "rdma_cm: {} of {n} test QPs connected in {} s",
                ids.len(),
                STEP.as_secs()
            )));
        };
        if !matches!(e.kind, CmEventKind::ConnectRequest { .. }) {
            continue;
        }
        let id = e.id.clone();
        let qp = id
            .create_qp(pd, init)
            .map_err(|e| cm_error("create a test QP", e))?;
        id.accept(param).map_err(|e| cm_error("accept", e))?;
        ids.push(id);
        qps.push(qp);
    }
    drop(listen);
    Ok((DataLinks { ids, channel }, qps))
}
