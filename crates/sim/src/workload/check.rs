//! Checking what completes against the model: every send completion in posting order with
//! its status, opcode and the bytes a READ or atomic brought back; every receive with the
//! message the peer posted for it.

use softrdma_proto::{Instant, WcOpcode, WcStatus, WorkCompletion};

use super::{first_difference, ExpectedRecv, OpKind, Piece, PostedRecv, Workload, CANARY};
use crate::fabric::{Fabric, NodeId};

impl Workload {
    pub(super) fn poll_completions(&mut self, fabric: &mut Fabric) {
        let now = fabric.now();
        for r in 0..self.resources.len() {
            let res = self.resources[r];
            let mut wcs = std::mem::take(&mut self.wc_buf);
            wcs.clear();
            if let Ok(engine) = fabric.engine_mut(res.node) {
                let _ = engine.poll_cq(res.send_cq, usize::MAX, &mut wcs);
            }
            for wc in &wcs {
                self.on_send_completion(now, res.node, wc);
            }
            wcs.clear();
            if let Ok(engine) = fabric.engine_mut(res.node) {
                let _ = engine.poll_cq(res.recv_cq, usize::MAX, &mut wcs);
            }
            for wc in &wcs {
                self.on_recv_completion(fabric, now, res.node, wc);
            }
            self.wc_buf = wcs;
        }
    }

    fn on_send_completion(&mut self, now: Instant, node: NodeId, wc: &WorkCompletion) {
        self.report.ops_completed += 1;
        let Some(&e) = self.by_qp.get(&(node, wc.qp_num)) else {
            self.diverge(
                now,
                format!(
                    "{node}: send completion for unknown qp {:#x}: {wc:?}",
                    wc.qp_num
                ),
            );
            return;
        };
        let label = self.endpoints[e].label();
        let Some(op) = self.endpoints[e].outstanding.pop_front() else {
            self.diverge(
                now,
                format!("{label}: completion with nothing outstanding: {wc:?}"),
            );
            return;
        };
        self.endpoints[e].scratch_ring.free_to(op.alloc_end);
        if op.wr_id != wc.wr_id {
            self.diverge(
                now,
                format!(
                    "{label}: completion order: expected wr_id {} ({}), got {wc:?}",
                    op.wr_id,
                    op.kind.name()
                ),
            );
            return;
        }
        if wc.status != WcStatus::Success {
            if self.keep_error(wc.status) {
                self.report.error_completions.push(format!(
                    "at {} ns {label}: wr_id {} {} {} bytes -> {:?}",
                    now.as_nanos(),
                    op.wr_id,
                    op.kind.name(),
                    op.len,
                    wc.status
                ));
            }
            self.diverge_status(
                now,
                format!(
                    "{label}: wr_id {} ({}, {} bytes, posted at {} ns) completed with {:?} ({})",
                    op.wr_id,
                    op.kind.name(),
                    op.len,
                    op.posted_at.as_nanos(),
                    wc.status,
                    wc.status.as_str()
                ),
                wc.status == WcStatus::WrFlushErr,
            );
            return;
        }
        let want_opcode = match op.kind {
            OpKind::Send | OpKind::SendImm => WcOpcode::Send,
            OpKind::Write | OpKind::WriteImm => WcOpcode::RdmaWrite,
            OpKind::Read => WcOpcode::RdmaRead,
            OpKind::CmpSwap => WcOpcode::CompSwap,
            OpKind::FetchAdd => WcOpcode::FetchAdd,
        };
        if wc.opcode != want_opcode {
            self.diverge(
                now,
                format!(
                    "{label}: wr_id {} expected opcode {want_opcode:?}, got {wc:?}",
                    op.wr_id
                ),
            );
            return;
        }
        let ep = &self.endpoints[e];
        let got = ep.scratch.read(op.alloc.off, op.alloc.len);
        let mut problem = None;
        match op.kind {
            OpKind::Read => {
                if wc.byte_len as u64 != op.len {
                    problem = Some(format!("byte_len {} != {}", wc.byte_len, op.len));
                }
                let expect = op.expect_data.as_deref().unwrap_or(&[]);
                let landed = gather(&got, op.alloc.off, &op.pieces);
                if problem.is_none() {
                    problem = first_difference(expect, &landed).map(|i| {
                        format!(
                            "READ data differs at byte {i} of {}: expected {:#04x}, got {:#04x}",
                            op.len, expect[i], landed[i]
                        )
                    });
                }
                if problem.is_none() {
                    problem = check_gaps(&got, op.alloc.off, &op.pieces);
                }
            }
            OpKind::CmpSwap | OpKind::FetchAdd => {
                let landed = gather(&got, op.alloc.off, &op.pieces);
                let mut w = [0u8; 8];
                w.copy_from_slice(&landed[..8]);
                let orig = u64::from_ne_bytes(w);
                if Some(orig) != op.expect_orig {
                    problem = Some(format!(
                        "{} returned original {orig:#x}, model says {:#x} (applied twice or lost?)",
                        op.kind.name(),
                        op.expect_orig.unwrap_or(0)
                    ));
                }
            }
            _ => {}
        }
        if let Some(p) = problem {
            self.diverge(
                now,
                format!("{label}: wr_id {} ({}): {p}", op.wr_id, op.kind.name()),
            );
            return;
        }
        self.report.ops_ok += 1;
    }

    fn on_recv_completion(
        &mut self,
        fabric: &mut Fabric,
        now: Instant,
        node: NodeId,
        wc: &WorkCompletion,
    ) {
        self.report.recvs_completed += 1;
        let Some(&e) = self.by_qp.get(&(node, wc.qp_num)) else {
            self.diverge(
                now,
                format!(
                    "{node}: recv completion for unknown qp {:#x}: {wc:?}",
                    wc.qp_num
                ),
            );
            return;
        };
        let label = self.endpoints[e].label();
        let Some(posted) = self.endpoints[e].recvs.pop_front() else {
            self.diverge(
                now,
                format!("{label}: recv completion with no RECV posted: {wc:?}"),
            );
            return;
        };
        self.endpoints[e].recv_ring.free_to(posted.alloc_end);
        if wc.status != WcStatus::Success && self.keep_error(wc.status) {
            self.report.error_completions.push(format!(
                "at {} ns {label}: RECV wr_id {} -> {:?}",
                now.as_nanos(),
                posted.wr_id,
                wc.status
            ));
        }
        if wc.status == WcStatus::WrFlushErr {
            self.diverge(now, format!("{label}: RECV wr_id {} flushed", posted.wr_id));
            return;
        }
        let expected = self.endpoints[e].expected_recvs.pop_front();
        let result = self.check_recv(e, &posted, expected.as_ref(), wc);
        if let Err(p) = result {
            self.diverge(now, format!("{label}: RECV wr_id {}: {p}", posted.wr_id));
        }
        if !self.posting_stopped || self.endpoints[e].recvs.len() < self.cfg.recv_depth {
            self.post_one_recv(fabric, e);
        }
    }

    fn check_recv(
        &self,
        e: usize,
        posted: &PostedRecv,
        expected: Option<&ExpectedRecv>,
        wc: &WorkCompletion,
    ) -> Result<(), String> {
        let ep = &self.endpoints[e];
        let Some(x) = expected else {
            return Err(format!(
                "completion without a matching message from the peer: {wc:?}"
            ));
        };
        if wc.wr_id != posted.wr_id {
            return Err(format!(
                "receive order: expected wr_id {}, got {wc:?}",
                posted.wr_id
            ));
        }
        if wc.status != WcStatus::Success {
            return Err(format!(
                "status {:?} ({}) for the message of peer wr_id {}",
                wc.status,
                wc.status.as_str(),
                x.sender_wr_id
            ));
        }
        if wc.opcode != x.opcode {
            return Err(format!(
                "opcode {:?}, expected {:?} (peer wr_id {})",
                wc.opcode, x.opcode, x.sender_wr_id
            ));
        }
        if u64::from(wc.byte_len) != x.byte_len {
            return Err(format!(
                "byte_len {}, expected {} (peer wr_id {})",
                wc.byte_len, x.byte_len, x.sender_wr_id
            ));
        }
        if wc.imm_data != x.imm {
            return Err(format!(
                "imm {:?}, expected {:?} (peer wr_id {})",
                wc.imm_data, x.imm, x.sender_wr_id
            ));
        }
        if wc.src_qp != ep.peer_qpn {
            return Err(format!(
                "src_qp {:#x}, expected {:#x}",
                wc.src_qp, ep.peer_qpn
            ));
        }
        let got = ep.recv_buf.read(posted.alloc.off, posted.alloc.len);
        let landed = gather(&got, posted.alloc.off, &posted.pieces);
        let n = x.data.len().min(landed.len());
        if let Some(i) = first_difference(&x.data, &landed[..n]) {
            return Err(format!(
                "SEND data differs at byte {i} of {} (peer wr_id {}): expected {:#04x}, got {:#04x}",
                x.data.len(),
                x.sender_wr_id,
                x.data[i],
                landed[i]
            ));
        }
        if let Some(i) = landed[x.data.len().min(landed.len())..]
            .iter()
            .position(|&b| b != CANARY)
        {
            return Err(format!(
                "RECV buffer written past the message: byte {} of the SGL changed",
                x.data.len() + i
            ));
        }
        check_gaps(&got, posted.alloc.off, &posted.pieces).map_or(Ok(()), Err)
    }
}

/// Concatenates the bytes of `pieces` from `buf`, which holds the allocation starting at
/// buffer offset `base`.
fn gather(buf: &[u8], base: u64, pieces: &[Piece]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in pieces {
        let s = (p.off - base) as usize;
        v.extend_from_slice(&buf[s..s + p.len as usize]);
    }
    v
}

/// Checks that the gaps between pieces still hold [`CANARY`].
fn check_gaps(buf: &[u8], base: u64, pieces: &[Piece]) -> Option<String> {
    for w in pieces.windows(2) {
        let s = (w[0].off + w[0].len - base) as usize;
        let t = (w[1].off - base) as usize;
        if let Some(i) = buf[s..t].iter().position(|&b| b != CANARY) {
            return Some(format!(
                "wrote into the gap after an SGE (byte {} of the gap)",
                i
            ));
        }
    }
    None
}
