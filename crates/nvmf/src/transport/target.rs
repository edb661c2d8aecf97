//! The target: a listening rdma_cm id on the port, the checks of each connect request's
//! private data (rejected with the transport's status codes), a thread per accepted queue,
//! and the keep alive reaper.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use softrdma::Device;
use softrdma_rdmacm::{
    CmEventKind, CmId, CmService, ConnParam, EventChannel, PortSpace, RdmaQpType,
};

use super::queue::{Queue, QueueShared};
use super::stats::{StatsInner, TargetStats};
use crate::controller::{
    lock, ConfigError, Limits, Registry, Subsystem, TeardownReason, ADMIN_QUEUE_SIZE,
    MAX_QUEUE_SIZE,
};
use crate::wire::rdma_cm::{CmReject, CmReply, CmRequest, RejectStatus};

/// The standard NVMe-oF port (Linux's `NVME_RDMA_IP_PORT`).
pub const NVMF_PORT: u16 = 4420;
/// How often the listener looks at its ids and the keep alive timers.
const TICK: Duration = Duration::from_millis(100);

/// How to run a target.
#[derive(Debug)]
pub struct TargetConfig {
    /// Where to listen (port 4420 is the standard one).
    pub addr: SocketAddr,
    /// The NVM subsystems (the discovery subsystem is always there).
    pub subsystems: Vec<Subsystem>,
    /// Limits advertised.
    pub limits: Limits,
    /// A device opened by the caller (e.g. with a pcap tap) on `addr`'s IP; `None` opens one.
    pub device: Option<Device>,
    /// Bytes of data buffers each queue may hold at once.
    pub queue_buffer_budget: usize,
}

impl TargetConfig {
    /// A target on `addr` serving `subsystems`, with the default limits.
    pub fn new(addr: SocketAddr, subsystems: Vec<Subsystem>) -> TargetConfig {
        TargetConfig {
            addr,
            subsystems,
            limits: Limits::default(),
            device: None,
            queue_buffer_budget: 32 << 20,
        }
    }
}

/// Why a target did not start.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The configuration is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// rdma_cm refused to listen on the address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: softrdma_rdmacm::CmError,
    },
}

/// A running NVMe-oF target. Dropping it (or [`Target::shutdown`]) disconnects every queue.
pub struct Target {
    registry: Arc<Registry>,
    stats: Arc<StatsInner>,
    stop: Arc<AtomicBool>,
    listener: Option<JoinHandle<()>>,
    live: Arc<AtomicU64>,
    local: SocketAddr,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("addr", &self.local).finish()
    }
}

impl Target {
    /// Listens on `config.addr` and serves hosts on threads of its own.
    pub fn start(config: TargetConfig) -> Result<Target, TargetError> {
        let registry = Arc::new(Registry::new(
            config.addr,
            config.subsystems,
            config.limits,
        )?);
        let ch = EventChannel::new();
        let listen = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        let listen_err = |source| TargetError::Listen {
            addr: config.addr,
            source,
        };
        // A device of the caller's: its connection manager must be the one the id uses.
        let service = match &config.device {
            Some(d) => Some(CmService::start(d).map_err(listen_err)?),
            None => None,
        };
        let local = match &config.device {
            Some(d) => listen.bind_device(d, config.addr.port()),
            None => listen.bind_addr(config.addr),
        }
        .map_err(listen_err)?;
        listen.listen().map_err(listen_err)?;
        let stats = Arc::new(StatsInner::default());
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(AtomicU64::new(0));
        let mut listener = Listener {
            ch,
            _listen: listen,
            _service: service,
            registry: registry.clone(),
            stats: stats.clone(),
            stop: stop.clone(),
            live: live.clone(),
            budget: config.queue_buffer_budget,
            queues: HashMap::new(),
        };
        let thread = std::thread::Builder::new()
            .name("nvmf-listener".into())
            .spawn(move || listener.run())
            .map_err(|e| listen_err(softrdma_rdmacm::CmError::Setup(e.to_string())))?;
        tracing::info!("NVMe-oF target listening on {local}");
        Ok(Target {
            registry,
            stats,
            stop,
            listener: Some(thread),
            live,
            local,
        })
    }

    /// The subsystems and live controllers.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The counters now.
    pub fn stats(&self) -> TargetStats {
        let s = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TargetStats {
            accepted: get(&s.accepted),
            rejected: get(&s.rejected),
            last_reject: *lock(&s.last_reject),
            capsules: get(&s.capsules),
            errors_answered: get(&s.errors_answered),
            short_capsules: get(&s.short_capsules),
            fatal_errors: get(&s.fatal_errors),
            keep_alive_expired: get(&s.keep_alive_expired),
            queues_closed: get(&s.queues_closed),
            queues_live: self.live.load(Ordering::Relaxed),
        }
    }

    /// Disconnects every host and stops listening.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.listener.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop_now();
    }
}

struct Served {
    shared: Arc<QueueShared>,
    thread: JoinHandle<()>,
}

struct Listener {
    ch: EventChannel,
    /// The listening id: held, so the port stays taken while the target runs.
    _listen: CmId,
    _service: Option<CmService>,
    registry: Arc<Registry>,
    stats: Arc<StatsInner>,
    stop: Arc<AtomicBool>,
    live: Arc<AtomicU64>,
    budget: usize,
    queues: HashMap<CmId, Served>,
}

impl Listener {
    fn run(&mut self) {
        while !self.stop.load(Ordering::Acquire) {
            if let Some(e) = self.ch.get_event(Some(TICK)) {
                match e.kind {
                    CmEventKind::ConnectRequest { param, peer, .. } => {
                        self.connect_request(e.id, &param, peer)
                    }
                    CmEventKind::Established { .. } => {}
                    CmEventKind::Disconnected
                    | CmEventKind::TimewaitExit
                    | CmEventKind::ConnectError
                    | CmEventKind::Unreachable
                    | CmEventKind::Rejected { .. } => {
                        if let Some(q) = self.queues.get(&e.id) {
                            q.shared.stop();
                        }
                    }
                    _ => {}
                }
            }
            let expired = self.registry.reap_expired(Instant::now());
            self.stats
                .keep_alive_expired
                .fetch_add(expired as u64, Ordering::Relaxed);
            self.collect(false);
        }
        for c in self.registry.controllers() {
            self.registry.remove(&c, TeardownReason::TargetStopped);
        }
        for q in self.queues.values() {
            q.shared.stop();
        }
        self.collect(true);
    }

    /// Joins the threads of queues that ended (all of them, waiting, with `all`), dropping
    /// their ids.
    fn collect(&mut self, all: bool) {
        let done: Vec<CmId> = self
            .queues
            .iter()
            .filter(|(_, q)| all || q.thread.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        for id in done {
            if let Some(q) = self.queues.remove(&id) {
                let _ = q.thread.join();
                self.live.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn reject(&self, id: &CmId, status: RejectStatus, peer: SocketAddr) {
        tracing::info!("rejecting a connection from {peer}: {status:?}");
        // Counted before the REJ leaves: a host that has its REJECTED event reads the stats
        // with its rejection in them (counted after, the host's read raced the count).
        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
        *lock(&self.stats.last_reject) = Some(status);
        let rej = CmReject { recfmt: 0, status };
        let _ = id.reject(&rej.emit());
    }

    /// A connect request: its private data checked (NVMe-oF's RDMA_CM_REQUEST), a queue made
    /// for it, accepted with the controller's receive queue size.
    fn connect_request(&mut self, id: CmId, param: &ConnParam, peer: SocketAddr) {
        let req = match CmRequest::parse(&param.private_data) {
            Ok(r) => r,
            Err(_) => return self.reject(&id, RejectStatus::InvalidLength, peer),
        };
        let limits = self.registry.limits;
        let max_entries = if req.qid == 0 {
            ADMIN_QUEUE_SIZE
        } else {
            MAX_QUEUE_SIZE
        };
        let status = if req.recfmt != 0 {
            Some(RejectStatus::InvalidRecfmt)
        } else if req.qid > limits.max_io_queues {
            Some(RejectStatus::InvalidQid)
        } else if req.hsqsize == 0 || req.hsqsize >= max_entries {
            Some(RejectStatus::InvalidHsqsize)
        } else if req.hrqsize < req.hsqsize + 1 {
            // The host must have room for a response to every command it may send.
            Some(RejectStatus::InvalidHrqsize)
        } else if param.initiator_depth == 0 {
            // The host takes no RDMA READ: its writes' data could not be fetched.
            Some(RejectStatus::InvalidIrd)
        } else {
            None
        };
        if let Some(status) = status {
            return self.reject(&id, status, peer);
        }
        let entries = req.hsqsize + 1;
        let made = Queue::new(
            &id,
            &self.registry,
            req.qid,
            entries,
            self.budget,
            self.stats.clone(),
        );
        let (queue, shared) = match made {
            Ok(q) => q,
            Err(e) => {
                tracing::warn!("no resources for a queue of {entries}: {e}");
                return self.reject(&id, RejectStatus::NoResources, peer);
            }
        };
        let max_init = id
            .device()
            .map_or(1, |d| d.query_device().max_qp_init_rd_atom.min(255) as u8);
        let accept = ConnParam {
            private_data: CmReply {
                recfmt: 0,
                crqsize: entries,
            }
            .emit()
            .to_vec(),
            responder_resources: 0,
            initiator_depth: param.initiator_depth.min(max_init),
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        if let Err(e) = id.accept(&accept) {
            tracing::warn!("accept from {peer} failed: {e}");
            return;
        }
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        let name = format!("nvmf-q{}", req.qid);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || queue.run());
        match thread {
            Ok(thread) => {
                self.live.fetch_add(1, Ordering::Relaxed);
                self.queues.insert(id, Served { shared, thread });
            }
            Err(e) => {
                tracing::warn!("no thread for a queue: {e}");
                let _ = id.disconnect();
            }
        }
    }
}
