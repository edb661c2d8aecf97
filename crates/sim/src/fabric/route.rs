//! The path of one datagram: from the engine that sent it, by destination IP (or multicast
//! group), past the interceptors, over its link or the switched network with its faults and
//! delays, to the queue of datagrams in flight, and into the capture.

use std::cmp::Reverse;
use std::net::{IpAddr, SocketAddr};

use softrdma_proto::{Duration, Instant};
use softrdma_wire::pcap::UdpDatagram;
use softrdma_wire::PacketRepr;

use super::{CapturePoint, Fabric, InFlight, NodeId, Scheduled};
use crate::intercept::{PacketInfo, Verdict};

impl Fabric {
    pub(super) fn capture(&mut self, at: Instant, pkt: &InFlight) {
        let Some(w) = self.pcap.as_mut() else {
            return;
        };
        let src = SocketAddr::new(self.nodes[pkt.src.0].ip.into(), pkt.src_port);
        let dst = SocketAddr::new(pkt.dst_ip.into(), pkt.dst_port);
        let d = UdpDatagram {
            tos: pkt.ecn,
            ..UdpDatagram::new(src, dst, &pkt.data)
        };
        if let Err(e) = w.write_udp(at.as_nanos(), &d) {
            // Keep simulating: a full disk must not change the verdict of a run.
            self.pcap_error = Some(e);
            self.pcap = None;
        }
    }

    pub(super) fn schedule(&mut self, at: Instant, pkt: InFlight) {
        self.seq += 1;
        self.in_flight.push(Reverse(Scheduled {
            at,
            seq: self.seq,
            pkt,
        }));
        self.stats.max_in_flight = self.stats.max_in_flight.max(self.in_flight.len() as u64);
    }

    /// Routes one datagram an engine emitted to its node, or to every node with a QP attached
    /// to the multicast group it is addressed to (each copy over its own link, as a switch
    /// replicates it).
    pub(super) fn route(
        &mut self,
        src: NodeId,
        dst_addr: SocketAddr,
        src_port: u16,
        ecn: u8,
        data: Vec<u8>,
    ) {
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += data.len() as u64;
        let dst_ip = match dst_addr.ip() {
            IpAddr::V4(ip) => Some(ip),
            IpAddr::V6(ip) => ip.to_ipv4_mapped(),
        };
        let Some(dst_ip) = dst_ip else {
            self.stats.packets_unroutable += 1;
            return;
        };
        if dst_ip.is_multicast() {
            let group = IpAddr::V4(dst_ip);
            let members: Vec<NodeId> = (0..self.nodes.len())
                .map(NodeId)
                .filter(|n| self.nodes[n.0].engine.mcast_groups().any(|g| g == group))
                .collect();
            if members.is_empty() {
                self.stats.packets_unroutable += 1;
            }
            for dst in members {
                self.route_to(InFlight {
                    src,
                    dst,
                    dst_ip,
                    src_port,
                    dst_port: dst_addr.port(),
                    ecn,
                    data: data.clone(),
                });
            }
            return;
        }
        let Some(dst) = self.by_ip.get(&dst_ip).copied() else {
            self.stats.packets_unroutable += 1;
            return;
        };
        self.route_to(InFlight {
            src,
            dst,
            dst_ip,
            src_port,
            dst_port: dst_addr.port(),
            ecn,
            data,
        });
    }

    /// One copy of a datagram on its way to one node: interceptors, then the link model (or
    /// the switches).
    pub(super) fn route_to(&mut self, mut pkt: InFlight) {
        let (src, dst) = (pkt.src, pkt.dst);
        if self.config.capture_point == CapturePoint::Send {
            self.capture(self.now, &pkt);
        }
        if let Some(net) = self.switched.as_mut() {
            // ECMP hashes the addresses and the UDP ports (a QP's source port is its own).
            let flow = (u64::from(pkt.src_port) << 32)
                ^ ((src.0 as u64) << 16)
                ^ (dst.0 as u64)
                ^ u64::from(pkt.dst_port);
            let (len, ect) = (pkt.data.len(), pkt.ecn & 0b11 != 0);
            net.send(self.now, src.0, dst.0, flow, len, ect, pkt);
            return;
        }
        let verdict = if self.interceptors.is_empty() {
            Verdict::Pass
        } else {
            let parsed = PacketRepr::parse(&pkt.data).ok();
            let info = PacketInfo {
                now: self.now,
                src_node: src,
                dst_node: dst,
                src: SocketAddr::new(IpAddr::V4(self.nodes[src.0].ip), pkt.src_port),
                dst: SocketAddr::new(IpAddr::V4(pkt.dst_ip), pkt.dst_port),
                payload: &pkt.data,
                packet: parsed.as_ref(),
            };
            // Every interceptor sees every datagram (so "the nth match" never depends on
            // what other interceptors did); the first non-Pass verdict decides.
            let mut verdict = Verdict::Pass;
            for i in &mut self.interceptors {
                let v = i.intercept(&info);
                if verdict == Verdict::Pass {
                    verdict = v;
                }
            }
            verdict
        };
        let now = self.now;
        match verdict {
            Verdict::Drop => {
                // It still used the transmitter.
                let len = pkt.data.len();
                let _ = self.link_mut(src, dst).transmit(now, len);
                self.stats.packets_dropped_by_interceptor += 1;
                return;
            }
            Verdict::Hold => {
                self.stats.packets_held += 1;
                self.held.push(pkt);
                return;
            }
            Verdict::CorruptBit(bit) => {
                if !pkt.data.is_empty() {
                    let bit = crate::link::covered_bit(bit, pkt.data.len());
                    pkt.data[bit / 8] ^= 1 << (bit % 8);
                    self.stats.packets_corrupted += 1;
                }
            }
            Verdict::Pass | Verdict::Duplicate | Verdict::Delay(_) => {}
        }
        let fate = self.link_mut(src, dst).transmit(now, pkt.data.len());
        let Some(mut arrival) = fate.arrival else {
            self.stats.packets_dropped += 1;
            return;
        };
        if let Verdict::Delay(d) = verdict {
            self.stats.packets_held += 1;
            arrival = arrival + d;
        }
        if fate.reordered {
            self.stats.packets_reordered += 1;
        }
        let forced_dup = (verdict == Verdict::Duplicate).then(|| arrival + Duration::from_nanos(1));
        for dup_at in [fate.duplicate_arrival, forced_dup].into_iter().flatten() {
            self.stats.packets_duplicated += 1;
            let copy = pkt.clone();
            self.schedule(dup_at, copy);
        }
        if let Some(bit) = fate.corrupt_bit {
            pkt.data[bit / 8] ^= 1 << (bit % 8);
            self.stats.packets_corrupted += 1;
        }
        self.schedule(arrival, pkt);
    }
}
