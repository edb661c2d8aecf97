//! Posting random work: receives into the receive ring, and SENDs, WRITEs, READs and
//! atomics (with their expected results recorded in the model) out of the scratch ring.

use softrdma_proto::{RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode};

use super::{
    ExpectedRecv, OpKind, PendingOp, Piece, PostedRecv, Workload, CANARY, COUNTERS_PER_ENDPOINT,
    SGE_GAP_BYTES,
};
use crate::fabric::Fabric;
use crate::rng::SimRng;

impl Workload {
    pub(super) fn post_one_recv(&mut self, fabric: &mut Fabric, e: usize) {
        let max_msg = u64::from(self.cfg.max_msg_bytes);
        let nsge = self.rng.range_inclusive(1, 3.min(max_msg.max(1)));
        let total = max_msg + (nsge - 1) * SGE_GAP_BYTES;
        let ep = &mut self.endpoints[e];
        ep.recv_ring.release(&ep.recv_buf, &mut ep.recv_released);
        let Some((off, end)) = self.endpoints[e].recv_ring.alloc(total) else {
            return;
        };
        let pieces = split_pieces(&mut self.rng, off, max_msg, nsge);
        let ep = &self.endpoints[e];
        ep.recv_buf.write(off, &vec![CANARY; total as usize]);
        let sg_list = pieces
            .iter()
            .map(|p| Sge {
                addr: ep.recv_buf.iova + p.off,
                length: p.len as u32,
                lkey: ep.recv_buf.key,
            })
            .collect();
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let (node, qpn) = (ep.node, ep.qpn);
        let now = fabric.now();
        let res = fabric
            .engine_mut(node)
            .map_err(|e| e.to_string())
            .and_then(|eng| {
                eng.post_recv(qpn, RecvWr { wr_id, sg_list })
                    .map_err(|e| e.to_string())
            });
        match res {
            Ok(()) => self.endpoints[e].recvs.push_back(PostedRecv {
                wr_id,
                alloc: Piece { off, len: total },
                alloc_end: end,
                pieces,
            }),
            Err(err) => {
                self.endpoints[e].recv_ring.free_to(end);
                let label = self.endpoints[e].label();
                self.diverge(now, format!("{label}: post_recv refused: {err}"));
            }
        }
    }

    pub(super) fn post_more(&mut self, fabric: &mut Fabric) {
        if self.posting_stopped {
            return;
        }
        // Bounded: at most one full window per endpoint per pump.
        let budget = self.endpoints.len() * self.cfg.window;
        for _ in 0..budget {
            if self.report.ops_posted >= self.cfg.ops {
                return;
            }
            let open: Vec<usize> = (0..self.endpoints.len())
                .filter(|&k| self.endpoints[k].outstanding.len() < self.cfg.window)
                .collect();
            let Some(&e) = self.rng.pick(&open) else {
                return;
            };
            if !self.post_one_op(fabric, e) {
                return;
            }
        }
    }

    /// Posts one random op from endpoint `e`; `false` if its buffers are momentarily full.
    fn post_one_op(&mut self, fabric: &mut Fabric, e: usize) -> bool {
        let now = fabric.now();
        let kind = self.cfg.mix.pick(&mut self.rng);
        let max_msg = u64::from(self.cfg.max_msg_bytes);
        let mtu = u64::from(self.cfg.mtu.bytes());
        let atomic = matches!(kind, OpKind::CmpSwap | OpKind::FetchAdd);
        let len = if atomic {
            8
        } else {
            match self.rng.below(10) {
                0 => 0,
                1 | 2 => self.rng.range_inclusive(1, 64.min(max_msg)),
                3 => mtu.min(max_msg),
                4 => (mtu * self.rng.range_inclusive(1, 3)).min(max_msg),
                _ => self.rng.range_inclusive(1, max_msg),
            }
        };
        let nsge = if atomic {
            1
        } else if len == 0 {
            0
        } else {
            self.rng.range_inclusive(1, 3.min(len))
        };
        let total = len + nsge.saturating_sub(1) * SGE_GAP_BYTES;
        let ep = &mut self.endpoints[e];
        ep.scratch_ring
            .release(&ep.scratch, &mut ep.scratch_released);
        let Some((off, end)) = self.endpoints[e].scratch_ring.alloc(total) else {
            return false;
        };
        let pieces = if nsge == 0 {
            Vec::new()
        } else {
            split_pieces(&mut self.rng, off, len, nsge)
        };
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        // Source data (SEND/WRITE) or canaries (READ/atomic landing zone).
        let mut payload = vec![0u8; len as usize];
        self.rng.fill_bytes(&mut payload);
        {
            let ep = &self.endpoints[e];
            ep.scratch.write(off, &vec![CANARY; total.max(1) as usize]);
            if !matches!(kind, OpKind::Read) && !atomic {
                let mut at = 0usize;
                for p in &pieces {
                    ep.scratch.write(p.off, &payload[at..at + p.len as usize]);
                    at += p.len as usize;
                }
            }
        }
        let imm = self.rng.next_u64() as u32;
        let ep = &self.endpoints[e];
        let sg_list: Vec<Sge> = pieces
            .iter()
            .map(|p| Sge {
                addr: ep.scratch.iova + p.off,
                length: p.len as u32,
                lkey: ep.scratch.key,
            })
            .collect();
        let data_len = ep.target_data_len;
        let remote_off = self.rng.below(data_len - len + 1);
        let remote_addr = ep.target.iova + remote_off;
        let rkey = ep.target.key;
        let counter = self.rng.below(COUNTERS_PER_ENDPOINT as u64) as usize;
        let counter_addr = ep.target.iova + ep.counter_offset(counter);
        let mut flags = SendFlags::SIGNALED;
        let mut expect_data = None;
        let mut expect_orig = None;
        let mut expected_recv = None;
        let op = match kind {
            OpKind::Send => SendOp::Send,
            OpKind::SendImm => SendOp::SendWithImm { imm },
            OpKind::Write => SendOp::RdmaWrite { remote_addr, rkey },
            OpKind::WriteImm => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            },
            OpKind::Read => SendOp::RdmaRead { remote_addr, rkey },
            OpKind::FetchAdd => SendOp::AtomicFetchAdd {
                remote_addr: counter_addr,
                rkey,
                add: self.rng.next_u64() >> self.rng.below(64),
            },
            OpKind::CmpSwap => {
                let cur = ep.counters[counter];
                let compare = if self.rng.chance(0.7) {
                    cur
                } else {
                    cur ^ (1 << self.rng.below(64))
                };
                SendOp::AtomicCmpSwap {
                    remote_addr: counter_addr,
                    rkey,
                    compare,
                    swap: self.rng.next_u64(),
                }
            }
        };
        match kind {
            OpKind::Write | OpKind::WriteImm => {
                // A retransmitted READ re-reads memory: order this WRITE after any READ still
                // outstanding that overlaps it.
                let lo = remote_off;
                let hi = remote_off + len;
                let overlaps = ep.outstanding.iter().any(|o| {
                    o.kind == OpKind::Read && o.remote_off < hi && lo < o.remote_off + o.len
                });
                if overlaps {
                    flags = flags | SendFlags::FENCE;
                }
            }
            _ => {}
        }
        let ep = &mut self.endpoints[e];
        match (kind, op) {
            (OpKind::Write | OpKind::WriteImm, _) => {
                ep.model.write(remote_off as usize, &payload);
            }
            (OpKind::Read, _) => {
                let mut v = vec![0u8; len as usize];
                ep.model.read(remote_off as usize, &mut v);
                expect_data = Some(v);
            }
            (OpKind::FetchAdd, SendOp::AtomicFetchAdd { add, .. }) => {
                expect_orig = Some(ep.counters[counter]);
                ep.counters[counter] = ep.counters[counter].wrapping_add(add);
            }
            (OpKind::CmpSwap, SendOp::AtomicCmpSwap { compare, swap, .. }) => {
                expect_orig = Some(ep.counters[counter]);
                if ep.counters[counter] == compare {
                    ep.counters[counter] = swap;
                }
            }
            _ => {}
        }
        if atomic {
            let off = ep.counter_offset(counter) as usize;
            ep.model.write(off, &ep.counters[counter].to_ne_bytes());
        }
        match kind {
            OpKind::Send | OpKind::SendImm => {
                expected_recv = Some(ExpectedRecv {
                    opcode: WcOpcode::Recv,
                    data: payload.clone(),
                    byte_len: len,
                    imm: (kind == OpKind::SendImm).then_some(imm),
                    sender_wr_id: wr_id,
                })
            }
            OpKind::WriteImm => {
                expected_recv = Some(ExpectedRecv {
                    opcode: WcOpcode::RecvRdmaWithImm,
                    data: Vec::new(),
                    byte_len: len,
                    imm: Some(imm),
                    sender_wr_id: wr_id,
                })
            }
            _ => {}
        }
        let (node, qpn, peer) = (ep.node, ep.qpn, ep.peer);
        let wr = SendWr {
            wr_id,
            op,
            sg_list,
            flags,
            inline_data: None,
            ud: None,
            xrc_srqn: None,
        };
        let res = fabric
            .engine_mut(node)
            .map_err(|e| e.to_string())
            .and_then(|eng| eng.post_send(now, qpn, wr).map_err(|e| e.to_string()));
        if let Err(err) = res {
            self.endpoints[e].scratch_ring.free_to(end);
            let label = self.endpoints[e].label();
            self.diverge(
                now,
                format!("{label}: post_send of {} refused: {err}", kind.name()),
            );
            // Count it as posted so the run terminates; it can never complete.
            self.report.ops_posted += 1;
            return false;
        }
        self.report.ops_posted += 1;
        *self.report.posted_by_kind.entry(kind.name()).or_insert(0) += 1;
        self.endpoints[e].outstanding.push_back(PendingOp {
            wr_id,
            kind,
            len,
            alloc: Piece {
                off,
                len: total.max(1),
            },
            alloc_end: end,
            pieces,
            remote_off,
            expect_data,
            expect_orig,
            posted_at: now,
        });
        if let Some(x) = expected_recv {
            self.endpoints[peer].expected_recvs.push_back(x);
        }
        true
    }
}

/// Splits `len` bytes starting at `off` into `n` pieces separated by [`SGE_GAP_BYTES`].
fn split_pieces(rng: &mut SimRng, off: u64, len: u64, n: u64) -> Vec<Piece> {
    let n = n.max(1).min(len.max(1));
    // n-1 distinct cut points in 1..len.
    let mut cuts: Vec<u64> = Vec::new();
    while (cuts.len() as u64) < n - 1 {
        let c = rng.range_inclusive(1, len - 1);
        if !cuts.contains(&c) {
            cuts.push(c);
        }
    }
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut prev = 0;
    let mut at = off;
    for c in cuts.into_iter().chain(std::iter::once(len)) {
        pieces.push(Piece {
            off: at,
            len: c - prev,
        });
        at += c - prev + SGE_GAP_BYTES;
        prev = c;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_split_pieces() {
        let mut rng = SimRng::new(5);
        for len in 1..50u64 {
            for n in 1..=3u64 {
                let p = split_pieces(&mut rng, 100, len, n);
                assert_eq!(p.iter().map(|p| p.len).sum::<u64>(), len);
                assert!(p.iter().all(|p| p.len > 0));
                assert_eq!(p[0].off, 100);
            }
        }
    }
}
