//! The send queue: posted send WQEs, oldest first, and the requester's position in them.
//!
//! Each WQE, when first started, is given a PSN range: one PSN per packet for SEND and WRITE,
//! one per expected response packet for READ (the request itself is a single packet), one for
//! an atomic. A cursor (`cursor`, `cursor_pkt`) says which packet goes out next; going back N
//! for a retransmission is just moving the cursor back (see [`Requester::go_back`]). This file
//! holds only the state; the requester (`mod.rs` beside it) and the completer (`completer/`) move
//! it, through the named methods below: no field is visible outside this file.

use std::collections::VecDeque;

use softrdma_wire::Psn;

use super::rtt::RttEstimator;
use crate::qp::attr::{Mtu, QpConfig};
use crate::time::{Duration, Instant};
use crate::wr::{SendWr, WcStatus, WorkCompletion};

/// A send WQE and its progress.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// Message length in bytes.
    pub len: u32,
    /// Payload bytes per packet when the WQE was posted.
    pub mtu: u32,
    /// PSNs the WQE consumes (none for a local operation).
    pub npkts: u32,
    /// First PSN, once started.
    pub first_psn: Psn,
    pub started: bool,
    /// The outcome, once known; the completion is generated when all older WQEs are done.
    pub status: Option<WcStatus>,
    /// READ: response bytes placed so far.
    pub read_done: u32,
}

impl SendWqe {
    pub(crate) fn new(wr: SendWr, mtu: Mtu) -> SendWqe {
        let len = u32::try_from(wr.length()).unwrap_or(u32::MAX);
        let mtu = mtu.bytes();
        let npkts = if wr.op.is_local() {
            0
        } else if wr.op.is_atomic() {
            1
        } else {
            len.div_ceil(mtu).max(1)
        };
        SendWqe {
            wr,
            len,
            mtu,
            npkts,
            first_psn: Psn::ZERO,
            started: false,
            status: None,
            read_done: 0,
        }
    }

    /// Last PSN of the WQE (the one before `first_psn` for a local operation, which
    /// consumes none).
    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts).sub(1)
    }

    /// Whether `psn` is one of the WQE's PSNs.
    pub(crate) fn contains(&self, psn: Psn) -> bool {
        self.started && psn.in_window(self.first_psn, self.npkts)
    }

    /// The completion reporting `status` for this WQE.
    pub(crate) fn completion(&self, qpn: u32, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id: self.wr.wr_id,
            status,
            opcode: self.wr.op.wc_opcode(),
            byte_len: self.len,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: qpn,
            src_qp: 0,
            grh: false,
            timestamp: crate::time::Instant::ZERO,
        }
    }
}

/// Requester and completer state of a QP.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    /// WQEs not yet completed, oldest first.
    sq: VecDeque<SendWqe>,
    /// Index in `sq` of the WQE whose packet goes out next.
    cursor: usize,
    /// Packet index within that WQE.
    cursor_pkt: u32,
    /// PSN of the next new WQE's first packet.
    next_psn: Psn,
    /// Every PSN before this one has been acknowledged (explicitly or by a response).
    unacked_psn: Psn,
    /// The highest PSN the responder has acknowledged, even past a READ or atomic whose
    /// response is still missing (which holds `unacked_psn` back): the measure of forward
    /// progress that refills the retry counters.
    peer_acked: Psn,
    /// One past the highest PSN ever sent: packets below it are retransmissions.
    sent_high: Psn,
    /// READ and atomic requests outstanding, what the responder's resources hold: one per
    /// READ/atomic WQE started, plus one per further chunk of a long READ (see
    /// `requester::read_chunk`) until the chunk before it is answered.
    rd_atomic_inflight: u32,
    /// Transport retries left before RETRY_EXC_ERR.
    retry_left: u8,
    /// RNR retries left (7 = infinite).
    rnr_left: u8,
    /// Waiting out an RNR NAK's timer: send nothing.
    rnr_wait: bool,
    /// The retransmit timer expired and no ACK has shown progress since: what is in flight
    /// is presumed lost, and the QP counts as one packet in the device's in-flight budget
    /// (TCP's "pipe" after an RTO), so a dead peer's QP does not hold the budget that live
    /// QPs need while it spends its retries.
    timed_out: bool,
    /// Tail-loss probes sent since an ACK last showed progress (each waits twice as long as
    /// the one before).
    tail_probes: u8,
    /// Packets since the last AckReq.
    pkts_since_ackreq: u32,
    /// The next packet built asks for an ACK whatever its place (a repair).
    force_ack_req: bool,
    /// The READ-response gap already acted on (one retry per gap, not one per packet).
    gap_retry_at: Option<Psn>,
    /// One packet to resend before anything else: the repair of a selective repeat.
    resend: Option<Psn>,
    /// Further copies of `resend` to send after it: a retransmission after timeouts that
    /// made no progress goes more than once (see `QpContext::retry_copies`).
    resend_copies: u32,
    /// The selective repeat under way, if any (see `completer/repair.rs`).
    repair: Option<Repair>,
    /// Whether the responder keeps packets that arrive after a gap, as softrdma's does
    /// (`None` until a repair shows it).
    peer_reorders: Option<bool>,
    /// The last send was refused for the device's in-flight budget, not the QP's window:
    /// the engine wakes the QP when other QPs' packets are acknowledged.
    starved: bool,
    rtt: RttEstimator,
}

/// A selective repeat: only `psn` is resent, and new packets keep flowing from `horizon` (one
/// past the highest sent when it started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Repair {
    pub psn: Psn,
    pub horizon: Psn,
    pub kind: RepairKind,
}

/// Why a packet is being repaired, which decides what its answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RepairKind {
    /// The PSN a sequence NAK named. An answer acknowledging more than `psn` shows that the
    /// responder kept what followed the gap; `psn` alone, that it dropped it (IBTA C9-92).
    Gap,
    /// The oldest unacknowledged packet, alone, after a retransmit timeout: a lost ACK costs
    /// one packet instead of a window. The answer says where the responder's run stopped, not
    /// what kind it is (everything after `psn` may simply be lost).
    Probe,
    /// The packet after where a short answer stopped, towards a responder that keeps early
    /// packets. The short answer may mean everything after it was lost, or only that the NAK
    /// of the next gap was (a responder NAKs a gap once): resending one packet tells which.
    /// Answered with `psn` alone, nothing beyond was kept, and the rest goes back N.
    Next,
    /// Like `Next`, for a READ or atomic request, which is not resent yet: the responder may
    /// have kept it and be answering it, and a duplicate would restart the answer. The
    /// answer ends the repair (as any READ response or atomic ACK that passes a repair); a
    /// silence sends the request with the tail probe; a sequence NAK naming it shows it lost.
    Await,
}

impl Requester {
    /// The posted send WQEs not yet completed, oldest first.
    pub(crate) fn wqes(&self) -> &VecDeque<SendWqe> {
        &self.sq
    }

    /// Takes every WQE out, oldest first (the QP flushes them), and puts the cursor back.
    pub(crate) fn drain(&mut self) -> std::collections::vec_deque::Drain<'_, SendWqe> {
        self.cursor = 0;
        self.cursor_pkt = 0;
        self.sq.drain(..)
    }

    /// The PSN of the next new WQE's first packet (a UD datagram's PSN).
    pub(crate) fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// The head WQE went out as a UD datagram with [`next_psn`](Self::next_psn): it leaves
    /// the queue, and the next datagram takes the PSN after.
    pub(crate) fn datagram_sent(&mut self) -> Option<SendWqe> {
        let wqe = self.sq.pop_front()?;
        self.next_psn = self.next_psn.next();
        Some(wqe)
    }

    /// Whether an RNR NAK's wait is under way (nothing is sent meanwhile).
    pub(crate) fn waiting_out_rnr(&self) -> bool {
        self.rnr_wait
    }

    /// The smoothed round trip, once one has been timed.
    pub(crate) fn srtt(&self) -> Option<core::time::Duration> {
        self.rtt.srtt()
    }

    /// Whether the responder keeps packets that follow a gap (`None` until a repair shows).
    pub(crate) fn peer_reorders(&self) -> Option<bool> {
        self.peer_reorders
    }

    /// Whether the last send was refused for the device's in-flight budget; clears it (the
    /// engine lists the QP to wake).
    pub(crate) fn take_starved(&mut self) -> bool {
        std::mem::take(&mut self.starved)
    }

    /// Has the next packet built ask for an ACK, whatever its place (the last before a
    /// pacing pause: the pause must not look like a loss).
    pub(crate) fn ask_for_ack(&mut self) {
        self.force_ack_req = true;
    }

    /// The started WQE that owns `psn`, if any.
    pub(crate) fn wqe_at(&self, psn: Psn) -> Option<&SendWqe> {
        self.sq.iter().find(|w| w.contains(psn))
    }

    /// Whether `psn` is a request packet the requester itself sends again: a SEND's or
    /// WRITE's. A READ's PSNs beyond its request, and an atomic's answer, are the
    /// responder's; resending a READ or atomic request the responder kept would restart its
    /// answer.
    pub(crate) fn resendable_alone(&self, psn: Psn) -> bool {
        self.wqe_at(psn)
            .is_some_and(|w| !w.wr.op.is_read_or_atomic())
    }

    /// Whether `psn` is a READ's or an atomic's, whose answer is a response of the
    /// responder's: the request itself, or (a READ answered in part) its first missing
    /// response, which the request sent again asks for with the rest of its chunk.
    pub(crate) fn answered_by_response(&self, psn: Psn) -> bool {
        self.wqe_at(psn)
            .is_some_and(|w| w.wr.op.is_read_or_atomic())
    }

    /// State for a QP entering RTS.
    pub(crate) fn reset(&mut self, cfg: &QpConfig) {
        self.next_psn = cfg.sq_psn;
        self.unacked_psn = cfg.sq_psn;
        self.peer_acked = cfg.sq_psn.sub(1);
        self.sent_high = cfg.sq_psn;
        self.cursor = 0;
        self.cursor_pkt = 0;
        self.resend = None;
        self.resend_copies = 0;
        self.repair = None;
        self.peer_reorders = None;
        self.rtt = RttEstimator::default();
        self.reset_retry_counters(cfg);
    }

    /// Transport retries spent since the last forward progress (each a retransmit timeout
    /// or a sequence NAK that found nothing acknowledged).
    pub(crate) fn retries_without_progress(&self, cfg: &QpConfig) -> u8 {
        cfg.retry_cnt.saturating_sub(self.retry_left)
    }

    pub(crate) fn reset_retry_counters(&mut self, cfg: &QpConfig) {
        self.retry_left = cfg.retry_cnt;
        self.rnr_left = cfg.rnr_retry;
        self.timed_out = false;
        self.tail_probes = 0;
    }

    /// Request packets this QP holds of the device's in-flight budget.
    pub(crate) fn budget_share(&self) -> u32 {
        let outstanding = self.outstanding();
        if self.timed_out {
            outstanding.min(1)
        } else {
            outstanding
        }
    }

    pub(crate) fn push(&mut self, wr: SendWr, mtu: Mtu) {
        self.sq.push_back(SendWqe::new(wr, mtu));
    }

    pub(crate) fn has_output(&self) -> bool {
        !self.rnr_wait && (self.cursor < self.sq.len() || self.resend.is_some())
    }

    /// Whether the RC packet with `psn` may go out (for the first time or again): fewer than
    /// `window` PSNs may be unacknowledged, counting from the oldest one. Checked per packet,
    /// not per message, as rxe's requester does (`RXE_MAX_UNACKED_PSNS`): a long message or
    /// a go-back-N retransmission otherwise leaves in one burst of up to 2^31 / MTU packets,
    /// which a slow receiver's queue drops faster than the retries can recover (an 8 MiB
    /// WRITE against rxe under TCG exhausted the retry budget). The PSNs of a started READ
    /// count too, so requests behind a long READ wait for most of its response.
    pub(crate) fn in_window(&self, psn: Psn, window: u32) -> bool {
        psn.distance(self.unacked_psn) < i32::try_from(window.max(1)).unwrap_or(i32::MAX)
    }

    /// PSNs sent and not yet acknowledged: what the network and the responder hold.
    pub(crate) fn outstanding(&self) -> u32 {
        self.sent_high.distance(self.unacked_psn).max(0) as u32
    }

    /// What holds between any two events, checked in debug builds after each (the
    /// completer's response, the requester's packet): acknowledged ≤ sent ≤ assigned PSNs,
    /// the cursor within the queue, a repair's horizon no later than what was sent.
    pub(crate) fn debug_check(&self) {
        debug_assert!(
            !self.sent_high.is_before(self.unacked_psn),
            "acknowledged past what was sent: unacked {:?}, sent_high {:?}",
            self.unacked_psn,
            self.sent_high
        );
        debug_assert!(
            !self.next_psn.is_before(self.sent_high),
            "sent past the PSNs assigned: sent_high {:?}, next_psn {:?}",
            self.sent_high,
            self.next_psn
        );
        debug_assert!(
            self.cursor <= self.sq.len(),
            "cursor {} past {} WQEs",
            self.cursor,
            self.sq.len()
        );
        if let Some(r) = self.repair {
            debug_assert!(
                !r.horizon.is_after(self.sent_high),
                "repair horizon past what was sent: {r:?}, sent_high {:?}",
                self.sent_high
            );
        }
    }

    /// Moves the cursor back so that transmission resumes at `psn` (go-back-N), abandoning
    /// any selective repeat.
    pub(crate) fn go_back(&mut self, psn: Psn) {
        self.resend = None;
        self.resend_copies = 0;
        self.repair = None;
        self.rtt.on_retransmit();
        for (i, wqe) in self.sq.iter().enumerate() {
            if wqe.contains(psn) {
                self.cursor = i;
                self.cursor_pkt = psn.distance(wqe.first_psn) as u32;
                return;
            }
            if !wqe.started {
                self.cursor = i;
                self.cursor_pkt = 0;
                return;
            }
        }
        self.cursor = self.sq.len();
        self.cursor_pkt = 0;
    }
}

/// Reads of the send queue's position, for the requester's packet building and the completer.
impl Requester {
    /// The WQE at index `idx` in the queue (oldest first); panics past the end, as indexing
    /// does.
    pub(in crate::qp::requester) fn wqe(&self, idx: usize) -> &SendWqe {
        &self.sq[idx]
    }

    /// The oldest WQE not yet completed, if any.
    pub(in crate::qp::requester) fn front(&self) -> Option<&SendWqe> {
        self.sq.front()
    }

    /// Every PSN before this one has been acknowledged: the oldest unacknowledged PSN, where
    /// the window starts.
    pub(in crate::qp::requester) fn unacked_psn(&self) -> Psn {
        self.unacked_psn
    }

    /// One past the highest PSN ever sent: packets below it are retransmissions.
    pub(in crate::qp::requester) fn sent_high(&self) -> Psn {
        self.sent_high
    }

    /// Where the cursor is: the index in the queue of the WQE whose packet goes out next (the
    /// queue's length when none waits), and the packet's index within that WQE.
    pub(in crate::qp::requester) fn cursor(&self) -> (usize, u32) {
        (self.cursor, self.cursor_pkt)
    }

    /// The PSN of the packet at the cursor: its packet's in a started WQE; otherwise the one
    /// the next WQE to start takes, [`next_psn`](Self::next_psn).
    pub(in crate::qp::requester) fn cursor_psn(&self) -> Psn {
        match self.sq.get(self.cursor) {
            Some(w) if w.started => w.first_psn.add(self.cursor_pkt),
            _ => self.next_psn,
        }
    }

    /// READ and atomic requests outstanding at the responder (see the field's note): what the
    /// QP's `max_rd_atomic` credit limits.
    pub(in crate::qp::requester) fn rd_atomic_inflight(&self) -> u32 {
        self.rd_atomic_inflight
    }
}

/// The requester's own moves: what building and sending a request packet does to the send
/// queue's state (IBTA 9.7.4; rxe's requester: `update_wqe_psn`, `update_state`,
/// `save_state`/`rollback_state`).
impl Requester {
    /// WQE `idx` starts, its first packet about to be built: it takes its PSNs, from
    /// [`next_psn`](Self::next_psn) on (none for a local operation), and a READ or atomic one
    /// of the responder's resources, which its answer returns
    /// ([`release_rd_atomic`](Self::release_rd_atomic)).
    pub(in crate::qp::requester) fn start_wqe(&mut self, idx: usize) {
        let wqe = &mut self.sq[idx];
        wqe.first_psn = self.next_psn;
        wqe.started = true;
        self.next_psn = self.next_psn.add(wqe.npkts);
        if wqe.wr.op.is_read_or_atomic() {
            self.rd_atomic_inflight += 1;
        }
    }

    /// The local operation (BIND_MW, LOCAL_INV) `idx`, at the cursor, was executed: it is
    /// started at [`next_psn`](Self::next_psn), taking none, has succeeded, and the cursor
    /// passes it. It completes when every older WQE has.
    pub(in crate::qp::requester) fn local_op_done(&mut self, idx: usize) {
        let wqe = &mut self.sq[idx];
        wqe.started = true;
        wqe.first_psn = self.next_psn;
        wqe.status = Some(WcStatus::Success);
        self.cursor += 1;
        self.cursor_pkt = 0;
    }

    /// The cursor passes over the WQE it points at, to the next one's first packet: a local
    /// operation done already (go-back-N rewound the cursor over it), or a WQE whose packets
    /// have all gone.
    pub(in crate::qp::requester) fn pass_wqe(&mut self) {
        self.cursor += 1;
        self.cursor_pkt = 0;
    }

    /// The request of a further chunk of a long READ, sent for the first time, takes a
    /// responder resource like a READ of its own — if the QP's credit (`limit`) allows one
    /// more; the chunk before it returns one when answered. Returns whether it took one.
    pub(in crate::qp::requester) fn take_rd_atomic(&mut self, limit: u32) -> bool {
        if self.rd_atomic_inflight >= limit {
            return false;
        }
        self.rd_atomic_inflight += 1;
        true
    }

    /// A new packet was refused for the device's in-flight budget (not the QP's window): the
    /// engine is to wake the QP when other QPs' packets are acknowledged
    /// ([`take_starved`](Self::take_starved)).
    pub(in crate::qp::requester) fn starve(&mut self) {
        self.starved = true;
    }

    /// One more packet is being built since the last one that asked for an ACK; returns how
    /// many that makes (with it). A long message asks for one every so many packets, since a
    /// responder acknowledges only what asks.
    pub(in crate::qp::requester) fn count_packet(&mut self) -> u32 {
        self.pkts_since_ackreq += 1;
        self.pkts_since_ackreq
    }

    /// The packet being built asks for an ACK (AckReq set): the count of packets since one
    /// did ([`count_packet`](Self::count_packet)) starts over.
    pub(in crate::qp::requester) fn ack_req_sent(&mut self) {
        self.pkts_since_ackreq = 0;
    }

    /// Packet `psn` of WQE `idx`, at the cursor, went out; the packet after it is `next_pkt`
    /// (a READ request covers its chunk's response PSNs). The cursor moves there, or to the
    /// next WQE past the WQE's end; a new packet moves [`sent_high`](Self::sent_high) past
    /// what it covers. Returns whether `psn` was a retransmission.
    pub(in crate::qp::requester) fn packet_sent(
        &mut self,
        idx: usize,
        psn: Psn,
        next_pkt: u32,
    ) -> bool {
        if next_pkt >= self.sq[idx].npkts {
            self.cursor += 1;
            self.cursor_pkt = 0;
        } else {
            self.cursor_pkt = next_pkt;
        }
        if psn.is_before(self.sent_high) {
            return true;
        }
        self.sent_high = self.sq[idx].first_psn.add(next_pkt);
        false
    }

    /// UC: the last packet `psn` of WQE `idx` is on the wire, which completes it, since
    /// nothing will ever acknowledge it (IBTA 9.7.7; rxe does the same): it has succeeded,
    /// and every PSN through `psn` counts as done.
    pub(in crate::qp::requester) fn unreliable_message_sent(&mut self, idx: usize, psn: Psn) {
        self.sq[idx].status = Some(WcStatus::Success);
        self.unacked_psn = psn.next();
    }

    /// Points the cursor at packet `pkt` of WQE `idx`, where a selective repeat's packet is
    /// built, and returns where it was: sending the repair must not move the cursor, so it
    /// goes back there afterwards ([`restore_cursor`](Self::restore_cursor); rxe's
    /// `save_state`).
    pub(in crate::qp::requester) fn point_cursor_at(
        &mut self,
        idx: usize,
        pkt: u32,
    ) -> (usize, u32) {
        let saved = (self.cursor, self.cursor_pkt);
        (self.cursor, self.cursor_pkt) = (idx, pkt);
        saved
    }

    /// Puts the cursor back where [`point_cursor_at`](Self::point_cursor_at) found it, once
    /// the repair was built (rxe's `rollback_state`).
    pub(in crate::qp::requester) fn restore_cursor(&mut self, saved: (usize, u32)) {
        (self.cursor, self.cursor_pkt) = saved;
    }

    /// WQE `idx` failed with `status` (the QP is going to the error state): WQEs before it
    /// already known to have succeeded still complete successfully; unfinished ones before
    /// it, and all after it, are flushed (WR_FLUSH_ERR) — a local operation after it too,
    /// though done already (rxe's completer reaches it only after the failure).
    pub(in crate::qp::requester) fn fail_wqe_at(&mut self, idx: usize, status: WcStatus) {
        for (i, wqe) in self.sq.iter_mut().enumerate() {
            if i == idx {
                wqe.status = Some(status);
            } else if i > idx || wqe.status.is_none() {
                wqe.status = Some(WcStatus::WrFlushErr);
            }
        }
    }
}

/// What the requester's packet building reads and consumes of the state the completer hands
/// it (see the hand-offs below).
impl Requester {
    /// The selective repeat under way, if any.
    pub(in crate::qp::requester) fn repair(&self) -> Option<Repair> {
        self.repair
    }

    /// The round-trip estimate, which the retransmit timeout and the tail probe's delay
    /// follow.
    pub(in crate::qp::requester) fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// Tail-loss probes sent since an ACK last showed progress.
    pub(in crate::qp::requester) fn tail_probes(&self) -> u8 {
        self.tail_probes
    }

    /// Whether a packet waits to be resent before anything else.
    pub(in crate::qp::requester) fn resend_pending(&self) -> bool {
        self.resend.is_some()
    }

    /// The packet to resend before anything else, if any; it stays for its further copies.
    pub(in crate::qp::requester) fn take_resend(&mut self) -> Option<Psn> {
        let psn = self.resend.take()?;
        if self.resend_copies > 0 {
            self.resend_copies -= 1;
            self.resend = Some(psn);
        }
        Some(psn)
    }

    /// Whether the packet being built must ask for an ACK whatever its place; clears it.
    pub(in crate::qp::requester) fn take_ack_request(&mut self) -> bool {
        std::mem::take(&mut self.force_ack_req)
    }

    /// `psn` leaves for the first time at `now` asking for an ACK: the round trip is timed on
    /// it unless another packet is being timed.
    pub(in crate::qp::requester) fn time_send(&mut self, psn: Psn, now: Instant) {
        self.rtt.on_send(psn, now);
    }
}

/// The completer's hand-offs: what it learned from a response or a timer and the requester
/// must act on when it next builds a packet (IBTA 9.7.5; rxe's completer sets the same state
/// in its `qp->req` and `qp->comp`). With [`go_back`](Requester::go_back) and
/// [`reset_retry_counters`](Requester::reset_retry_counters) they are how the completer changes
/// the send queue's state: it writes none of its fields.
impl Requester {
    /// An RNR NAK came: send nothing until its timer runs out ([`rnr_wait_over`]), since the
    /// responder has no receive WQE for what would go.
    ///
    /// [`rnr_wait_over`]: Self::rnr_wait_over
    pub(in crate::qp::requester) fn wait_for_rnr(&mut self) {
        self.rnr_wait = true;
    }

    /// The RNR NAK's timer ran out: the requester may send again.
    pub(in crate::qp::requester) fn rnr_wait_over(&mut self) {
        self.rnr_wait = false;
    }

    /// Spends one RNR retry on an RNR NAK (none when the count is 7, infinite); `false`, and
    /// nothing spent, when none is left: the WQE fails with RNR_RETRY_EXC_ERR.
    pub(in crate::qp::requester) fn spend_rnr_retry(&mut self) -> bool {
        if self.rnr_left == 0 {
            return false;
        }
        if self.rnr_left != 7 {
            self.rnr_left -= 1;
        }
        true
    }

    /// Spends one transport retry (a retransmit timeout, or a sequence NAK that found nothing
    /// acknowledged); `false`, and nothing spent, when none is left: the WQE fails with
    /// RETRY_EXC_ERR. What was spent since the last progress backs the retransmit timer off.
    pub(in crate::qp::requester) fn spend_retry(&mut self) -> bool {
        if self.retry_left == 0 {
            return false;
        }
        self.retry_left -= 1;
        true
    }

    /// The retransmit timer expired: what is in flight is presumed lost, and until an ACK
    /// shows progress the QP counts as one packet in the device's in-flight budget
    /// ([`budget_share`](Self::budget_share)).
    pub(in crate::qp::requester) fn time_out(&mut self) {
        self.timed_out = true;
    }

    /// The responder executed every PSN through `psn` (acknowledged it, maybe past a READ or
    /// atomic whose response is still missing). Returns whether that is further than it had
    /// shown: forward progress, which refills the retry counters.
    pub(in crate::qp::requester) fn responder_executed_through(&mut self, psn: Psn) -> bool {
        if !psn.is_after(self.peer_acked) {
            return false;
        }
        self.peer_acked = psn;
        true
    }

    /// Every PSN before `next` is acknowledged (`next` after the oldest unacknowledged one):
    /// the window opens, and what the cursor would resend below `next` is not needed.
    /// Returns how many PSNs were newly acknowledged.
    pub(in crate::qp::requester) fn acknowledged_before(&mut self, next: Psn) -> u32 {
        let acked = next.distance(self.unacked_psn).max(0).unsigned_abs();
        self.unacked_psn = next;
        acked
    }

    /// The acknowledgement of everything before the oldest unacknowledged PSN arrived at
    /// `now`: the round trip it completes, if the packet being timed is among them (see
    /// [`RttEstimator::on_ack`]).
    pub(in crate::qp::requester) fn time_ack(&mut self, now: Instant) -> Option<Duration> {
        self.rtt.on_ack(self.unacked_psn, now)
    }

    /// An acknowledgement overtook the cursor inside a SEND or WRITE: it skips the packets
    /// acknowledged meanwhile instead of resending them. (A READ's or atomic's cursor stays:
    /// its request is what asks for the rest of its answer.)
    pub(in crate::qp::requester) fn skip_acknowledged(&mut self) {
        let Some(wqe) = self.sq.get(self.cursor) else {
            return;
        };
        if wqe.started && !wqe.wr.op.is_read_or_atomic() {
            let cursor_psn = wqe.first_psn.add(self.cursor_pkt);
            if cursor_psn.is_before(self.unacked_psn)
                && self.unacked_psn.in_window(wqe.first_psn, wqe.npkts)
            {
                self.cursor_pkt = self.unacked_psn.distance(wqe.first_psn) as u32;
            }
        }
    }

    /// WQE `idx` succeeded (acknowledged, or answered in full): it completes when every older
    /// one has ([`retire_front`](Self::retire_front)).
    pub(in crate::qp::requester) fn wqe_succeeded(&mut self, idx: usize) {
        self.sq[idx].status = Some(WcStatus::Success);
    }

    /// READ WQE `idx` has its response bytes placed up to `done`: a request sent again for
    /// it asks only for the rest, from the first missing response.
    pub(in crate::qp::requester) fn read_placed(&mut self, idx: usize, done: u32) {
        self.sq[idx].read_done = done;
    }

    /// A chunk of a long READ was answered in full: its responder resource is free, and the
    /// next chunk's request (or another READ or atomic) may take it.
    pub(in crate::qp::requester) fn release_rd_atomic(&mut self) {
        self.rd_atomic_inflight = self.rd_atomic_inflight.saturating_sub(1);
    }

    /// Takes the oldest WQE out of the queue (it succeeded, and every older one has gone): a
    /// READ or atomic frees its responder resource, and the cursor keeps pointing at the same
    /// packet.
    pub(in crate::qp::requester) fn retire_front(&mut self) -> Option<SendWqe> {
        let wqe = self.sq.pop_front()?;
        if wqe.wr.op.is_read_or_atomic() {
            self.release_rd_atomic();
        }
        if self.cursor == 0 {
            self.cursor_pkt = 0;
        } else {
            self.cursor -= 1;
        }
        Some(wqe)
    }

    /// A READ response or atomic ACK is missing at `psn` (a later one came): the requester
    /// goes back to `psn` to ask again — once per gap, not once per packet behind it, since
    /// the responses still draining show the same gap. Returns whether this gap is new (and
    /// acted on).
    pub(in crate::qp::requester) fn retry_gap_at(&mut self, psn: Psn) -> bool {
        if self.gap_retry_at == Some(psn) {
            return false;
        }
        self.resume_from(psn);
        true
    }

    /// The READ response awaited arrived in sequence: the next gap is a new loss.
    pub(in crate::qp::requester) fn gap_filled(&mut self) {
        self.gap_retry_at = None;
    }

    /// Transmission resumes at `psn` (go-back-N after a NAK or a retransmit timeout), and a
    /// response gap at `psn` seen before the resent request's answer is the old answer still
    /// draining, not a new loss ([`retry_gap_at`](Self::retry_gap_at) leaves it alone).
    pub(in crate::qp::requester) fn resume_from(&mut self, psn: Psn) {
        self.gap_retry_at = Some(psn);
        self.go_back(psn);
    }

    /// Starts a selective repeat of `psn` (see [`RepairKind`]): it goes next, alone and
    /// asking for an ACK, while new packets keep flowing from the highest sent.
    pub(in crate::qp::requester) fn start_repair(&mut self, psn: Psn, kind: RepairKind) {
        self.repair = Some(Repair {
            psn,
            horizon: self.sent_high,
            kind,
        });
        self.resend = Some(psn);
        self.resend_copies = 0;
    }

    /// Repairs `psn`, a READ or atomic request, without sending it ([`RepairKind::Await`]):
    /// the responder may be answering it already.
    pub(in crate::qp::requester) fn await_repair(&mut self, psn: Psn) {
        self.repair = Some(Repair {
            psn,
            horizon: self.sent_high,
            kind: RepairKind::Await,
        });
    }

    /// The selective repeat is over: its answer came, and nothing more needs to go again.
    pub(in crate::qp::requester) fn end_repair(&mut self) {
        self.repair = None;
    }

    /// A retransmission is under way: no round trip can be timed on what is in flight
    /// (Karn's rule).
    pub(in crate::qp::requester) fn drop_rtt_sample(&mut self) {
        self.rtt.on_retransmit();
    }

    /// The packet about to be resent goes `extra` more times after it: a retransmission
    /// after timeouts that made no progress (see `QpContext::retry_copies`).
    pub(in crate::qp::requester) fn repeat_resend(&mut self, extra: u32) {
        self.resend_copies = extra;
    }

    /// `psn` goes again before anything else, then `extra` more times, the cursor left where
    /// it is (no repair: its answer teaches nothing about the responder).
    pub(in crate::qp::requester) fn resend_next(&mut self, psn: Psn, extra: u32) {
        self.resend = Some(psn);
        self.resend_copies = extra;
    }

    /// A tail-loss probe went: the round trip being timed is marked probed (see
    /// [`RttEstimator::on_probe`]), and the next probe of this silence waits twice as long.
    pub(in crate::qp::requester) fn tail_probe_sent(&mut self) {
        self.rtt.on_probe();
        self.tail_probes = self.tail_probes.saturating_add(1);
    }

    /// An answer showed that the responder keeps packets that arrive after a gap, as
    /// softrdma's does: a gap is repaired by resending one packet, not going back N.
    pub(in crate::qp::requester) fn peer_keeps_early_packets(&mut self) {
        self.peer_reorders = Some(true);
    }

    /// An answer showed that the responder drops packets that arrive after a gap (IBTA
    /// C9-92, Linux rxe): gaps go back N from now on.
    pub(in crate::qp::requester) fn peer_drops_early_packets(&mut self) {
        self.peer_reorders = Some(false);
    }
}
