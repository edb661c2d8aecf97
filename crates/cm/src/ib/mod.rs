//! The InfiniBand communication manager (IBTA Vol. 1 ch. 12) as Linux's `ib_cm`
//! (`drivers/infiniband/core/cm.c`) runs it on a RoCE port, as a sans-IO state machine: MADs
//! and the time go in; MADs to send, events and the next deadline come out. No sockets, no
//! clock, no threads; the same calls in the same order give the same bytes out (the
//! communication IDs and PSNs come from [`CmConfig::rng_seed`]).
//!
//! One [`IbCm`] serves one port (one GID). Connections are [`IbCmId`]s, listeners
//! [`ListenId`]s. The files follow the protocol's phases: `active.rs` (`connect`: REQ → REP →
//! RTU), `passive.rs` (`listen`, REQ, `accept` → REP, RTU), `reject.rs` (REJ and MRA both
//! ways, `destroy`), `disconnect.rs` (DREQ/DREP, time-wait), `sidr.rs` (SIDR_REQ/SIDR_REP),
//! `qp.rs` (the QP attributes the handshake negotiated), `timers.rs` (retransmission and IBTA
//! time codes), with the connection record in `conn.rs`.
//!
//! # How a driver runs it
//!
//! The driver owns the GSI QP (UD QP 1, Q_Key 0x80010000, P_Key 0xffff) and the clock:
//!
//! 1. **Receive.** For every UD datagram that arrives on QP 1 whose payload is a MAD of the CM
//!    class (0x07), call [`IbCm::handle_mad`] with the current time, the sender's GID (its IP
//!    address: IPv4-mapped for IPv4), the DETH source QP (1) and the payload. Anything may be
//!    passed: non-MADs and other classes are counted in [`IbCm::stats`] and dropped. (Other
//!    classes are the GSI layer's: Linux answers an unhandled Get/Set with
//!    [`softrdma_wire::mad::unmatched_response`] and drops the rest.)
//! 2. **Transmit.** After every call into the CM, drain [`IbCm::poll_transmit`] and send each
//!    [`OutMad`] as a UD SEND_ONLY to `dst_qpn` at `dst` with the GSI Q_Key. Retransmissions
//!    come out of here too; the driver never resends on its own.
//! 3. **Time.** Wake up at [`IbCm::poll_timeout`] and call [`IbCm::handle_timeout`]; then drain
//!    again. `now` must not go backwards.
//! 4. **Events.** Drain [`IbCm::poll_event`] after every call and act on each [`IbCmEvent`]:
//!    - `ReqReceived` (passive): create a QP, move it RESET→INIT→RTR→RTS with
//!      [`IbCm::qp_attr`] (`Init`, `Rtr`, `Rts` in turn; the RTR attributes need the
//!      connection to have received the REQ, which it has), then [`IbCm::accept`] — or
//!      [`IbCm::reject`]. If that takes a while, [`IbCm::send_mra`] first.
//!    - `RepReceived` (active): move the QP (already INIT) to RTR and RTS with
//!      [`IbCm::qp_attr`], then [`IbCm::send_rtu`]. Only then may it send.
//!    - `Established` (passive): the RTU arrived; the QP may send. If the QP receives a
//!      packet before the RTU (the RTU was lost), call [`IbCm::established`]: Linux's
//!      `ib_cm_notify(IB_EVENT_COMM_EST)`.
//!    - `RejReceived`, `ReqError`, `RepError`: the connection failed; move the QP to ERR.
//!    - `DreqReceived`: move the QP to ERR (flushing), then [`IbCm::send_drep`].
//!    - `DrepReceived`, `DreqError`: the disconnect is done; the connection waits in
//!      time-wait; `TimewaitExit` says the QP number may be reused.
//!    - `SidrReqReceived` / `SidrRepReceived` / `SidrReqError`: UD service resolution.
//! 5. **Teardown.** [`IbCm::disconnect`] sends a DREQ; [`IbCm::destroy`] forgets a
//!    connection, first sending whatever Linux's `ib_destroy_cm_id` sends in its state (a
//!    REJ, a DREQ, a DREP). [`IbCm::farewell`] is that MAD ahead of time, and
//!    [`IbCm::farewell_changes`] says whose changed: a driver keeps them where someone finds
//!    them if its process dies (Linux destroys a dead process's ids itself).
//!
//! The rdma_cm layer ([`crate::rdma`]) is such a driver for the addressing part and is what
//! the verbs layer is meant to run; it passes MADs and time straight through.
//!
//! # Linux behaviour kept
//!
//! - TIDs: our agent number (`CmConfig::tid_agent`) above our comm ID in x86 byte order, as
//!   `cm_form_tid` produces on a little-endian host; REP, RTU, MRA, REJ and DREP echo the
//!   TID of the exchange.
//! - Retransmission: REQ, REP, DREQ and SIDR_REQ are resent unchanged every `timeout` until
//!   answered, `max_cm_retries` times; the REQ's timeout is 2 × packet life time + the remote
//!   CM response timeout, the REP's and the passive DREQ's the active side's local CM response
//!   timeout. An MRA stretches the wait to its service timeout plus the ACK timeout.
//! - Duplicates: a duplicate REQ is dropped (REQ_RCVD) or answered with the MRA (MRA_REQ_SENT);
//!   a duplicate REP gets the RTU again (ESTABLISHED) or the MRA (MRA_REP_SENT); a DREQ for a
//!   connection in time-wait or already forgotten gets a DREP; a duplicate RTU or DREQ is
//!   counted and dropped.
//! - Rejections: no listener → REJ 8 (invalid service ID); a REQ from a QP that already has a
//!   connection here → REJ 10 (stale connection) and a DREQ for the old one; the consumer's
//!   refusal → 28 with its private data; the active side giving up → 4 (timeout) with its
//!   CA GUID as ARI.
//! - Time-wait lasts the QP's ACK timeout (2048 ms for rxe's code 19).
//! - LAP and APR are dropped, as Linux does on RoCE ports.

use std::collections::{BTreeMap, HashMap, VecDeque};

use softrdma_proto::{Duration, Instant};
use softrdma_wire::mad::cm::{CmMad, CmMessage};
use softrdma_wire::mad::{Mad, MadError, Method, MgmtClass};
use softrdma_wire::Gid;

mod active;
mod conn;
mod disconnect;
mod event;
mod id;
mod params;
mod passive;
mod qp;
mod reject;
mod sidr;
mod state;
mod stats;
mod timers;

pub use conn::ConnInfo;
pub use event::{IbCmEvent, OutMad, RepReceived, ReqReceived, SidrRepReceived, SidrReqReceived};
pub use id::{IbCmId, ListenId};
pub use params::{
    PathRecord, RepParams, ReqParams, SidrRepParams, SidrReqParams, CMA_CM_RESPONSE_TIMEOUT,
    CMA_MAX_CM_RETRIES, CMA_MRA_SERVICE_TIMEOUT, ROCE_PACKET_LIFE_TIME,
};
pub use state::CmState;
pub use stats::{AttrCounters, CmDrop, CmStats};
pub use timers::{ack_timeout, iba_time};

use crate::rng::Rng;
use conn::Conn;
use timers::{Deadlines, Pending};

/// Why an operation was refused; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such connection (never existed, or destroyed).
    #[error("no such CM id")]
    NoSuchId,
    /// The operation is not allowed in the connection's state (Linux: -EINVAL).
    #[error("not allowed in state {0}")]
    InvalidState(CmState),
    /// Private data longer than the message carries.
    #[error("private data of {len} bytes exceeds the {max} the message carries")]
    PrivateDataTooLong {
        /// What was passed.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Another listener covers that service ID (Linux: -EBUSY).
    #[error("service ID already listened on")]
    ServiceIdInUse,
    /// [`CmConfig::max_connections`] connections exist.
    #[error("too many CM ids")]
    TooManyConnections,
    /// A parameter is out of range.
    #[error("invalid parameter: {0}")]
    InvalidParameter(&'static str),
}

/// Static configuration of one port's CM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// This CA's node GUID (rxe: the EUI-64 of the netdev's MAC).
    pub ca_guid: u64,
    /// This CA's ACK delay code (rxe: 15); goes into REPs and ACK timeouts.
    pub ca_ack_delay: u8,
    /// High 32 bits of our TIDs (Linux: the MAD agent's number).
    pub tid_agent: u32,
    /// Seed of the generator for communication IDs and starting PSNs.
    pub rng_seed: u64,
    /// Most connections (including those in time-wait) at once; REQs beyond it are dropped
    /// unanswered, as Linux drops them when it cannot allocate.
    pub max_connections: usize,
    /// The top byte of every local communication ID (and SIDR request ID), if set: a device
    /// that shares its address with other processes has the kernel steer the CM's replies by
    /// it (see `softrdma`'s shared addresses). `None`: all 32 bits are random.
    pub comm_id_prefix: Option<u8>,
}

impl Default for CmConfig {
    fn default() -> CmConfig {
        CmConfig {
            ca_guid: 0,
            ca_ack_delay: 15,
            tid_agent: 1,
            rng_seed: 0x5eed,
            max_connections: 4096,
            comm_id_prefix: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Listener {
    service_id: u64,
    service_mask: u64,
}

/// One port's communication manager. See the [module docs](self) for the driving contract.
#[derive(Debug)]
pub struct IbCm {
    config: CmConfig,
    rng: Rng,
    next_handle: u64,
    conns: BTreeMap<IbCmId, Conn>,
    by_comm_id: HashMap<u32, IbCmId>,
    remote_ids: HashMap<(u32, u64), IbCmId>,
    remote_qpns: HashMap<(u32, u64), IbCmId>,
    remote_sidr: HashMap<(u32, Gid), IbCmId>,
    listeners: BTreeMap<ListenId, Listener>,
    deadlines: Deadlines,
    outbox: VecDeque<OutMad>,
    events: VecDeque<IbCmEvent>,
    stats: CmStats,
    /// What [`IbCm::farewell_changes`] last reported each connection's farewell from.
    farewell_keys: HashMap<IbCmId, (CmState, u32, u64)>,
}

impl IbCm {
    /// A CM with no connections and no listeners.
    pub fn new(config: CmConfig) -> IbCm {
        IbCm {
            rng: Rng::new(config.rng_seed),
            config,
            next_handle: 1,
            conns: BTreeMap::new(),
            by_comm_id: HashMap::new(),
            remote_ids: HashMap::new(),
            remote_qpns: HashMap::new(),
            remote_sidr: HashMap::new(),
            listeners: BTreeMap::new(),
            deadlines: Deadlines::default(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            stats: CmStats::default(),
            farewell_keys: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> &CmStats {
        &self.stats
    }

    /// A connection's state and negotiated parameters.
    pub fn info(&self, id: IbCmId) -> Option<ConnInfo> {
        self.conns.get(&id).map(ConnInfo::from)
    }

    /// Connections that exist (in any state), in creation order.
    pub fn ids(&self) -> impl Iterator<Item = IbCmId> + '_ {
        self.conns.keys().copied()
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        self.outbox.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<IbCmEvent> {
        self.events.pop_front()
    }

    /// When [`IbCm::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.next()
    }

    /// Retransmits what is due, gives up on what has run out of retries, and ends time-waits.
    pub fn handle_timeout(&mut self, now: Instant) {
        for id in self.deadlines.due(now) {
            self.expire(now, id);
        }
    }

    /// The Service ID of `mad` if it is a connection request (REQ, SIDR_REQ) that no listener
    /// here takes and no connection here knows: what [`IbCm::handle_mad`] would reject as an
    /// invalid service. On an address that several devices share, it may be a request for
    /// another device's listener that a steering table gone wrong sent here; a caller that
    /// knows the address's listeners drops it then ([`IbCm::misdirected`]) instead of handing
    /// it on, so that the requester's retransmission reaches the listener.
    pub fn unlistened_request(&self, mad: &[u8]) -> Option<u64> {
        let parsed = Mad::parse(mad).ok()?;
        let h = parsed.header;
        if h.mgmt_class != MgmtClass::CM || h.method != Method::SEND {
            return None;
        }
        let service_id = match CmMessage::parse(h.attr_id, parsed.data).ok()? {
            CmMessage::Req(req) => {
                let known = self
                    .remote_ids
                    .contains_key(&(req.local_comm_id, req.local_ca_guid));
                (!known).then_some(req.service_id)?
            }
            CmMessage::SidrReq(req) => req.service_id,
            _ => return None,
        };
        self.find_listener(service_id)
            .is_none()
            .then_some(service_id)
    }

    /// Counts a MAD the caller dropped as misdirected (see [`IbCm::unlistened_request`]).
    pub fn misdirected(&mut self) {
        self.stats.drop(CmDrop::Misdirected);
    }

    /// Processes one received MAD (the whole UD payload). See the module docs.
    pub fn handle_mad(&mut self, now: Instant, src: Gid, src_qpn: u32, mad: &[u8]) {
        let parsed = match Mad::parse(mad) {
            Ok(m) => m,
            Err(_) => return self.stats.drop(CmDrop::Malformed),
        };
        let h = parsed.header;
        if h.mgmt_class != MgmtClass::CM {
            return self.stats.drop(CmDrop::NotCm);
        }
        if h.class_version != softrdma_wire::mad::cm::CLASS_VERSION {
            return self.stats.drop(CmDrop::ClassVersion);
        }
        if h.method != Method::SEND {
            // Linux registers the CM agent for Send only; the MAD layer answers a Get or Set
            // nobody takes with "unsupported method/attribute" and drops the rest.
            if let Some(resp) = softrdma_wire::mad::unmatched_response(mad) {
                self.outbox.push_back(OutMad {
                    dst: src,
                    dst_qpn: src_qpn,
                    mad: resp,
                });
            }
            return self.stats.drop(CmDrop::Method);
        }
        let msg = match CmMessage::parse(h.attr_id, parsed.data) {
            Ok(CmMessage::ClassPortInfo(_)) | Err(MadError::UnknownAttribute(_)) => {
                return self.stats.drop(CmDrop::UnknownAttribute)
            }
            Ok(m) => m,
            Err(_) => return self.stats.drop(CmDrop::Malformed),
        };
        self.stats.rx.bump(h.attr_id);
        let rx = Received {
            src,
            src_qpn,
            tid: h.tid,
        };
        match msg {
            CmMessage::Req(m) => self.on_req(now, rx, &m),
            CmMessage::Mra(m) => self.on_mra(now, &m),
            CmMessage::Rej(m) => self.on_rej(now, &m),
            CmMessage::Rep(m) => self.on_rep(now, rx, &m),
            CmMessage::Rtu(m) => self.on_rtu(&m),
            CmMessage::Dreq(m) => self.on_dreq(now, rx, &m),
            CmMessage::Drep(m) => self.on_drep(now, &m),
            CmMessage::SidrReq(m) => self.on_sidr_req(rx, &m),
            CmMessage::SidrRep(m) => self.on_sidr_rep(&m),
            CmMessage::Lap(_) | CmMessage::Apr(_) => self.stats.drop(CmDrop::AlternatePath),
            CmMessage::ClassPortInfo(_) => unreachable!("filtered above"),
        }
    }

    // ---- helpers shared by the phase files ----

    fn conn(&self, id: IbCmId) -> Result<&Conn, CmError> {
        self.conns.get(&id).ok_or(CmError::NoSuchId)
    }

    fn conn_mut(&mut self, id: IbCmId) -> Result<&mut Conn, CmError> {
        self.conns.get_mut(&id).ok_or(CmError::NoSuchId)
    }

    /// A new connection with a fresh handle and communication ID.
    fn create(&mut self, peer: Gid, path: PathRecord) -> Result<IbCmId, CmError> {
        if self.conns.len() >= self.config.max_connections {
            return Err(CmError::TooManyConnections);
        }
        let comm_id = loop {
            let mut c = self.rng.next_u64() as u32;
            if let Some(prefix) = self.config.comm_id_prefix {
                c = u32::from(prefix) << 24 | c & 0x00ff_ffff;
            }
            if c != 0 && !self.by_comm_id.contains_key(&c) {
                break c;
            }
        };
        let id = IbCmId(self.next_handle);
        self.next_handle += 1;
        self.conns.insert(id, Conn::new(comm_id, peer, path));
        self.by_comm_id.insert(comm_id, id);
        Ok(id)
    }

    /// A random starting PSN.
    fn random_psn(&mut self) -> softrdma_wire::Psn {
        self.rng.psn()
    }

    /// The connection with our comm ID `local` whose remote comm ID is `remote`
    /// (`cm_acquire_id`: both must match; `remote` 0 finds one that has not learnt it yet).
    fn acquire(&self, local: u32, remote: u32) -> Option<IbCmId> {
        let id = *self.by_comm_id.get(&local)?;
        (self.conns.get(&id)?.remote_comm_id == remote).then_some(id)
    }

    /// Our TID for a connection (`cm_form_tid` on a little-endian host).
    fn form_tid(&self, local_comm_id: u32) -> u64 {
        (u64::from(self.config.tid_agent) << 32) | u64::from(local_comm_id.swap_bytes())
    }

    /// Queues a MAD that expects no answer.
    fn send(&mut self, dst: Gid, dst_qpn: u32, mad: CmMad) {
        self.stats.tx.bump(mad.msg.attr_id());
        self.outbox.push_back(OutMad {
            dst,
            dst_qpn,
            mad: mad.to_bytes(),
        });
    }

    /// Queues a MAD of connection `id` that is resent until answered.
    fn send_and_wait(&mut self, now: Instant, id: IbCmId, mad: CmMad, timeout: Duration) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let bytes = mad.to_bytes();
        c.pending = Some(Pending {
            mad: bytes,
            dst: c.peer,
            dst_qpn: c.peer_qpn,
            sent_in: c.state,
            deadline: now + timeout,
            timeout,
            retries_left: c.max_cm_retries,
        });
        let (dst, dst_qpn) = (c.peer, c.peer_qpn);
        self.stats.tx.bump(mad.msg.attr_id());
        self.outbox.push_back(OutMad {
            dst,
            dst_qpn,
            mad: bytes,
        });
        self.rearm(id);
    }

    /// Queues a MAD for connection `id`, to its peer.
    fn send_to_peer(&mut self, id: IbCmId, mad: CmMad) {
        if let Some(c) = self.conns.get(&id) {
            let (dst, qpn) = (c.peer, c.peer_qpn);
            self.send(dst, qpn, mad);
        }
    }

    /// Stops retransmitting `id`'s outstanding MAD (`ib_cancel_mad`).
    fn cancel(&mut self, id: IbCmId) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = None;
        }
        self.rearm(id);
    }

    /// Recomputes `id`'s place in the deadline index.
    fn rearm(&mut self, id: IbCmId) {
        let at = self.conns.get(&id).and_then(Conn::deadline);
        self.deadlines.set(id, at);
    }

    /// Indexes `id` by (remote comm ID, remote CA GUID); returns the connection already
    /// there, if any (a duplicate).
    fn insert_remote_id(&mut self, id: IbCmId) -> Option<IbCmId> {
        let c = self.conns.get(&id)?;
        let key = (c.remote_comm_id, c.remote_ca_guid);
        if let Some(&other) = self.remote_ids.get(&key) {
            return Some(other);
        }
        self.remote_ids.insert(key, id);
        self.conns.get_mut(&id)?.in_remote_ids = true;
        None
    }

    /// Indexes `id` by (remote QPN, remote CA GUID); returns the connection already there,
    /// if any (a stale connection).
    fn insert_remote_qpn(&mut self, id: IbCmId) -> Option<IbCmId> {
        let c = self.conns.get(&id)?;
        let key = (c.remote_qpn, c.remote_ca_guid);
        if let Some(&other) = self.remote_qpns.get(&key) {
            return Some(other);
        }
        self.remote_qpns.insert(key, id);
        self.conns.get_mut(&id)?.in_remote_qpns = true;
        None
    }

    /// Drops `id` from the duplicate and stale indexes (`cm_remove_remote`).
    fn remove_remote(&mut self, id: IbCmId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.in_remote_ids {
            c.in_remote_ids = false;
            self.remote_ids
                .remove(&(c.remote_comm_id, c.remote_ca_guid));
        }
        if c.in_remote_qpns {
            c.in_remote_qpns = false;
            self.remote_qpns.remove(&(c.remote_qpn, c.remote_ca_guid));
        }
    }

    /// Back to idle, out of the indexes (`cm_reset_to_idle`).
    fn reset_to_idle(&mut self, id: IbCmId) {
        self.remove_remote(id);
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = CmState::Idle;
        }
    }

    /// Forgets `id` entirely.
    fn forget(&mut self, id: IbCmId) {
        self.remove_remote(id);
        if let Some(c) = self.conns.remove(&id) {
            self.by_comm_id.remove(&c.local_comm_id);
            if c.in_remote_sidr {
                self.remote_sidr.remove(&(c.remote_comm_id, c.peer));
            }
        }
        self.deadlines.set(id, None);
    }

    fn event(&mut self, e: IbCmEvent) {
        self.events.push_back(e);
    }

    /// A deadline of `id` passed: resend, give up, or leave time-wait.
    fn expire(&mut self, now: Instant, id: IbCmId) {
        let Some(c) = self.conns.get_mut(&id) else {
            self.deadlines.set(id, None);
            return;
        };
        if c.timewait_until.is_some_and(|t| t <= now) {
            c.timewait_until = None;
            if c.state == CmState::Timewait {
                c.state = CmState::Idle;
                self.events.push_back(IbCmEvent::TimewaitExit { id });
            }
        }
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(p) = c.pending.as_mut().filter(|p| p.deadline <= now) {
            if p.retries_left > 0 {
                p.retries_left -= 1;
                p.deadline = now + p.timeout;
                let out = OutMad {
                    dst: p.dst,
                    dst_qpn: p.dst_qpn,
                    mad: p.mad,
                };
                let attr_id = u16::from_be_bytes([p.mad[16], p.mad[17]]);
                self.stats.tx_retries.bump(attr_id);
                self.outbox.push_back(out);
            } else {
                let sent_in = p.sent_in;
                c.pending = None;
                if c.state == sent_in {
                    self.send_failed(now, id, sent_in);
                }
            }
        }
        self.rearm(id);
    }

    /// Every attempt of a MAD went unanswered (`cm_process_send_error`).
    fn send_failed(&mut self, now: Instant, id: IbCmId, state: CmState) {
        match state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.reset_to_idle(id);
                self.event(IbCmEvent::ReqError { id });
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                self.reset_to_idle(id);
                self.event(IbCmEvent::RepError { id });
            }
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.event(IbCmEvent::DreqError { id });
            }
            CmState::SidrReqSent => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = CmState::Idle;
                }
                self.event(IbCmEvent::SidrReqError { id });
            }
            _ => {}
        }
    }

    /// Registers a listener on `service_id` (`ib_cm_listen`): REQs and SIDR_REQs whose
    /// service ID `s` satisfies `s & mask == service_id` come to it. `mask` 0 means exact.
    /// A listener that overlaps an existing one is refused.
    pub fn listen(&mut self, service_id: u64, mask: u64) -> Result<ListenId, CmError> {
        let mask = if mask == 0 { u64::MAX } else { mask };
        let service_id = service_id & mask;
        let overlaps = self
            .listeners
            .values()
            .any(|l| (l.service_mask & service_id) == (mask & l.service_id));
        if overlaps {
            return Err(CmError::ServiceIdInUse);
        }
        let id = ListenId(self.next_handle);
        self.next_handle += 1;
        self.listeners.insert(
            id,
            Listener {
                service_id,
                service_mask: mask,
            },
        );
        Ok(id)
    }

    /// Stops listening. Connections already created from it are not affected.
    pub fn stop_listening(&mut self, id: ListenId) -> Result<(), CmError> {
        self.listeners
            .remove(&id)
            .map(|_| ())
            .ok_or(CmError::NoSuchId)
    }

    /// The listener covering `service_id` (`cm_find_listen`).
    fn find_listener(&self, service_id: u64) -> Option<ListenId> {
        self.listeners
            .iter()
            .find(|(_, l)| service_id & l.service_mask == l.service_id)
            .map(|(&id, _)| id)
    }
}

/// Where a received MAD came from and its TID: what a response needs.
#[derive(Debug, Clone, Copy)]
struct Received {
    src: Gid,
    src_qpn: u32,
    tid: u64,
}

/// Checks private data against a message's limit.
fn check_private_data(data: &[u8], max: usize) -> Result<(), CmError> {
    if data.len() > max {
        Err(CmError::PrivateDataTooLong {
            len: data.len(),
            max,
        })
    } else {
        Ok(())
    }
}
