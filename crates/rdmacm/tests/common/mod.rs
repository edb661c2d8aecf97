//! What the rdma_cm integration tests share: the network their devices use. Compiled as their
//! own binaries they use UDP sockets on loopback, one device per 127.0.x.y address, opened by
//! rdma_cm itself; compiled into `over_fabric` (`tests/over_fabric.rs`) every address they
//! name is a device on one in-process `LocalFabric` that duplicates and reorders
//! datagrams, with its connection manager running, before rdma_cm looks for it.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, OnceLock};

use softrdma::{Device, DeviceConfig, FaultConfig, LocalFabric};
use softrdma_rdmacm::CmService;

/// Whether this binary's devices sit on the fabric.
pub fn on_fabric() -> bool {
    env!("CARGO_CRATE_NAME") == "over_fabric"
}

/// The socket address `s`; on the fabric, with a device at its IP address (opened once,
/// kept for the binary's life with its connection manager, which rdma_cm then uses).
pub fn addr(s: &str) -> SocketAddr {
    let a: SocketAddr = s.parse().unwrap();
    if on_fabric() {
        host(a.ip());
    }
    a
}

/// The fabric of this binary's devices.
pub fn fabric() -> &'static LocalFabric {
    static FABRIC: OnceLock<LocalFabric> = OnceLock::new();
    FABRIC.get_or_init(LocalFabric::new)
}

fn host(ip: IpAddr) {
    static HOSTS: OnceLock<Mutex<HashMap<IpAddr, (Device, CmService)>>> = OnceLock::new();
    let fabric = fabric();
    let mut hosts = HOSTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    hosts.entry(ip).or_insert_with(|| {
        // Each device draws its own faults, the same in every run.
        let seed = ip
            .to_string()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        // No loss: a lost MAD waits for rdma_cm's retransmission timeout (2 x packet life time
        // + CM response timeout, 6.3 s), two in a row outlast the tests' ten seconds per event;
        // the verbs tests over the lossy fabric (`crates/verbs/tests/over_lossy_fabric.rs`)
        // cover loss. Duplicated and reordered MADs and data cost no waiting.
        let faults = FaultConfig {
            duplicate: 0.02,
            reorder: 0.05,
            seed,
            ..FaultConfig::NONE
        };
        let dev = Device::open(DeviceConfig::new(ip).fabric(fabric).faults(faults))
            .unwrap_or_else(|e| panic!("open {ip} on the fabric: {e}"));
        let cm = CmService::start(&dev).unwrap();
        (dev, cm)
    });
}
