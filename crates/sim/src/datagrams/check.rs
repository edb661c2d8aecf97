//! What comes out of the queues, against the model: each receive must be a whole message of
//! its stream, from the stream's sender, with its immediate, and (UC) newer than the last one;
//! each send must complete successfully.

use std::collections::VecDeque;
use std::net::IpAddr;

use softrdma_proto::{Instant, WcOpcode, WcStatus, WorkCompletion};
use softrdma_wire::{GrhArea, GRH_LEN};

use super::{imm_of, message, DatagramWorkload, Kind, Region, HEADER_LEN, MAGIC};
use crate::fabric::{Fabric, NodeId};

impl DatagramWorkload {
    pub(super) fn poll(&mut self, fabric: &mut Fabric) {
        let now = fabric.now();
        for r in 0..self.resources.len() {
            let res = self.resources[r];
            let mut wcs = std::mem::take(&mut self.wc_buf);
            wcs.clear();
            if let Ok(e) = fabric.engine_mut(res.node) {
                let _ = e.poll_cq(res.send_cq, usize::MAX, &mut wcs);
            }
            for wc in &wcs {
                self.on_sent(now, res.node, wc);
            }
            wcs.clear();
            if let Ok(e) = fabric.engine_mut(res.node) {
                let _ = e.poll_cq(res.recv_cq, usize::MAX, &mut wcs);
            }
            for wc in &wcs {
                self.on_received(fabric, now, res.node, wc);
            }
            self.wc_buf = wcs;
        }
    }

    fn on_sent(&mut self, now: Instant, node: NodeId, wc: &WorkCompletion) {
        let Some(s) = self
            .sends
            .get_mut(&(node, wc.qp_num))
            .and_then(VecDeque::pop_front)
        else {
            self.diverge(
                now,
                format!("{node}: send completion nobody posted: {wc:?}"),
            );
            return;
        };
        self.streams[s].outstanding -= 1;
        if wc.status != WcStatus::Success {
            self.diverge(
                now,
                format!("{node}: UD/UC send completed with {:?}: {wc:?}", wc.status),
            );
            return;
        }
        match self.streams[s].kind {
            Kind::Ud => self.report.ud_sent += 1,
            Kind::Mcast => self.report.mcast_sent += 1,
            Kind::Uc => self.report.uc_sent += 1,
        }
    }

    fn on_received(
        &mut self,
        fabric: &mut Fabric,
        now: Instant,
        node: NodeId,
        wc: &WorkCompletion,
    ) {
        let key = (node, wc.qp_num);
        let Some(r) = self.receivers.get(&key) else {
            self.diverge(
                now,
                format!("{node}: receive completion for unknown QP: {wc:?}"),
            );
            return;
        };
        let (uc_stream, slots, slot_len) = (r.uc_stream, r.slots.clone(), r.slot_len);
        let slot = wc.wr_id;
        let verdict = if wc.status != WcStatus::Success {
            Err(format!("status {:?}", wc.status))
        } else {
            match uc_stream {
                Some(s) => self.check_uc(s, &slots, slot * slot_len, wc),
                None => self.check_ud(fabric, node, &slots, slot * slot_len, wc),
            }
        };
        match verdict {
            Ok((s, seq)) => self.delivered(now, key, s, seq),
            Err(what) => self.diverge(now, format!("{node} QP {:#x}: {what}: {wc:?}", wc.qp_num)),
        }
        self.post_recv(fabric, key, slot);
    }

    /// A UD receive: GRH area, then a message whose header names its stream.
    fn check_ud(
        &self,
        fabric: &Fabric,
        node: NodeId,
        slots: &Region,
        at: u64,
        wc: &WorkCompletion,
    ) -> Result<(usize, u32), String> {
        let len = (wc.byte_len as usize)
            .checked_sub(GRH_LEN)
            .filter(|_| wc.grh)
            .ok_or("a UD receive without its GRH area")?;
        let area = slots.read(at, GRH_LEN)?;
        let grh = GrhArea::parse(&area).ok_or("GRH area unreadable")?;
        let body = slots.read(at + GRH_LEN as u64, len)?;
        let (s, seq) = self.check_body(&body)?;
        let st = &self.streams[s];
        if !matches!(st.kind, Kind::Ud | Kind::Mcast) {
            return Err(format!("a UD delivery of UC stream {s}"));
        }
        let sender_ip = fabric.ip(st.sender).map_err(|e| e.to_string())?;
        if grh.src != IpAddr::V4(sender_ip) || wc.src_qp != st.sender_qpn {
            return Err(format!(
                "stream {s} is from {}:{:#x}, the delivery says {}:{:#x}",
                sender_ip, st.sender_qpn, grh.src, wc.src_qp
            ));
        }
        if !st.dests.contains(&(node, wc.qp_num)) {
            return Err(format!("stream {s} was not sent to this QP"));
        }
        self.check_imm(s, seq, wc)?;
        Ok((s, seq))
    }

    /// A UC receive: a SEND into the slot, or a WRITE with immediate into the target region.
    fn check_uc(
        &self,
        s: usize,
        slots: &Region,
        at: u64,
        wc: &WorkCompletion,
    ) -> Result<(usize, u32), String> {
        let st = &self.streams[s];
        if wc.src_qp != st.sender_qpn {
            return Err(format!(
                "src_qp {:#x}, the connection's peer is {:#x}",
                wc.src_qp, st.sender_qpn
            ));
        }
        if wc.opcode == WcOpcode::RecvRdmaWithImm {
            let seq = wc
                .imm_data
                .ok_or("WRITE with immediate without immediate")?;
            let &(off, len) = st
                .writes
                .get(&seq)
                .ok_or_else(|| format!("immediate {seq} names no WRITE of stream {s}"))?;
            if wc.byte_len != len {
                return Err(format!(
                    "WRITE {seq} was {len} bytes, the delivery says {}",
                    wc.byte_len
                ));
            }
            let target = st.write_target.as_ref().ok_or("UC stream without target")?;
            let body = target.read(off, len as usize)?;
            let (bs, bseq) = self.check_body(&body)?;
            if (bs, bseq) != (s, seq) {
                return Err(format!(
                    "WRITE {seq} region holds stream {bs} message {bseq}"
                ));
            }
            return Ok((s, seq));
        }
        let body = slots.read(at, wc.byte_len as usize)?;
        let (bs, seq) = self.check_body(&body)?;
        if bs != s {
            return Err(format!("stream {bs}'s message on stream {s}'s connection"));
        }
        self.check_imm(s, seq, wc)?;
        Ok((s, seq))
    }

    /// The header must name a message that was sent, and every byte must be that message's.
    fn check_body(&self, body: &[u8]) -> Result<(usize, u32), String> {
        if body.len() < HEADER_LEN {
            return Err(format!("{} bytes: shorter than any message", body.len()));
        }
        let word = |i: usize| u32::from_be_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        let (magic, s, seq, len) = (word(0), word(4), word(8), word(12));
        if magic != MAGIC
            || (s as usize) >= self.streams.len()
            || seq >= self.streams[s as usize].next_seq
        {
            return Err(format!(
                "header {magic:#x}/{s}/{seq}/{len} names no message sent"
            ));
        }
        if len as usize != body.len() {
            return Err(format!(
                "message {s}/{seq} has {len} bytes, {} delivered",
                body.len()
            ));
        }
        if message(self.cfg.seed, s, seq, len) != body {
            return Err(format!("message {s}/{seq} delivered with other bytes"));
        }
        Ok((s as usize, seq))
    }

    fn check_imm(&self, s: usize, seq: u32, wc: &WorkCompletion) -> Result<(), String> {
        match wc.imm_data {
            Some(imm) if imm != imm_of(s as u32, seq) => {
                Err(format!("message {s}/{seq} with immediate {imm:#x}"))
            }
            _ => Ok(()),
        }
    }

    fn delivered(&mut self, now: Instant, key: (NodeId, u32), s: usize, seq: u32) {
        let st = &mut self.streams[s];
        if !st.seen.insert((key.0, key.1, seq)) {
            if st.kind == Kind::Uc {
                let what = format!(
                    "{} QP {:#x}: UC message {s}/{seq} delivered twice",
                    key.0, key.1
                );
                self.diverge(now, what);
            } else {
                self.report.ud_duplicates += 1;
            }
            return;
        }
        if st.kind == Kind::Uc {
            if st.last_delivered.is_some_and(|last| seq <= last) {
                let what = format!(
                    "{} QP {:#x}: UC message {s}/{seq} after {:?}",
                    key.0, key.1, st.last_delivered
                );
                self.diverge(now, what);
                return;
            }
            st.last_delivered = Some(seq);
        }
        match st.kind {
            Kind::Ud => self.report.ud_delivered += 1,
            Kind::Mcast => self.report.mcast_delivered += 1,
            Kind::Uc => self.report.uc_delivered += 1,
        }
    }
}
