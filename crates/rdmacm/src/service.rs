//! The connection manager of one device: its GSI QP (QP 1), the sans-IO [`RdmaCm`] that
//! speaks the IB CM through it, and the thread that carries MADs between the two and runs
//! the CM's timers. Each application call (connect, accept, …) runs the CM under the same
//! lock and sends what it produced at once, so a handshake costs no thread hand-off.
//!
//! One service per device address, shared by every CM id bound there (the kernel's rdma_cm
//! has one per port); it lives as long as an id, a channel's pending event or the caller
//! holds it.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant as WallClock};

use softrdma::farewell::{Farewell, Farewells};
use softrdma::{
    wr, AddressHandle, AhAttr, CompletionQueue, Device, DeviceConfig, MemoryRegion,
    ProtectionDomain, QpInitAttr, QueuePair, WcOpcode, WcStatus, WeakDevice, WorkCompletion,
};
use softrdma_cm::ib::{CmConfig, OutMad};
use softrdma_cm::rdma::gsi::{GsiBuffers, GsiService};
use softrdma_cm::rdma::{RdmaCm, RdmaEvent, RdmaEventKind, RdmaId};
use softrdma_proto::Instant;
use softrdma_wire::mad::{GSI_QKEY, MAD_LEN};

use crate::error::CmError;
use crate::event::CmEventKind;

/// What the service needs of a CM id (implemented by the public id type): the service routes
/// the CM's events to ids and does librdmacm's part of the handshake on their QPs.
pub(crate) trait Endpoint: Send + Sync {
    /// A connect request reached this listener: make the new id, hand the event to the
    /// listener's channel, return the new id (`None` when the listener is being destroyed).
    fn connect_request(
        self: Arc<Self>,
        rid: RdmaId,
        kind: CmEventKind,
    ) -> Option<Weak<dyn Endpoint>>;
    /// Delivers an event about this id to its channel.
    fn post(self: Arc<Self>, kind: CmEventKind);
    /// Whether the CM's `Established` answers the consumer's own completion of the
    /// connection ([`crate::CmId::establish`]), and so is not an event of the id; once.
    fn take_establish_quietly(&self) -> bool;
    /// Keeps the peer's REP parameters.
    fn set_peer_param(&self, param: softrdma_cm::rdma::ConnParam);
    /// The active side's QP on the REP: INIT again with the CM's rights, RTR, RTS (what
    /// librdmacm's `ucma_modify_qp_rtr`/`_rts` do before completing the connection).
    fn ready_active_qp(&self, cm: &RdmaCm) -> Result<(), CmError>;
    /// Whether rdma_cm moves the id's QP (one given to [`crate::CmId::create_qp`] or
    /// [`crate::CmId::adopt_qp`]); a consumer's own QP it leaves alone.
    fn has_qp(&self) -> bool;
    /// Moves the id's QP to the error state.
    fn qp_to_error(&self);
}

/// Receive buffers kept posted on QP 1 (each a GRH area and a MAD).
const RECV_SLOTS: usize = 128;
/// MAD buffers for sends, used round robin (UD sends complete as soon as they leave).
const SEND_SLOTS: usize = 128;
const RECV_SLOT_LEN: usize = GsiBuffers::RECV_SLOT_LEN;
/// Longest the thread sleeps without a CM deadline (it also wakes for every MAD).
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// The connection manager of one device.
pub(crate) struct Service {
    pub(crate) device: Device,
    pub(crate) pd: ProtectionDomain,
    gsi: QueuePair,
    cq: CompletionQueue,
    recv_mr: MemoryRegion,
    send_mr: MemoryRegion,
    epoch: WallClock,
    state: Mutex<State>,
    /// MADs posted and not yet completed: what must leave before the device closes (a
    /// program's last DREP, sent just before it exits).
    sending: AtomicUsize,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Last: see [`Registration`].
    registration: Registration,
}

pub(crate) struct State {
    pub(crate) cm: RdmaCm,
    /// Every id of this service, to route the CM's events to its channel.
    pub(crate) ids: HashMap<RdmaId, Weak<dyn Endpoint>>,
    ahs: HashMap<IpAddr, AddressHandle>,
    buffers: GsiBuffers,
    /// Events produced while the lock was held, delivered once it is released (a channel's
    /// consumer may call back into the service).
    pending: VecDeque<(Arc<dyn Endpoint>, CmEventKind)>,
    /// Ids looked up while the lock is held, released after it: dropping the last handle of
    /// an id runs the CM, which needs the lock.
    hold: Vec<Arc<dyn Endpoint>>,
    /// What the CM would send if the process ended now, where another process finds it
    /// (`softrdma::farewell`): made when a connection has something to say, removed when none
    /// has; `None` inside if it cannot be made.
    farewells: Option<Option<Farewells<softrdma_cm::ib::IbCmId>>>,
}

impl State {
    /// The live id `rid` names, kept alive until the lock is released.
    fn id(&mut self, rid: RdmaId) -> Option<Arc<dyn Endpoint>> {
        let id = self.ids.get(&rid).and_then(Weak::upgrade)?;
        self.hold.push(id.clone());
        Some(id)
    }
}

/// The services by device address. An entry whose service no longer upgrades is one being
/// torn down: until the entry goes, its device may still hold `<ip>:4791`. A program that
/// destroys its last id on an address and binds there again at once (which just works with
/// the kernel's rdma_cm) waits for that teardown instead of failing with `EADDRINUSE`.
struct Registry {
    services: Mutex<HashMap<IpAddr, (u64, Weak<Service>)>>,
    /// The devices services ran on. A device outlives its service while the application
    /// holds a PD, QP or MR of it; a new service on that address uses it again (the kernel's
    /// rdma_cm shares one device too) instead of failing to bind a second one there.
    devices: Mutex<HashMap<IpAddr, WeakDevice>>,
    /// Notified whenever an entry goes.
    removed: Condvar,
    next_serial: AtomicU64,
}

/// Longest a bind waits for a service on its address to finish closing (the teardown waits
/// up to a second for the last MADs, then joins two threads).
const TEARDOWN_WAIT: Duration = Duration::from_secs(5);

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        services: Mutex::default(),
        devices: Mutex::default(),
        removed: Condvar::new(),
        next_serial: AtomicU64::new(1),
    })
}

type Services<'a> = MutexGuard<'a, HashMap<IpAddr, (u64, Weak<Service>)>>;

impl Registry {
    /// The registry, locked once no service on `ip` is closing (or after [`TEARDOWN_WAIT`]),
    /// with the live service on `ip` if there is one.
    fn settled(&self, ip: IpAddr) -> (Services<'_>, Option<Arc<Service>>) {
        let deadline = WallClock::now() + TEARDOWN_WAIT;
        let mut services = lock(&self.services);
        loop {
            let Some((_, weak)) = services.get(&ip) else {
                return (services, None);
            };
            if let Some(s) = weak.upgrade() {
                return (services, Some(s));
            }
            let left = deadline.saturating_duration_since(WallClock::now());
            if left.is_zero() {
                return (services, None);
            }
            services = self
                .removed
                .wait_timeout(services, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A service's entry in the registry. The last field of [`Service`], so it goes after
/// everything else the service held: its device, and with it the socket.
struct Registration {
    ip: IpAddr,
    /// Set once the entry is in the registry (a service that failed to start has none).
    serial: OnceLock<u64>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(&serial) = self.serial.get() else {
            return;
        };
        let r = registry();
        let mut services = lock(&r.services);
        if services.get(&self.ip).is_some_and(|(s, _)| *s == serial) {
            services.remove(&self.ip);
        }
        drop(services);
        r.removed.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Service {
    /// The service of the device at `ip`: the live one; else a new one, on the device an
    /// earlier service left open (the application still holds it), or on a device opened now
    /// (a device opened elsewhere in the process and never given to rdma_cm holds port 4791:
    /// open it through [`Service::for_device`] first).
    pub(crate) fn for_ip(ip: IpAddr) -> Result<Arc<Service>, CmError> {
        let r = registry();
        let (services, live) = r.settled(ip);
        if let Some(s) = live {
            return Ok(s);
        }
        // Under the registry lock: a second thread binding here waits and finds the service.
        let held = lock(&r.devices).get(&ip).and_then(WeakDevice::upgrade);
        let device = match held {
            Some(device) => device,
            None => Device::open(DeviceConfig::new(ip)).map_err(CmError::Device)?,
        };
        Service::register(services, &device)
    }

    /// The service of `device` (started on first use).
    pub(crate) fn for_device(device: &Device) -> Result<Arc<Service>, CmError> {
        let (services, live) = registry().settled(device.ip());
        if let Some(s) = live {
            return Ok(s);
        }
        Service::register(services, device)
    }

    /// Starts the service of `device` and enters it in the registry, whose lock `services` the
    /// caller took when it found no service there: two threads binding one address at once
    /// start one service, and the second finds it.
    fn register(mut services: Services<'_>, device: &Device) -> Result<Arc<Service>, CmError> {
        let r = registry();
        let s = Service::start(device.clone())?;
        let mut devices = lock(&r.devices);
        devices.retain(|_, d| d.is_open());
        devices.insert(device.ip(), device.downgrade());
        drop(devices);
        let serial = r.next_serial.fetch_add(1, Ordering::Relaxed);
        services.insert(device.ip(), (serial, Arc::downgrade(&s)));
        let _ = s.registration.serial.set(serial);
        Ok(s)
    }

    fn start(device: Device) -> Result<Arc<Service>, CmError> {
        let pd = device.alloc_pd();
        let cq = device
            .create_cq((RECV_SLOTS + SEND_SLOTS) as u32)
            .map_err(|e| CmError::Setup(e.to_string()))?;
        let mut init = QpInitAttr::ud(&cq);
        init.cap.max_send_wr = SEND_SLOTS as u32;
        init.cap.max_recv_wr = RECV_SLOTS as u32;
        let gsi = pd
            .create_gsi_qp(&init)
            .map_err(|e| CmError::Setup(e.to_string()))?;
        gsi.ready_ud(GSI_QKEY)
            .map_err(|e| CmError::Setup(e.to_string()))?;
        let local = softrdma::AccessFlags::LOCAL_WRITE;
        let buffers = GsiBuffers::new(RECV_SLOTS, SEND_SLOTS);
        let recv_mr = pd
            .reg_mr(buffers.recv_bytes(), local)
            .map_err(|e| CmError::Setup(e.to_string()))?;
        let send_mr = pd
            .reg_mr(buffers.send_bytes(), local)
            .map_err(|e| CmError::Setup(e.to_string()))?;
        for slot in 0..RECV_SLOTS {
            post_recv_slot(&gsi, &recv_mr, slot)?;
        }
        let seed = std::collections::hash_map::RandomState::new().hash_one(WallClock::now());
        let config = CmConfig {
            ca_guid: softrdma::gid::node_guid(device.ip()),
            rng_seed: seed,
            tid_agent: (seed >> 32) as u32 | 1,
            // On a shared address, the kernel steers the CM's replies by this byte.
            comm_id_prefix: device.address_slot(),
            ..CmConfig::default()
        };
        let service = Arc::new(Service {
            pd,
            gsi,
            cq,
            recv_mr,
            send_mr,
            epoch: WallClock::now(),
            state: Mutex::new(State {
                cm: RdmaCm::new(config),
                ids: HashMap::new(),
                ahs: HashMap::new(),
                buffers,
                pending: VecDeque::new(),
                hold: Vec::new(),
                farewells: None,
            }),
            sending: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
            registration: Registration {
                ip: device.ip(),
                serial: OnceLock::new(),
            },
            device,
        });
        let weak = Arc::downgrade(&service);
        let handle = std::thread::Builder::new()
            .name(format!("softrdma-cm {}", service.device.ip()))
            .spawn(move || run(weak))
            .map_err(|e| CmError::Setup(e.to_string()))?;
        *lock(&service.thread) = Some(handle);
        Ok(service)
    }

    /// The CM's clock: time since the service started.
    pub(crate) fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Runs `f` on the CM, then sends what it produced and hands out its events.
    pub(crate) fn with_cm<T>(&self, f: impl FnOnce(&mut State, Instant) -> T) -> T {
        let mut st = lock(&self.state);
        let now = self.now();
        let out = f(&mut st, now);
        self.pump(&mut st, now);
        self.release(st);
        out
    }

    /// Sends every MAD the CM has queued and turns its events into the ids' events (doing
    /// for the consumer what librdmacm does inside the library: the active side's QP goes to
    /// RTR and RTS on the REP and the RTU leaves at once; a disconnected or rejected QP goes
    /// to ERR).
    fn pump(&self, st: &mut State, now: Instant) {
        Round { service: self, st }.pump(now);
        self.keep_farewells(st);
    }

    /// Writes down each connection's farewell that changed: what the kernel's CM would send
    /// for it if this process died now (see `softrdma::farewell`).
    fn keep_farewells(&self, st: &mut State) {
        let changes = st.cm.farewell_changes();
        if st.farewells.is_none() && changes.iter().all(|(_, mad)| mad.is_none()) {
            return;
        }
        let file = st.farewells.get_or_insert_with(|| {
            Farewells::create(self.device.ip())
                .map_err(|e| {
                    tracing::debug!(
                        "rdma_cm: no farewell file (a killed process's peers will not be \
                         told): {e}"
                    )
                })
                .ok()
        });
        let Some(file) = file else { return };
        for (id, mad) in changes {
            let said = mad.and_then(|m| {
                Some(Farewell {
                    dst: m.dst.to_ip()?,
                    dst_qpn: m.dst_qpn,
                    mad: m.mad,
                })
            });
            if let Err(e) = file.set(id, said.as_ref()) {
                tracing::debug!("rdma_cm: farewell not written: {e}");
            }
        }
        if file.is_empty() {
            // Nothing to say: no file is left behind (made again with the next connection).
            st.farewells = None;
        }
    }

    fn on_event(&self, st: &mut State, now: Instant, e: RdmaEvent) {
        let Some(id) = st.id(e.id) else {
            if let RdmaEventKind::ConnectRequest { listen_id, .. } = &e.kind {
                self.on_connect_request(st, e.id, *listen_id, e.kind.clone());
            }
            return;
        };
        match e.kind {
            RdmaEventKind::ConnectResponse { param } if !id.has_qp() => {
                id.set_peer_param(param.clone());
                st.pending
                    .push_back((id, CmEventKind::ConnectResponse { param }));
            }
            RdmaEventKind::ConnectResponse { param } => match id.ready_active_qp(&st.cm) {
                Ok(()) => {
                    let _ = st.cm.complete_connect(now, e.id);
                    id.set_peer_param(param);
                }
                Err(err) => {
                    tracing::debug!("rdma_cm: the QP could not be readied: {err}");
                    let _ = st.cm.reject(now, e.id, &[]);
                    st.pending.push_back((id, CmEventKind::ConnectError));
                }
            },
            RdmaEventKind::Established { .. } if id.take_establish_quietly() => {}
            RdmaEventKind::Established { ud } => {
                st.pending.push_back((id, CmEventKind::Established { ud }));
            }
            RdmaEventKind::Rejected {
                reason,
                private_data,
            } => {
                // librdmacm moves a rejected id's QP to the error state (ucma_modify_qp_err).
                id.qp_to_error();
                st.pending.push_back((
                    id,
                    CmEventKind::Rejected {
                        reason,
                        private_data,
                    },
                ));
            }
            RdmaEventKind::Unreachable { .. } => {
                st.pending.push_back((id, CmEventKind::Unreachable))
            }
            RdmaEventKind::Disconnected => {
                id.qp_to_error();
                st.pending.push_back((id, CmEventKind::Disconnected));
            }
            RdmaEventKind::TimewaitExit => st.pending.push_back((id, CmEventKind::TimewaitExit)),
            RdmaEventKind::ConnectRequest { .. } => {}
        }
    }

    /// A REQ (or SIDR_REQ) reached a listener: a new id on the listener's channel.
    fn on_connect_request(
        &self,
        st: &mut State,
        rid: RdmaId,
        listen_id: RdmaId,
        kind: RdmaEventKind,
    ) {
        let Some(listener) = st.id(listen_id) else {
            // The listener is gone; the CM rejects when the id is destroyed.
            let now = self.now();
            let _ = st.cm.destroy(now, rid);
            return;
        };
        let RdmaEventKind::ConnectRequest {
            param, peer, local, ..
        } = kind
        else {
            return;
        };
        match listener.connect_request(rid, CmEventKind::ConnectRequest { param, peer, local }) {
            Some(new) => {
                st.ids.insert(rid, new);
            }
            // The CM rejects when the id is destroyed.
            None => {
                let now = self.now();
                let _ = st.cm.destroy(now, rid);
            }
        }
    }

    fn send_mad(&self, st: &mut State, OutMad { dst, dst_qpn, mad }: OutMad) {
        let Some(ip) = dst.to_ip() else { return };
        let ah = match st.ahs.get(&ip) {
            Some(ah) => ah.clone(),
            None => {
                let attr = AhAttr::new(dst, self.device.gid_index() as u8);
                match self.pd.create_ah(&attr) {
                    Ok(ah) => {
                        st.ahs.insert(ip, ah.clone());
                        ah
                    }
                    Err(e) => {
                        tracing::debug!("rdma_cm: no address handle for {ip}: {e}");
                        return;
                    }
                }
            }
        };
        let (slot, off) = st.buffers.next_send();
        if self.send_mr.write(off, &mad).is_err() {
            return;
        }
        let sge = self.send_mr.sge(off, MAD_LEN as u32);
        let w = wr::ud_send(
            SEND_WR_BASE + slot as u64,
            vec![sge],
            &ah,
            dst_qpn,
            GSI_QKEY,
        );
        self.sending.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = self.gsi.post_send([w]) {
            self.sending.fetch_sub(1, Ordering::AcqRel);
            // A full send queue loses the MAD; the CM's retransmission covers it.
            tracing::debug!("rdma_cm: MAD not sent: {e}");
        }
    }

    /// Handles what QP 1 received.
    fn on_completions(&self, wcs: &[WorkCompletion]) {
        let mut st = lock(&self.state);
        let now = self.now();
        for wc in wcs {
            if wc.wr_id >= SEND_WR_BASE {
                self.sending.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let slot = wc.wr_id as usize;
            if wc.status == WcStatus::Success && wc.byte_len as usize >= RECV_SLOT_LEN {
                let mut buf = [0u8; RECV_SLOT_LEN];
                if self
                    .recv_mr
                    .read(GsiBuffers::recv_offset(slot), &mut buf)
                    .is_ok()
                {
                    Round {
                        service: self,
                        st: &mut st,
                    }
                    .on_received(now, &buf, wc.src_qp);
                }
            }
            if wc.status != WcStatus::WrFlushErr {
                let _ = post_recv_slot(&self.gsi, &self.recv_mr, slot);
            }
        }
        Round {
            service: self,
            st: &mut st,
        }
        .on_timers(now);
        self.pump(&mut st, now);
        self.release(st);
    }

    /// Unlocks, then delivers the events and lets go of the ids the pass looked up.
    fn release(&self, mut st: MutexGuard<'_, State>) {
        let pending = std::mem::take(&mut st.pending);
        let hold = std::mem::take(&mut st.hold);
        drop(st);
        for (id, kind) in pending {
            id.post(kind);
        }
        drop(hold);
    }

    /// How long the thread may sleep.
    fn next_wait(&self) -> Duration {
        let st = lock(&self.state);
        let now = self.now();
        match st.cm.poll_timeout() {
            Some(t) => t.saturating_duration_since(now).min(IDLE_WAIT),
            None => IDLE_WAIT,
        }
    }
}

/// Keeps a device's connection manager running while held. Without one, the manager stops
/// with the last id bound on the device and starts again with the next: a program that closes
/// one connection's ids and listens again at once (perftest's `-R` does, between its
/// parameter exchange and its test connection) would be without a listener while it restarts,
/// and a peer's REQ in that moment is rejected. A library that owns the device for the
/// process's lifetime (the C `librdmacm.so.1`) holds one.
pub struct CmService {
    _service: Arc<Service>,
}

impl CmService {
    /// Starts (or joins) the connection manager of `device`.
    pub fn start(device: &Device) -> Result<CmService, CmError> {
        Ok(CmService {
            _service: Service::for_device(device)?,
        })
    }

    /// Whether the manager runs on `device` (joining one that runs at the address on another
    /// device returns that one).
    pub(crate) fn runs_on(&self, device: &Device) -> bool {
        self._service.device.name() == device.name()
    }
}

impl std::fmt::Debug for CmService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmService")
            .field("device", &self._service.device.ip())
            .finish()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // Let the last MADs leave (their completions come through the thread, or are polled
        // here when the thread itself drops the service), for at most a second.
        let deadline = WallClock::now() + Duration::from_secs(1);
        let mut wcs = Vec::new();
        while self.sending.load(Ordering::Acquire) > 0 && WallClock::now() < deadline {
            wcs.clear();
            self.cq
                .poll_blocking(32, &mut wcs, Some(Duration::from_millis(10)));
            for wc in &wcs {
                if wc.wr_id >= SEND_WR_BASE {
                    self.sending.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        self.stop.store(true, Ordering::Release);
        if let Some(h) = lock(&self.thread).take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// One pass of the service over its CM, with the state locked: the service's part of
/// [`GsiService`] (how a MAD leaves, what an event means to an id).
struct Round<'a> {
    service: &'a Service,
    st: &'a mut State,
}

impl GsiService for Round<'_> {
    fn cm(&mut self) -> &mut RdmaCm {
        &mut self.st.cm
    }

    fn send_mad(&mut self, mad: OutMad) {
        self.service.send_mad(self.st, mad);
    }

    fn on_event(&mut self, now: Instant, event: RdmaEvent) {
        self.service.on_event(self.st, now, event);
    }

    /// A request for another device's listener on this shared address (the kernel's steering
    /// went by a table gone wrong) is not this CM's to reject: dropped, it comes again to the
    /// listener once the table is right.
    fn misdirected(&mut self, mad: &[u8]) -> bool {
        self.st
            .cm
            .unlistened_request(mad)
            .is_some_and(|sid| self.service.device.request_for_another(sid))
    }
}

/// Send work requests are numbered from here (receives by their slot).
const SEND_WR_BASE: u64 = 1 << 32;

fn post_recv_slot(gsi: &QueuePair, mr: &MemoryRegion, slot: usize) -> Result<(), CmError> {
    let sge = mr.sge(GsiBuffers::recv_offset(slot), RECV_SLOT_LEN as u32);
    gsi.post_recv([wr::recv(slot as u64, vec![sge])])
        .map_err(|e| CmError::Setup(e.to_string()))
}

/// The service thread: waits for MADs (or the next CM deadline) and handles them.
fn run(service: Weak<Service>) {
    let mut wcs = Vec::with_capacity(32);
    loop {
        let Some(s) = service.upgrade() else { return };
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        let wait = s.next_wait();
        wcs.clear();
        // Passive: MADs are rare, and a thread driving the device while it waits would take
        // every data datagram of the device's connections on their way to the progress
        // thread (and keep that thread from spinning for a busy responder).
        s.cq.poll_blocking_passive(32, &mut wcs, Some(wait));
        s.on_completions(&wcs);
    }
}

/// Where a connection to `dst` leaves from: the source address the kernel's routing table
/// picks (what rdma_resolve_addr asks the kernel), found by connecting a UDP socket.
pub(crate) fn route_source(dst: SocketAddr) -> Result<IpAddr, CmError> {
    let any: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let sock = std::net::UdpSocket::bind(any).map_err(CmError::Route)?;
    sock.connect(SocketAddr::new(dst.ip(), 4791))
        .map_err(CmError::Route)?;
    Ok(sock.local_addr().map_err(CmError::Route)?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CmId, EventChannel, PortSpace, RdmaQpType};

    /// A service still closing (here: waiting for a MAD that never completes, on another
    /// thread) holds its address: a new service there waits for it to close, then opens the
    /// device afresh, instead of failing with `EADDRINUSE` (CI saw that when the CM thread
    /// dropped a listener's service just as the program bound the port again).
    #[test]
    fn a_new_service_waits_for_the_old_one_on_its_address_to_close() {
        let ip: IpAddr = "127.0.60.27".parse().unwrap();
        let old = Service::for_ip(ip).unwrap();
        old.sending.store(1, Ordering::Release);
        let closing = std::thread::spawn(move || drop(old));
        // The old service is now in its second-long wait for the MAD.
        std::thread::sleep(Duration::from_millis(200));
        let asked = WallClock::now();
        let new = Service::for_ip(ip).expect("the address is free once the old service closed");
        assert!(
            asked.elapsed() >= Duration::from_millis(500),
            "{:?}",
            asked.elapsed()
        );
        assert_eq!(new.device.ip(), ip);
        closing.join().unwrap();
        // And the registry names the new service.
        assert!(Arc::ptr_eq(&Service::for_ip(ip).unwrap(), &new));
    }

    /// A program that keeps a PD of its last id on an address (and so the device) and binds
    /// there again gets the device it holds, as with the kernel's rdma_cm, which shares one
    /// device; before, rdma_cm opened a second one and failed with `EADDRINUSE`.
    #[test]
    fn a_new_service_uses_the_device_the_application_still_holds() {
        let ip: IpAddr = "127.0.60.28".parse().unwrap();
        let old = Service::for_ip(ip).unwrap();
        let pd = old.pd.clone();
        let gone = Arc::downgrade(&old);
        drop(old);
        // The CM thread may hold the service a moment longer.
        let asked = WallClock::now();
        while gone.strong_count() > 0 {
            assert!(
                asked.elapsed() < Duration::from_secs(5),
                "the service stays"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let new = Service::for_ip(ip).expect("the held device serves again");
        assert_eq!(new.device.name(), pd.device().name());
        // And connections are made through it.
        let (sch, cch) = (EventChannel::new(), EventChannel::new());
        let l = CmId::new(&sch, PortSpace::Tcp, RdmaQpType::Rc);
        l.bind_addr(SocketAddr::new(ip, 7471)).unwrap();
        l.listen().unwrap();
        let c = CmId::new(&cch, PortSpace::Tcp, RdmaQpType::Rc);
        let src = "127.0.60.29:0".parse().unwrap();
        c.resolve_addr(Some(src), SocketAddr::new(ip, 7471))
            .unwrap();
        let wait = Some(Duration::from_secs(10));
        assert_eq!(cch.get_event(wait).unwrap().kind, CmEventKind::AddrResolved);
        c.resolve_route().unwrap();
        assert_eq!(
            cch.get_event(wait).unwrap().kind,
            CmEventKind::RouteResolved
        );
        let cq = c.device().unwrap().create_cq(4).unwrap();
        let _qp = c.create_qp(&c.pd().unwrap(), &QpInitAttr::rc(&cq)).unwrap();
        c.connect(&crate::ConnParam::rc(0)).unwrap();
        let req = sch.get_event(wait).unwrap();
        assert!(
            matches!(req.kind, CmEventKind::ConnectRequest { .. }),
            "{req:?}"
        );
        assert_eq!(req.id.device().unwrap().name(), pd.device().name());
    }

    /// Two threads binding ids to one fresh address at once both succeed, as with the
    /// kernel's rdma_cm (found in review: both found no service, both opened a device, and
    /// the second failed with `EADDRINUSE`, 20 rounds in 20).
    #[test]
    fn two_threads_binding_one_fresh_address_at_once_both_succeed() {
        for round in 0..20u8 {
            let ip: IpAddr = format!("127.0.61.{}", 10 + round).parse().unwrap();
            let barrier = Arc::new(std::sync::Barrier::new(2));
            let ch = EventChannel::new();
            let binds: Vec<_> = (0..2u16)
                .map(|i| {
                    let (barrier, ch) = (barrier.clone(), ch.clone());
                    std::thread::spawn(move || {
                        let id = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
                        barrier.wait();
                        let bound = id.bind_addr(SocketAddr::new(ip, 7000 + i));
                        (id, bound.map_err(|e| e.to_string()))
                    })
                })
                .collect();
            let ids: Vec<_> = binds.into_iter().map(|h| h.join().unwrap()).collect();
            for (_, bound) in &ids {
                assert!(bound.is_ok(), "round {round}: {bound:?}");
            }
            assert_eq!(
                ids[0].0.device().unwrap().name(),
                ids[1].0.device().unwrap().name()
            );
        }
    }
}
