//! Queue pairs: creation, the state machine, posting work requests.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use softrdma_proto::{
    AccessFlags, AddressVector, Engine, EngineError, Instant, Mtu, QpAttr, QpCaps, QpConfig,
    QpState, QpType, RecvWr, SendFlags, SendWr,
};
use softrdma_wire::Psn;

use crate::error::{
    CreateQpError, McastError, ModifyQpError, PostErrorKind, PostRecvError, PostSendError,
};
use crate::limits::{MAX_INLINE_DATA, MAX_MSG_SZ, MAX_QP_WR, MAX_SGE};
use crate::progress::Access;
use crate::{CompletionQueue, Gid, ProtectionDomain};

/// How to create a queue pair (`ibv_qp_init_attr`).
#[derive(Debug, Clone)]
pub struct QpInitAttr {
    /// Completions of send work requests go here.
    pub send_cq: CompletionQueue,
    /// Completions of receive work requests go here.
    pub recv_cq: CompletionQueue,
    /// Transport: RC, UC or UD.
    pub qp_type: QpType,
    /// Queue sizes.
    pub cap: QpCaps,
    /// Every send WR completes (as if all were posted with `SIGNALED`).
    pub sq_sig_all: bool,
    /// Take receive work requests from this shared receive queue (of the same protection
    /// domain) instead of the QP's own receive queue, which then has no capacity
    /// (`ibv_qp_init_attr.srq`).
    pub srq: Option<crate::SharedReceiveQueue>,
}

impl QpInitAttr {
    /// A `qp_type` QP with default capacities (256 WRs and 4 SGEs each way), both queues
    /// completing to `cq`, every send signaled.
    pub fn new(qp_type: QpType, cq: &CompletionQueue) -> QpInitAttr {
        QpInitAttr {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            qp_type,
            cap: QpCaps::default(),
            sq_sig_all: true,
            srq: None,
        }
    }

    /// A reliable connected QP ([`QpInitAttr::new`] with [`QpType::Rc`]).
    pub fn rc(cq: &CompletionQueue) -> QpInitAttr {
        QpInitAttr::new(QpType::Rc, cq)
    }

    /// An unreliable connected QP: SEND and RDMA WRITE, no acknowledgements.
    pub fn uc(cq: &CompletionQueue) -> QpInitAttr {
        QpInitAttr::new(QpType::Uc, cq)
    }

    /// An unreliable datagram QP: one-packet SENDs to any QP through address handles.
    pub fn ud(cq: &CompletionQueue) -> QpInitAttr {
        QpInitAttr::new(QpType::Ud, cq)
    }

    /// An XRC initiator QP (`IBV_QPT_XRC_SEND`): RC's requester, without a receive queue,
    /// each work request naming the XRC SRQ at the target
    /// ([`SendWr::to_xrc_srq`](crate::SendWr::to_xrc_srq)); see [`crate::XrcDomain`].
    pub fn xrc_ini(cq: &CompletionQueue) -> QpInitAttr {
        QpInitAttr::new(QpType::XrcIni, cq)
    }
}

/// What a peer needs to connect to a QP: exchanged out of band (a TCP socket, a file, ...),
/// like the `LID:QPN:PSN:GID` line of `ibv_rc_pingpong`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpEndpoint {
    /// The GID of the QP's device (its IP address).
    pub gid: Gid,
    /// The QP number.
    pub qpn: u32,
    /// The first PSN the QP sends with (the peer's `rq_psn`).
    pub psn: u32,
}

/// Attributes for [`QueuePair::connect`] and the `to_*` helpers, with `ibv_rc_pingpong`-like
/// defaults suited to RDMA READ and atomics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// What incoming requests may do (`qp_access_flags`).
    pub access: AccessFlags,
    /// Path MTU; `None` uses the port's active MTU.
    pub path_mtu: Option<Mtu>,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout (14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code sent to peers that find no receive posted.
    pub min_rnr_timer: u8,
    /// Outstanding outgoing READ/atomic requests.
    pub max_rd_atomic: u8,
    /// Outstanding incoming READ/atomic requests (responder resources).
    pub max_dest_rd_atomic: u8,
    /// Traffic class (DSCP).
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            path_mtu: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            traffic_class: 0,
            hop_limit: 64,
        }
    }
}

/// A QP's current state and attributes (`ibv_query_qp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// State.
    pub state: QpState,
    /// Resolved attributes.
    pub config: QpConfig,
    /// Capacities.
    pub cap: QpCaps,
    /// Send WRs posted and not completed.
    pub send_queue_len: usize,
    /// Receive WRs posted and not consumed.
    pub recv_queue_len: usize,
    /// The rate congestion control allows the QP now, Mb/s (`None`: not running).
    pub cc_rate_mbps: Option<u64>,
}

struct QpInner {
    owner: QpOwner,
    // Held so the CQs outlive the QP (the engine refers to them by handle); an XRC target
    // has none.
    _send_cq: Option<CompletionQueue>,
    _recv_cq: Option<CompletionQueue>,
    // Held so the SRQ outlives the QP (dropped after the QP is destroyed, in `drop`).
    _srq: Option<crate::SharedReceiveQueue>,
    qpn: u32,
    qp_type: QpType,
    cap: QpCaps,
    sq_sig_all: bool,
    psn: u32,
}

/// What a QP belongs to: a protection domain, or, for an XRC target, its XRC domain.
enum QpOwner {
    Pd(ProtectionDomain),
    Xrcd(crate::XrcDomain),
}

impl QpInner {
    fn device(&self) -> &crate::Device {
        match &self.owner {
            QpOwner::Pd(pd) => pd.device(),
            QpOwner::Xrcd(x) => x.device(),
        }
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        // ibverbs' destroy discards outstanding work silently; softrdma flushes it first so
        // every posted WR completes exactly once (with WR_FLUSH_ERR) — the CQs are still alive.
        self.device().inner().end_qp(self.qpn);
    }
}

/// A queue pair (`ibv_qp`): a send queue and a receive queue, connected to one remote QP.
///
/// Create it with [`ProtectionDomain::create_qp`], connect it with [`connect`](Self::connect)
/// (or step through the states with [`modify`](Self::modify)), then post work requests. A
/// cheap handle, usable from many threads; it keeps its PD, CQs and device alive. Dropping the
/// last handle flushes outstanding work (WR_FLUSH_ERR completions) and destroys the QP.
#[derive(Clone)]
pub struct QueuePair {
    inner: Arc<QpInner>,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &format_args!("{:#x}", self.inner.qpn))
            .finish()
    }
}

fn random_psn(qpn: u32) -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(qpn);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() as u32) & 0xff_ffff
}

impl QueuePair {
    /// A new QP of `pd`; QP 1, the general services QP, when `gsi` (a UD QP, one per
    /// device: [`ProtectionDomain::create_gsi_qp`]).
    pub(crate) fn new(
        pd: ProtectionDomain,
        init: &QpInitAttr,
        gsi: bool,
    ) -> Result<QueuePair, CreateQpError> {
        let device = pd.device();
        for cq in [&init.send_cq, &init.recv_cq] {
            if !Arc::ptr_eq(&cq.device().shared, &device.shared) {
                return Err(CreateQpError::WrongDevice);
            }
        }
        let mut c = init.cap;
        if init.qp_type == QpType::XrcIni {
            // An initiator has no receive queue (its recv_cq goes unused, as in ibverbs).
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        }
        if let Some(srq) = &init.srq {
            if !Arc::ptr_eq(&srq.pd().device().shared, &device.shared) {
                return Err(CreateQpError::WrongDevice);
            }
            // The QP's own receive queue is unused (ibverbs ignores max_recv_wr/sge here).
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        }
        if c.max_send_wr > MAX_QP_WR || c.max_recv_wr > MAX_QP_WR {
            return Err(CreateQpError::InvalidCaps("more WRs than max_qp_wr"));
        }
        if c.max_send_sge > MAX_SGE || c.max_recv_sge > MAX_SGE {
            return Err(CreateQpError::InvalidCaps("more SGEs than max_sge"));
        }
        if c.max_inline_data > MAX_INLINE_DATA {
            return Err(CreateQpError::InvalidCaps("max_inline_data too large"));
        }
        if gsi && (init.qp_type != QpType::Ud || init.srq.is_some()) {
            return Err(CreateQpError::InvalidCaps(
                "the GSI QP is a UD QP without an SRQ",
            ));
        }
        let (send_cq, recv_cq) = (init.send_cq.inner.handle, init.recv_cq.inner.handle);
        let srq = init.srq.as_ref().map(|s| s.inner.handle);
        let created = device.inner().engine(Access::Query, |e, _| {
            if gsi {
                e.create_gsi_qp(pd.handle(), send_cq, recv_cq, c)
            } else {
                e.create_qp_with_srq(pd.handle(), send_cq, recv_cq, init.qp_type, c, srq)
            }
        });
        let qpn = created.map_err(|e| match e {
            EngineError::InvalidArgument(s) => CreateQpError::InvalidCaps(s),
            EngineError::NoSuchSrq => CreateQpError::InvalidCaps("no such SRQ"),
            EngineError::Busy => CreateQpError::InvalidCaps("the device has its GSI QP already"),
            _ => CreateQpError::InvalidCaps("refused by the engine"),
        })?;
        Ok(QueuePair {
            inner: Arc::new(QpInner {
                owner: QpOwner::Pd(pd),
                _send_cq: Some(init.send_cq.clone()),
                _recv_cq: Some(init.recv_cq.clone()),
                _srq: init.srq.clone(),
                qpn,
                qp_type: init.qp_type,
                cap: c,
                sq_sig_all: init.sq_sig_all,
                psn: random_psn(qpn),
            }),
        })
    }

    /// The XRC target QP `qpn` just made in `xrcd` (see [`crate::XrcDomain::create_qp`]).
    pub(crate) fn adopt_target(xrcd: crate::XrcDomain, qpn: u32, cap: QpCaps) -> QueuePair {
        QueuePair {
            inner: Arc::new(QpInner {
                owner: QpOwner::Xrcd(xrcd),
                _send_cq: None,
                _recv_cq: None,
                _srq: None,
                qpn,
                qp_type: QpType::XrcTgt,
                cap,
                sq_sig_all: false,
                psn: random_psn(qpn),
            }),
        }
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.inner.qpn
    }

    /// The transport type.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// Capacities.
    pub fn cap(&self) -> QpCaps {
        self.inner.cap
    }

    /// The protection domain; `None` for an XRC target, which belongs to an XRC domain.
    pub fn pd(&self) -> Option<&ProtectionDomain> {
        match &self.inner.owner {
            QpOwner::Pd(pd) => Some(pd),
            QpOwner::Xrcd(_) => None,
        }
    }

    /// The XRC domain of an XRC target QP; `None` for every other QP.
    pub fn xrc_domain(&self) -> Option<&crate::XrcDomain> {
        match &self.inner.owner {
            QpOwner::Xrcd(x) => Some(x),
            QpOwner::Pd(_) => None,
        }
    }

    /// The device.
    pub fn device(&self) -> &crate::Device {
        self.inner.device()
    }

    /// The PSN [`connect`](Self::connect) uses as `sq_psn` (random per QP, like
    /// `ibv_rc_pingpong`'s).
    pub fn local_psn(&self) -> u32 {
        self.inner.psn
    }

    /// What the peer needs to connect to this QP.
    pub fn endpoint(&self) -> QpEndpoint {
        QpEndpoint {
            gid: self.inner.device().gid(),
            qpn: self.inner.qpn,
            psn: self.inner.psn,
        }
    }

    /// Current state and attributes (`ibv_query_qp`).
    pub fn query(&self) -> QpInfo {
        let qpn = self.inner.qpn;
        let info = self.inner.device().inner().engine(Access::Query, |e, _| {
            e.qp(qpn).map(|q| QpInfo {
                state: q.state(),
                config: *q.config(),
                cap: *q.caps(),
                send_queue_len: q.send_queue_len(),
                recv_queue_len: q.recv_queue_len(),
                cc_rate_mbps: q.cc_rate_bps().map(|r| (r / 1e6) as u64),
            })
        });
        info.unwrap_or(QpInfo {
            state: QpState::Err,
            config: QpConfig::default(),
            cap: self.inner.cap,
            send_queue_len: 0,
            recv_queue_len: 0,
            cc_rate_mbps: None,
        })
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.query().state
    }

    /// Changes state and attributes (`ibv_modify_qp`): the `Some` fields of `attr` are the
    /// attribute mask. Refused changes change nothing. A move to RESET discards the QP's work
    /// requests and also its completions still waiting in its CQs (as mlx5's provider does):
    /// poll those first if they matter.
    pub fn modify(&self, attr: &QpAttr) -> Result<(), ModifyQpError> {
        let device = self.inner.device();
        if let Some(av) = attr.ah_attr {
            if av.dest_ip.is_ipv4() != device.ip().is_ipv4() {
                return Err(ModifyQpError::AddressFamily(av.dest_ip));
            }
        }
        let qpn = self.inner.qpn;
        device.inner().engine(Access::Teardown, |e, _| {
            e.modify_qp(qpn, attr).map_err(|e| match e {
                EngineError::Modify(m) => ModifyQpError::Transition(m),
                _ => ModifyQpError::Transition(softrdma_proto::ModifyQpError::NoSuchQp),
            })
        })
    }

    /// RESET → INIT with port 1, P_Key index 0 and `access`.
    pub fn to_init(&self, access: AccessFlags) -> Result<(), ModifyQpError> {
        self.modify(&QpAttr::rc_init(access))
    }

    /// INIT → RTR towards `remote`.
    pub fn to_rtr(&self, remote: &QpEndpoint, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        let device = self.inner.device();
        let mtu = match opts.path_mtu {
            Some(m) => m,
            None => device.query_port(1).map_or(Mtu::Mtu1024, |p| p.active_mtu),
        };
        let dest_ip = remote
            .gid
            .to_ip()
            .ok_or(ModifyQpError::NoAddress(remote.gid))?;
        let dest = AddressVector {
            dest_ip,
            traffic_class: opts.traffic_class,
            hop_limit: opts.hop_limit,
        };
        let psn = Psn::new(remote.psn);
        if self.inner.qp_type == QpType::Uc {
            return self.modify(&QpAttr::uc_rtr(mtu, dest, remote.qpn, psn));
        }
        self.modify(&QpAttr::rc_rtr(
            mtu,
            dest,
            remote.qpn,
            psn,
            opts.max_dest_rd_atomic,
            opts.min_rnr_timer,
        ))
    }

    /// RTR → RTS, sending from [`local_psn`](Self::local_psn).
    pub fn to_rts(&self, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        if self.inner.qp_type == QpType::Uc {
            return self.modify(&QpAttr::unreliable_rts(Psn::new(self.inner.psn)));
        }
        self.modify(&QpAttr::rc_rts(
            Psn::new(self.inner.psn),
            opts.timeout,
            opts.retry_cnt,
            opts.rnr_retry,
            opts.max_rd_atomic,
        ))
    }

    /// Connects an RC or UC QP to `remote`: RESET → INIT → RTR → RTS (a QP not in RESET is
    /// reset first, which discards its completions still in its CQs: see
    /// [`modify`](Self::modify)). UC takes only the attributes it has (access, path MTU, PSNs). Post
    /// receives before the peer starts sending (RC retries on RNR; UC drops what finds none).
    pub fn connect(&self, remote: &QpEndpoint, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        if self.inner.qp_type == QpType::Ud {
            return Err(ModifyQpError::Transition(
                softrdma_proto::ModifyQpError::InvalidValue {
                    attr: "qp_type (a UD QP has no peer: use ready_ud)",
                },
            ));
        }
        self.reset_if_needed()?;
        self.to_init(opts.access)?;
        self.to_rtr(remote, opts)?;
        self.to_rts(opts)
    }

    /// Brings a UD QP to RTS (RESET → INIT with `qkey` → RTR → RTS, a QP not in RESET is reset
    /// first, as [`connect`](Self::connect) does): it then sends to any QP through address handles and receives datagrams that
    /// present `qkey`.
    pub fn ready_ud(&self, qkey: u32) -> Result<(), ModifyQpError> {
        self.reset_if_needed()?;
        self.modify(&QpAttr::ud_init(qkey))?;
        self.modify(&QpAttr::ud_rtr())?;
        self.modify(&QpAttr::unreliable_rts(Psn::new(self.inner.psn)))
    }

    fn reset_if_needed(&self) -> Result<(), ModifyQpError> {
        if self.state() == QpState::Reset {
            return Ok(());
        }
        self.modify(&QpAttr {
            qp_state: Some(QpState::Reset),
            ..Default::default()
        })
    }

    /// Attaches this UD QP to the multicast group `gid` (`ibv_attach_mcast`; the LID does not
    /// exist on RoCE): datagrams sent to the group with QPN [`softrdma_proto::MULTICAST_QPN`]
    /// reach it. The device joins the group's IP address on its interface with the first QP.
    pub fn attach_mcast(&self, gid: &Gid) -> Result<(), McastError> {
        let group = self.mcast_group(gid)?;
        let qpn = self.inner.qpn;
        self.inner
            .device()
            .inner()
            .attach_mcast(qpn, group)
            .map_err(|e| e.map_or(McastError::NotUd, McastError::Join))
    }

    /// Detaches this QP from `gid` (`ibv_detach_mcast`); the device leaves the IP group with
    /// the last QP.
    pub fn detach_mcast(&self, gid: &Gid) -> Result<(), McastError> {
        let group = self.mcast_group(gid)?;
        let qpn = self.inner.qpn;
        if self.inner.device().inner().detach_mcast(qpn, group) {
            Ok(())
        } else {
            Err(McastError::NotAttached(*gid))
        }
    }

    fn mcast_group(&self, gid: &Gid) -> Result<std::net::IpAddr, McastError> {
        if self.inner.qp_type != QpType::Ud {
            return Err(McastError::NotUd);
        }
        match gid.to_ip() {
            Some(ip) if ip.is_multicast() && ip.is_ipv4() == self.inner.device().ip().is_ipv4() => {
                Ok(ip)
            }
            _ => Err(McastError::NotAGroup(*gid)),
        }
    }

    /// Posts send work requests in order (`ibv_post_send`). On error, the WRs before
    /// [`PostSendError::bad_wr`] were posted and the rest were not. Returns without waiting for
    /// the network; completions arrive on the send CQ (only for `SIGNALED` WRs unless the QP
    /// was created with `sq_sig_all`; errors always complete).
    pub fn post_send(&self, wrs: impl IntoIterator<Item = SendWr>) -> Result<(), PostSendError> {
        let qpn = self.inner.qpn;
        let sig_all = self.inner.sq_sig_all;
        self.inner
            .device()
            .inner()
            .engine(Access::Post, |e, now| post_each(e, now, qpn, sig_all, wrs))
    }

    /// Posts send work requests all together or none of them (`ibv_wr_complete`): each is
    /// checked, behind the ones before it, before any is queued. On error nothing was posted,
    /// and [`PostSendError::bad_wr`] names the WR that would have failed.
    pub fn post_send_all(&self, wrs: Vec<SendWr>) -> Result<(), PostSendError> {
        let qpn = self.inner.qpn;
        let sig_all = self.inner.sq_sig_all;
        self.inner.device().inner().engine(Access::Post, |e, now| {
            for (i, wr) in wrs.iter().enumerate() {
                check_length(i, wr)?;
                e.check_send(qpn, wr, i).map_err(|e| post_error(i, e))?;
            }
            post_each(e, now, qpn, sig_all, wrs)
        })
    }

    /// Posts receive work requests in order (`ibv_post_recv`). On error, the WRs before
    /// [`PostRecvError::bad_wr`] were posted and the rest were not.
    pub fn post_recv(&self, wrs: impl IntoIterator<Item = RecvWr>) -> Result<(), PostRecvError> {
        let qpn = self.inner.qpn;
        self.inner
            .device()
            .inner()
            .engine(Access::PostReceive, |e, _| {
                for (i, wr) in wrs.into_iter().enumerate() {
                    e.post_recv(qpn, wr).map_err(|e| PostRecvError {
                        bad_wr: i,
                        kind: PostErrorKind::from_engine(e),
                    })?;
                }
                Ok(())
            })
    }
}

/// Posts `wrs` in order until one is refused (`ibv_post_send`'s rule).
fn post_each(
    engine: &mut Engine,
    now: Instant,
    qpn: u32,
    sig_all: bool,
    wrs: impl IntoIterator<Item = SendWr>,
) -> Result<(), PostSendError> {
    for (i, mut wr) in wrs.into_iter().enumerate() {
        check_length(i, &wr)?;
        if sig_all {
            wr.flags = wr.flags | SendFlags::SIGNALED;
        }
        engine
            .post_send(now, qpn, wr)
            .map_err(|e| post_error(i, e))?;
    }
    Ok(())
}

/// WR `i` is longer than any message may be.
fn check_length(i: usize, wr: &SendWr) -> Result<(), PostSendError> {
    let len = wr.length();
    if len > u64::from(MAX_MSG_SZ) {
        return Err(PostSendError {
            bad_wr: i,
            kind: PostErrorKind::MessageTooLong(len),
        });
    }
    Ok(())
}

/// The engine refused WR `i`.
fn post_error(i: usize, e: EngineError) -> PostSendError {
    PostSendError {
        bad_wr: i,
        kind: PostErrorKind::from_engine(e),
    }
}
