//! [`Device`]: one software RDMA NIC bound to one local IP address, and its attributes.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::{JoinHandle, ThreadId};

use softrdma_proto::cc::CcConfig;
use softrdma_proto::{Engine, EngineConfig, Mtu};
use softrdma_udp::{Config as UdpConfig, RecvArena, RoceSocket, ROCEV2_UDP_PORT};

use crate::cq::CompletionQueue;
use crate::error::{CreateCqError, OpenDeviceError, QueryError};
use crate::event::AsyncEvents;
use crate::faults::FaultConfig;
use crate::gid::{eui64, interface_of, mac_of, Gid, GidEntry};
use crate::limits::{MAX_CQE, MAX_MSG_SZ, MAX_QP_WR, MAX_SGE};
use crate::pd::ProtectionDomain;
use crate::progress::{self, Core, Inner, IoCounters};
use crate::share::{ServiceClaim, ShareError, SharedAddress, SharedAddressInfo};
use crate::stats::DeviceStats;

/// How to open a [`Device`]. `DeviceConfig::new(ip)` gives the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// The local IP address (IPv4 or IPv6) the device sends from and receives on. Use a
    /// specific address, not a wildcard: the ICRC covers it.
    pub ip: IpAddr,
    /// The UDP port to bind and to send to (4791, RoCEv2's; change only for unusual setups:
    /// every peer must use the same).
    pub port: u16,
    /// Spin on the socket instead of sleeping in `ppoll(2)`: lowest latency, one core busy.
    pub busy_poll: bool,
    /// Let the progress thread spin on the socket for a while before it sleeps (at most
    /// 50 µs, and only while datagrams have been coming at shorter intervals), so that a
    /// passive responder answers without a wake-up. On by default; see
    /// [`DeviceConfig::adaptive_spin`].
    pub adaptive_spin: bool,
    /// Transmit on the posting thread (run to completion: lowest latency). When `false`, the
    /// progress thread sends everything and posting only wakes it.
    pub inline_transmit: bool,
    /// The port's active MTU; `None` derives it from the interface MTU as rxe does (1024 on a
    /// 1500-byte Ethernet, 4096 on loopback or jumbo frames).
    pub active_mtu: Option<Mtu>,
    /// Socket buffer size to ask for, each direction.
    pub socket_buffer_bytes: usize,
    /// Messages one receive system call may return.
    pub recv_batch: usize,
    /// Check the ICRC of received packets (only a fuzzing setup turns this off).
    pub verify_icrc: bool,
    /// Write every datagram the device sends and receives to this pcap file (created or
    /// truncated at open), with synthesized IP/UDP headers whose IPv4 identification makes each
    /// ICRC verify; see [`DeviceConfig::pcap`].
    pub pcap: Option<PathBuf>,
    /// Batch equal-sized packets to the same loopback destination into UDP GSO sends (one
    /// system call and one trip through the stack for up to 64 packets; see
    /// [`DeviceConfig::gso`]). On by default.
    pub gso: bool,
    /// Accept datagrams only from these networks (empty, the default: from anywhere). Others
    /// are dropped before the transport sees them and counted in
    /// [`IoCounters::rx_denied`](crate::IoCounters::rx_denied). Connected QPs accept packets
    /// only from the address they were connected to in any case; this narrows who may reach
    /// the device at all (see [`IpNetwork`](crate::IpNetwork) for what it cannot stop).
    pub allowed_peers: Vec<crate::IpNetwork>,
    /// Congestion control: ECT(0) marks, CNPs for CE-marked packets, DCQCN pacing (see
    /// `softrdma_proto::cc`). Off by default, as in Linux rxe.
    pub congestion_control: CcConfig,
    /// Faults the device injects into its own traffic, on the way out and on the way in:
    /// loss, duplication, reordering, delay, corruption, from a seed (see [`FaultConfig`]).
    /// None by default. What a program does when packets are lost or a peer goes silent can
    /// be tried this way without root or netem.
    pub faults: FaultConfig,
    /// Share the address with the user's other softrdma devices on it, in this process and
    /// in others (see [`Device::shared_address`]): on by default, as every process of a host
    /// shares rxe's address. Off, the device binds the address alone and a second one fails
    /// with "address in use". Port 0 (a port the kernel picks) is never shared.
    pub share_address: bool,
    /// Receive the payload of an RDMA WRITE in progress straight into its target (one copy,
    /// the kernel's; see `softrdma_proto::placement` for what may land where). On by
    /// default; off, every datagram is received into the device's buffers and copied from
    /// there. Not with fault injection or a pcap tap, which need every datagram's bytes
    /// first.
    pub direct_placement: bool,
}

impl DeviceConfig {
    /// Defaults for `ip`: port 4791, sleeping progress thread, inline transmit, GSO batching
    /// to loopback peers.
    pub fn new(ip: IpAddr) -> DeviceConfig {
        DeviceConfig {
            ip,
            port: ROCEV2_UDP_PORT,
            busy_poll: false,
            adaptive_spin: true,
            inline_transmit: true,
            active_mtu: None,
            socket_buffer_bytes: softrdma_udp::DEFAULT_SOCKET_BUFFER_BYTES,
            recv_batch: 32,
            verify_icrc: true,
            pcap: None,
            gso: true,
            allowed_peers: Vec::new(),
            congestion_control: CcConfig::OFF,
            faults: FaultConfig::NONE,
            share_address: true,
            direct_placement: true,
        }
    }

    /// Sharing the address with other devices on it (the default) or binding it alone (see
    /// [`DeviceConfig::share_address`]).
    pub fn share_address(mut self, on: bool) -> DeviceConfig {
        self.share_address = on;
        self
    }

    /// Receiving WRITE payloads straight into their target (the default) or through the
    /// device's buffers (see [`DeviceConfig::direct_placement`]).
    pub fn direct_placement(mut self, on: bool) -> DeviceConfig {
        self.direct_placement = on;
        self
    }

    /// Injecting `faults` into the device's traffic (see [`DeviceConfig::faults`]).
    pub fn faults(mut self, faults: FaultConfig) -> DeviceConfig {
        self.faults = faults;
        self
    }

    /// With congestion control (e.g. `CcConfig::dcqcn(line_rate_bps)`).
    pub fn congestion_control(mut self, cc: CcConfig) -> DeviceConfig {
        self.congestion_control = cc;
        self
    }

    /// Accepting datagrams only from `networks` (see [`DeviceConfig::allowed_peers`]).
    pub fn allowed_peers(
        mut self,
        networks: impl IntoIterator<Item = crate::IpNetwork>,
    ) -> DeviceConfig {
        self.allowed_peers = networks.into_iter().collect();
        self
    }

    /// With UDP GSO batching on (the default) or off. On, a run of equal-sized packets to one loopback
    /// destination leaves as one GSO datagram (segment `k` with IPv4 identification `k`, which
    /// its ICRC covers), and receivers with GRO take it in one system call: much higher
    /// throughput on loopback. The price is visibility: `tcpdump -i lo` then records the
    /// unsplit datagrams (several RoCEv2 packets in one UDP payload), which packet decoders
    /// cannot read — the device's own [`pcap`](DeviceConfig::pcap) tap still records every
    /// packet separately. Datagrams to other destinations are never batched yet: segment
    /// numbering on real links belongs to the kernel or the NIC and has not been checked
    /// against rxe.
    pub fn gso(mut self, on: bool) -> DeviceConfig {
        self.gso = on;
        self
    }

    /// With busy polling on or off.
    pub fn busy_poll(mut self, on: bool) -> DeviceConfig {
        self.busy_poll = on;
        self
    }

    /// With the progress thread's adaptive spin before sleeping on or off. Off, a device
    /// whose application does not poll (the target of READs and WRITEs) pays a thread
    /// wake-up per request (5–10 µs on a virtual machine) but never spins; on, it spins up to
    /// 50 µs after a datagram while traffic keeps coming faster than that.
    pub fn adaptive_spin(mut self, on: bool) -> DeviceConfig {
        self.adaptive_spin = on;
        self
    }

    /// With another UDP port.
    pub fn port(mut self, port: u16) -> DeviceConfig {
        self.port = port;
        self
    }

    /// With a fixed active MTU.
    pub fn active_mtu(mut self, mtu: Mtu) -> DeviceConfig {
        self.active_mtu = Some(mtu);
        self
    }

    /// With inline transmit on or off.
    pub fn inline_transmit(mut self, on: bool) -> DeviceConfig {
        self.inline_transmit = on;
        self
    }

    /// Writes every datagram the device sends and receives to the pcap file `path` (classic
    /// pcap, nanosecond timestamps, raw-IP link type 101), like `tcpdump -w` on the device's
    /// address would, without root. The IP and UDP headers are synthesized: sent datagrams get
    /// IPv4 identification 0 and DF (what the kernel writes for them), received ones the
    /// identification recovered from their ICRC, so every intact packet's ICRC verifies in the
    /// file (`softrdma decode FILE` checks it). Records are buffered and flushed whenever the
    /// progress thread goes idle and when the device closes. The tap's counters are in
    /// [`IoCounters::pcap_records`](crate::IoCounters::pcap_records).
    pub fn pcap(mut self, path: impl Into<PathBuf>) -> DeviceConfig {
        self.pcap = Some(path.into());
        self
    }
}

/// Atomic operation guarantees (ibverbs `ibv_atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicCap {
    /// No atomics.
    None,
    /// Atomic with respect to this device only (rxe's `ATOMIC_HCA`); softrdma's atomics are
    /// real CPU atomics, so they are also atomic with respect to the local CPU's atomics.
    Hca,
    /// Atomic with respect to the CPU and all devices.
    Glob,
}

/// Device attributes (ibverbs `ibv_device_attr`), with rxe's values where softrdma has no
/// limit of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (EUI-64 of the interface MAC), host order.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor ID (rxe's 0xffffff).
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Most outstanding WRs per work queue.
    pub max_qp_wr: u32,
    /// Capability flags (`IBV_DEVICE_*` bits).
    pub device_cap_flags: u64,
    /// Most SGEs per WR.
    pub max_sge: u32,
    /// Most SGEs per READ WR.
    pub max_sge_rd: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most MRs.
    pub max_mr: u32,
    /// Most PDs.
    pub max_pd: u32,
    /// Most incoming READ/atomic requests outstanding per QP.
    pub max_qp_rd_atom: u32,
    /// Most outgoing READ/atomic requests outstanding per QP.
    pub max_qp_init_rd_atom: u32,
    /// Atomic guarantees.
    pub atomic_cap: AtomicCap,
    /// Most SRQs.
    pub max_srq: u32,
    /// Most work requests per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// Most address handles.
    pub max_ah: u32,
    /// Most multicast groups.
    pub max_mcast_grp: u32,
    /// Most QPs attached to one multicast group.
    pub max_mcast_qp_attach: u32,
    /// Most attachments in all (groups × QPs).
    pub max_total_mcast_qp_attach: u32,
    /// Most P_Keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Number of ports (1).
    pub phys_port_cnt: u8,
    /// Device memory in all, in bytes ([`DeviceMemory`](crate::DeviceMemory)).
    pub max_dm_size: u64,
}

/// Port state (ibverbs `ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// The port is down.
    Down,
    /// Active: the socket is bound and the progress thread runs.
    Active,
}

/// Link layer (ibverbs `IBV_LINK_LAYER_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// Ethernet (RoCE).
    Ethernet,
}

/// Port attributes (ibverbs `ibv_port_attr`), modeled on rxe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// State.
    pub state: PortState,
    /// Largest MTU the port supports (4096).
    pub max_mtu: Mtu,
    /// The MTU in use: the path MTU applications should choose.
    pub active_mtu: Mtu,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// Capability flags (rxe's value).
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Subnet manager LID (0 on RoCE).
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Entries in the P_Key table (1: 0xffff).
    pub pkey_tbl_len: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Active width (1 = 1X).
    pub active_width: u8,
    /// Active speed (1 = 2.5 Gbps, nominal).
    pub active_speed: u8,
    /// Physical state (5 = LINK_UP).
    pub phys_state: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// UD datagrams dropped for a wrong Q_Key, at most 0xffff (rxe counts them here too).
    pub qkey_viol_cntr: u32,
}

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
        let mut udp = UdpConfig::new(config.ip).port(config.port);
        udp.recv_buffer_bytes = config.socket_buffer_bytes;
        udp.send_buffer_bytes = config.socket_buffer_bytes;
        let (mut share, socket) = if config.share_address && config.port != 0 {
            udp.reuse_port = true;
            let addr = SocketAddr::new(config.ip, config.port);
            let (share, socket) = SharedAddress::join(addr, || {
                RoceSocket::open(udp).map_err(OpenDeviceError::Socket)
            })?;
            (Some(share), socket)
        } else {
            (None, RoceSocket::open(udp)?)
        };
        let local_addr = socket.local_addr();
        let arena = RecvArena::for_socket(&socket, config.recv_batch.max(1));

        let iface = interface_of(config.ip);
        let mac = mac_of(config.ip, iface.as_ref());
        let if_mtu = iface.as_ref().and_then(|(_, _, mtu)| *mtu).unwrap_or(1500);
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
        // The fd stays valid as long as the core (which owns the socket) lives in `inner`.
        let sock_fd = std::os::fd::AsRawFd::as_raw_fd(&socket.readiness_fd());
        let epoch = std::time::Instant::now();
        let epoch_monotonic_ns = monotonic_ns().saturating_sub(elapsed_ns(epoch));
        let mut core = Core::new(engine, socket, arena, config.gso, epoch);
        core.allowed_peers = config.allowed_peers.clone();
        core.placement = config.direct_placement;
        if !config.faults.is_none() {
            core.faults = Some(crate::faults::Faults::new(config.faults));
        }
        core.gso_any_destination = crate::netdev::kernel_segments_gso(config.ip);
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
        let bad_qkey = self
            .shared
            .inner
            .lock()
            .engine
            .stats()
            .drops_for(softrdma_proto::DropReason::BadQkey);
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
        let inner = &self.shared.inner;
        let core = inner.lock();
        DeviceStats {
            engine: core.engine.stats().clone(),
            io: IoCounters {
                wakeups: inner.wakeups.load(Ordering::Relaxed),
                ..core.io_counters()
            },
        }
    }

    /// The device's asynchronous events (the `async_fd` of ibverbs): created on first use,
    /// the same descriptor afterwards. Fails only when out of file descriptors.
    pub fn async_events(&self) -> std::io::Result<AsyncEvents> {
        let mut core = self.shared.inner.lock();
        if let Some(e) = &core.async_events {
            return Ok(e.clone());
        }
        let e = AsyncEvents::new()?;
        core.async_events = Some(e.clone());
        Ok(e)
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
