//! The requester: turns send WQEs into request packets.
//!
//! Packets are built from registered memory at transmit time, so a retransmission re-reads the
//! buffer exactly as a NIC does; the application must not touch it before the completion. The
//! send queue state it walks is in `state.rs`; the completer (`completer/`) consumes the
//! responses.

pub(crate) mod completer;
mod placed;
pub(crate) mod rtt;
pub(crate) mod state;

use softrdma_wire::{
    crc32_update, packet_len, AtomicEth, Bth, ExtHeaders, Feth, Ieth, ImmDt, Opcode, Psn, Reth,
    Xrceth,
};

use crate::config::EngineConfig;
use crate::io::DatagramOut;
use crate::mr::MrTable;
use crate::qp::attr::{QpState, QpType};
use crate::qp::timers::Timer;
use crate::qp::{turn_goes_on, Ctx, QpContext};
use crate::wr::{FlushLevel, SendFlags, SendOp, WcStatus};
use state::SendWqe;

impl QpContext {
    /// Produces the next request packet, new or retransmitted.
    pub(crate) fn poll_requester_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
    ) -> Option<DatagramOut> {
        loop {
            if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.req.waiting_out_rnr() {
                return None;
            }
            if let Some(psn) = self.req.take_resend() {
                match self.resend_one(ctx, out, psn) {
                    Some(t) => return Some(t),
                    None => continue,
                }
            }
            let (cursor, pkt) = self.req.cursor();
            let wqe = self.req.wqes().get(cursor)?;
            if !wqe.started && !self.may_start(wqe) {
                return None;
            }
            if wqe.wr.op.is_local() {
                if wqe.started {
                    // Go-back-N rewound the cursor over it: done once, it is passed over.
                    self.req.pass_wqe();
                } else if !self.execute_local(ctx, cursor) {
                    return None;
                }
                continue;
            }
            // UC has no acknowledgements to open a window with.
            let psn = self.req.cursor_psn();
            // A READ request's responses are in flight with it: its last response PSN must
            // fit in the window too.
            let last = match wqe.wr.op {
                SendOp::RdmaRead { .. } => {
                    let k = if wqe.started { pkt } else { 0 };
                    psn.add(read_request_pkts(ctx.config, k, wqe.npkts) - 1)
                }
                _ => psn,
            };
            if self.qp_type.is_reliable()
                && !self.req.in_window(last, ctx.config.max_inflight_packets)
            {
                return None;
            }
            if !wqe.started {
                // Local protection is checked when the WQE starts (rxe does it as it copies).
                let need = wqe.wr.op.local_access();
                let sgl_ok = wqe.wr.inline_data.is_some()
                    || ctx.mrs.check_sgl(self.pd, &wqe.wr.sg_list, need).is_ok();
                if !sgl_ok {
                    self.fail_wqe(ctx, cursor, WcStatus::LocProtErr);
                    return None;
                }
                self.req.start_wqe(cursor);
            }
            if !self.may_send_next(ctx) {
                return None;
            }
            if !self.may_request_next_chunk(ctx.config) {
                return None;
            }
            match self.build_request(ctx, out) {
                Ok(t) => return Some(t),
                Err(RequestBuild::Skip) => continue,
                Err(RequestBuild::Failed) => {
                    self.fail_wqe(ctx, cursor, WcStatus::LocProtErr);
                    return None;
                }
            }
        }
    }

    /// Whether a not-yet-started WQE may start now: fences, the READ/atomic credit limit and
    /// SQ drain (the in-flight window is checked for every packet, see
    /// `Requester::in_window`).
    fn may_start(&self, wqe: &SendWqe) -> bool {
        if self.state == QpState::Sqd {
            return false;
        }
        let rd = self.req.rd_atomic_inflight();
        if wqe.wr.flags.contains(SendFlags::FENCE) && rd > 0 {
            return false;
        }
        !(wqe.wr.op.is_read_or_atomic() && rd >= u32::from(self.cfg.max_rd_atomic.max(1)))
    }

    /// Whether the packet at the cursor, inside the QP's window, may go now. Retransmissions
    /// may; a new packet only while the device's packets in flight, over all QPs, are fewer
    /// than its budget — what keeps many QPs together from overrunning the receiver's socket
    /// buffer, or a slow link's queue. A READ request costs the responses it asks for (256
    /// QPs each asking for 16 responses at once overran a 4 MiB socket buffer). The budget
    /// has no exemption but an idle device: a QP with nothing in flight used to be allowed
    /// one packet regardless, and a thousand of them kept the budget full of single packets,
    /// each asking for its own ACK. A QP refused here is woken when ACKs free the budget
    /// (`Engine::wake_starved`); one timing out towards a dead peer counts as one packet
    /// (`Requester::budget_share`), so it cannot hold the budget the others need.
    fn may_send_next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if !self.qp_type.is_reliable() {
            return true;
        }
        let (idx, k) = self.req.cursor();
        let wqe = self.req.wqe(idx);
        let psn = wqe.first_psn.add(k);
        if psn.is_before(self.req.sent_high()) {
            return true;
        }
        let own = self.req.budget_share();
        // A READ request brings its responses: it costs what it asks for.
        let cost = match wqe.wr.op {
            SendOp::RdmaRead { .. } => read_request_pkts(ctx.config, k, wqe.npkts),
            _ => 1,
        };
        if own == 0
            && (ctx.others_inflight == 0
                || ctx.others_inflight.saturating_add(cost) <= ctx.budget.limit())
        {
            return true;
        }
        if ctx.others_inflight.saturating_add(own) >= ctx.budget.limit() {
            self.req.starve();
            ctx.stats.budget_waits += 1;
            return false;
        }
        true
    }

    /// Whether the packet at the cursor, when it is the request for a further chunk of a long
    /// READ sent for the first time, may go: it takes a responder resource like a READ of its
    /// own, so the QP's READ/atomic credit must allow one more (counted here, returned when the
    /// chunk before it is answered).
    fn may_request_next_chunk(&mut self, config: &EngineConfig) -> bool {
        let (idx, k) = self.req.cursor();
        let wqe = self.req.wqe(idx);
        if k == 0 || !matches!(wqe.wr.op, SendOp::RdmaRead { .. }) {
            return true;
        }
        let psn = wqe.first_psn.add(k);
        if psn.is_before(self.req.sent_high()) || k % read_chunk(config) != 0 {
            return true;
        }
        let limit = u32::from(self.cfg.max_rd_atomic.max(1));
        self.req.take_rd_atomic(limit)
    }

    /// Resends the single packet `psn` (a selective repeat's repair) with AckReq set, the
    /// cursor left where it was. `None` when there is nothing to send after all (`psn` has been
    /// acknowledged meanwhile) or the QP failed.
    fn resend_one(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
        psn: Psn,
    ) -> Option<DatagramOut> {
        if psn.is_before(self.req.unacked_psn()) || !psn.is_before(self.req.sent_high()) {
            return None;
        }
        let idx = self.wqe_index(psn)?;
        let k = psn.distance(self.req.wqe(idx).first_psn) as u32;
        let saved = self.req.point_cursor_at(idx, k);
        self.req.ask_for_ack();
        let built = self.build_request(ctx, out);
        self.req.restore_cursor(saved);
        match built {
            Ok(t) => Some(t),
            Err(RequestBuild::Skip) => None,
            Err(RequestBuild::Failed) => {
                self.fail_wqe(ctx, idx, WcStatus::LocProtErr);
                None
            }
        }
    }

    /// Builds the packet at the cursor and advances it.
    fn build_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
    ) -> Result<DatagramOut, RequestBuild> {
        let (idx, k) = self.req.cursor();
        let wqe = self.req.wqe(idx);
        if k >= wqe.npkts {
            self.req.pass_wqe();
            return Err(RequestBuild::Skip);
        }
        let psn = wqe.first_psn.add(k);
        let mtu = wqe.mtu;
        let last = k + 1 == wqe.npkts;
        let Some(RequestHeaders {
            opcode,
            mut ext,
            payload,
            request_pkts,
        }) = request_headers(wqe, k, ctx.config)
        else {
            return Err(RequestBuild::Skip);
        };
        let mut bth = Bth::new(opcode, self.cfg.dest_qpn, psn);
        let request_end = request_pkts.map(|n| k + n);
        let ends_message = last || request_end == Some(wqe.npkts);
        // What a WRITE still has to send after this packet, for the engine's turns (see
        // `turn_goes_on`). Only a WRITE's: a stream of them breaks its GSO sends at every
        // message's start anyway (the RETH makes the first packet longer), so finishing a
        // message in the turn saves a send, where a stream of SENDs, whose packets are all
        // alike, joins one message's end to the next's start in the QP's next turn. Only a
        // new packet's (a resent one is followed by whatever the QP sends next, not by the
        // rest of its message), and only if the window and the device budget let all of it
        // out now: a turn drawn out into a refusal would only cost the QP a wait for the
        // budget.
        let fresh = !psn.is_before(self.req.sent_high());
        // Packets the window and the device budget let out after this one (a new packet's).
        let room = fresh.then(|| {
            let window = ctx.config.max_inflight_packets;
            let budget = ctx.budget.limit();
            let in_budget = ctx.others_inflight + self.req.budget_share() + 1;
            (window.saturating_sub(self.req.outstanding() + 1))
                .min(budget.saturating_sub(in_budget))
        });
        let tail = match wqe.wr.op {
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. }
                if !ends_message && room.is_some_and(|r| wqe.npkts - k - 1 <= r) =>
            {
                (wqe.len as usize).saturating_sub(k as usize * mtu as usize + payload)
            }
            _ => 0,
        };
        ctx.message_tail = tail;
        let reliable = self.qp_type.is_reliable();
        match self.qp_type {
            // UC: the same opcodes in the UC range (IBTA 9.2: the three high bits name the
            // transport), and no acknowledgements to ask for.
            QpType::Uc => bth.opcode = Opcode(bth.opcode.0 | UC_OPCODE_BASE),
            // XRC: RC's opcodes in the XRC range, each naming the target's SRQ.
            QpType::XrcIni => {
                bth.opcode = Opcode(bth.opcode.0 | XRC_OPCODE_BASE);
                ext.xrceth = wqe.wr.xrc_srqn.map(|srqn| Xrceth { srqn });
            }
            _ => {}
        }
        let read_or_atomic = wqe.wr.op.is_read_or_atomic();
        let solicited = ends_message && wqe.wr.flags.contains(SendFlags::SOLICITED);
        let since_ack_req = self.req.count_packet();
        let forced = self.req.take_ack_request();
        // Ask for an ACK at a message's end, every `ack_req_every` packets, and on the last
        // packet the window or the device budget lets out: the ACK that reopens them must not
        // wait for the retransmit timer.
        let fills = room == Some(0);
        bth.ack_req = reliable
            && (ends_message
                || read_or_atomic
                || fills
                || (fresh && turn_ends(ctx, packet_len(bth.opcode, payload), tail))
                || forced
                || since_ack_req >= ack_req_interval(ctx.config));
        if bth.ack_req {
            self.req.ack_req_sent();
            if fresh && reliable {
                self.req.time_send(psn, ctx.now);
            }
        }
        bth.solicited = solicited;

        let offset = u64::from(k) * u64::from(mtu);
        let (pd, wr) = (self.pd, &self.req.wqe(idx).wr);
        let fill = |mrs: &MrTable, buf: &mut [u8], crc: u32| match &wr.inline_data {
            Some(data) => {
                let start = offset as usize;
                buf.copy_from_slice(&data[start..start + buf.len()]);
                Some(crc32_update(crc, buf))
            }
            None if buf.is_empty() => Some(crc),
            None => mrs.gather_crc(pd, &wr.sg_list, offset, buf, crc).ok(),
        };
        let t = self
            .build_packet(ctx, out, bth, &ext, payload, fill)
            .ok_or(RequestBuild::Failed)?;

        let next_k = request_end.unwrap_or(k + 1);
        if self.req.packet_sent(idx, psn, next_k) {
            ctx.stats.retransmitted_packets += 1;
        }
        if !reliable {
            if last {
                // UC completes a WQE once its last packet is on the wire: nothing will ever
                // acknowledge it (IBTA 9.7.7; rxe does the same).
                self.req.unreliable_message_sent(idx, psn);
                self.retire_completed(ctx);
            }
            return Ok(t);
        }
        if !self.timers.is_armed(Timer::Retransmit) {
            if let Some(timeout) = self.retransmit_timeout() {
                self.timers.set(Timer::Retransmit, ctx.now + timeout);
            }
        }
        self.arm_tail_probe(ctx);
        self.req.debug_check();
        Ok(t)
    }

    /// Executes the local operation (BIND_MW, LOCAL_INV) at the cursor, in its place in the
    /// send queue, as rxe's requester does when it reaches one: nothing goes on the wire, and
    /// it completes as soon as every older WQE has. A failure moves the QP to the error
    /// state (rxe: `IB_WC_MW_BIND_ERR` for a bind, `IB_WC_LOC_QP_OP_ERR` for an
    /// invalidation). Returns whether it succeeded.
    fn execute_local(&mut self, ctx: &mut Ctx<'_>, idx: usize) -> bool {
        let result = match self.req.wqe(idx).wr.op {
            SendOp::BindMw(bind) => ctx
                .mrs
                .bind_window(self.pd, self.qpn, &bind)
                .map_err(|_| WcStatus::MwBindErr),
            SendOp::LocalInv { rkey } => {
                let by = crate::mw::Invalidator::Local { pd: self.pd };
                ctx.mrs
                    .invalidate(rkey, by)
                    .map_err(|_| WcStatus::LocQpOpErr)
            }
            _ => Err(WcStatus::LocQpOpErr),
        };
        if let Err(status) = result {
            self.fail_wqe(ctx, idx, status);
            return false;
        }
        self.req.local_op_done(idx);
        self.retire_completed(ctx);
        true
    }

    /// Records `status` for WQE `idx` (its index in the send queue as the caller sees it) and
    /// moves the QP to the error state. WQEs before it already known to have succeeded still
    /// complete successfully; unfinished ones before it, and all after it, are flushed — a
    /// bind or invalidation after it too, though done already (rxe's completer reaches it
    /// only after the failure, and flushes it).
    pub(crate) fn fail_wqe(&mut self, ctx: &mut Ctx<'_>, idx: usize, status: WcStatus) {
        self.req.fail_wqe_at(idx, status);
        self.enter_error(ctx);
    }
}

/// What turns an RC opcode into its UC twin (`0b001` in the transport bits).
const UC_OPCODE_BASE: u8 = 0x20;
/// What turns an RC opcode into its XRC twin (`0b101` in the transport bits).
pub(crate) const XRC_OPCODE_BASE: u8 = 0xa0;

enum RequestBuild {
    /// The cursor was past the WQE's last packet; try the next one.
    Skip,
    /// The payload could not be read from memory.
    Failed,
}

/// Whether a packet of `len` bytes, with `tail` payload bytes of its message after it, ends
/// the QP's transmit turn while other QPs wait (the engine's rule: [`turn_goes_on`]). Its
/// packets then sit in flight while the others take their turns and the device budget, so
/// the last of them asks for the ACK: without it they would be acknowledged only when the QP's next
/// turn comes, which with a thousand QPs sharing the budget can be later than its retransmit
/// timer.
fn turn_ends(ctx: &Ctx<'_>, len: usize, tail: usize) -> bool {
    ctx.turn_used
        .is_some_and(|used| !turn_goes_on(used + len, len, tail))
}

/// Packets between AckReqs in a long message: `ack_req_every`, but at least two per
/// in-flight window, since a responder ACKs only what asks for it (rxe does the same) and a
/// window without an AckReq would wait for the retransmit timer. Of any `window` packets in
/// flight, the one asking for an ACK is then at most `window / 2` from the newest, so its
/// ACK reopens the window before it drains.
fn ack_req_interval(config: &EngineConfig) -> u32 {
    config
        .ack_req_every
        .min(config.max_inflight_packets / 2)
        .max(1)
}

/// Response packets one READ request asks for at most: half the QP's window, so the next
/// chunk's request goes while the responses of the one before arrive. A long READ is asked
/// for chunk by chunk — to the responder, consecutive READ requests — so its responses enter
/// the window and the device's in-flight budget like any packets instead of arriving all at
/// once (a 8 MiB READ is 2048 packets, twice what a 4 MiB socket buffer holds), and a lost
/// response costs a chunk, not the whole rest. Chunk boundaries are fixed (every
/// `read_chunk` packets from the WQE's first), so a restart stays inside its chunk.
pub(crate) fn read_chunk(config: &EngineConfig) -> u32 {
    (config.max_inflight_packets / 2).max(1)
}

/// Response packets of the READ request at packet `k` of an `npkts`-packet READ: up to the end
/// of `k`'s chunk.
pub(crate) fn read_request_pkts(config: &EngineConfig, k: u32, npkts: u32) -> u32 {
    let chunk = read_chunk(config);
    let chunk_end = (k / chunk + 1).saturating_mul(chunk);
    chunk_end.min(npkts).saturating_sub(k).max(1)
}

/// Payload bytes of packet `k` of a `len`-byte message at `mtu` bytes per packet.
fn packet_payload(len: u32, mtu: u32, k: u32) -> usize {
    let start = u64::from(k) * u64::from(mtu);
    (u64::from(len).saturating_sub(start)).min(u64::from(mtu)) as usize
}

fn send_opcode(op: &SendOp, k: u32, npkts: u32) -> (Opcode, Option<u32>, Option<u32>) {
    let (imm, inv) = match *op {
        SendOp::SendWithImm { imm } => (Some(imm), None),
        SendOp::SendWithInv { rkey } => (None, Some(rkey)),
        _ => (None, None),
    };
    let only = npkts == 1;
    let last = k + 1 == npkts;
    let opcode = match (only, k == 0, last, imm.is_some(), inv.is_some()) {
        (true, _, _, true, _) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (true, _, _, _, true) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        (true, _, _, _, _) => Opcode::RC_SEND_ONLY,
        (false, true, _, _, _) => Opcode::RC_SEND_FIRST,
        (false, false, false, _, _) => Opcode::RC_SEND_MIDDLE,
        (false, false, true, true, _) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (false, false, true, _, true) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        (false, false, true, _, _) => Opcode::RC_SEND_LAST,
    };
    let ends = only || last;
    (opcode, imm.filter(|_| ends), inv.filter(|_| ends))
}

fn write_opcode(imm: bool, k: u32, npkts: u32) -> Opcode {
    let only = npkts == 1;
    let last = k + 1 == npkts;
    match (only, k == 0, last, imm) {
        (true, _, _, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (true, _, _, false) => Opcode::RC_RDMA_WRITE_ONLY,
        (false, true, _, _) => Opcode::RC_RDMA_WRITE_FIRST,
        (false, false, false, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (false, false, true, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (false, false, true, false) => Opcode::RC_RDMA_WRITE_LAST,
    }
}

/// The opcode, extension headers and payload length of packet `k` of `wqe`, and for a READ
/// request the response PSNs it covers; `None` for a local operation, which has no packets.
/// RC's opcodes: the caller moves them to UC's or XRC's range.
fn request_headers(wqe: &SendWqe, k: u32, config: &EngineConfig) -> Option<RequestHeaders> {
    let mtu = wqe.mtu;
    let last = k + 1 == wqe.npkts;
    let opcode;
    let mut ext = ExtHeaders::default();
    let mut payload = 0usize;
    let mut request_pkts = None;
    match wqe.wr.op {
        SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
            let (send, imm, inv) = send_opcode(&wqe.wr.op, k, wqe.npkts);
            opcode = send;
            ext.imm_dt = imm.map(|imm| ImmDt { imm });
            ext.ieth = inv.map(|rkey| Ieth { rkey });
            payload = packet_payload(wqe.len, mtu, k);
        }
        SendOp::RdmaWrite { remote_addr, rkey }
        | SendOp::RdmaWriteWithImm {
            remote_addr, rkey, ..
        } => {
            let imm = match wqe.wr.op {
                SendOp::RdmaWriteWithImm { imm, .. } => Some(imm),
                _ => None,
            };
            opcode = write_opcode(imm.is_some(), k, wqe.npkts);
            if k == 0 {
                ext.reth = Some(Reth {
                    va: remote_addr,
                    rkey,
                    dma_len: wqe.len,
                });
            }
            if last {
                ext.imm_dt = imm.map(|imm| ImmDt { imm });
            }
            payload = packet_payload(wqe.len, mtu, k);
        }
        SendOp::RdmaRead { remote_addr, rkey } => {
            // One request per chunk (see `read_chunk`), up to the chunk's end: a restart
            // mid-response asks only for the rest of its chunk, from the first missing
            // response PSN.
            let done = u64::from(k) * u64::from(mtu);
            let pkts = read_request_pkts(config, k, wqe.npkts);
            let upto = (u64::from(k + pkts) * u64::from(mtu)).min(u64::from(wqe.len));
            opcode = Opcode::RC_RDMA_READ_REQUEST;
            ext.reth = Some(Reth {
                va: remote_addr.wrapping_add(done),
                rkey,
                dma_len: upto.saturating_sub(done) as u32,
            });
            request_pkts = Some(pkts);
        }
        SendOp::AtomicCmpSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            opcode = Opcode::RC_COMPARE_SWAP;
            ext.atomic_eth = Some(AtomicEth {
                va: remote_addr,
                rkey,
                swap_add: swap,
                compare,
            });
        }
        SendOp::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            opcode = Opcode::RC_FETCH_ADD;
            ext.atomic_eth = Some(AtomicEth {
                va: remote_addr,
                rkey,
                swap_add: add,
                compare: 0,
            });
        }
        SendOp::AtomicWrite { remote_addr, rkey } => {
            opcode = Opcode::RC_ATOMIC_WRITE;
            ext.reth = Some(Reth {
                va: remote_addr,
                rkey,
                dma_len: 8,
            });
            payload = 8;
        }
        SendOp::Flush {
            remote_addr,
            rkey,
            len,
            placement,
            level,
        } => {
            opcode = Opcode::RC_FLUSH;
            ext.feth = Some(Feth {
                selectivity: match level {
                    FlushLevel::Range => 0,
                    FlushLevel::Region => 1,
                },
                placement,
            });
            ext.reth = Some(Reth {
                va: remote_addr,
                rkey,
                dma_len: len,
            });
        }
        // Local operations have no packets (`npkts` 0): the test above skipped them.
        SendOp::BindMw(_) | SendOp::LocalInv { .. } => return None,
    }
    Some(RequestHeaders {
        opcode,
        ext,
        payload,
        request_pkts,
    })
}

/// What [`request_headers`] gives.
struct RequestHeaders {
    opcode: Opcode,
    ext: ExtHeaders,
    payload: usize,
    /// A READ request covers this many response PSNs (every other request one).
    request_pkts: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_segmentation() {
        assert_eq!(packet_payload(4096, 1024, 3), 1024);
        assert_eq!(packet_payload(4097, 1024, 4), 1);
        assert_eq!(packet_payload(0, 1024, 0), 0);
        assert_eq!(send_opcode(&SendOp::Send, 0, 1).0, Opcode::RC_SEND_ONLY);
        assert_eq!(
            send_opcode(&SendOp::SendWithImm { imm: 1 }, 2, 3),
            (Opcode::RC_SEND_LAST_WITH_IMMEDIATE, Some(1), None)
        );
        assert_eq!(
            send_opcode(&SendOp::SendWithImm { imm: 1 }, 0, 3),
            (Opcode::RC_SEND_FIRST, None, None)
        );
        assert_eq!(write_opcode(true, 1, 3), Opcode::RC_RDMA_WRITE_MIDDLE);
        assert_eq!(
            write_opcode(true, 0, 1),
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
        );
    }
}
