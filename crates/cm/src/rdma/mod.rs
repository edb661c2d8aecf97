//! rdma_cm over the IB CM (Linux's `drivers/infiniband/core/cma.c` with librdmacm's user-side
//! steps): IP addresses and ports in port spaces instead of GIDs and service IDs, the IP
//! header in REQ and SIDR_REQ private data, and rdma_cm's events. Like [`crate::ib`] it is
//! sans-IO; it owns an [`IbCm`] and passes MADs and time straight through.
//!
//! # How a driver runs it
//!
//! Exactly as [`crate::ib`] describes for MADs and time ([`RdmaCm::handle_mad`],
//! [`RdmaCm::poll_transmit`], [`RdmaCm::poll_timeout`], [`RdmaCm::handle_timeout`]); the
//! events are [`RdmaEvent`]s from [`RdmaCm::poll_event`], one per rdma_cm event:
//!
//! - **Passive.** [`RdmaCm::create_id`], [`RdmaCm::bind`] (port 0 = an ephemeral port),
//!   [`RdmaCm::listen`]. A REQ yields `ConnectRequest` on a *new* id (its `listen_id` says
//!   which listener): create its QP, move it to INIT, RTR and RTS with [`RdmaCm::qp_attr`]
//!   (as librdmacm's `rdma_accept` does before telling the kernel), then [`RdmaCm::accept`]
//!   with the QP number — or [`RdmaCm::reject`]. `Established` follows the RTU; if the QP
//!   sees traffic first, call [`RdmaCm::established`].
//! - **Active.** `create_id`, `bind` to the source address the route to the peer uses (port
//!   0), then [`RdmaCm::connect`] with the destination, the [`Route`] (path MTU, hop limit,
//!   traffic class) and the QP's number (QP already in INIT: [`RdmaCm::qp_attr`] works on an
//!   unconnected id). `ConnectResponse` comes with the REP: move the QP to RTR and RTS with
//!   [`RdmaCm::qp_attr`], then [`RdmaCm::complete_connect`] sends the RTU and yields
//!   `Established` (librdmacm turns CONNECT_RESPONSE into ESTABLISHED the same way).
//!   `Rejected` (with the REJ's reason and private data) or `Unreachable` (no answer) end it.
//! - **Both.** [`RdmaCm::disconnect`] sends the DREQ, or the DREP when the peer's DREQ came
//!   first; `Disconnected` is reported once per connection (move the QP to ERR), then
//!   `TimewaitExit`. [`RdmaCm::destroy`] forgets an id, telling the peer what its state calls
//!   for.
//! - **UD** (UDP and IPoIB port spaces, or IB with a UD id): `connect` sends a SIDR_REQ;
//!   the listener's `ConnectRequest` is accepted with the UD QP's number (and Q_Key), and the
//!   active side's `Established` carries the remote QPN and Q_Key.
//!
//! Private data: the application's part of a REQ is at most 56 bytes (92 minus rdma_cm's
//! 36-byte header), of a SIDR_REQ 180; REP 196, REJ 148, SIDR_REP 136. Received private
//! data is handed over in full (rdma_cm's `private_data_len` is the whole field).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;

use softrdma_proto::{AccessFlags, Instant, QpAttr, QpState};
use softrdma_wire::mad::cm::{RejectReason, SidrStatus, TransportType};
use softrdma_wire::mad::cma::{roce_flow_label, PortSpace, CMA_HEADER_LEN, RDMA_UDP_QKEY};
use softrdma_wire::{Gid, Psn};

use crate::ib::{
    CmConfig, CmError, CmEvent, CmId, CmStats, IbCm, ListenId, OutMad, PathRecord, RepParams,
    ReqParams, SidrRepParams, SidrReqParams, CMA_MRA_SERVICE_TIMEOUT,
};

mod addr;
mod event;

pub use event::{ConnParam, RdmaEvent, RdmaEventKind, Route, UdParam};

use addr::{listener_matches, read_header, request_private_data, Ports};

/// An rdma_cm identifier (`struct rdma_cm_id`). Handles are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RdmaId(pub(crate) u64);

/// The QP type an id connects (`ibv_qp_type` of `rdma_create_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaQpType {
    /// Reliable connected (TCP and IB port spaces).
    Rc,
    /// Unreliable connected (IB port space).
    Uc,
    /// Unreliable datagram (UDP and IPoIB port spaces; IB): SIDR instead of REQ/REP.
    Ud,
}

/// rdma_cm's id states (`enum rdma_cm_state`, as far as the CM is concerned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaState {
    /// Created.
    Idle,
    /// Bound to an address and port.
    Bound,
    /// Listening.
    Listen,
    /// Connecting or connected.
    Connect,
    /// Disconnected (the peer's DREQ or our DREP came in).
    Disconnect,
}

/// Why an rdma_cm call was refused; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RdmaError {
    /// No such id.
    #[error("no such rdma_cm id")]
    NoSuchId,
    /// Not allowed in the id's state (librdmacm: EINVAL).
    #[error("not allowed in rdma_cm state {0:?}")]
    InvalidState(RdmaState),
    /// The address and port are taken (EADDRINUSE).
    #[error("address in use")]
    AddressInUse,
    /// Source and destination are not the same family, or no source address is bound.
    #[error("address family mismatch or no source address")]
    Address,
    /// The IB CM refused.
    #[error(transparent)]
    Cm(#[from] CmError),
}

#[derive(Debug, Clone)]
struct Id {
    ps: PortSpace,
    qp_type: RdmaQpType,
    state: RdmaState,
    /// Our address (bound, or the one a request was sent to).
    src: Option<SocketAddr>,
    /// The peer's.
    dst: Option<SocketAddr>,
    cm: Option<CmId>,
    /// The listener this id came from.
    listen_id: Option<RdmaId>,
    /// The PSN this side will receive first (`id_priv->seq_num`, drawn at creation): the
    /// starting PSN of our REQ or REP, and known before either is sent, so a passive QP can
    /// reach RTR before `accept` as librdmacm moves it.
    seq_num: Psn,
}

/// rdma_cm for one port. See the [module docs](self).
#[derive(Debug)]
pub struct RdmaCm {
    ib: IbCm,
    /// Ephemeral ports and starting PSNs.
    rng: u64,
    next_id: u64,
    ids: BTreeMap<RdmaId, Id>,
    by_cm: HashMap<CmId, RdmaId>,
    ports: Ports,
    /// IB listeners per service ID, with how many rdma listeners share each.
    ib_listens: BTreeMap<u64, (ListenId, usize)>,
    events: VecDeque<RdmaEvent>,
}

impl RdmaCm {
    /// rdma_cm over a new IB CM with `config`.
    pub fn new(config: CmConfig) -> RdmaCm {
        RdmaCm {
            rng: config.rng_seed ^ 0x706f_7274_7321,
            ib: IbCm::new(config),
            next_id: 1,
            ids: BTreeMap::new(),
            by_cm: HashMap::new(),
            ports: Ports::default(),
            ib_listens: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    /// The IB CM underneath (for its counters and connection states).
    pub fn ib(&self) -> &IbCm {
        &self.ib
    }

    /// The IB CM's counters.
    pub fn stats(&self) -> &CmStats {
        self.ib.stats()
    }

    /// An id's state.
    pub fn state(&self, id: RdmaId) -> Option<RdmaState> {
        self.ids.get(&id).map(|i| i.state)
    }

    /// An id's local and remote addresses.
    pub fn addresses(&self, id: RdmaId) -> Option<(Option<SocketAddr>, Option<SocketAddr>)> {
        self.ids.get(&id).map(|i| (i.src, i.dst))
    }

    /// The IB connection behind an id.
    pub fn cm_id(&self, id: RdmaId) -> Option<CmId> {
        self.ids.get(&id).and_then(|i| i.cm)
    }

    /// Ids that exist.
    pub fn ids(&self) -> impl Iterator<Item = RdmaId> + '_ {
        self.ids.keys().copied()
    }

    // ---- MADs and time: straight through ----

    /// A MAD received on QP 1 (see [`IbCm::handle_mad`]).
    pub fn handle_mad(&mut self, now: Instant, src: Gid, src_qpn: u32, mad: &[u8]) {
        self.ib.handle_mad(now, src, src_qpn, mad);
        self.pump(now);
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        self.ib.poll_transmit()
    }

    /// When [`RdmaCm::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ib.poll_timeout()
    }

    /// Retransmissions, give-ups, time-wait ends.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.ib.handle_timeout(now);
        self.pump(now);
    }

    /// The next rdma_cm event.
    pub fn poll_event(&mut self) -> Option<RdmaEvent> {
        self.events.pop_front()
    }

    // ---- ids ----

    /// A new id in port space `ps` for QP type `qp_type` (`rdma_create_id`).
    pub fn create_id(&mut self, ps: PortSpace, qp_type: RdmaQpType) -> RdmaId {
        let id = RdmaId(self.next_id);
        self.next_id += 1;
        let seq_num = Psn::new((Self::next_random(&mut self.rng) >> 16) as u32);
        self.ids.insert(
            id,
            Id {
                ps,
                qp_type,
                state: RdmaState::Idle,
                src: None,
                dst: None,
                cm: None,
                listen_id: None,
                seq_num,
            },
        );
        id
    }

    fn get(&self, id: RdmaId) -> Result<&Id, RdmaError> {
        self.ids.get(&id).ok_or(RdmaError::NoSuchId)
    }

    fn get_mut(&mut self, id: RdmaId) -> Result<&mut Id, RdmaError> {
        self.ids.get_mut(&id).ok_or(RdmaError::NoSuchId)
    }

    /// A 64-bit LCG step (Knuth's MMIX constants): deterministic from the configured seed.
    fn next_random(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *state
    }

    fn next_port(state: &mut u64) -> u16 {
        let span = u64::from(addr::EPHEMERAL_PORTS.end() - addr::EPHEMERAL_PORTS.start()) + 1;
        addr::EPHEMERAL_PORTS.start() + ((Self::next_random(state) >> 33) % span) as u16
    }

    /// Binds an idle id to `addr` (`rdma_bind_addr`); port 0 picks an ephemeral port.
    /// Returns the bound address.
    pub fn bind(&mut self, id: RdmaId, addr: SocketAddr) -> Result<SocketAddr, RdmaError> {
        let i = self.get(id)?;
        if i.state != RdmaState::Idle {
            return Err(RdmaError::InvalidState(i.state));
        }
        let ps = i.ps;
        let rng = &mut self.rng;
        let port = self
            .ports
            .bind(id, ps, addr, || Self::next_port(rng))
            .ok_or(RdmaError::AddressInUse)?;
        let bound = SocketAddr::new(addr.ip(), port);
        let i = self.get_mut(id)?;
        i.src = Some(bound);
        i.state = RdmaState::Bound;
        Ok(bound)
    }

    /// Listens on the bound address (`rdma_listen`): the IB CM listens on the port's service
    /// ID, shared by every listener on that port.
    pub fn listen(&mut self, id: RdmaId) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        if i.state != RdmaState::Bound {
            return Err(RdmaError::InvalidState(i.state));
        }
        let sid = i.ps.service_id(i.src.expect("bound").port());
        match self.ib_listens.get_mut(&sid) {
            Some((_, users)) => *users += 1,
            None => {
                let l = self.ib.listen(sid, 0)?;
                self.ib_listens.insert(sid, (l, 1));
            }
        }
        self.get_mut(id)?.state = RdmaState::Listen;
        Ok(())
    }

    fn check_user_data(data: &[u8], max: usize) -> Result<(), RdmaError> {
        if data.len() > max {
            Err(RdmaError::Cm(CmError::PrivateDataTooLong {
                len: data.len(),
                max,
            }))
        } else {
            Ok(())
        }
    }

    /// Connects a bound id to `dst` (`rdma_connect` after address and route resolution):
    /// a REQ (RC/UC) or SIDR_REQ (UD) with rdma_cm's IP header and `param.private_data`
    /// after it.
    pub fn connect(
        &mut self,
        now: Instant,
        id: RdmaId,
        dst: SocketAddr,
        route: Route,
        param: &ConnParam,
    ) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        if i.state != RdmaState::Bound {
            return Err(RdmaError::InvalidState(i.state));
        }
        let src = i.src.expect("bound");
        if src.ip().is_unspecified() || src.is_ipv4() != dst.is_ipv4() {
            return Err(RdmaError::Address);
        }
        let ud = i.qp_type == RdmaQpType::Ud;
        let max = if ud { 216 } else { 92 } - CMA_HEADER_LEN;
        Self::check_user_data(&param.private_data, max)?;
        let private_data =
            request_private_data(src, dst.ip(), &param.private_data).ok_or(RdmaError::Address)?;
        let path = PathRecord {
            traffic_class: route.traffic_class,
            hop_limit: route.hop_limit,
            ..PathRecord::roce(
                Gid::from_ip(src.ip()),
                Gid::from_ip(dst.ip()),
                route.mtu,
                roce_flow_label(src.port(), dst.port()),
            )
        };
        let service_id = i.ps.service_id(dst.port());
        let cm = if ud {
            self.ib.sidr_request(
                now,
                &SidrReqParams {
                    path,
                    service_id,
                    timeout_ms: 1 << (crate::ib::CMA_CM_RESPONSE_TIMEOUT - 8),
                    max_cm_retries: crate::ib::CMA_MAX_CM_RETRIES,
                    private_data,
                },
            )?
        } else {
            let req = ReqParams {
                transport: if i.qp_type == RdmaQpType::Uc {
                    TransportType::Uc
                } else {
                    TransportType::Rc
                },
                responder_resources: param.responder_resources,
                initiator_depth: param.initiator_depth,
                flow_control: param.flow_control,
                retry_count: param.retry_count.min(7),
                rnr_retry_count: param.rnr_retry_count.min(7),
                srq: param.srq,
                private_data,
                starting_psn: Some(i.seq_num),
                ..ReqParams::rdma_cm(path, service_id, param.qp_num)
            };
            self.ib.connect(now, &req)?
        };
        let i = self.get_mut(id)?;
        i.cm = Some(cm);
        i.dst = Some(dst);
        i.state = RdmaState::Connect;
        self.by_cm.insert(cm, id);
        self.pump(now);
        Ok(())
    }

    /// Accepts a connection request on the id its `ConnectRequest` came with
    /// (`rdma_accept`): a REP with `param`'s QP number, resources and private data, or for UD
    /// a SIDR_REP with the QP number and Q_Key.
    pub fn accept(&mut self, now: Instant, id: RdmaId, param: &ConnParam) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        let cm = match (i.state, i.cm, i.listen_id) {
            (RdmaState::Connect, Some(cm), Some(_)) => cm,
            _ => return Err(RdmaError::InvalidState(i.state)),
        };
        if i.qp_type == RdmaQpType::Ud {
            Self::check_user_data(&param.private_data, 136)?;
            let qkey = if param.qkey != 0 {
                param.qkey
            } else {
                RDMA_UDP_QKEY
            };
            self.ib.sidr_reply(
                now,
                cm,
                &SidrRepParams {
                    status: SidrStatus::Success,
                    qpn: param.qp_num,
                    qkey,
                    info: Vec::new(),
                    private_data: param.private_data.clone(),
                },
            )?;
        } else {
            self.ib.accept(
                now,
                cm,
                &RepParams {
                    qpn: param.qp_num,
                    starting_psn: Some(i.seq_num),
                    responder_resources: param.responder_resources,
                    initiator_depth: param.initiator_depth,
                    failover_accepted: 0,
                    flow_control: param.flow_control,
                    rnr_retry_count: param.rnr_retry_count.min(7),
                    srq: param.srq,
                    private_data: param.private_data.clone(),
                },
            )?;
        }
        self.pump(now);
        Ok(())
    }

    /// Refuses a connection request (`rdma_reject`): REJ reason 28 (consumer defined) with
    /// `private_data` (≤ 148 bytes), or a SIDR_REP "reject" for UD.
    pub fn reject(
        &mut self,
        now: Instant,
        id: RdmaId,
        private_data: &[u8],
    ) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        let cm = i.cm.ok_or(RdmaError::InvalidState(i.state))?;
        if i.qp_type == RdmaQpType::Ud {
            self.ib.sidr_reply(
                now,
                cm,
                &SidrRepParams {
                    private_data: private_data.to_vec(),
                    ..SidrRepParams::refuse(SidrStatus::Reject)
                },
            )?;
        } else {
            self.ib
                .reject(now, cm, RejectReason::ConsumerDefined, &[], private_data)?;
        }
        self.pump(now);
        Ok(())
    }

    /// Completes an active connection after `ConnectResponse` (librdmacm's
    /// `ucma_process_conn_resp`): the QP is in RTS; the RTU goes out and `Established`
    /// follows.
    pub fn complete_connect(&mut self, now: Instant, id: RdmaId) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        let cm = match (i.state, i.cm, i.listen_id) {
            (RdmaState::Connect, Some(cm), None) => cm,
            _ => return Err(RdmaError::InvalidState(i.state)),
        };
        self.ib.send_rtu(now, cm, &[])?;
        self.event(id, RdmaEventKind::Established { ud: None });
        self.pump(now);
        Ok(())
    }

    /// The QP of a passive connection received traffic before the RTU (`rdma_notify` with
    /// `IBV_EVENT_COMM_EST`).
    pub fn established(&mut self, now: Instant, id: RdmaId) -> Result<(), RdmaError> {
        let cm = self.get(id)?.cm.ok_or(RdmaError::NoSuchId)?;
        self.ib.established(now, cm)?;
        self.pump(now);
        Ok(())
    }

    /// Disconnects (`rdma_disconnect`): the DREQ if connected, the DREP if the peer's DREQ
    /// came first.
    pub fn disconnect(&mut self, now: Instant, id: RdmaId) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        let cm = i.cm.ok_or(RdmaError::InvalidState(i.state))?;
        match self.ib.disconnect(now, cm, &[]) {
            Ok(()) => {}
            Err(CmError::InvalidState(_)) => self.ib.send_drep(now, cm, &[])?,
            Err(e) => return Err(e.into()),
        }
        self.pump(now);
        Ok(())
    }

    /// Forgets an id (`rdma_destroy_id`): stops listening, releases the port, and destroys the
    /// IB connection (which tells the peer what its state calls for).
    pub fn destroy(&mut self, now: Instant, id: RdmaId) -> Result<(), RdmaError> {
        let i = self.ids.remove(&id).ok_or(RdmaError::NoSuchId)?;
        if i.state == RdmaState::Listen {
            let sid = i.ps.service_id(i.src.expect("bound").port());
            if let Some((l, users)) = self.ib_listens.get_mut(&sid) {
                *users -= 1;
                if *users == 0 {
                    let l = *l;
                    self.ib_listens.remove(&sid);
                    self.ib.stop_listening(l)?;
                }
            }
        }
        if i.listen_id.is_none() {
            if let Some(src) = i.src {
                self.ports.unbind(id, i.ps, src.port());
            }
        }
        if let Some(cm) = i.cm {
            self.by_cm.remove(&cm);
            self.ib.destroy(now, cm)?;
        }
        self.pump(now);
        Ok(())
    }

    /// QP attributes for `target` (`rdma_init_qp_attr`): the IB CM's once a handshake is under
    /// way, with the RTR's expected PSN replaced by the id's own (so a passive QP can reach RTR
    /// before `accept`); before it (an active QP being created), INIT with no remote access,
    /// P_Key index 0, port 1, and rdma_cm's Q_Key for UD.
    ///
    /// A consumer that accepts or connects with other READ/atomic limits than the peer asked
    /// for sets `max_dest_rd_atomic` (RTR) and `max_rd_atomic` (RTS) to its own values, as
    /// librdmacm does with its `responder_resources` and `initiator_depth`.
    pub fn qp_attr(&self, id: RdmaId, target: QpState) -> Result<QpAttr, RdmaError> {
        let i = self.get(id)?;
        match i.cm {
            Some(cm) if i.qp_type != RdmaQpType::Ud => {
                let mut attr = self.ib.qp_attr(cm, target)?;
                if target == QpState::Rtr {
                    attr.rq_psn = Some(i.seq_num);
                }
                Ok(attr)
            }
            _ if target == QpState::Init => {
                let mut attr = QpAttr::rc_init(AccessFlags::empty());
                if i.qp_type == RdmaQpType::Ud {
                    attr.qp_access_flags = None;
                    attr.qkey = Some(RDMA_UDP_QKEY);
                }
                Ok(attr)
            }
            _ => Err(RdmaError::InvalidState(i.state)),
        }
    }

    fn event(&mut self, id: RdmaId, kind: RdmaEventKind) {
        self.events.push_back(RdmaEvent { id, kind });
    }

    /// Turns the IB CM's events into rdma_cm's (`cma_ib_handler`, `cma_ib_req_handler`,
    /// `cma_sidr_rep_handler`).
    fn pump(&mut self, now: Instant) {
        while let Some(e) = self.ib.poll_event() {
            match e {
                CmEvent::ReqReceived { id: cm, req } => self.on_request(now, cm, Request::Rc(req)),
                CmEvent::SidrReqReceived { id: cm, req } => {
                    self.on_request(now, cm, Request::Ud(req))
                }
                other => self.on_cm_event(now, other),
            }
        }
    }

    fn on_cm_event(&mut self, now: Instant, e: CmEvent) {
        let cm = e.id();
        let Some(&id) = self.by_cm.get(&cm) else {
            return;
        };
        let state = self.ids[&id].state;
        // cma_ib_handler: everything but TIMEWAIT_EXIT only while connecting/connected,
        // TIMEWAIT_EXIT only after the disconnect.
        let wanted = match e {
            CmEvent::TimewaitExit { .. } => RdmaState::Disconnect,
            _ => RdmaState::Connect,
        };
        if state != wanted {
            return;
        }
        let kind = match e {
            CmEvent::RepReceived { rep, .. } => {
                // The consumer readies its QP before the RTU: retransmitted REPs get an MRA.
                let _ = self
                    .ib
                    .send_mra(now, cm, CMA_MRA_SERVICE_TIMEOUT, true, &[]);
                RdmaEventKind::ConnectResponse {
                    param: ConnParam {
                        private_data: rep.private_data.to_vec(),
                        responder_resources: rep.responder_resources,
                        initiator_depth: rep.initiator_depth,
                        flow_control: rep.flow_control,
                        retry_count: 0,
                        rnr_retry_count: rep.rnr_retry_count,
                        srq: rep.srq,
                        qp_num: rep.remote_qpn,
                        qkey: 0,
                    },
                }
            }
            CmEvent::Established { .. } => RdmaEventKind::Established { ud: None },
            CmEvent::RejReceived {
                reason,
                private_data,
                ..
            } => RdmaEventKind::Rejected {
                reason,
                private_data: private_data.to_vec(),
            },
            CmEvent::ReqError { .. } | CmEvent::RepError { .. } | CmEvent::SidrReqError { .. } => {
                RdmaEventKind::Unreachable { sidr_status: None }
            }
            CmEvent::DreqReceived { .. }
            | CmEvent::DrepReceived { .. }
            | CmEvent::DreqError { .. } => {
                self.ids.get_mut(&id).expect("exists").state = RdmaState::Disconnect;
                RdmaEventKind::Disconnected
            }
            CmEvent::TimewaitExit { .. } => RdmaEventKind::TimewaitExit,
            CmEvent::SidrRepReceived { rep, .. } if rep.status == SidrStatus::Success => {
                let peer = self.ids[&id].dst.map(|d| d.ip());
                RdmaEventKind::Established {
                    ud: Some(UdParam {
                        qp_num: rep.qpn,
                        qkey: rep.qkey,
                        peer,
                        private_data: rep.private_data.to_vec(),
                    }),
                }
            }
            CmEvent::SidrRepReceived { rep, .. } => RdmaEventKind::Unreachable {
                sidr_status: Some(rep.status),
            },
            CmEvent::MraReceived { .. } => return,
            CmEvent::ReqReceived { .. } | CmEvent::SidrReqReceived { .. } => return,
        };
        self.event(id, kind);
    }

    /// A REQ or SIDR_REQ reached a service ID we listen on: find the rdma listener its IP
    /// header and QP type fit (`cma_ib_id_from_event`, `cma_ib_check_req_qp_type`), or refuse
    /// it as Linux does when a handler fails — REJ 28, SIDR_REP "reject".
    fn on_request(&mut self, now: Instant, cm: CmId, req: Request) {
        let (service_id, private_data) = match &req {
            Request::Rc(r) => (r.service_id, &r.private_data[..]),
            Request::Ud(r) => (r.service_id, &r.private_data[..]),
        };
        let found = PortSpace::from_service_id(service_id).and_then(|(ps, port)| {
            let (_, peer, dst) = read_header(private_data).ok()?;
            let listener = self
                .ports
                .on_port(ps, port)
                .iter()
                .find_map(|&(lid, bound)| {
                    let l = &self.ids[&lid];
                    let type_fits = match &req {
                        Request::Rc(r) => matches!(
                            (l.qp_type, r.transport),
                            (RdmaQpType::Rc, TransportType::Rc)
                                | (RdmaQpType::Uc, TransportType::Uc)
                        ),
                        Request::Ud(_) => l.qp_type == RdmaQpType::Ud,
                    };
                    (l.state == RdmaState::Listen && type_fits && listener_matches(bound, dst))
                        .then_some(lid)
                })?;
            Some((ps, port, listener, peer, dst))
        });
        let Some((ps, port, listener, peer, dst)) = found else {
            // cm_destroy_id in REQ_RCVD / SIDR_REQ_RCVD: REJ 28 / SIDR_REP reject.
            let _ = self.ib.destroy(now, cm);
            return;
        };
        let id = RdmaId(self.next_id);
        self.next_id += 1;
        let qp_type = self.ids[&listener].qp_type;
        let local = SocketAddr::new(dst, port);
        self.ids.insert(
            id,
            Id {
                ps,
                qp_type,
                state: RdmaState::Connect,
                src: Some(local),
                dst: Some(peer),
                cm: Some(cm),
                listen_id: Some(listener),
                seq_num: Psn::new((Self::next_random(&mut self.rng) >> 16) as u32),
            },
        );
        self.by_cm.insert(cm, id);
        let user = private_data[CMA_HEADER_LEN..].to_vec();
        let param = match &req {
            Request::Rc(r) => ConnParam {
                private_data: user,
                responder_resources: r.responder_resources,
                initiator_depth: r.initiator_depth,
                flow_control: r.flow_control,
                retry_count: r.retry_count,
                rnr_retry_count: r.rnr_retry_count,
                srq: r.srq,
                qp_num: r.remote_qpn,
                qkey: 0,
            },
            Request::Ud(_) => ConnParam {
                private_data: user,
                ..ConnParam::default()
            },
        };
        self.event(
            id,
            RdmaEventKind::ConnectRequest {
                listen_id: listener,
                param,
                peer,
                local,
            },
        );
        if matches!(req, Request::Rc(_)) {
            // cma_ib_req_handler arms an MRA for retransmitted REQs while the consumer decides.
            let _ = self
                .ib
                .send_mra(now, cm, CMA_MRA_SERVICE_TIMEOUT, true, &[]);
        }
    }
}

/// A request as the IB CM reported it.
enum Request {
    Rc(Box<crate::ib::ReqReceived>),
    Ud(Box<crate::ib::SidrReqReceived>),
}

impl RdmaId {
    /// The raw handle, for logs.
    pub fn raw(self) -> u64 {
        self.0
    }
}
