//! Bringing queue pairs up on a fabric (RC and UC pairs, UD QPs): the verbs choreography (PD,
//! CQs, RESET → INIT → RTR → RTS) every test and workload would otherwise repeat.
//!
//! The out-of-band exchange real peers do over TCP (QPN, PSN, address) is a direct exchange
//! here: both QPs are created first, then each is told the other's number.

use std::net::IpAddr;

use softrdma_proto::{
    AccessFlags, AddressVector, CqHandle, EngineError, Mtu, PdHandle, QpAttr, QpCaps, QpType,
};
use softrdma_wire::Psn;

use crate::fabric::{Fabric, NodeId, SimError};

/// Why setting up objects failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The fabric refused (e.g. no such node).
    #[error(transparent)]
    Sim(#[from] SimError),
    /// An engine refused a verbs call; `step` says which.
    #[error("{step}: {source}")]
    Engine {
        /// The call that failed.
        step: &'static str,
        /// The engine's reason.
        source: EngineError,
    },
}

fn engine_step(step: &'static str) -> impl FnOnce(EngineError) -> SetupError {
    move |source| SetupError::Engine { step, source }
}

/// Per-node verbs objects shared by all of a node's QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeResources {
    /// The node.
    pub node: NodeId,
    /// Its protection domain.
    pub pd: PdHandle,
    /// CQ for send completions of every QP on the node.
    pub send_cq: CqHandle,
    /// CQ for receive completions of every QP on the node.
    pub recv_cq: CqHandle,
}

/// Allocates a PD and a send and a receive CQ of `cq_capacity` entries on `node`.
pub fn node_resources(
    fabric: &mut Fabric,
    node: NodeId,
    cq_capacity: usize,
) -> Result<NodeResources, SetupError> {
    let engine = fabric.engine_mut(node)?;
    let pd = engine.alloc_pd();
    let send_cq = engine.create_cq(cq_capacity);
    let recv_cq = engine.create_cq(cq_capacity);
    Ok(NodeResources {
        node,
        pd,
        send_cq,
        recv_cq,
    })
}

/// Attributes of an RC connection (the ibverbs `modify_qp` values both ends use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcParams {
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout.
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code sent in RNR NAKs.
    pub min_rnr_timer: u8,
    /// Outgoing READ/atomic limit.
    pub max_rd_atomic: u8,
    /// Incoming READ/atomic resources.
    pub max_dest_rd_atomic: u8,
    /// Rights granted to the peer's requests.
    pub access: AccessFlags,
    /// Queue capacities.
    pub caps: QpCaps,
}

impl Default for RcParams {
    /// Fast recovery in virtual time: ACK timeout 4.096 µs × 2^10 ≈ 4.2 ms, seven retries,
    /// infinite RNR retries with the shortest RNR timer, 16 READ/atomics in flight.
    fn default() -> RcParams {
        RcParams {
            mtu: Mtu::Mtu1024,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            access: AccessFlags::all(),
            caps: QpCaps::default(),
        }
    }
}

/// One end of an RC connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEnd {
    /// The node.
    pub node: NodeId,
    /// The QP number.
    pub qpn: u32,
    /// First PSN this end sends (the peer's `rq_psn`).
    pub sq_psn: Psn,
}

/// Two connected RC QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcConnection {
    /// The first end.
    pub a: QpEnd,
    /// The second end.
    pub b: QpEnd,
}

/// Creates one RC QP on each of `a` and `b` and brings both to RTS connected to each other.
/// `psn_a` is the first PSN `a` sends, `psn_b` the first `b` sends.
pub fn connect_rc(
    fabric: &mut Fabric,
    a: &NodeResources,
    b: &NodeResources,
    params: &RcParams,
    psn_a: Psn,
    psn_b: Psn,
) -> Result<RcConnection, SetupError> {
    let qpn_a = create_qp(fabric, a, params)?;
    let qpn_b = create_qp(fabric, b, params)?;
    let ip_a = IpAddr::V4(fabric.ip(a.node)?);
    let ip_b = IpAddr::V4(fabric.ip(b.node)?);
    bring_up(fabric, a.node, qpn_a, params, ip_b, qpn_b, psn_b, psn_a)?;
    bring_up(fabric, b.node, qpn_b, params, ip_a, qpn_a, psn_a, psn_b)?;
    Ok(RcConnection {
        a: QpEnd {
            node: a.node,
            qpn: qpn_a,
            sq_psn: psn_a,
        },
        b: QpEnd {
            node: b.node,
            qpn: qpn_b,
            sq_psn: psn_b,
        },
    })
}

fn create_qp(fabric: &mut Fabric, r: &NodeResources, params: &RcParams) -> Result<u32, SetupError> {
    fabric
        .engine_mut(r.node)?
        .create_qp(r.pd, r.send_cq, r.recv_cq, QpType::Rc, params.caps)
        .map_err(engine_step("create_qp"))
}

#[allow(clippy::too_many_arguments)]
fn bring_up(
    fabric: &mut Fabric,
    node: NodeId,
    qpn: u32,
    params: &RcParams,
    peer_ip: IpAddr,
    peer_qpn: u32,
    rq_psn: Psn,
    sq_psn: Psn,
) -> Result<(), SetupError> {
    let engine = fabric.engine_mut(node)?;
    let init = QpAttr::rc_init(params.access);
    engine
        .modify_qp(qpn, &init)
        .map_err(engine_step("modify_qp RESET->INIT"))?;
    let peer = AddressVector {
        dest_ip: peer_ip,
        traffic_class: 0,
        hop_limit: 64,
    };
    let rtr = QpAttr::rc_rtr(
        params.mtu,
        peer,
        peer_qpn,
        rq_psn,
        params.max_dest_rd_atomic,
        params.min_rnr_timer,
    );
    engine
        .modify_qp(qpn, &rtr)
        .map_err(engine_step("modify_qp INIT->RTR"))?;
    let rts = QpAttr::rc_rts(
        sq_psn,
        params.timeout,
        params.retry_cnt,
        params.rnr_retry,
        params.max_rd_atomic,
    );
    engine
        .modify_qp(qpn, &rts)
        .map_err(engine_step("modify_qp RTR->RTS"))?;
    Ok(())
}

/// Creates one UC QP on each of `a` and `b` and brings both to RTS connected to each other
/// (`psn_a` is the first PSN `a` sends, `psn_b` the first `b` sends).
pub fn connect_uc(
    fabric: &mut Fabric,
    a: &NodeResources,
    b: &NodeResources,
    mtu: Mtu,
    caps: QpCaps,
    psn_a: Psn,
    psn_b: Psn,
) -> Result<(u32, u32), SetupError> {
    let mk = |fabric: &mut Fabric, r: &NodeResources| {
        fabric
            .engine_mut(r.node)?
            .create_qp(r.pd, r.send_cq, r.recv_cq, QpType::Uc, caps)
            .map_err(engine_step("create_qp UC"))
    };
    let qpn_a = mk(fabric, a)?;
    let qpn_b = mk(fabric, b)?;
    for (r, qpn, peer, peer_qpn, sq, rq) in [
        (a, qpn_a, b.node, qpn_b, psn_a, psn_b),
        (b, qpn_b, a.node, qpn_a, psn_b, psn_a),
    ] {
        let peer_ip = IpAddr::V4(fabric.ip(peer)?);
        let engine = fabric.engine_mut(r.node)?;
        engine
            .modify_qp(qpn, &QpAttr::rc_init(AccessFlags::all()))
            .map_err(engine_step("modify_qp UC RESET->INIT"))?;
        let av = AddressVector {
            dest_ip: peer_ip,
            traffic_class: 0,
            hop_limit: 64,
        };
        engine
            .modify_qp(qpn, &QpAttr::uc_rtr(mtu, av, peer_qpn, rq))
            .map_err(engine_step("modify_qp UC INIT->RTR"))?;
        engine
            .modify_qp(qpn, &QpAttr::unreliable_rts(sq))
            .map_err(engine_step("modify_qp UC RTR->RTS"))?;
    }
    Ok((qpn_a, qpn_b))
}

/// Creates a UD QP on `r`'s node and brings it to RTS with Q_Key `qkey`, sending from `psn`.
pub fn ud_qp(
    fabric: &mut Fabric,
    r: &NodeResources,
    caps: QpCaps,
    qkey: u32,
    psn: Psn,
) -> Result<u32, SetupError> {
    let engine = fabric.engine_mut(r.node)?;
    let qpn = engine
        .create_qp(r.pd, r.send_cq, r.recv_cq, QpType::Ud, caps)
        .map_err(engine_step("create_qp UD"))?;
    engine
        .modify_qp(qpn, &QpAttr::ud_init(qkey))
        .map_err(engine_step("modify_qp UD RESET->INIT"))?;
    engine
        .modify_qp(qpn, &QpAttr::ud_rtr())
        .map_err(engine_step("modify_qp UD INIT->RTR"))?;
    engine
        .modify_qp(qpn, &QpAttr::unreliable_rts(psn))
        .map_err(engine_step("modify_qp UD RTR->RTS"))?;
    Ok(qpn)
}
