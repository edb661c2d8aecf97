//! Direct placement in the engine: how the next datagram should be received, and the
//! segments of a datagram received that way (the rule they keep is in [`crate::placement`]).

use std::sync::Arc;

use softrdma_wire::{crc32_update, pad_for, Aeth, Bth, IcrcContext, Opcode, ICRC_LEN};

use super::Engine;
use crate::io::DatagramMeta;
use crate::placement::{
    Expected, PlacedPiece, PlacedReceive, PlacementPlan, PlanKind, MAX_DATAGRAM,
};
use crate::qp::requester::read_chunk;
use crate::qp::{Placed, QpContext};
use crate::time::Instant;

/// Most packets one plan expects: what one GRO receive can hold (the kernel's
/// `UDP_MAX_SEGMENTS`).
const MAX_PLACED_PACKETS: usize = 64;

impl Engine {
    /// How to receive the next datagram so that its payload lands in registered memory
    /// directly, if the engine expects one: on the QP the latest packet was for, the rest of
    /// the RDMA WRITE in progress (a request came last) or the next responses to its RDMA READ
    /// (a response came last). `None` when it expects nothing it could place (see
    /// [`crate::placement`] for what is never placed).
    pub fn plan_placement(&self) -> Option<PlacementPlan> {
        let (qpn, request) = self.last_rx;
        let qp = self.qps.get(&qpn)?;
        if request {
            self.write_plan(qpn, qp)
        } else {
            self.read_plan(qpn, qp)
        }
    }

    /// Whether [`plan_placement`](Self::plan_placement) has a plan (without making it).
    pub fn expects_placement(&self) -> bool {
        let (qpn, request) = self.last_rx;
        self.qps.get(&qpn).is_some_and(|qp| {
            if request {
                qp.write_placement(&self.shared.mrs).is_some()
            } else {
                self.shared.config.place_read_responses
                    && qp
                        .read_placement(&self.shared.mrs, read_chunk(&self.shared.config), 1)
                        .is_some_and(|t| !t.is_empty())
            }
        })
    }

    /// [`plan_placement`](Self::plan_placement) for QP `qpn` (a WRITE it receives, else READ
    /// responses it expects), whatever came last: tests and the simulator use it to receive
    /// datagrams into another QP's layout on purpose.
    pub fn plan_placement_for(&self, qpn: u32) -> Option<PlacementPlan> {
        let qp = self.qps.get(&qpn)?;
        self.write_plan(qpn, qp).or_else(|| self.read_plan(qpn, qp))
    }

    fn write_plan(&self, qpn: u32, qp: &QpContext) -> Option<PlacementPlan> {
        let t = qp.write_placement(&self.shared.mrs)?;
        let mtu = t.mtu as usize;
        let full = Bth::LEN + mtu + ICRC_LEN;
        let left = t.remaining as usize;
        let packets = left
            .div_ceil(mtu)
            .min(MAX_DATAGRAM / full)
            .min(MAX_PLACED_PACKETS);
        if packets == 0 {
            return None;
        }
        let mut pieces = Vec::with_capacity(packets);
        let mut expected = Vec::with_capacity(packets);
        for k in 0..packets {
            let len = (left - k * mtu).min(mtu);
            let ends = left - k * mtu <= mtu;
            pieces.push(PlacedPiece {
                at: k * full + Bth::LEN,
                len,
                memory: Arc::clone(&t.memory),
                offset: t.offset + k * mtu,
            });
            expected.push(Expected {
                opcode: if ends {
                    Opcode::RC_RDMA_WRITE_LAST
                } else {
                    Opcode::RC_RDMA_WRITE_MIDDLE
                },
                header_len: Bth::LEN,
                len: Bth::LEN + len + usize::from(pad_for(len)) + ICRC_LEN,
                at_message: t.va + (k * mtu) as u64,
            });
        }
        let end_psn = t.psn.add(left.div_ceil(mtu) as u32);
        Some(PlacementPlan::new(
            qpn,
            PlanKind::Write,
            t.psn,
            end_psn,
            pieces,
            expected,
        ))
    }

    fn read_plan(&self, qpn: u32, qp: &QpContext) -> Option<PlacementPlan> {
        if !self.shared.config.place_read_responses {
            return None;
        }
        let chunk = read_chunk(&self.shared.config);
        // No more than one datagram can hold: a plan is made for every receive, the empty
        // ones of a thread spinning on its CQ included.
        let full = Bth::LEN + qp.cfg.path_mtu.bytes() as usize + ICRC_LEN;
        let max = (MAX_DATAGRAM / full).clamp(1, MAX_PLACED_PACKETS);
        let targets = qp.read_placement(&self.shared.mrs, chunk, max)?;
        let first = targets.first()?;
        let (psn, end_psn) = (first.psn, first.message_end);
        let mut pieces = Vec::with_capacity(targets.len());
        let mut expected = Vec::with_capacity(targets.len());
        let mut at = 0;
        for t in targets {
            let len = t.len as usize;
            let header_len = Bth::LEN
                + if t.opcode == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
                    0
                } else {
                    Aeth::LEN
                };
            let packet = header_len + len + usize::from(pad_for(len)) + ICRC_LEN;
            if at + packet > MAX_DATAGRAM {
                break;
            }
            pieces.push(PlacedPiece {
                at: at + header_len,
                len,
                memory: t.memory,
                offset: t.offset,
            });
            expected.push(Expected {
                opcode: t.opcode,
                header_len,
                len: packet,
                at_message: t.at_message,
            });
            at += packet;
        }
        if pieces.is_empty() {
            return None;
        }
        Some(PlacementPlan::new(
            qpn,
            PlanKind::Read,
            psn,
            end_psn,
            pieces,
            expected,
        ))
    }

    /// Handles a datagram of `len` bytes received into `plan`'s layout (`scratch` holds
    /// every byte that did not go to one of its pieces, at its own offset; `stride` is the
    /// GRO segment size, 0 for a datagram that came alone). Segments that are exactly the
    /// packets the plan expected, and whose ICRC checks over the bytes where they landed,
    /// run as any packet does, without their payload being copied. At the first that is not,
    /// the rest of the datagram is copied back into `scratch` for the caller to hand over as
    /// usual ([`PlacedReceive`]).
    pub fn handle_placed(
        &mut self,
        now: Instant,
        meta: &DatagramMeta,
        plan: &PlacementPlan,
        scratch: &mut [u8],
        len: usize,
        stride: usize,
    ) -> PlacedReceive {
        let len = len.min(scratch.len());
        let stride = if stride == 0 { len } else { stride };
        let (mut at, mut k) = (0, 0);
        while at < len {
            let end = (at + stride).min(len);
            if !self.take_placed(now, meta, plan, k, at, &scratch[at..end]) {
                break;
            }
            k += 1;
            at = end;
        }
        let rest_lost = at < len && plan.restore(scratch, at, len).is_err();
        PlacedReceive {
            placed: k,
            rest_from: at,
            rest_lost,
        }
    }

    /// Runs segment `k` (bytes `seg`, at datagram offset `at`) in place if it is the packet
    /// the plan expected there and the QP still expects it; `false` otherwise.
    fn take_placed(
        &mut self,
        now: Instant,
        meta: &DatagramMeta,
        plan: &PlacementPlan,
        k: usize,
        at: usize,
        seg: &[u8],
    ) -> bool {
        let (Some(piece), Some(want)) = (plan.pieces().get(k), plan.expected(k)) else {
            return false;
        };
        if seg.len() != want.len || piece.at != at + want.header_len {
            return false;
        }
        let Ok(bth) = Bth::parse(seg) else {
            return false;
        };
        let psn = plan.first_psn.add(k as u32);
        if bth.opcode != want.opcode
            || bth.dest_qpn != plan.qpn
            || bth.psn != psn
            || bth.pad_count != pad_for(piece.len)
        {
            return false;
        }
        // The QP's state now, not only when the plan was made: the segments before this one
        // ran in between. (The target itself is checked again when the packet runs, as for
        // any packet: a payload found elsewhere than where it belongs is moved there.)
        let Some(qp) = self.qps.get(&plan.qpn) else {
            return false;
        };
        let expects = match plan.kind {
            PlanKind::Write => qp.expects_placed(psn, want.at_message),
            PlanKind::Read => qp.expects_placed_response(psn, want.at_message),
        };
        if !expects {
            return false;
        }
        let dm = DatagramMeta {
            segment: meta.segment.wrapping_add(k as u16),
            ..*meta
        };
        let ipv4 = if self.shared.config.verify_icrc && !cfg!(fuzzing) {
            let ctx = IcrcContext {
                ipv4_id: dm.segment,
                ..IcrcContext::new(
                    meta.src.ip(),
                    meta.dst,
                    meta.src.port(),
                    self.shared.config.local_udp_port,
                )
            };
            let body_end = seg.len() - ICRC_LEN;
            let mut stored = [0u8; ICRC_LEN];
            stored.copy_from_slice(&seg[body_end..]);
            let pad = &seg[want.header_len + piece.len..body_end];
            let computed = ctx
                .begin(seg.len(), &seg[..want.header_len])
                .ok()
                .and_then(|c| piece.memory.crc32(piece.offset, piece.len, c).ok())
                .map(|c| {
                    if pad.is_empty() {
                        c
                    } else {
                        crc32_update(c, pad)
                    }
                });
            // A segment that fails is not run from here: copied back, it goes the ordinary
            // way, which drops it (and counts it) as it drops any bad ICRC.
            let Some(Ok(r)) =
                computed.map(|c| ctx.check_computed(c, u32::from_le_bytes(stored), seg.len()))
            else {
                return false;
            };
            r
        } else {
            softrdma_wire::RecoveredIpv4 {
                id: 0,
                dont_fragment: true,
            }
        };
        let placed = Placed {
            memory: Arc::clone(&piece.memory),
            offset: piece.offset,
            len: piece.len as u64,
        };
        self.shared.stats.rx_packets += 1;
        self.handle_checked(now, &dm, seg, ipv4, Some(placed));
        true
    }
}
