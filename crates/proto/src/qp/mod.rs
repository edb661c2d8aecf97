//! One queue pair: the send queue with its requester and completer, the receive queue with
//! its responder, the QP's attributes and state, and its timers.
//!
//! The stages live in their own files, as in rxe: `requester` turns send WQEs into request
//! packets, `completer` consumes ACKs, NAKs, READ responses and atomic ACKs and retires WQEs
//! in order, `responder` executes incoming requests (one file per operation). They share the
//! [`QpContext`] and talk through its fields, all on one thread, driven by the engine.

pub mod attr;
pub(crate) mod congestion;
pub(crate) mod datagram;
pub(crate) mod requester;
pub(crate) mod responder;
pub mod source_port;
pub mod timers;
pub(crate) mod transition;
pub(crate) mod validate;

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use softrdma_wire::{
    crc32_update, emit_headers, packet_len, Bth, ExtHeaders, IcrcContext, ICRC_LEN,
};

use crate::budget::InflightBudget;
use crate::cc::{NotificationPoint, ReactionPoint};
use crate::config::EngineConfig;
use crate::cq::{CqContext, CqHandle};
use crate::event::AsyncEvent;
use crate::io::DatagramOut;
use crate::mr::{MrTable, PdHandle};
use crate::srq::{SharedReceiveQueue, SrqHandle};
use crate::stats::Stats;
use crate::time::Instant;
use crate::wr::{RecvWr, SendFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::xrc::XrcdHandle;

pub use attr::GSI_QKEY;
pub use attr::{AddressVector, Mtu, QpAttr, QpCaps, QpConfig, QpState, QpType};
use requester::state::Requester;
use responder::state::Responder;
pub use source_port::{rxe_source_port, ud_source_port};
use timers::TimerTable;
pub use transition::ModifyQpError;

/// Datagram bytes one QP may send in a turn before the next ready QP's turn: what one UDP
/// GSO datagram holds (the largest UDP payload over IPv4), so a turn fills one.
pub(crate) const TRANSMIT_TURN: usize = 65_507;

/// A message's tail short enough for a turn to run on past [`TRANSMIT_TURN`] and finish it.
const TURN_TAIL: usize = 8 * 1024;

/// Whether a QP's transmit turn goes on after a packet of `len` bytes that brought it to
/// `used` bytes, with `tail` payload bytes of the packet's message still to send: while
/// another packet of this size fits, or past that to finish a message whose tail is short.
///
/// Cut at the turn, a 64 KiB WRITE at MTU 4096 (16 packets; 15 fit a turn) left its last
/// packet for the QP's next turn, where it could not join the next WRITE's first packet
/// (longer: it carries the RETH) in a GSO send: with a thousand QPs taking turns, three GSO
/// sends per message instead of two. (Only WRITEs report a tail: see the requester.) The
/// engine and the requester (which asks for an ACK on the packet that ends a turn) decide by
/// this one rule.
pub(crate) fn turn_goes_on(used: usize, len: usize, tail: usize) -> bool {
    used + len <= TRANSMIT_TURN || (tail > 0 && tail <= TURN_TAIL)
}

/// Everything outside the QP that its stages use: time, memory, CQs, SRQs, events, counters.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    /// What completions made now are stamped with (`now`, or a later time the engine saw).
    pub stamp: Instant,
    pub config: &'a EngineConfig,
    pub mrs: &'a mut MrTable,
    pub cqs: &'a mut BTreeMap<CqHandle, CqContext>,
    pub srqs: &'a mut BTreeMap<SrqHandle, SharedReceiveQueue>,
    pub events: &'a mut VecDeque<AsyncEvent>,
    /// QPs whose completion did not fit their CQ: the engine moves them to the error state
    /// once the stage that completed returns (a stage cannot tear down its own QP midway).
    pub overflowed: &'a mut Vec<u32>,
    /// Bytes every QP's reorder buffer holds together (bounded by `config.reorder_bytes`).
    pub reorder_bytes: &'a mut usize,
    pub stats: &'a mut Stats,
    /// The IPv4 identification the caller's kernel will write into the next datagram (the
    /// ICRC covers it): 0 for a plain don't-fragment send, k for segment k of a GSO send.
    pub ipv4_id: u16,
    /// Request packets the engine's other QPs have in flight (for the device budget).
    pub others_inflight: u32,
    /// How many request packets all QPs may have in flight.
    pub budget: &'a mut InflightBudget,
    /// Datagram bytes this QP's transmit turn has used so far while other QPs wait their turn
    /// (`None`: nobody waits, the turn does not end).
    pub turn_used: Option<usize>,
    /// Set by the requester: payload bytes of the WRITE under way still to send after the
    /// packet it just built (0 at its end, and for other packets), for [`turn_goes_on`].
    pub message_tail: usize,
    /// Where in the caller's buffer a packet built now goes (see `Engine::poll_transmit_at`).
    pub out_at: usize,
    /// The payload of the packet being handled was received straight into memory, here
    /// (see [`crate::placement`]); its bytes in the packet are not the payload.
    pub placed: Option<Placed>,
}

/// Where a placed payload landed: `len` bytes of `memory` at `offset`.
#[derive(Clone)]
pub(crate) struct Placed {
    pub memory: std::sync::Arc<dyn crate::mr::RegionMemory>,
    pub offset: usize,
    pub len: u64,
}

impl Placed {
    /// Whether the payload lies exactly at `len` bytes of `memory` at `offset`.
    pub(crate) fn is_at(
        &self,
        memory: &std::sync::Arc<dyn crate::mr::RegionMemory>,
        offset: usize,
        len: u64,
    ) -> bool {
        std::ptr::addr_eq(
            std::sync::Arc::as_ptr(&self.memory),
            std::sync::Arc::as_ptr(memory),
        ) && self.offset == offset
            && self.len == len
    }

    /// The payload's bytes, read back from where they landed.
    pub(crate) fn bytes(&self) -> Result<Vec<u8>, crate::mr::MemoryFault> {
        let mut buf = vec![0u8; self.len as usize];
        self.memory.read(self.offset, &mut buf)?;
        Ok(buf)
    }

    /// Copies the payload to `offset` in `to`.
    pub(crate) fn move_to(
        &self,
        to: &dyn crate::mr::RegionMemory,
        offset: usize,
    ) -> Result<(), crate::mr::MemoryFault> {
        let mut buf = vec![0u8; self.len as usize];
        self.memory.read(self.offset, &mut buf)?;
        to.write(offset, &buf)
    }
}

impl Ctx<'_> {
    /// Delivers a completion to `cq`. A full CQ loses it: IBTA and rxe raise a CQ error
    /// (`AsyncEvent::CqError`, once per CQ: it stays in overrun) and the QP goes to the error
    /// state; a CQ overrun is the application's bug, so it is made loud.
    pub(crate) fn complete(&mut self, cq: CqHandle, mut wc: WorkCompletion) {
        wc.timestamp = self.stamp;
        self.stats.completions += 1;
        let Some(q) = self.cqs.get_mut(&cq) else {
            self.stats.cq_overruns += 1;
            return;
        };
        let first_overrun = !q.overrun;
        if !q.push(wc) {
            self.stats.cq_overruns += 1;
            if first_overrun {
                self.events.push_back(AsyncEvent::CqError(cq));
            }
            if !self.overflowed.contains(&wc.qp_num) {
                self.overflowed.push(wc.qp_num);
            }
        }
    }
}

/// A queue pair as the engine keeps it.
///
/// The engine's context of a QP, as a NIC's QP context; the application's handle is
/// `softrdma::QueuePair`.
pub struct QpContext {
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) pd: PdHandle,
    pub(crate) send_cq: CqHandle,
    pub(crate) recv_cq: CqHandle,
    pub(crate) caps: QpCaps,
    pub(crate) state: QpState,
    pub(crate) cfg: QpConfig,
    /// UDP source port of this QP's packets (rxe's flow-label hash of the two QPNs).
    pub(crate) src_port: u16,
    /// Posted receive WQEs, oldest first (empty when the QP takes them from `srq`).
    pub(crate) rq: VecDeque<RecvWr>,
    /// The shared receive queue the QP takes receive WQEs from, if any. For an XRC target,
    /// the XRC SRQ of the message under way (or the last one), whose PD and CQ are then in
    /// `pd` and `recv_cq`: see `responder::xrc`.
    pub(crate) srq: Option<SrqHandle>,
    /// The XRC domain of an XRC target QP. Such a QP is created with PD 0 and CQ 0, which no
    /// allocation hands out, so nothing resolves through them before a message names its SRQ.
    pub(crate) xrcd: Option<XrcdHandle>,
    pub(crate) req: Requester,
    pub(crate) resp: Responder,
    pub(crate) timers: TimerTable,
    /// What IPv4 identifications the peer's datagrams carry (see [`PeerIpv4Ids`]).
    pub(crate) peer_ids: PeerIpv4Ids,
    /// The deadline the engine's timer index has this QP under.
    pub(crate) scheduled: Option<Instant>,
    /// The packets in flight the engine's device total counts for this QP.
    pub(crate) counted_inflight: u32,
    /// Whether the engine's list of QPs waiting for the device budget holds this QP.
    pub(crate) budget_listed: bool,
    /// Congestion control's reaction point (RC and UC QPs in RTS, when the engine runs it).
    pub(crate) rp: Option<ReactionPoint>,
    /// Congestion control's notification point.
    pub(crate) np: NotificationPoint,
}

/// How the peer numbers the IPv4 identification of its datagrams, learned from its packets.
///
/// A receiver cannot see the identification, so the engine recovers it from the ICRC, which
/// spends 16 of the 32 check bits: about one corruption in 2^15 solves as some other
/// identification. softrdma peers send identification 0 (segment `k` of a GSO send: `k`),
/// Linux rxe counts up from anywhere. A peer whose first packet carried a small
/// identification is held to small ones: a large one from it is far likelier a corruption
/// that happens to solve than a real datagram, and is rejected as a bad ICRC, which brings
/// detection for softrdma peers back near 2^-26. A counting peer that merely started below
/// [`SMALL_IPV4_ID`] (about one rxe connection in a thousand) keeps sending large ones, each
/// a little above the one before; after [`REJECTS_BEFORE_LENIENT`] such rejections in a row —
/// retransmitted, nothing is lost — the QP accepts them. Repeated corruption does not look
/// like that: a stuck bit aliases to the same identification every time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PeerIpv4Ids {
    small: u32,
    large: u32,
    /// Rejected large identifications in a row, each above the previous.
    rejected: u32,
    last_rejected: u16,
}

/// Identifications below this are what softrdma peers use (at most 64 GSO segments).
pub(crate) const SMALL_IPV4_ID: u16 = 64;
/// How far apart two successive identifications of a counting peer may be (Linux adds a
/// random amount up to the time since the last use to its per-destination counters).
pub(crate) const COUNTING_STEP_MAX: u16 = 4096;
/// Large identifications from a small-identification peer after which the QP gives in.
pub(crate) const REJECTS_BEFORE_LENIENT: u32 = 3;

impl PeerIpv4Ids {
    /// A peer known to be a softrdma device (see `EngineConfig::peers_use_small_ipv4_ids`).
    pub(crate) fn small_only() -> PeerIpv4Ids {
        PeerIpv4Ids {
            small: 1,
            ..PeerIpv4Ids::default()
        }
    }

    /// Whether to accept a packet whose ICRC solved for identification `id`, learning from it.
    pub(crate) fn admit(&mut self, id: u16) -> bool {
        if id < SMALL_IPV4_ID {
            self.small = self.small.saturating_add(1);
            return true;
        }
        if self.large > 0 || self.small == 0 {
            self.large = self.large.saturating_add(1);
            return true;
        }
        let step = id.wrapping_sub(self.last_rejected);
        self.rejected = if self.rejected > 0 && (1..=COUNTING_STEP_MAX).contains(&step) {
            self.rejected + 1
        } else {
            1
        };
        self.last_rejected = id;
        if self.rejected >= REJECTS_BEFORE_LENIENT {
            self.large = 1;
            return true;
        }
        false
    }
}

impl QpContext {
    pub(crate) fn new(
        qpn: u32,
        qp_type: QpType,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        caps: QpCaps,
    ) -> QpContext {
        QpContext {
            qpn,
            qp_type,
            pd,
            send_cq,
            recv_cq,
            caps,
            state: QpState::Reset,
            cfg: QpConfig::default(),
            // Connected QPs learn theirs with the remote QPN (rxe's flow-label hash).
            src_port: match qp_type {
                QpType::Ud => ud_source_port(qpn),
                QpType::Rc | QpType::Uc | QpType::XrcIni | QpType::XrcTgt => 0xc000,
            },
            rq: VecDeque::new(),
            srq: None,
            xrcd: None,
            req: Requester::default(),
            resp: Responder::default(),
            timers: TimerTable::default(),
            peer_ids: PeerIpv4Ids::default(),
            scheduled: None,
            counted_inflight: 0,
            budget_listed: false,
            rp: None,
            np: NotificationPoint::default(),
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The UDP source port of the QP's packets (rxe's: for RC and UC a hash of both QPNs,
    /// known once the remote QPN is; for UD a hash of the QPN).
    pub fn source_port(&self) -> u16 {
        self.src_port
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Current attributes.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }

    /// Transport type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Capacities.
    pub fn caps(&self) -> &QpCaps {
        &self.caps
    }

    /// Send WQEs not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.req.wqes().len()
    }

    /// Receive WQEs posted to the QP and not yet consumed (0 on a QP that takes them from an
    /// SRQ).
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }

    /// The shared receive queue the QP takes its receive WQEs from, if any.
    pub fn srq(&self) -> Option<SrqHandle> {
        self.srq
    }

    /// The smoothed round trip of the QP's requests, once one has been timed.
    pub fn smoothed_rtt(&self) -> Option<core::time::Duration> {
        self.req.srtt()
    }

    /// The retransmit timeout in force: the local ACK timeout adapted to the round trip.
    pub fn retransmit_timeout_in_force(&self) -> Option<core::time::Duration> {
        self.retransmit_timeout()
    }

    /// Request packets sent and not yet acknowledged.
    pub fn packets_in_flight(&self) -> u32 {
        self.req.outstanding()
    }

    /// Whether the responder was seen to keep packets that follow a gap, so that a loss
    /// costs one resent packet rather than a go-back-N (`None`: no loss yet).
    pub fn peer_keeps_early_packets(&self) -> Option<bool> {
        self.req.peer_reorders()
    }

    /// Applies a validated transition.
    pub(crate) fn apply_modify(&mut self, ctx: &mut Ctx<'_>, to: QpState, attr: &QpAttr) {
        let from = self.state;
        self.cfg.apply(attr);
        if attr.dest_qp_num.is_some() {
            self.src_port = rxe_source_port(self.qpn, self.cfg.dest_qpn);
        }
        match to {
            QpState::Reset => {
                // Reset discards everything without completions (ibverbs semantics), and the
                // completions of the QP's former life that its CQs still hold: a program that
                // resets a QP after an error to use it again (rdma-core's tests do) must not
                // poll the flushes of the old one. mlx5's and mlx4's providers clean their CQs
                // so; rxe leaves them.
                for cq in [self.send_cq, self.recv_cq] {
                    if let Some(q) = ctx.cqs.get_mut(&cq) {
                        q.discard_qp(self.qpn);
                    }
                }
                *ctx.reorder_bytes -= self.resp.drop_early();
                self.rq.clear();
                self.req = Requester::default();
                self.resp = Responder::default();
                self.timers.clear();
                self.cfg = QpConfig::default();
                self.rp = None;
                self.np = NotificationPoint::default();
            }
            QpState::Err if from != QpState::Err => self.enter_error(ctx),
            _ => {}
        }
        if from == QpState::Init && to == QpState::Rtr {
            self.resp.reset(self.cfg.rq_psn);
        }
        if from == QpState::Rtr && to == QpState::Rts {
            self.req.reset(&self.cfg);
            if self.qp_type != QpType::Ud {
                let burst = ctx.config.cc.pace_burst_bytes;
                self.rp = ctx
                    .config
                    .cc
                    .algorithm
                    .as_ref()
                    .map(|a| ReactionPoint::new(a, burst));
            }
        }
        if attr.retry_cnt.is_some() || attr.rnr_retry.is_some() {
            self.req.reset_retry_counters(&self.cfg);
        }
        if to != QpState::Err {
            self.state = to;
        }
    }

    /// Moves the QP to the error state: every outstanding and later WR completes with
    /// WR_FLUSH_ERR (the WR that caused the error has already been completed by the caller).
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        self.state = QpState::Err;
        self.timers.clear();
        self.flush_send_queue(ctx);
        self.flush_recv_queue(ctx);
        self.resp.clear_output();
        *ctx.reorder_bytes -= self.resp.drop_early();
    }

    /// Completes every remaining send WQE, in order: one already known to have succeeded as a
    /// success (if signaled), one with a recorded error with that error, the rest with
    /// WR_FLUSH_ERR (error completions are generated signaled or not, as in ibverbs).
    pub(crate) fn flush_send_queue(&mut self, ctx: &mut Ctx<'_>) {
        for wqe in self.req.drain() {
            let status = wqe.status.unwrap_or(WcStatus::WrFlushErr);
            if status == WcStatus::Success && !wqe.wr.flags.contains(SendFlags::SIGNALED) {
                continue;
            }
            let wc = wqe.completion(self.qpn, status);
            ctx.complete(self.send_cq, wc);
        }
    }

    /// Completes every posted receive WQE with WR_FLUSH_ERR.
    pub(crate) fn flush_recv_queue(&mut self, ctx: &mut Ctx<'_>) {
        // A SEND in progress holds the oldest receive WQE: it completes first.
        if let Some(msg) = self.resp.take_send() {
            self.flush_recv(ctx, &msg.wr);
        }
        while let Some(wr) = self.rq.pop_front() {
            self.flush_recv(ctx, &wr);
        }
        if self.srq.is_some() {
            // The SRQ's WQEs belong to the SRQ and stay for its other QPs; this QP will take
            // no more of them (IBTA 11.6.2: "Last WQE Reached").
            ctx.events.push_back(AsyncEvent::QpLastWqeReached(self.qpn));
        }
    }

    /// Completes one receive WQE with WR_FLUSH_ERR (also for one posted to a QP in ERR).
    pub(crate) fn flush_recv(&self, ctx: &mut Ctx<'_>, wr: &RecvWr) {
        ctx.complete(
            self.recv_cq,
            WorkCompletion {
                wr_id: wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm_data: None,
                invalidated_rkey: None,
                qp_num: self.qpn,
                src_qp: self.cfg.dest_qpn,
                grh: false,
                timestamp: crate::time::Instant::ZERO,
            },
        );
    }

    /// Where this QP's packets go: the peer's IP at the RoCEv2 port.
    pub(crate) fn peer(&self, ctx: &Ctx<'_>) -> Option<SocketAddr> {
        self.cfg
            .av
            .map(|av| SocketAddr::new(av.dest_ip, ctx.config.remote_udp_port))
    }

    /// Builds one packet into `out`: headers from `bth` and `ext`, then `payload_len` bytes
    /// written by `fill` (given the region table) straight into the buffer, then pad and ICRC.
    /// `fill` writes every byte of the slice it is given and continues the CRC it is given
    /// (the ICRC's so far: pseudo-header and headers) over them, so that the payload is
    /// gathered and hashed in one pass (`MrTable::gather_crc`); it returns `None` if the
    /// payload could not be produced (memory became inaccessible), which abandons the packet.
    pub(crate) fn build_packet(
        &self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
        bth: Bth,
        ext: &ExtHeaders,
        payload_len: usize,
        fill: impl FnOnce(&MrTable, &mut [u8], u32) -> Option<u32>,
    ) -> Option<DatagramOut> {
        let dst = self.peer(ctx)?;
        self.build_packet_to(ctx, out, dst, bth, ext, payload_len, fill)
    }

    /// [`build_packet`](Self::build_packet) to an explicit destination (a UD datagram's).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build_packet_to(
        &self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
        dst: SocketAddr,
        bth: Bth,
        ext: &ExtHeaders,
        payload_len: usize,
        fill: impl FnOnce(&MrTable, &mut [u8], u32) -> Option<u32>,
    ) -> Option<DatagramOut> {
        let len = packet_len(bth.opcode, payload_len);
        let end = ctx.out_at + len;
        if out.len() < end {
            out.resize(end, 0);
        }
        // No zero-filling (a pass over every packet): whatever the buffer held there before
        // is overwritten, the headers by `emit_headers`, the payload by `fill`, the pad and
        // the ICRC below.
        let out = &mut out[ctx.out_at..end];
        let hlen = emit_headers(&bth, ext, payload_len, out);
        let icrc = IcrcContext {
            ipv4_id: ctx.ipv4_id,
            ..IcrcContext::new(ctx.config.local_ip, dst.ip(), self.src_port, dst.port())
        };
        let crc = icrc.begin(len, &out[..hlen]).ok()?;
        let crc = fill(ctx.mrs, &mut out[hlen..hlen + payload_len], crc)?;
        let pad = &mut out[hlen + payload_len..len - ICRC_LEN];
        pad.fill(0);
        let crc = crc32_update(crc, pad);
        out[len - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
        ctx.stats.tx_packets += 1;
        ctx.stats.tx_bytes += len as u64;
        Stats::count_opcode(&mut ctx.stats.tx_by_opcode, bth.opcode.0);
        Some(DatagramOut {
            dst,
            src_port: self.src_port,
            ecn: 0,
            len,
        })
    }

    /// The next packet this QP wants to send: responder output (ACKs, READ responses) first,
    /// since it unblocks the peer, then new or retransmitted requests.
    pub(crate) fn poll_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
    ) -> Option<DatagramOut> {
        if matches!(self.state, QpState::Reset | QpState::Init | QpState::Err) {
            return None;
        }
        if self.qp_type == QpType::Ud {
            return self.poll_datagram_transmit(ctx, out);
        }
        if let Some(t) = self.poll_cnp(ctx, out) {
            return Some(t);
        }
        // One request packet may go ahead of a lone queued ACK. In a ping-pong the ACK of the
        // message just received and the answer leave in one batch; answer first, the peer
        // can start on it while its kernel still delivers the ACK (on loopback the sender's
        // system call runs the receiver's whole path, one datagram after the other). Never
        // more than one: the ACK must not wait behind a stream of requests.
        if self.resp.ack_may_yield() {
            if let Some(t) = self.poll_paced_requester_transmit(ctx, out) {
                self.resp.set_ack_yielded(true);
                return Some(t);
            }
        }
        if let Some(t) = self.poll_responder_transmit(ctx, out) {
            self.resp.set_ack_yielded(false);
            return Some(t);
        }
        self.poll_paced_requester_transmit(ctx, out)
    }

    /// Whether the QP may have something to send.
    pub(crate) fn wants_transmit(&self) -> bool {
        !matches!(self.state, QpState::Reset | QpState::Init | QpState::Err)
            && (self.np.pending || self.resp.has_output() || self.req.has_output())
    }

    /// Earliest timer deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Peer address check: a connected QP accepts packets only from its peer's IP.
    pub(crate) fn accepts_source(&self, src: IpAddr) -> bool {
        match self.cfg.av {
            Some(av) => av.dest_ip == src || canonical(av.dest_ip) == canonical(src),
            None => false,
        }
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}
