//! What the rdma_cm integration tests share: the network their devices use. Compiled as their
//! own binaries they use UDP sockets on loopback, one device per 127.0.x.y address, opened by
//! rdma_cm itself; compiled into `over_fabric` (`tests/over_fabric.rs`) every address they
//! name is a device on an in-process `LocalFabric` that duplicates and reorders datagrams,
//! with its connection manager running, before rdma_cm looks for it
//! (`softrdma_rdmacm::FabricHosts`).
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::OnceLock;

use softrdma::LocalFabric;
use softrdma_rdmacm::FabricHosts;

/// Whether this binary's devices sit on the fabric.
pub fn on_fabric() -> bool {
    env!("CARGO_CRATE_NAME") == "over_fabric"
}

/// The fabric's hosts. No loss: a lost MAD waits for rdma_cm's retransmission timeout (2 x
/// packet life time + CM response timeout, 6.3 s), and two in a row outlast the tests' ten
/// seconds per event; the verbs tests over the lossy fabric
/// (`crates/verbs/tests/over_lossy_fabric.rs`) cover loss. Duplicated and reordered MADs and
/// data cost no waiting.
pub fn hosts() -> &'static FabricHosts {
    static HOSTS: OnceLock<FabricHosts> = OnceLock::new();
    HOSTS.get_or_init(|| FabricHosts::new(&LocalFabric::new(), FabricHosts::NO_LOSS))
}

/// The fabric of this binary's devices.
pub fn fabric() -> &'static LocalFabric {
    hosts().fabric()
}

/// The socket address `s`; on the fabric, with a device at its IP address.
pub fn addr(s: &str) -> SocketAddr {
    let a: SocketAddr = s.parse().unwrap();
    if on_fabric() {
        hosts()
            .host(a.ip())
            .unwrap_or_else(|e| panic!("a host at {a} on the fabric: {e}"));
    }
    a
}
