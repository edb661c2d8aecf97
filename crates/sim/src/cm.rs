//! Connection management over the faulty fabric: rdma_cm handshakes (`softrdma_cm::rdma`, the
//! IB CM's MADs) carried by each node's QP 1, through the same loss, duplication, reordering
//! and corruption as the data.
//!
//! # What runs
//! Every node runs an rdma_cm with its GSI QP and listens on one port. From every node to
//! every other, `connections` RC connections are made: the passive side creates its QP and
//! accepts each request, the active side readies its QP on the REP and completes with the RTU
//! (as librdmacm does); once a connection is established on both sides, the active side
//! disconnects and the passive side answers.
//!
//! # What is checked
//! Every connection is established exactly once on each side, with each side's QP in RTS
//! connected to the other's QP number, and then disconnected exactly once on each side —
//! whatever MADs were lost or duplicated (the CM's retransmissions, duplicate handling and
//! time-wait cover it); no connection is rejected or declared unreachable.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use softrdma_cm::ib::{CmConfig, OutMad};
use softrdma_cm::rdma::gsi::{GsiBuffers, GsiService};
use softrdma_cm::rdma::{ConnParam, RdmaCm, RdmaEvent, RdmaEventKind, RdmaId, RdmaQpType, Route};
use softrdma_proto::{
    AddressVector, Instant, QpAttr, QpCaps, QpState, QpType, RecvWr, SendFlags, SendOp, SendWr,
    Sge, UdDest, VecMemory, WcOpcode, WcStatus,
};
use softrdma_wire::mad::cma::PortSpace;
use softrdma_wire::mad::{GSI_QKEY, MAD_LEN};
use softrdma_wire::Gid;

use crate::fabric::{Fabric, NodeId};
use crate::setup::{node_resources, NodeResources, SetupError};
use crate::workload::Divergence;

/// The port every node listens on.
pub const PORT: u16 = 7471;
/// Receives each GSI QP keeps posted.
const RECV_SLOTS: usize = 64;
const SLOT: usize = GsiBuffers::RECV_SLOT_LEN;
/// Send buffers, used round robin.
const SEND_SLOTS: usize = 64;
const BASE: u64 = 0x7000_0000;

/// Shape of the handshakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmWorkloadConfig {
    /// Seed of the CMs' communication IDs and starting PSNs.
    pub seed: u64,
    /// Nodes of the fabric.
    pub nodes: usize,
    /// Connections from every node to every other.
    pub connections: usize,
}

/// The verdict and tallies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmReport {
    /// Connections attempted.
    pub connections: u64,
    /// Established on both sides.
    pub established: u64,
    /// Disconnected on both sides.
    pub disconnected: u64,
    /// MADs sent, over all nodes.
    pub mads_sent: u64,
    /// MADs handled, over all nodes.
    pub mads_received: u64,
    /// Things that disagreed with the model.
    pub mismatches: u64,
    /// The first of them.
    pub first_divergence: Option<Divergence>,
}

impl CmReport {
    /// Whether every connection came up and went down, once on each side.
    pub fn passed(&self) -> bool {
        self.mismatches == 0
            && self.established == self.connections
            && self.disconnected == self.connections
    }
}

/// One side of one connection.
#[derive(Debug, Default, Clone, Copy)]
struct Side {
    qpn: u32,
    established: u32,
    disconnected: u32,
}

/// One connection: active node and id, passive node and id.
#[derive(Debug, Clone)]
struct Conn {
    active: (usize, RdmaId),
    passive: Option<(usize, RdmaId)>,
    sides: [Side; 2],
}

struct CmNode {
    res: NodeResources,
    cm: RdmaCm,
    gsi: u32,
    recv: Arc<VecMemory>,
    recv_key: u32,
    send: Arc<VecMemory>,
    send_key: u32,
    buffers: GsiBuffers,
    ip: IpAddr,
}

/// The running handshakes. See the module docs.
pub struct CmWorkload {
    nodes: Vec<CmNode>,
    conns: Vec<Conn>,
    /// Which connection an id (node, id) belongs to, and on which side (0 active).
    by_id: BTreeMap<(usize, RdmaId), (usize, usize)>,
    report: CmReport,
}

fn step(step: &'static str) -> impl FnOnce(softrdma_proto::EngineError) -> SetupError {
    move |source| SetupError::Engine { step, source }
}

impl CmWorkload {
    /// Opens every node's GSI QP and CM, listens, and starts every connection.
    pub fn setup(fabric: &mut Fabric, cfg: CmWorkloadConfig) -> Result<CmWorkload, SetupError> {
        let mut nodes = Vec::new();
        for i in 0..cfg.nodes {
            let res = node_resources(fabric, NodeId(i), 4 * (RECV_SLOTS + SEND_SLOTS))?;
            let ip = IpAddr::V4(fabric.ip(NodeId(i))?);
            let e = fabric.engine_mut(NodeId(i))?;
            let caps = QpCaps {
                max_send_wr: SEND_SLOTS as u32,
                max_recv_wr: RECV_SLOTS as u32,
                ..QpCaps::default()
            };
            let gsi = e
                .create_gsi_qp(res.pd, res.send_cq, res.recv_cq, caps)
                .map_err(step("create_gsi_qp"))?;
            e.modify_qp(gsi, &QpAttr::ud_init(GSI_QKEY))
                .map_err(step("GSI INIT"))?;
            e.modify_qp(gsi, &QpAttr::ud_rtr())
                .map_err(step("GSI RTR"))?;
            e.modify_qp(gsi, &QpAttr::unreliable_rts(softrdma_wire::Psn::ZERO))
                .map_err(step("GSI RTS"))?;
            let buffers = GsiBuffers::new(RECV_SLOTS, SEND_SLOTS);
            let recv = Arc::new(VecMemory::new(buffers.recv_bytes()));
            let send = Arc::new(VecMemory::new(buffers.send_bytes()));
            let local = softrdma_proto::AccessFlags::LOCAL_WRITE;
            let recv_key = e
                .reg_mr(
                    res.pd,
                    BASE,
                    buffers.recv_bytes() as u64,
                    local,
                    recv.clone(),
                )
                .map_err(step("reg_mr"))?;
            let send_key = e
                .reg_mr(
                    res.pd,
                    BASE,
                    buffers.send_bytes() as u64,
                    local,
                    send.clone(),
                )
                .map_err(step("reg_mr"))?;
            for slot in 0..RECV_SLOTS {
                e.post_recv(gsi, recv_wr(recv_key, slot))
                    .map_err(step("post_recv"))?;
            }
            let mut cm = RdmaCm::new(CmConfig {
                ca_guid: 0x1000 + i as u64,
                rng_seed: cfg.seed ^ (i as u64) << 32,
                ..CmConfig::default()
            });
            let listener = cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
            cm.bind(listener, SocketAddr::new(ip, PORT))
                .and_then(|_| cm.listen(listener))
                .map_err(|_| SetupError::Engine {
                    step: "rdma_cm listen",
                    source: softrdma_proto::EngineError::Busy,
                })?;
            nodes.push(CmNode {
                res,
                cm,
                gsi,
                recv,
                recv_key,
                send,
                send_key,
                buffers,
                ip,
            });
        }
        let mut w = CmWorkload {
            nodes,
            conns: Vec::new(),
            by_id: BTreeMap::new(),
            report: CmReport::default(),
        };
        let now = fabric.now();
        for a in 0..cfg.nodes {
            for b in 0..cfg.nodes {
                if a == b {
                    continue;
                }
                for _ in 0..cfg.connections {
                    let qpn = w.create_rc_qp(fabric, a)?;
                    let dst = SocketAddr::new(w.nodes[b].ip, PORT);
                    let node = &mut w.nodes[a];
                    let id = node.cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
                    let src = SocketAddr::new(node.ip, 0);
                    let started = node.cm.bind(id, src).is_ok()
                        && node
                            .cm
                            .qp_attr(id, QpState::Init)
                            .ok()
                            .and_then(|attr| {
                                fabric
                                    .engine_mut(NodeId(a))
                                    .ok()?
                                    .modify_qp(qpn, &attr)
                                    .ok()
                            })
                            .is_some()
                        && w.nodes[a]
                            .cm
                            .connect(now, id, dst, Route::default(), &ConnParam::rc(qpn))
                            .is_ok();
                    let c = w.conns.len();
                    w.by_id.insert((a, id), (c, 0));
                    w.conns.push(Conn {
                        active: (a, id),
                        passive: None,
                        sides: [
                            Side {
                                qpn,
                                ..Side::default()
                            },
                            Side::default(),
                        ],
                    });
                    w.report.connections += 1;
                    if !started {
                        w.diverge(now, format!("connection {c}: connect refused"));
                    }
                }
            }
        }
        Ok(w)
    }

    fn create_rc_qp(&mut self, fabric: &mut Fabric, node: usize) -> Result<u32, SetupError> {
        let r = self.nodes[node].res;
        fabric
            .engine_mut(r.node)?
            .create_qp(r.pd, r.send_cq, r.send_cq, QpType::Rc, QpCaps::default())
            .map_err(step("create_qp"))
    }

    fn diverge(&mut self, now: Instant, what: String) {
        self.report.mismatches += 1;
        if self.report.first_divergence.is_none() {
            self.report.first_divergence = Some(Divergence { at: now, what });
        }
    }

    /// Carries MADs, runs the CMs' timers, reacts to their events. Returns whether every
    /// connection is done (disconnected on both sides).
    pub fn pump(&mut self, fabric: &mut Fabric) -> bool {
        let now = fabric.now();
        for n in 0..self.nodes.len() {
            self.receive(fabric, n, now);
            let mut round = NodeRound {
                w: self,
                fabric,
                n,
                now,
            };
            round.on_timers(now);
            round.pump(now);
            if let Some(t) = self.nodes[n].cm.poll_timeout() {
                fabric.wake_at(t);
            }
        }
        self.conns
            .iter()
            .all(|c| c.sides.iter().all(|s| s.disconnected > 0))
    }

    fn receive(&mut self, fabric: &mut Fabric, n: usize, now: Instant) {
        let (id, cq, gsi) = {
            let node = &self.nodes[n];
            (node.res.node, node.res.recv_cq, node.gsi)
        };
        let mut wcs = Vec::new();
        let Ok(e) = fabric.engine_mut(id) else { return };
        let _ = e.poll_cq(cq, usize::MAX, &mut wcs);
        for wc in wcs {
            if wc.opcode != WcOpcode::Recv || wc.qp_num != gsi {
                continue;
            }
            let slot = wc.wr_id as usize;
            if wc.status == WcStatus::Success {
                let mut buf = vec![0u8; SLOT];
                self.nodes[n]
                    .recv
                    .read(GsiBuffers::recv_offset(slot), &mut buf);
                self.report.mads_received += 1;
                NodeRound {
                    w: self,
                    fabric,
                    n,
                    now,
                }
                .on_received(now, &buf, wc.src_qp);
            }
            let key = self.nodes[n].recv_key;
            if let Ok(e) = fabric.engine_mut(id) {
                let _ = e.post_recv(gsi, recv_wr(key, slot));
            }
        }
    }

    fn send(
        &mut self,
        fabric: &mut Fabric,
        n: usize,
        now: Instant,
        dst: Gid,
        qpn: u32,
        mad: &[u8],
    ) {
        let Some(ip) = dst.to_ip() else { return };
        let node = &mut self.nodes[n];
        let (slot, at) = node.buffers.next_send();
        node.send.write(at, mad);
        let wr = SendWr {
            wr_id: slot as u64,
            op: SendOp::Send,
            sg_list: vec![Sge {
                addr: BASE + at as u64,
                length: MAD_LEN as u32,
                lkey: node.send_key,
            }],
            flags: SendFlags::empty(),
            inline_data: None,
            ud: Some(UdDest {
                av: AddressVector {
                    dest_ip: ip,
                    traffic_class: 0,
                    hop_limit: 64,
                },
                remote_qpn: qpn,
                remote_qkey: GSI_QKEY,
            }),
            xrc_srqn: None,
        };
        let (id, gsi) = (node.res.node, node.gsi);
        self.report.mads_sent += 1;
        if let Ok(e) = fabric.engine_mut(id) {
            // A full send queue loses the MAD; the CM retransmits.
            let _ = e.post_send(now, gsi, wr);
        }
    }

    fn modify(
        fabric: &mut Fabric,
        node: NodeId,
        qpn: u32,
        cm: &RdmaCm,
        id: RdmaId,
        to: &[QpState],
    ) -> bool {
        to.iter().all(|&t| {
            cm.qp_attr(id, t)
                .ok()
                .and_then(|attr| fabric.engine_mut(node).ok()?.modify_qp(qpn, &attr).ok())
                .is_some()
        })
    }

    fn on_event(
        &mut self,
        fabric: &mut Fabric,
        n: usize,
        now: Instant,
        id: RdmaId,
        kind: RdmaEventKind,
    ) {
        let node_id = self.nodes[n].res.node;
        match kind {
            RdmaEventKind::ConnectRequest { peer, param, .. } => {
                // Which connection: the one whose active QP the REQ names, from that node.
                let Some(a) = self.nodes.iter().position(|x| x.ip == peer.ip()) else {
                    self.diverge(now, format!("node {n}: a request from unknown {peer}"));
                    return;
                };
                let Some(c) = self.conns.iter().position(|c| {
                    c.active.0 == a && c.sides[0].qpn == param.qp_num && c.passive.is_none()
                }) else {
                    // A copy of a REQ the fabric duplicated and held back until after its
                    // connection was disconnected on this side: the CM dropped the REQ's
                    // identity when it entered time-wait (as Linux's `cm_enter_timewait`
                    // does), so the copy reads as a new request. The listener refuses it, as
                    // a program whose connection is gone would; anything else is a divergence.
                    let stale = self.conns.iter().any(|c| {
                        c.active.0 == a
                            && c.sides[0].qpn == param.qp_num
                            && c.passive.is_some_and(|(p, _)| p == n)
                            && c.sides[1].disconnected > 0
                    });
                    if stale {
                        let _ = self.nodes[n].cm.reject(now, id, &[]);
                    } else {
                        self.diverge(
                            now,
                            format!("node {n}: an unexpected request from node {a}"),
                        );
                    }
                    return;
                };
                let Ok(qpn) = self.create_rc_qp(fabric, n) else {
                    self.diverge(now, format!("node {n}: no QP for connection {c}"));
                    return;
                };
                let cm = &mut self.nodes[n].cm;
                let ok = Self::modify(
                    fabric,
                    node_id,
                    qpn,
                    cm,
                    id,
                    &[QpState::Init, QpState::Rtr, QpState::Rts],
                ) && cm.accept(now, id, &ConnParam::rc(qpn)).is_ok();
                self.conns[c].passive = Some((n, id));
                self.conns[c].sides[1].qpn = qpn;
                self.by_id.insert((n, id), (c, 1));
                if !ok {
                    self.diverge(now, format!("connection {c}: accept failed"));
                }
            }
            RdmaEventKind::ConnectResponse { .. } => {
                let Some(&(c, _)) = self.by_id.get(&(n, id)) else {
                    return;
                };
                let qpn = self.conns[c].sides[0].qpn;
                let cm = &mut self.nodes[n].cm;
                let ok = Self::modify(
                    fabric,
                    node_id,
                    qpn,
                    cm,
                    id,
                    &[QpState::Init, QpState::Rtr, QpState::Rts],
                ) && cm.complete_connect(now, id).is_ok();
                if !ok {
                    self.diverge(
                        now,
                        format!("connection {c}: the REP could not be completed"),
                    );
                }
            }
            RdmaEventKind::Established { .. } => {
                let Some(&(c, side)) = self.by_id.get(&(n, id)) else {
                    return;
                };
                self.conns[c].sides[side].established += 1;
                if self.conns[c].sides[side].established > 1 {
                    self.diverge(
                        now,
                        format!("connection {c} side {side}: established twice"),
                    );
                }
                let both = self.conns[c].sides.iter().all(|s| s.established > 0);
                if both {
                    self.check_connected(fabric, c, now);
                    self.report.established += 1;
                    // The active side ends it.
                    let (a, aid) = self.conns[c].active;
                    let _ = self.nodes[a].cm.disconnect(now, aid);
                }
            }
            RdmaEventKind::Disconnected => {
                let Some(&(c, side)) = self.by_id.get(&(n, id)) else {
                    return;
                };
                self.conns[c].sides[side].disconnected += 1;
                if self.conns[c].sides[side].disconnected > 1 {
                    self.diverge(
                        now,
                        format!("connection {c} side {side}: disconnected twice"),
                    );
                }
                if side == 1 {
                    // The passive side answers the DREQ.
                    let _ = self.nodes[n].cm.disconnect(now, id);
                }
                if self.conns[c].sides.iter().all(|s| s.disconnected > 0) {
                    self.report.disconnected += 1;
                }
            }
            RdmaEventKind::Rejected { reason, .. } => {
                let what = format!("node {n}: a connection was rejected ({reason:?})");
                self.diverge(now, what);
            }
            RdmaEventKind::Unreachable { .. } => {
                self.diverge(now, format!("node {n}: a peer was unreachable"));
            }
            RdmaEventKind::TimewaitExit => {}
        }
    }

    /// Both QPs in RTS, each pointing at the other.
    fn check_connected(&mut self, fabric: &Fabric, c: usize, now: Instant) {
        let conn = self.conns[c].clone();
        let Some((p, _)) = conn.passive else { return };
        let ends = [(conn.active.0, 0usize), (p, 1usize)];
        for (node, side) in ends {
            let qpn = conn.sides[side].qpn;
            let peer = conn.sides[1 - side].qpn;
            let qp = fabric.engine(NodeId(node)).ok().and_then(|e| e.qp(qpn));
            let ok = qp.is_some_and(|q| q.state() == QpState::Rts && q.config().dest_qpn == peer);
            if !ok {
                self.diverge(
                    now,
                    format!("connection {c} side {side}: QP not in RTS towards {peer:#x}"),
                );
            }
        }
    }

    /// The verdict.
    pub fn finish(&mut self) -> CmReport {
        self.report.clone()
    }
}

/// One node's pass over its CM: the simulator's part of [`GsiService`] (a MAD leaves as a UD
/// send on the node's engine; an event moves the connection's QPs and is checked).
struct NodeRound<'a> {
    w: &'a mut CmWorkload,
    fabric: &'a mut Fabric,
    n: usize,
    now: Instant,
}

impl GsiService for NodeRound<'_> {
    fn cm(&mut self) -> &mut RdmaCm {
        &mut self.w.nodes[self.n].cm
    }

    fn send_mad(&mut self, m: OutMad) {
        self.w
            .send(self.fabric, self.n, self.now, m.dst, m.dst_qpn, &m.mad);
    }

    fn on_event(&mut self, now: Instant, e: RdmaEvent) {
        self.w.on_event(self.fabric, self.n, now, e.id, e.kind);
    }
}

fn recv_wr(key: u32, slot: usize) -> RecvWr {
    RecvWr {
        wr_id: slot as u64,
        sg_list: vec![Sge {
            addr: BASE + GsiBuffers::recv_offset(slot) as u64,
            length: SLOT as u32,
            lkey: key,
        }],
    }
}
