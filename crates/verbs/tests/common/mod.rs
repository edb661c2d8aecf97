//! Shared helpers of the loopback integration tests: one device per 127.0.x.y address (each
//! test uses its own addresses, so tests run in parallel), port 4791 on each.
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use softrdma::{
    AccessFlags, CompletionQueue, ConnectOptions, Device, DeviceConfig, MemoryRegion,
    ProtectionDomain, QpInitAttr, QueuePair, WorkCompletion,
};

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
    Device::open(DeviceConfig::new(ip(addr))).unwrap_or_else(|e| panic!("open {addr}: {e}"))
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
