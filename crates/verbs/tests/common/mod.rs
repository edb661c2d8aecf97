//! Shared helpers of the verbs-level integration tests: one device per 127.0.x.y address (each
//! test uses its own addresses, so tests run in parallel), port 4791 on each.
//!
//! The same test files run over two networks. Compiled as their own binaries they use the
//! kernel's UDP stack on loopback. Compiled into `over_fabric` and `over_lossy_fabric`
//! (`tests/over_fabric.rs`, `tests/over_lossy_fabric.rs`), every device they open through
//! these helpers sits on an in-process [`LocalFabric`] instead (one per test file: each file
//! compiles its own `common`) — clean, or losing, duplicating and reordering datagrams from a
//! seed per device — so the same assertions hold the stack to them over the simulated network
//! too.
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use softrdma::{
    AccessFlags, CompletionQueue, ConnectOptions, Device, DeviceConfig, FaultConfig, LocalFabric,
    MemoryRegion, ProtectionDomain, QpInitAttr, QueuePair, WorkCompletion,
};

/// Which network this binary's devices use (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// UDP sockets on loopback.
    Udp,
    /// The in-process fabric, delivering everything.
    Fabric,
    /// The in-process fabric with loss, duplication and reordering.
    LossyFabric,
}

pub fn network() -> Network {
    match env!("CARGO_CRATE_NAME") {
        "over_fabric" => Network::Fabric,
        "over_lossy_fabric" => Network::LossyFabric,
        _ => Network::Udp,
    }
}

/// The fabric every device of this binary is attached to, if it uses one.
pub fn fabric() -> Option<&'static LocalFabric> {
    static FABRIC: OnceLock<LocalFabric> = OnceLock::new();
    (network() != Network::Udp).then(|| FABRIC.get_or_init(LocalFabric::new))
}

/// What the lossy fabric does to every device's datagrams, each way.
pub const LOSSY: FaultConfig = FaultConfig {
    loss: 0.02,
    duplicate: 0.02,
    reorder: 0.05,
    ..FaultConfig::NONE
};

/// `config` on this binary's network: unchanged over UDP; on the fabric, with the lossy
/// fabric's faults (seeded by the address, so each device draws its own) unless the test
/// set faults of its own.
pub fn on_network(config: DeviceConfig) -> DeviceConfig {
    let Some(f) = fabric() else {
        return config;
    };
    let seed = config
        .ip
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    let faults = if network() == Network::LossyFabric && config.faults.is_none() {
        FaultConfig { seed, ..LOSSY }
    } else {
        config.faults
    };
    config.fabric(f).faults(faults)
}

/// A sender of raw datagrams from `addr` that is not a device (a forger): a UDP socket, or
/// the fabric's [`LocalFabric::send_from`].
pub enum RawSender {
    Socket(UdpSocket),
    Fabric(SocketAddr),
}

impl RawSender {
    pub fn bind(addr: SocketAddr) -> RawSender {
        match fabric() {
            None => RawSender::Socket(UdpSocket::bind(addr).unwrap()),
            Some(_) if addr.port() == 0 => RawSender::Fabric(SocketAddr::new(addr.ip(), 40_000)),
            Some(_) => RawSender::Fabric(addr),
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        match self {
            RawSender::Socket(s) => s.local_addr().unwrap(),
            RawSender::Fabric(a) => *a,
        }
    }

    pub fn send_to(&self, bytes: &[u8], to: SocketAddr) {
        match self {
            RawSender::Socket(s) => {
                s.send_to(bytes, to).unwrap();
            }
            RawSender::Fabric(a) => {
                fabric().unwrap().send_from(*a, to, bytes);
            }
        }
    }
}

pub const WAIT: Duration = Duration::from_secs(10);

pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn open(addr: &str) -> Device {
    open_with(DeviceConfig::new(ip(addr)))
}

/// A device opened with `config`, on this binary's network.
pub fn open_with(config: DeviceConfig) -> Device {
    let ip = config.ip;
    Device::open(on_network(config)).unwrap_or_else(|e| panic!("open {ip}: {e}"))
}

/// One side of a connection.
pub struct Side {
    pub dev: Device,
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

impl Side {
    pub fn new(addr: &str, mr_len: usize) -> Side {
        Side::on(open(addr), mr_len)
    }

    /// A side on a device opened by the caller (with a config of its own).
    pub fn on(dev: Device, mr_len: usize) -> Side {
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4096).unwrap();
        let mut init = QpInitAttr::rc(&cq);
        init.cap.max_send_wr = 1024;
        init.cap.max_recv_wr = 1024;
        let qp = pd.create_qp(&init).unwrap();
        let mr = pd.reg_mr(mr_len, all_access()).unwrap();
        Side {
            dev,
            pd,
            cq,
            qp,
            mr,
        }
    }
}

/// Two connected sides.
pub fn pair(a: &str, b: &str, mr_len: usize) -> (Side, Side) {
    let a = Side::new(a, mr_len);
    let b = Side::new(b, mr_len);
    connect(&a.qp, &b.qp);
    (a, b)
}

pub fn connect(a: &QueuePair, b: &QueuePair) {
    a.connect(&b.endpoint(), &ConnectOptions::default())
        .unwrap();
    b.connect(&a.endpoint(), &ConnectOptions::default())
        .unwrap();
}

/// Waits for exactly `n` completions (panics after [`WAIT`]).
pub fn wait_wcs(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out with {} of {n} completions: {out:?}",
            out.len()
        );
        cq.poll_blocking(n - out.len(), &mut out, Some(left));
    }
    out
}

pub fn wait_one(cq: &CompletionQueue) -> WorkCompletion {
    wait_wcs(cq, 1)[0]
}

/// A small deterministic generator (xorshift64) for the tests' random choices.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A valid RoCEv2 packet from `src` to `dst` (AckReq set, ICRC for these addresses), as a
/// forger with the right numbers would build it.
pub fn forge(
    src: SocketAddr,
    dst: SocketAddr,
    opcode: softrdma_wire::Opcode,
    qpn: u32,
    psn: softrdma_wire::Psn,
    ext: softrdma_wire::ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    use softrdma_wire::{emit_headers, packet_len, Bth, IcrcContext};
    let mut bth = Bth::new(opcode, qpn, psn);
    bth.ack_req = true;
    let mut buf = vec![0u8; packet_len(opcode, payload.len())];
    let h = emit_headers(&bth, &ext, payload.len(), &mut buf);
    buf[h..h + payload.len()].copy_from_slice(payload);
    IcrcContext::new(src.ip(), dst.ip(), src.port(), dst.port())
        .fill(&mut buf)
        .unwrap();
    buf
}
