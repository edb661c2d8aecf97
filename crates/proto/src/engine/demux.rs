//! Ingress: from a received datagram to the QP (or, for multicast, the QPs) it is for.
//!
//! Every check that does not need QP state happens here, in rxe's order (`rxe_recv.c`): the
//! ICRC (which also reveals the sender's IPv4 identification), the headers, the P_Key, the
//! destination QP and its transport, the source address of a connected QP and the sender's
//! IPv4-identification habit. A datagram that fails any of them is counted by reason and
//! dropped.

use std::net::SocketAddr;

use softrdma_wire::pcap::UdpDatagram;
use softrdma_wire::{GrhArea, IcrcContext, OpKind, PacketRepr, RecoveredIpv4, Transport};

use super::Engine;
use crate::cc::CE;
use crate::io::DatagramMeta;
use crate::qp::Placed;
use crate::qp::{QpState, QpType};
use crate::stats::{DropReason, Stats};
use crate::time::Instant;
use crate::wr::MULTICAST_QPN;

impl Engine {
    /// Processes one received UDP datagram (its payload: BTH through ICRC). Anything wrong
    /// with it is counted and the datagram dropped; nothing a peer sends can make this panic.
    pub fn handle_datagram(&mut self, now: Instant, meta: &DatagramMeta, data: &[u8]) {
        self.shared.stats.rx_packets += 1;
        let mut ipv4 = RecoveredIpv4 {
            id: 0,
            dont_fragment: true,
        };
        if self.shared.config.verify_icrc && !cfg!(fuzzing) {
            let ctx = IcrcContext::new(
                meta.src.ip(),
                meta.dst,
                meta.src.port(),
                self.shared.config.local_udp_port,
            );
            match ctx.verify_ipv4_near(data, meta.segment) {
                Ok(r) => ipv4 = r,
                Err(_) => {
                    self.shared.stats.drop(DropReason::BadIcrc);
                    return;
                }
            }
        }
        self.handle_checked(now, meta, data, ipv4, None);
    }

    /// [`handle_datagram`](Self::handle_datagram) once the ICRC has been checked (`ipv4`:
    /// what it revealed of the sender's IPv4 header). `placed`: the payload is not in `data`
    /// (whose payload bytes are then stale scratch of the right length) but already where
    /// the plan put it, and only a packet that executes exactly there may carry it (see
    /// [`crate::placement`]).
    pub(crate) fn handle_checked(
        &mut self,
        now: Instant,
        meta: &DatagramMeta,
        data: &[u8],
        ipv4: RecoveredIpv4,
        placed: Option<Placed>,
    ) {
        let pkt = match PacketRepr::parse(data) {
            Ok(p) => p,
            Err(e) => {
                self.shared.stats.drop(e.into());
                return;
            }
        };
        if pkt.bth.pkey & 0x7fff != 0x7fff {
            self.shared.stats.drop(DropReason::BadPkey);
            return;
        }
        let Some(info) = pkt.bth.opcode.info() else {
            self.shared.stats.drop(DropReason::Malformed);
            return;
        };
        if info.transport == Transport::Ud {
            debug_assert!(placed.is_none(), "only RC WRITEs are placed");
            if placed.is_none() {
                self.handle_ud(now, meta, ipv4, &pkt, data);
            }
            return;
        }
        let Some(qp) = self.qps.get_mut(&pkt.bth.dest_qpn) else {
            self.shared.stats.drop(DropReason::UnknownQp);
            return;
        };
        // An XRC initiator takes only responses, an XRC target only requests.
        let transport_ok = match (info.transport, qp.qp_type) {
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) => true,
            (Transport::Xrc, QpType::XrcIni) => !info.is_request(),
            (Transport::Xrc, QpType::XrcTgt) => info.is_request(),
            (Transport::Cnp, t) => t.is_connected(),
            _ => false,
        };
        if !transport_ok {
            self.shared.stats.drop(DropReason::WrongTransport);
            return;
        }
        if !qp.accepts_source(meta.src.ip()) {
            self.shared.stats.drop(DropReason::WrongSource);
            return;
        }
        if !qp.peer_ids.admit(ipv4.id) {
            self.shared.stats.drop(DropReason::BadIcrc);
            return;
        }
        self.shared.stats.rx_bytes += data.len() as u64;
        Stats::count_opcode(&mut self.shared.stats.rx_by_opcode, pkt.bth.opcode.0);
        // Only an RC WRITE's MIDDLE or LAST, or an RC READ response, is ever placed
        // (`Engine::handle_placed` checks).
        let placeable =
            matches!(info.kind, OpKind::Write | OpKind::ReadResponse) && qp.qp_type == QpType::Rc;
        if placed.is_some() && !placeable {
            debug_assert!(false, "a placed payload for {:?}", pkt.bth.opcode);
            self.shared.stats.drop(DropReason::Malformed);
            return;
        }
        let mut ctx = self.shared.ctx(now, 0);
        ctx.placed = placed;
        if meta.ecn() == CE {
            qp.on_congestion_experienced(&mut ctx);
        }
        if info.kind == OpKind::Cnp {
            qp.on_cnp(&mut ctx);
        } else if info.is_request() {
            if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Err) {
                ctx.stats.drop(DropReason::BadState);
                return;
            }
            qp.handle_request(&mut ctx, &pkt);
        } else {
            let connected_rc = qp.qp_type.is_reliable();
            if !matches!(qp.state, QpState::Rts | QpState::Sqd) || !connected_rc {
                ctx.stats.drop(DropReason::BadState);
                return;
            }
            qp.handle_response(&mut ctx, &pkt);
        }
        let qpn = qp.qpn;
        if info.is_request() || info.kind == OpKind::ReadResponse {
            self.last_rx = (qpn, info.is_request());
        }
        if qp.wants_transmit() {
            self.ready.push_back(qpn);
        }
        self.sync_timer(qpn);
        self.settle_overflows();
    }

    /// A UD datagram: to one QP, or to every QP attached to the multicast group it was sent to.
    fn handle_ud(
        &mut self,
        now: Instant,
        meta: &DatagramMeta,
        ipv4: RecoveredIpv4,
        pkt: &PacketRepr<'_>,
        data: &[u8],
    ) {
        let small_only = self.shared.config.peers_use_small_ipv4_ids;
        if !self.ud_peers.admit(meta.src.ip(), ipv4.id, small_only) {
            self.shared.stats.drop(DropReason::BadIcrc);
            return;
        }
        let targets: Vec<u32> = if pkt.bth.dest_qpn == MULTICAST_QPN {
            match self.mcast.get(&meta.dst) {
                Some(qpns) if meta.dst.is_multicast() => qpns.clone(),
                _ => Vec::new(),
            }
        } else {
            vec![pkt.bth.dest_qpn]
        };
        let known: Vec<u32> = targets
            .into_iter()
            .filter(|q| self.qps.get(q).is_some_and(|qp| qp.qp_type == QpType::Ud))
            .collect();
        if known.is_empty() {
            let reason = if self.qps.contains_key(&pkt.bth.dest_qpn) {
                DropReason::WrongTransport
            } else {
                DropReason::UnknownQp
            };
            self.shared.stats.drop(reason);
            return;
        }
        let grh = GrhArea::write(&UdpDatagram {
            tos: meta.tos,
            ttl: meta.ttl,
            ipv4_id: ipv4.id,
            dont_fragment: ipv4.dont_fragment,
            ..UdpDatagram::new(
                meta.src,
                SocketAddr::new(meta.dst, self.shared.config.local_udp_port),
                data,
            )
        });
        let Some(grh) = grh else {
            self.shared.stats.drop(DropReason::Malformed);
            return;
        };
        self.shared.stats.rx_bytes += data.len() as u64;
        Stats::count_opcode(&mut self.shared.stats.rx_by_opcode, pkt.bth.opcode.0);
        for qpn in known {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut ctx = self.shared.ctx(now, 0);
            if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
                ctx.stats.drop(DropReason::BadState);
                continue;
            }
            qp.handle_datagram_request(&mut ctx, pkt, &grh);
        }
        self.settle_overflows();
    }
}
