//! [`Device`]: one software RDMA NIC bound to one local IP address, and its attributes.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::{JoinHandle, ThreadId};

use softrdma_proto::{Engine, EngineConfig, Mtu};
use softrdma_udp::{Config as UdpConfig, RecvArena, RoceSocket, MAX_UDP_PAYLOAD};

use crate::backend::{AttachError, Backend};
use crate::cq::CompletionQueue;
use crate::error::{CreateCqError, OpenDeviceError, QueryError};
use crate::event::AsyncEvents;
use crate::gid::{eui64, interface_of, mac_of, Gid, GidEntry};
use crate::limits::{MAX_CQE, MAX_MSG_SZ, MAX_QP_WR, MAX_SGE};
use crate::pd::ProtectionDomain;
use crate::progress::{self, Access, Core, Inner};
use crate::share::{ServiceClaim, ShareError, SharedAddress, SharedAddressInfo};
use crate::stats::DeviceStats;

mod attr;
mod config;

pub use attr::{AtomicCap, DeviceAttr, LinkLayer, PortAttr, PortState};
pub use config::DeviceConfig;

/// What every object of a device shares; dropping the last reference stops the progress
/// thread.
pub(crate) struct DeviceShared {
    pub inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: Option<ThreadId>,
    name: String,
    local_addr: SocketAddr,
    attr: DeviceAttr,
    port: PortAttr,
    gids: Vec<GidEntry>,
    /// The device's membership of a shared address. Declared after `inner`, so that it is
    /// dropped after the socket's own descriptor closed (see `share`).
    share: Option<SharedAddress>,
    /// Bytes of device memory allocated (`crate::dm`).
    pub(crate) dm_in_use: AtomicUsize,
    /// `CLOCK_MONOTONIC` (ns) when the device's clock read 0.
    epoch_monotonic_ns: u64,
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        self.inner
            .stop
            .store(true, std::sync::atomic::Ordering::Release);
        self.inner.signal();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            // A waker run by the progress thread could drop the last handle there; the thread
            // cannot join itself, and exits on its own once it sees `stop`.
            if Some(std::thread::current().id()) != self.thread_id {
                let _ = h.join();
            }
        }
    }
}

/// A software RDMA device (an RNIC with one port) bound to one local IP address: the
/// `ibv_context` of softrdma.
///
/// Opening it binds `<ip>:4791` and starts the device's progress thread. `Device` is a cheap
/// handle (clone it freely); every object created from it keeps the device alive, and when the
/// last one goes, the thread stops. Several devices may live in one process, each on its own
/// address.
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<DeviceShared>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.shared.name)
            .field("addr", &self.shared.local_addr)
            .finish()
    }
}

/// A handle on a device that does not keep it open ([`Device::downgrade`]): what a registry
/// of the process's devices holds, such as rdma_cm's by address, to find a device the
/// application still holds (through a PD, a QP, …) without keeping it open itself.
#[derive(Clone, Debug, Default)]
pub struct WeakDevice {
    shared: Weak<DeviceShared>,
}

impl WeakDevice {
    /// The device, if something still holds it open.
    pub fn upgrade(&self) -> Option<Device> {
        self.shared.upgrade().map(|shared| Device { shared })
    }

    /// Whether something still holds the device open (without taking a handle, whose drop
    /// could be the one that closes it).
    pub fn is_open(&self) -> bool {
        self.shared.strong_count() > 0
    }
}

static DEVICE_INDEX: AtomicU32 = AtomicU32::new(0);

/// rxe's active MTU for an interface MTU: the largest IB MTU that fits with the RoCEv2 headers.
fn active_mtu_for(if_mtu: u32, ipv6: bool) -> Mtu {
    // IP + UDP + BTH + RETH + ICRC (the largest header set of a data packet).
    let overhead = if ipv6 { 40 } else { 20 } + 8 + 12 + 16 + 4;
    let room = if_mtu.saturating_sub(overhead);
    [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
        .into_iter()
        .find(|m| m.bytes() <= room)
        .unwrap_or(Mtu::Mtu256)
}

impl Device {
    /// A handle that does not keep the device open (see [`WeakDevice`]).
    pub fn downgrade(&self) -> WeakDevice {
        WeakDevice {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Opens a device: binds the socket, builds the GID table, starts the progress thread.
    pub fn open(config: DeviceConfig) -> Result<Device, OpenDeviceError> {
        if config.ip.is_unspecified() {
            return Err(OpenDeviceError::Unspecified);
        }
        config.faults.validate()?;
        let (mut share, backend, arena): (_, Box<dyn Backend>, _) = match &config.fabric {
            Some(fabric) => {
                let at = SocketAddr::new(config.ip, config.port);
                let port = fabric.attach(at).map_err(|e| match e {
                    AttachError::InUse(addr) => OpenDeviceError::FabricAddressInUse { addr },
                    AttachError::NoEphemeralPort(ip) => {
                        OpenDeviceError::FabricPortsExhausted { ip }
                    }
                    AttachError::Wake(e) => OpenDeviceError::Wake(e),
                })?;
                let arena = RecvArena::new(config.recv_batch.max(1), MAX_UDP_PAYLOAD);
                (None, Box::new(port), arena)
            }
            None => {
                let (share, socket) = Device::open_socket(&config)?;
                let arena = RecvArena::for_socket(&socket, config.recv_batch.max(1));
                (share, Box::new(socket), arena)
            }
        };
        let local_addr = backend.local_addr();

        // A fabric device has no interface: it gets loopback's MTU.
        let iface = interface_of(config.ip).filter(|_| config.fabric.is_none());
        let mac = mac_of(config.ip, iface.as_ref());
        let no_interface = if config.fabric.is_some() { 65536 } else { 1500 };
        let if_mtu = iface
            .as_ref()
            .and_then(|(_, _, mtu)| *mtu)
            .unwrap_or(no_interface);
        let active_mtu = config
            .active_mtu
            .unwrap_or_else(|| active_mtu_for(if_mtu, config.ip.is_ipv6()));
        let gids = crate::gid::table(config.ip, mac);
        let guid = u64::from_be_bytes(eui64(mac));

        let mut ecfg = EngineConfig::new(config.ip);
        ecfg.local_udp_port = local_addr.port();
        ecfg.remote_udp_port = config.port;
        ecfg.verify_icrc = config.verify_icrc;
        ecfg.cc = config.congestion_control;
        ecfg.port_mtu = active_mtu;
        // rkeys are all that guards registered memory from anyone who can reach the port:
        // the engine draws them from this seed (see `softrdma_proto::MrTable`).
        ecfg.key_seed = os_random_u64();
        if let Some(share) = &share {
            // The kernel steers datagrams to this member by the QPN's top byte.
            let base = u32::from(share.slot()) << 16;
            ecfg.first_qpn = base | 0x11;
            ecfg.last_qpn = base | 0xffff;
        }
        let engine = Engine::new(ecfg);
        // The fd stays valid as long as the core (which owns the backend) lives in `inner`.
        let sock_fd = backend.readiness_fd();
        let epoch = std::time::Instant::now();
        let epoch_monotonic_ns = monotonic_ns().saturating_sub(elapsed_ns(epoch));
        let mut core = Core::new(engine, backend, arena, config.gso, epoch);
        core.allowed_peers = config.allowed_peers.clone();
        core.placement = config.direct_placement;
        if !config.faults.is_none() {
            core.faults = Some(crate::faults::Faults::new(config.faults));
        }
        core.gso_any_destination =
            config.fabric.is_none() && crate::netdev::kernel_segments_gso(config.ip);
        core.probes = share.as_ref().map(SharedAddress::probes);
        if let Some(path) = &config.pcap {
            core.tap = Some(crate::tap::Tap::create(path, local_addr).map_err(|source| {
                OpenDeviceError::Pcap {
                    path: path.clone(),
                    source,
                }
            })?);
        }
        let inner = Arc::new(
            Inner::new(
                core,
                sock_fd,
                config.busy_poll,
                config.adaptive_spin,
                config.inline_transmit,
            )
            .map_err(OpenDeviceError::Wake)?,
        );
        let index = DEVICE_INDEX.fetch_add(1, Ordering::Relaxed);
        let name = format!("softrdma{index}");
        let thread_inner = inner.clone();
        let handle = std::thread::Builder::new()
            .name(format!("{name}-progress"))
            .spawn(move || progress::run(thread_inner))
            .map_err(OpenDeviceError::Thread)?;
        let thread_id = Some(handle.thread().id());
        if let Some(share) = share.as_mut() {
            share.start(&name).map_err(OpenDeviceError::Thread)?;
        }
        let attr = DeviceAttr {
            fw_ver: "0.0.0".into(),
            node_guid: guid,
            sys_image_guid: guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: 1_048_560,
            max_qp_wr: MAX_QP_WR,
            // BAD_PKEY_CNTR | BAD_QKEY_CNTR | UD_AV_PORT_ENFORCE | PORT_ACTIVE_EVENT |
            // SYS_IMAGE_GUID | RC_RNR_NAK_GEN | XRC: only what softrdma does.
            device_cap_flags: (1 << 1)
                | (1 << 2)
                | (1 << 6)
                | (1 << 10)
                | (1 << 11)
                | (1 << 12)
                | (1 << 20),
            max_sge: MAX_SGE,
            max_sge_rd: MAX_SGE,
            max_cq: 1_048_576,
            max_cqe: MAX_CQE,
            max_mr: 524_287,
            max_pd: 1_048_576,
            max_qp_rd_atom: u32::from(softrdma_proto::MAX_RD_ATOMIC),
            max_qp_init_rd_atom: u32::from(softrdma_proto::MAX_RD_ATOMIC),
            atomic_cap: AtomicCap::Hca,
            max_srq: crate::limits::MAX_SRQ,
            max_srq_wr: crate::limits::MAX_SRQ_WR,
            max_srq_sge: crate::limits::MAX_SRQ_SGE,
            max_ah: 32767,
            max_mcast_grp: softrdma_proto::MAX_MCAST_GROUPS as u32,
            max_mcast_qp_attach: softrdma_proto::MAX_MCAST_QP_ATTACH as u32,
            max_total_mcast_qp_attach: (softrdma_proto::MAX_MCAST_GROUPS
                * softrdma_proto::MAX_MCAST_QP_ATTACH)
                as u32,
            max_pkeys: 64,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            max_dm_size: crate::dm::MAX_DM_SIZE as u64,
        };
        let port = PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::Mtu4096,
            active_mtu,
            gid_tbl_len: crate::gid::GID_TABLE_LEN,
            port_cap_flags: 0x0001_0000,
            max_msg_sz: MAX_MSG_SZ,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            pkey_tbl_len: 1,
            link_layer: LinkLayer::Ethernet,
            active_width: 1,
            active_speed: 1,
            phys_state: 5,
            max_vl_num: 1,
            qkey_viol_cntr: 0,
        };
        tracing::debug!(%name, %local_addr, "device open");
        Ok(Device {
            shared: Arc::new(DeviceShared {
                inner,
                thread: Mutex::new(Some(handle)),
                thread_id,
                name,
                local_addr,
                attr,
                port,
                gids,
                share,
                dm_in_use: AtomicUsize::new(0),
                epoch_monotonic_ns,
            }),
        })
    }

    /// The UDP socket of a device opened as `config` says, and its place on the shared
    /// address if it shares one.
    fn open_socket(
        config: &DeviceConfig,
    ) -> Result<(Option<SharedAddress>, RoceSocket), OpenDeviceError> {
        let mut udp = UdpConfig::new(config.ip).port(config.port);
        udp.recv_buffer_bytes = config.socket_buffer_bytes;
        udp.send_buffer_bytes = config.socket_buffer_bytes;
        if config.share_address && config.port != 0 {
            udp.reuse_port = true;
            let addr = SocketAddr::new(config.ip, config.port);
            let (share, socket) = SharedAddress::join(addr, || {
                RoceSocket::open(udp).map_err(OpenDeviceError::Socket)
            })?;
            Ok((Some(share), socket))
        } else {
            Ok((None, RoceSocket::open(udp)?))
        }
    }

    /// Whether a device could open on `ip`:`port` now, sharing the address (see
    /// [`DeviceConfig::share_address`]): binds a socket as a device would and closes it at
    /// once. It fails when something that does not share holds the port — the kernel's
    /// rdma_rxe, another user's program, a device opened with `share_address(false)` — or
    /// the address is not local.
    pub fn check_address(ip: IpAddr, port: u16) -> Result<(), OpenDeviceError> {
        let mut udp = UdpConfig::new(ip).port(port);
        udp.reuse_port = true;
        udp.recv_buffer_bytes = 0;
        udp.send_buffer_bytes = 0;
        // Joining the group at its end and leaving it moves no other member.
        RoceSocket::open(udp)
            .map(drop)
            .map_err(OpenDeviceError::Socket)
    }

    /// The device's place in its shared address, if it shares it (see
    /// [`DeviceConfig::share_address`]): its slot, how many devices share the address, the
    /// table file.
    pub fn shared_address(&self) -> Option<SharedAddressInfo> {
        self.shared.share.as_ref().map(SharedAddress::info)
    }

    /// Whether a connection request for `service_id` that reached this device was meant for
    /// another device on its shared address: one that listens on it. The kernel steered it by
    /// a table gone wrong (see [`DeviceConfig::share_address`]); the devices are asked to put
    /// the table right, and the caller drops the request rather than reject it, so that the
    /// requester's retransmission reaches the listener. Always `false` for a device that does
    /// not share its address.
    pub fn request_for_another(&self, service_id: u64) -> bool {
        self.shared
            .share
            .as_ref()
            .is_some_and(|s| s.listened_elsewhere(service_id))
    }

    /// Has connection requests (REQ, SIDR_REQ) for `service_id` that reach the shared address
    /// come to this device, for as long as the claim lives: what a connection manager does
    /// when it listens. Fails if another program on the address listens on it, as a second
    /// `rdma_listen` on a port of the host would. A device that does not share its address
    /// gets every request anyway, and the claim does nothing.
    pub fn claim_service_id(&self, service_id: u64) -> Result<ServiceClaim, ShareError> {
        match &self.shared.share {
            Some(share) => share.claim(service_id),
            None => Ok(ServiceClaim::unshared(service_id)),
        }
    }

    /// The top byte of the device's QPNs and communication IDs when it shares its address
    /// (the kernel steers datagrams to it by that byte); `None` otherwise.
    pub fn address_slot(&self) -> Option<u8> {
        self.shared.share.as_ref().map(SharedAddress::slot)
    }

    /// The device's name (`softrdma0`, `softrdma1`, ... in opening order).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The local IP address.
    pub fn ip(&self) -> IpAddr {
        self.shared.local_addr.ip()
    }

    /// The bound UDP address.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> DeviceAttr {
        self.shared.attr.clone()
    }

    /// Attributes of port `port_num` (`ibv_query_port`); only port 1 exists.
    pub fn query_port(&self, port_num: u8) -> Result<PortAttr, QueryError> {
        if port_num != 1 {
            return Err(QueryError::NoSuchPort(port_num));
        }
        let mut port = self.shared.port.clone();
        let bad_qkey = self.shared.inner.engine(Access::Query, |e, _| {
            e.stats().drops_for(softrdma_proto::DropReason::BadQkey)
        });
        port.qkey_viol_cntr = u32::try_from(bad_qkey.min(0xffff)).unwrap_or(0xffff);
        Ok(port)
    }

    /// GID `index` of port `port_num` (`ibv_query_gid`); [`QueryError::EmptyGid`] for an
    /// index of the table that holds none (see [`crate::gid::GID_TABLE_LEN`]).
    pub fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid, QueryError> {
        if port_num != 1 {
            return Err(QueryError::NoSuchPort(port_num));
        }
        match self.shared.gids.get(index as usize) {
            Some(e) => Ok(e.gid),
            None if index < crate::gid::GID_TABLE_LEN => Err(QueryError::EmptyGid(index)),
            None => Err(QueryError::NoSuchGid(index)),
        }
    }

    /// The GID table's entries that hold a GID (`ibv_query_gid_table`).
    pub fn gid_table(&self) -> &[GidEntry] {
        &self.shared.gids
    }

    /// The GID other hosts reach this device by: the IPv4-mapped GID for IPv4, the address
    /// itself for IPv6 (indices 0 and 1 of the table).
    pub fn gid(&self) -> Gid {
        Gid::from_ip(self.ip())
    }

    /// The first index of [`Device::gid`] in the table: 0.
    pub fn gid_index(&self) -> u32 {
        let g = self.gid();
        self.shared
            .gids
            .iter()
            .find(|e| e.gid == g)
            .map_or(0, |e| e.index)
    }

    /// One round of progress on the calling thread: what arrived is received and what the
    /// device holds back goes out now. An application thread that busy-polls a CQ leaves the
    /// replies to what completed (the ACK of the message it just got) queued, to send them
    /// with its answer at its next post or poll, and the progress thread sends them when the
    /// poller's lease ends (2 ms). A thread that stops polling to do something else on the
    /// wire first calls this: the connection manager does before each of its calls, so that
    /// its MADs never overtake the data path's ACKs — a peer waiting for its last send to
    /// complete before it listens again (perftest's `-R`) is not still waiting when the next
    /// REQ arrives.
    pub fn progress(&self) {
        self.inner().drive();
    }

    /// Counters.
    pub fn stats(&self) -> DeviceStats {
        let (engine, io) = self.shared.inner.counters();
        DeviceStats { engine, io }
    }

    /// The device's asynchronous events (the `async_fd` of ibverbs): created on first use,
    /// the same descriptor afterwards. Fails only when out of file descriptors.
    pub fn async_events(&self) -> std::io::Result<AsyncEvents> {
        self.shared.inner.async_events()
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> ProtectionDomain {
        ProtectionDomain::new(self.clone())
    }

    /// Creates a completion queue of at least `cqe` entries (`ibv_create_cq`).
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue, CreateCqError> {
        CompletionQueue::new(self.clone(), cqe)
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.shared.inner
    }

    /// The device's clock as `CLOCK_MONOTONIC` nanoseconds at
    /// `t`: e.g. when a completion was made ([`WorkCompletion::timestamp`]). ibverbs' device
    /// clock (`ibv_query_rt_values_ex`) is this clock.
    ///
    /// [`WorkCompletion::timestamp`]: crate::WorkCompletion::timestamp
    pub fn clock_ns(&self, t: crate::DeviceTime) -> u64 {
        self.shared.epoch_monotonic_ns.saturating_add(t.as_nanos())
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (what `std::time::Instant` reads on Linux).
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn elapsed_ns(since: std::time::Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// 64 bits from the operating system's random source (`getrandom(2)`); should that fail
/// (a kernel before 3.17), std's per-process random hash keys, which come from the same
/// source by other means.
fn os_random_u64() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: writes at most 8 bytes into the live 8-byte array; the result is checked.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), v.len(), 0) };
    if n == 8 {
        return u64::from_ne_bytes(v);
    }
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_like_rxe() {
        assert_eq!(active_mtu_for(1500, false), Mtu::Mtu1024);
        assert_eq!(active_mtu_for(9000, false), Mtu::Mtu4096);
        assert_eq!(active_mtu_for(65536, false), Mtu::Mtu4096);
    }
}
