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
//!
//! # Example: two ports, MADs carried by hand
//!
//! What a driver does, minus the QP: carry each [`OutMad`] to the port whose GID it names,
//! pass the time, react to events.
//!
//! ```
//! use softrdma_cm::ib::CmConfig;
//! use softrdma_cm::rdma::{ConnParam, RdmaCm, RdmaEventKind, RdmaQpType, Route};
//! use softrdma_proto::Instant;
//! use softrdma_wire::mad::cma::PortSpace;
//! use softrdma_wire::Gid;
//!
//! let (a_ip, b_ip) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
//! let mut a = RdmaCm::new(CmConfig { ca_guid: 1, ..CmConfig::default() });
//! let mut b = RdmaCm::new(CmConfig { ca_guid: 2, rng_seed: 9, ..CmConfig::default() });
//! let listener = b.create_id(PortSpace::Tcp, RdmaQpType::Rc);
//! b.bind(listener, std::net::SocketAddr::new(b_ip, 7174)).unwrap();
//! b.listen(listener).unwrap();
//!
//! let now = Instant::ZERO;
//! let client = a.create_id(PortSpace::Tcp, RdmaQpType::Rc);
//! a.bind(client, std::net::SocketAddr::new(a_ip, 0)).unwrap();
//! let param = ConnParam::rc(0x11);
//! a.connect(now, client, "10.0.0.2:7174".parse().unwrap(), Route::default(), &param).unwrap();
//!
//! let mut established = 0;
//! for _ in 0..10 {
//!     // The wire: every MAD to its destination's CM, sent from the other's GID, QP 1.
//!     while let Some(m) = a.poll_transmit() {
//!         assert_eq!(m.dst, Gid::from_ip(b_ip));
//!         b.handle_mad(now, Gid::from_ip(a_ip), 1, &m.mad);
//!     }
//!     while let Some(m) = b.poll_transmit() {
//!         a.handle_mad(now, Gid::from_ip(b_ip), 1, &m.mad);
//!     }
//!     // The consumers: the passive one accepts (its QP would go to RTS first), the active one
//!     // readies its QP from `qp_attr` and completes.
//!     while let Some(e) = b.poll_event() {
//!         match e.kind {
//!             RdmaEventKind::ConnectRequest { .. } => {
//!                 b.accept(now, e.id, &ConnParam { qp_num: 0x22, ..param.clone() }).unwrap()
//!             }
//!             RdmaEventKind::Established { .. } => established += 1,
//!             _ => {}
//!         }
//!     }
//!     while let Some(e) = a.poll_event() {
//!         match e.kind {
//!             RdmaEventKind::ConnectResponse { param } => {
//!                 assert_eq!(param.qp_num, 0x22);
//!                 a.complete_connect(now, e.id).unwrap();
//!             }
//!             RdmaEventKind::Established { .. } => established += 1,
//!             _ => {}
//!         }
//!     }
//! }
//! assert_eq!(established, 2);
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;

use softrdma_proto::{AccessFlags, Instant, QpAttr, QpState};
use softrdma_wire::mad::cma::{PortSpace, RDMA_UDP_QKEY};
use softrdma_wire::{Gid, Psn};

use crate::ib::{CmConfig, CmError, CmStats, IbCm, IbCmId, ListenId, OutMad};

mod addr;
mod connect;
mod dispatch;
mod event;
pub mod gsi;
mod id;

pub use event::{ConnParam, RdmaEvent, RdmaEventKind, Route, UdParam};
pub use id::RdmaId;

use crate::rng::Rng;
use addr::Ports;

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
    cm: Option<IbCmId>,
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
    rng: Rng,
    next_id: u64,
    ids: BTreeMap<RdmaId, Id>,
    by_cm: HashMap<IbCmId, RdmaId>,
    ports: Ports,
    /// IB listeners per service ID, with how many rdma listeners share each.
    ib_listens: BTreeMap<u64, (ListenId, usize)>,
    events: VecDeque<RdmaEvent>,
}

impl RdmaCm {
    /// rdma_cm over a new IB CM with `config`.
    pub fn new(config: CmConfig) -> RdmaCm {
        RdmaCm {
            rng: Rng::new(config.rng_seed ^ 0x706f_7274_7321),
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
    pub fn cm_id(&self, id: RdmaId) -> Option<IbCmId> {
        self.ids.get(&id).and_then(|i| i.cm)
    }

    /// Ids that exist.
    pub fn ids(&self) -> impl Iterator<Item = RdmaId> + '_ {
        self.ids.keys().copied()
    }

    // ---- MADs and time: straight through ----

    /// See [`IbCm::unlistened_request`]: a connection request no listener of this CM takes.
    pub fn unlistened_request(&self, mad: &[u8]) -> Option<u64> {
        self.ib.unlistened_request(mad)
    }

    /// See [`IbCm::misdirected`].
    pub fn misdirected(&mut self) {
        self.ib.misdirected();
    }

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

    /// The connections whose last word changed (see [`IbCm::farewell_changes`]): what a
    /// driver keeps for someone to send should its process die.
    pub fn farewell_changes(&mut self) -> Vec<(IbCmId, Option<OutMad>)> {
        self.ib.farewell_changes()
    }

    // ---- ids ----

    /// A new id in port space `ps` for QP type `qp_type` (`rdma_create_id`).
    pub fn create_id(&mut self, ps: PortSpace, qp_type: RdmaQpType) -> RdmaId {
        let id = RdmaId(self.next_id);
        self.next_id += 1;
        let seq_num = self.rng.psn();
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

    fn next_port(rng: &mut Rng) -> u16 {
        let span = u64::from(addr::EPHEMERAL_PORTS.end() - addr::EPHEMERAL_PORTS.start()) + 1;
        addr::EPHEMERAL_PORTS.start() + (rng.next_u64() % span) as u16
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
}

impl RdmaId {
    /// The raw handle, for logs.
    pub fn raw(self) -> u64 {
        self.0
    }
}
