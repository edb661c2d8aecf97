//! The engine: one software RNIC's transport state, driven from outside.
//!
//! # Contract (sans-IO)
//! The engine does no I/O, starts no threads and reads no clock. The caller:
//! - feeds every received UDP datagram to [`Engine::handle_datagram`];
//! - calls [`Engine::poll_transmit`] until it returns `None` after anything that may have
//!   produced output (a datagram, a post, a timeout), and sends what it returns;
//! - calls [`Engine::handle_timeout`] once [`Engine::poll_timeout`]'s instant has passed;
//! - drains completions with [`Engine::poll_cq`].
//!
//! `now` must never go backwards. Given the same sequence of calls with the same arguments,
//! the engine produces the same packets and completions: that is what lets the simulator
//! replay a failing run from its seed.

mod demux;
mod memory;
mod peers;
mod placed;
mod transmit;
mod xrc;

pub use crate::qp::validate::MAX_MESSAGE_BYTES;
pub use peers::MAX_UD_PEERS;

/// Most multicast groups an engine's QPs may be attached to (rxe's `max_mcast_grp`).
pub const MAX_MCAST_GROUPS: usize = 8192;
/// Most QPs attached to one multicast group (rxe's `max_mcast_qp_attach`).
pub const MAX_MCAST_QP_ATTACH: usize = 56;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;

use crate::budget::InflightBudget;
use crate::config::EngineConfig;
use crate::cq::{CqContext, CqHandle};
use crate::error::EngineError;
use crate::event::AsyncEvent;
use crate::mr::{MrTable, PdHandle};
use crate::qp::{Ctx, QpAttr, QpCaps, QpContext, QpState, QpType};
use crate::srq::{SharedReceiveQueue, SrqAttr, SrqHandle};
use crate::stats::Stats;
use crate::time::Instant;
use crate::wr::{RecvWr, SendWr, WcStatus, WorkCompletion};

/// What every QP's stages share: configuration, memory, completion and shared receive
/// queues, asynchronous events, counters.
struct Shared {
    config: EngineConfig,
    mrs: MrTable,
    cqs: BTreeMap<CqHandle, CqContext>,
    srqs: BTreeMap<SrqHandle, SharedReceiveQueue>,
    events: VecDeque<AsyncEvent>,
    overflowed: Vec<u32>,
    reorder_bytes: usize,
    budget: InflightBudget,
    stats: Stats,
    /// The latest time any call gave the engine: what completions made by calls that take
    /// no time (`modify_qp`'s flushes) are stamped with.
    latest: Instant,
}

impl Shared {
    /// The context a QP stage runs in; borrows only these fields, so a QP borrowed from the
    /// engine's table can run next to it.
    fn ctx(&mut self, now: Instant, ipv4_id: u16) -> Ctx<'_> {
        self.latest = self.latest.max(now);
        Ctx {
            now,
            stamp: self.latest,
            config: &self.config,
            mrs: &mut self.mrs,
            cqs: &mut self.cqs,
            srqs: &mut self.srqs,
            events: &mut self.events,
            overflowed: &mut self.overflowed,
            reorder_bytes: &mut self.reorder_bytes,
            stats: &mut self.stats,
            ipv4_id,
            others_inflight: 0,
            budget: &mut self.budget,
            turn_used: None,
            message_tail: 0,
            out_at: 0,
            placed: None,
        }
    }
}

/// The transport engine of one software RNIC.
pub struct Engine {
    shared: Shared,
    pds: BTreeSet<u32>,
    next_pd: u32,
    /// Open XRC domains (see [`xrc`]).
    xrcds: BTreeSet<u32>,
    next_xrcd: u32,
    next_cq: u32,
    next_srq: u32,
    /// Boxed: a lookup among a thousand QPs then walks small nodes of keys and pointers,
    /// not nodes holding eleven whole QPs each (most of a many-QP run's transmit scheduling
    /// went to cache misses in those).
    qps: BTreeMap<u32, Box<QpContext>>,
    next_qpn: u32,
    /// QPs that may have output, in the order they became ready.
    ready: VecDeque<u32>,
    /// Datagram bytes the QP at the front of `ready` has sent in its current turn.
    turn_bytes: usize,
    /// Packets the QP at the front of `ready` has sent in its current turn.
    turn_packets: u32,
    /// Packets of the latest turn that ran to its end: what a QP woken for the budget is
    /// likely to send (see `Engine::wake_starved`).
    full_turn_packets: u32,
    /// Every QP's earliest timer, ordered: `poll_timeout` is the first entry, not a scan of
    /// all QPs (it is asked after every post and every batch of packets).
    timers: BTreeSet<(Instant, u32)>,
    /// Multicast groups (their IP address, from the group's GID) and the UD QPs attached.
    mcast: BTreeMap<IpAddr, Vec<u32>>,
    /// What the senders of UD datagrams use as IPv4 identification.
    ud_peers: peers::UdPeers,
    /// Request packets in flight over all QPs (the sum of their `counted_inflight`).
    inflight: u32,
    /// QPs that held a packet back for the device budget, to wake when it frees up (each at
    /// most once: `QpContext::budget_listed`).
    starved: VecDeque<u32>,
    /// The QP the latest request or READ response was for, and whether it was a request:
    /// whose message the next datagram most likely continues (see
    /// [`Engine::plan_placement`]).
    last_rx: (u32, bool),
}

impl Engine {
    /// A new engine with no objects.
    pub fn new(config: EngineConfig) -> Engine {
        Engine {
            shared: Shared {
                config,
                mrs: MrTable::with_key_seed(config.key_seed),
                cqs: BTreeMap::new(),
                srqs: BTreeMap::new(),
                events: VecDeque::new(),
                overflowed: Vec::new(),
                reorder_bytes: 0,
                budget: InflightBudget::new(config.device_inflight_packets),
                stats: Stats::default(),
                latest: Instant::ZERO,
            },
            pds: BTreeSet::new(),
            next_pd: 1,
            xrcds: BTreeSet::new(),
            next_xrcd: 1,
            next_cq: 1,
            next_srq: 1,
            qps: BTreeMap::new(),
            next_qpn: config.first_qpn,
            ready: VecDeque::new(),
            turn_bytes: 0,
            turn_packets: 0,
            full_turn_packets: transmit::WAKE_PER_PACKETS,
            timers: BTreeSet::new(),
            mcast: BTreeMap::new(),
            ud_peers: peers::UdPeers::default(),
            inflight: 0,
            starved: VecDeque::new(),
            last_rx: (0, true),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// Request packets all QPs have in flight, and how many the device budget allows now
    /// (it adapts to the round trip: see [`EngineConfig::device_inflight_packets`]).
    pub fn packets_in_flight(&self) -> (u32, u32) {
        (self.inflight, self.shared.budget.limit())
    }

    /// The memory region table.
    pub fn mrs(&self) -> &MrTable {
        &self.shared.mrs
    }

    // --- objects -------------------------------------------------------------------------

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> PdHandle {
        let pd = self.next_pd;
        self.next_pd += 1;
        self.pds.insert(pd);
        PdHandle(pd)
    }

    /// Frees a protection domain that no MR or QP uses.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), EngineError> {
        if !self.pds.contains(&pd.0) {
            return Err(EngineError::NoSuchPd);
        }
        if self.shared.mrs.pd_in_use(pd)
            || self.qps.values().any(|q| q.pd == pd)
            || self.shared.srqs.values().any(|s| s.pd == pd)
        {
            return Err(EngineError::Busy);
        }
        self.pds.remove(&pd.0);
        Ok(())
    }

    /// Creates a completion queue of `capacity` entries.
    pub fn create_cq(&mut self, capacity: usize) -> CqHandle {
        let cq = CqHandle(self.next_cq);
        self.next_cq += 1;
        self.shared.cqs.insert(cq, CqContext::new(capacity));
        cq
    }

    /// Changes how many completions `cq` holds (ibverbs `ibv_resize_cq`); refused while more
    /// wait in it than the new size, as rxe refuses.
    pub fn resize_cq(&mut self, cq: CqHandle, capacity: usize) -> Result<(), EngineError> {
        let q = self.shared.cqs.get_mut(&cq).ok_or(EngineError::NoSuchCq)?;
        if !q.resize(capacity) {
            return Err(EngineError::InvalidArgument(
                "more completions wait in the CQ than the new size holds",
            ));
        }
        Ok(())
    }

    /// Destroys a completion queue no QP uses.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), EngineError> {
        if !self.shared.cqs.contains_key(&cq) {
            return Err(EngineError::NoSuchCq);
        }
        if self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
            || self
                .shared
                .srqs
                .values()
                .any(|s| s.xrc.is_some_and(|x| x.cq == cq))
        {
            return Err(EngineError::Busy);
        }
        self.shared.cqs.remove(&cq);
        Ok(())
    }

    /// Moves up to `max` completions of `cq` to `out`.
    pub fn poll_cq(
        &mut self,
        cq: CqHandle,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, EngineError> {
        Ok(self
            .shared
            .cqs
            .get_mut(&cq)
            .ok_or(EngineError::NoSuchCq)?
            .poll(max, out))
    }

    /// A completion queue, to inspect.
    pub fn cq(&self, cq: CqHandle) -> Option<&CqContext> {
        self.shared.cqs.get(&cq)
    }

    /// Creates a QP in the RESET state; returns its number.
    pub fn create_qp(
        &mut self,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        qp_type: QpType,
        caps: QpCaps,
    ) -> Result<u32, EngineError> {
        self.create_qp_with_srq(pd, send_cq, recv_cq, qp_type, caps, None)
    }

    /// Creates a QP in the RESET state that takes its receive WQEs from `srq` (of the same
    /// PD) when given; returns its number. Its own receive queue then stays empty
    /// (`caps.max_recv_wr` is ignored) and `post_recv` to it is refused.
    pub fn create_qp_with_srq(
        &mut self,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        qp_type: QpType,
        caps: QpCaps,
        srq: Option<SrqHandle>,
    ) -> Result<u32, EngineError> {
        if !self.pds.contains(&pd.0) {
            return Err(EngineError::NoSuchPd);
        }
        if let Some(s) = srq {
            let srq = self.shared.srqs.get(&s).ok_or(EngineError::NoSuchSrq)?;
            if srq.pd != pd {
                return Err(EngineError::InvalidArgument(
                    "the SRQ belongs to another protection domain",
                ));
            }
            if srq.xrc.is_some() {
                return Err(EngineError::InvalidArgument(
                    "an XRC SRQ is reached through XRC target QPs, not attached to a QP",
                ));
            }
        }
        if !self.shared.cqs.contains_key(&send_cq) || !self.shared.cqs.contains_key(&recv_cq) {
            return Err(EngineError::NoSuchCq);
        }
        if qp_type == QpType::XrcTgt {
            return Err(EngineError::InvalidArgument(
                "an XRC target QP belongs to an XRC domain: create_xrc_tgt_qp",
            ));
        }
        let qpn = self.alloc_qpn()?;
        let mut qp = QpContext::new(qpn, qp_type, pd, send_cq, recv_cq, caps);
        qp.srq = srq;
        Ok(self.insert_qp(qp))
    }

    /// The next free QP number of the engine's range.
    fn alloc_qpn(&mut self) -> Result<u32, EngineError> {
        let (first, last) = (self.shared.config.first_qpn, self.shared.config.last_qpn);
        let after = |q: u32| if q >= last { first } else { q + 1 };
        let mut qpn = self.next_qpn;
        let mut tried = 0u32;
        while self.qps.contains_key(&qpn) || qpn < 2 || qpn > last {
            qpn = after(qpn);
            tried += 1;
            if tried > last.saturating_sub(first) + 1 {
                return Err(EngineError::InvalidArgument("every QP number is in use"));
            }
        }
        self.next_qpn = after(qpn);
        Ok(qpn)
    }

    /// Files a new QP under its number.
    fn insert_qp(&mut self, mut qp: QpContext) -> u32 {
        if self.shared.config.peers_use_small_ipv4_ids {
            qp.peer_ids = crate::qp::PeerIpv4Ids::small_only();
        }
        let qpn = qp.qpn;
        self.qps.insert(qpn, Box::new(qp));
        qpn
    }

    /// Creates the device's general services QP, QP 1 (IBTA 13.5.1, what Linux's MAD layer
    /// opens on every port): a UD QP whose Q_Key is the GSI Q_Key, through which connection
    /// management MADs travel. One per engine; move it to RTS like any UD QP.
    pub fn create_gsi_qp(
        &mut self,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        caps: QpCaps,
    ) -> Result<u32, EngineError> {
        const GSI_QPN: u32 = 1;
        if self.qps.contains_key(&GSI_QPN) {
            return Err(EngineError::Busy);
        }
        if !self.pds.contains(&pd.0) {
            return Err(EngineError::NoSuchPd);
        }
        if !self.shared.cqs.contains_key(&send_cq) || !self.shared.cqs.contains_key(&recv_cq) {
            return Err(EngineError::NoSuchCq);
        }
        let qp = QpContext::new(GSI_QPN, QpType::Ud, pd, send_cq, recv_cq, caps);
        self.qps.insert(GSI_QPN, Box::new(qp));
        Ok(GSI_QPN)
    }

    /// Changes QP state and attributes (ibverbs `ibv_modify_qp`). Refused changes change
    /// nothing.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp)?;
        let to = crate::qp::transition::validate(qp.qp_type, qp.state, attr)?;
        let mut ctx = self.shared.ctx(Instant::ZERO, 0);
        qp.apply_modify(&mut ctx, to, attr);
        self.ready.push_back(qpn);
        self.sync_timer(qpn);
        self.settle_overflows();
        Ok(())
    }

    /// A QP, to inspect.
    pub fn qp(&self, qpn: u32) -> Option<&QpContext> {
        self.qps.get(&qpn).map(|qp| &**qp)
    }

    /// Numbers of all QPs.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.keys().copied()
    }

    /// Destroys a QP. Outstanding WRs are discarded without completions (ibverbs semantics:
    /// move the QP to ERR and drain the CQ first if they matter). A QP still attached to a
    /// multicast group is refused (`Busy`), as on rxe: detach it first.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), EngineError> {
        if !self.qps.contains_key(&qpn) {
            return Err(EngineError::NoSuchQp);
        }
        if self.mcast.values().any(|qps| qps.contains(&qpn)) {
            return Err(EngineError::Busy);
        }
        let mut qp = self.qps.remove(&qpn).ok_or(EngineError::NoSuchQp)?;
        self.shared.mrs.unbind_qp_windows(qpn);
        self.shared.reorder_bytes -= qp.resp.drop_early();
        self.inflight -= qp.counted_inflight;
        self.wake_starved(qp.counted_inflight);
        if let Some(at) = qp.scheduled {
            self.timers.remove(&(at, qpn));
        }
        Ok(())
    }

    /// Creates a shared receive queue in `pd` (ibverbs `ibv_create_srq`). A non-zero
    /// `attr.srq_limit` is armed at once.
    pub fn create_srq(&mut self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle, EngineError> {
        self.check_srq(pd, &attr)?;
        self.insert_srq(SharedReceiveQueue::new(pd, attr, None))
    }

    /// What every new SRQ needs: an existing PD and room for a WQE.
    fn check_srq(&self, pd: PdHandle, attr: &SrqAttr) -> Result<(), EngineError> {
        if !self.pds.contains(&pd.0) {
            return Err(EngineError::NoSuchPd);
        }
        if attr.max_wr == 0 || attr.max_sge == 0 {
            return Err(EngineError::InvalidArgument(
                "an SRQ holds at least one WQE of one SGE",
            ));
        }
        if attr.srq_limit > attr.max_wr {
            return Err(EngineError::InvalidArgument("srq_limit above max_wr"));
        }
        Ok(())
    }

    /// Files a new SRQ under the next number (24 bits: XRC packets carry it).
    fn insert_srq(&mut self, srq: SharedReceiveQueue) -> Result<SrqHandle, EngineError> {
        if self.next_srq > softrdma_wire::QPN_MASK {
            return Err(EngineError::InvalidArgument("every SRQ number is in use"));
        }
        let h = SrqHandle(self.next_srq);
        self.next_srq += 1;
        self.shared.srqs.insert(h, srq);
        Ok(h)
    }

    /// Resizes an SRQ (`max_wr`, never below the WQEs it holds) and/or arms its limit
    /// (ibverbs `ibv_modify_srq` with `IBV_SRQ_MAX_WR` / `IBV_SRQ_LIMIT`).
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        max_wr: Option<u32>,
        srq_limit: Option<u32>,
    ) -> Result<(), EngineError> {
        let s = self
            .shared
            .srqs
            .get_mut(&srq)
            .ok_or(EngineError::NoSuchSrq)?;
        let new_max = max_wr.unwrap_or(s.attr.max_wr);
        if (new_max as usize) < s.wrs.len() || new_max == 0 {
            return Err(EngineError::InvalidArgument(
                "max_wr below the WQEs the SRQ holds",
            ));
        }
        if srq_limit.is_some_and(|l| l > new_max) {
            return Err(EngineError::InvalidArgument("srq_limit above max_wr"));
        }
        s.attr.max_wr = new_max;
        if let Some(l) = srq_limit {
            s.attr.srq_limit = l;
        }
        Ok(())
    }

    /// An SRQ, to inspect (ibverbs `ibv_query_srq`).
    pub fn srq(&self, srq: SrqHandle) -> Option<&SharedReceiveQueue> {
        self.shared.srqs.get(&srq)
    }

    /// Destroys an SRQ no QP uses (`Busy` otherwise, as ibverbs refuses with `EBUSY`). Its
    /// WQEs are discarded without completions.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), EngineError> {
        if !self.shared.srqs.contains_key(&srq) {
            return Err(EngineError::NoSuchSrq);
        }
        // (An XRC target's `srq` is only the SRQ its last message went to.)
        if self
            .qps
            .values()
            .any(|q| q.srq == Some(srq) && q.qp_type != QpType::XrcTgt)
        {
            return Err(EngineError::Busy);
        }
        self.shared.srqs.remove(&srq);
        // XRC target QPs that delivered into it last forget it (and its PD and CQ).
        for qp in self.qps.values_mut() {
            qp.forget_xrc_srq(srq);
        }
        Ok(())
    }

    /// Posts a receive WR to an SRQ (ibverbs `ibv_post_srq_recv` for one WR).
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), EngineError> {
        let s = self
            .shared
            .srqs
            .get_mut(&srq)
            .ok_or(EngineError::NoSuchSrq)?;
        if s.wrs.len() >= s.attr.max_wr as usize {
            return Err(EngineError::QueueFull);
        }
        if wr.sg_list.len() > s.attr.max_sge as usize {
            return Err(EngineError::InvalidArgument(
                "too many scatter/gather elements",
            ));
        }
        s.wrs.push_back(wr);
        Ok(())
    }

    /// The oldest asynchronous event not yet taken (ibverbs `ibv_get_async_event`).
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.shared.events.pop_front()
    }

    /// Reports an event that concerns the port rather than an object (the verbs layer raises
    /// `PortActive` when a device opens).
    pub fn raise_port_event(&mut self, event: AsyncEvent) {
        self.shared.events.push_back(event);
    }

    /// Moves every QP whose completion overflowed its CQ to the error state (IBTA, rxe).
    pub(crate) fn settle_overflows(&mut self) {
        while let Some(qpn) = self.shared.overflowed.pop() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if qp.state == QpState::Err {
                continue;
            }
            let mut ctx = self.shared.ctx(Instant::ZERO, 0);
            qp.enter_error(&mut ctx);
            self.sync_timer(qpn);
        }
    }

    /// Attaches UD QP `qpn` to the multicast group whose address is `group` (ibverbs
    /// `ibv_attach_mcast`, the GID mapped to an IP address): datagrams sent to the group's
    /// address with destination QPN [`MULTICAST_QPN`](crate::wr::MULTICAST_QPN) reach it.
    /// Attaching twice is not an error.
    pub fn attach_mcast(&mut self, qpn: u32, group: IpAddr) -> Result<(), EngineError> {
        let qp = self.qps.get(&qpn).ok_or(EngineError::NoSuchQp)?;
        if qp.qp_type != QpType::Ud {
            return Err(EngineError::InvalidArgument(
                "only UD QPs join multicast groups",
            ));
        }
        if !group.is_multicast() {
            return Err(EngineError::InvalidArgument(
                "not a multicast group address",
            ));
        }
        if !self.mcast.contains_key(&group) && self.mcast.len() >= MAX_MCAST_GROUPS {
            return Err(EngineError::Exhausted("multicast groups"));
        }
        let members = self.mcast.entry(group).or_default();
        if !members.contains(&qpn) {
            if members.len() >= MAX_MCAST_QP_ATTACH {
                return Err(EngineError::Exhausted(
                    "QPs attached to the multicast group",
                ));
            }
            members.push(qpn);
        }
        Ok(())
    }

    /// Detaches `qpn` from `group` (ibverbs `ibv_detach_mcast`); `InvalidArgument` if it was
    /// not attached.
    pub fn detach_mcast(&mut self, qpn: u32, group: IpAddr) -> Result<(), EngineError> {
        if !self.qps.contains_key(&qpn) {
            return Err(EngineError::NoSuchQp);
        }
        let members = self
            .mcast
            .get_mut(&group)
            .filter(|m| m.contains(&qpn))
            .ok_or(EngineError::InvalidArgument("QP not attached to the group"))?;
        members.retain(|&q| q != qpn);
        if members.is_empty() {
            self.mcast.remove(&group);
        }
        Ok(())
    }

    /// The multicast groups some QP is attached to: the I/O layer joins exactly these.
    pub fn mcast_groups(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.mcast.keys().copied()
    }

    // --- work requests -------------------------------------------------------------------

    /// Posts a send WR (ibverbs `ibv_post_send` for one WR). Structural problems are an `Err`
    /// and nothing is queued; protection problems found later complete the WR with an error
    /// status, as on hardware.
    pub fn post_send(&mut self, now: Instant, qpn: u32, wr: SendWr) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp)?;
        send_check(&self.shared.config, qp, &wr, 0)?;
        let mut ctx = self.shared.ctx(now, 0);
        if qp.state == QpState::Err {
            // IBTA: WRs posted to a QP in the error state complete with flush errors.
            let wc = crate::qp::requester::state::SendWqe::new(wr, qp.cfg.path_mtu)
                .completion(qpn, WcStatus::WrFlushErr);
            ctx.complete(qp.send_cq, wc);
            self.settle_overflows();
            return Ok(());
        }
        let mtu = match qp.qp_type {
            QpType::Ud => self.shared.config.port_mtu,
            _ => qp.cfg.path_mtu,
        };
        qp.req.push(wr, mtu);
        self.ready.push_back(qpn);
        Ok(())
    }

    /// Whether [`post_send`](Self::post_send) would take `wr` on `qpn` behind `ahead` more WRs
    /// of the same batch, posting nothing: a batch that must be posted whole or not at all
    /// (`ibv_wr_complete`) is checked first.
    pub fn check_send(&self, qpn: u32, wr: &SendWr, ahead: usize) -> Result<(), EngineError> {
        let qp = self.qps.get(&qpn).ok_or(EngineError::NoSuchQp)?;
        send_check(&self.shared.config, qp, wr, ahead)
    }

    /// Posts a receive WR (ibverbs `ibv_post_recv` for one WR).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp)?;
        if qp.srq.is_some() {
            return Err(EngineError::InvalidArgument(
                "the QP takes its receives from an SRQ: post to the SRQ",
            ));
        }
        if matches!(qp.qp_type, QpType::XrcIni | QpType::XrcTgt) {
            return Err(EngineError::InvalidArgument(
                "an XRC QP has no receive queue: receives go to XRC SRQs",
            ));
        }
        if qp.state == QpState::Reset {
            return Err(EngineError::InvalidState(QpState::Reset));
        }
        if qp.rq.len() >= qp.caps.max_recv_wr as usize {
            return Err(EngineError::QueueFull);
        }
        if wr.sg_list.len() > qp.caps.max_recv_sge as usize {
            return Err(EngineError::InvalidArgument(
                "too many scatter/gather elements",
            ));
        }
        if qp.state == QpState::Err {
            let mut ctx = self.shared.ctx(Instant::ZERO, 0);
            qp.flush_recv(&mut ctx, &wr);
            self.settle_overflows();
            return Ok(());
        }
        qp.rq.push_back(wr);
        // A waiting RNR'd sender will retry on its own; nothing to transmit here.
        Ok(())
    }
}

/// The checks a send WR passes before it is queued on `qp` behind `ahead` others: the QP's
/// state, room in its send queue, and the WR itself.
fn send_check(
    config: &EngineConfig,
    qp: &QpContext,
    wr: &SendWr,
    ahead: usize,
) -> Result<(), EngineError> {
    match qp.state {
        QpState::Rts | QpState::Sqd | QpState::Err => {}
        s => return Err(EngineError::InvalidState(s)),
    }
    if qp.req.wqes().len() + ahead >= qp.caps.max_send_wr as usize {
        return Err(EngineError::QueueFull);
    }
    qp.validate_send(config, wr)
}
