//! What the NVMe-oF loopback tests share: the network their devices use. Compiled as their
//! own binary they use UDP sockets on loopback, one device per 127.0.38.x address; compiled
//! into `over_fabric` (`tests/over_fabric.rs`) every address they name is a device on one
//! in-process `LocalFabric` that duplicates and reorders datagrams, with its connection
//! manager running (`softrdma_rdmacm::FabricHosts`), and the devices a test opens itself are
//! on that fabric too.
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;

use softrdma::{DeviceConfig, LocalFabric};
use softrdma_rdmacm::FabricHosts;

/// Whether this binary's devices sit on the fabric.
pub fn on_fabric() -> bool {
    env!("CARGO_CRATE_NAME") == "over_fabric"
}

/// The fabric's hosts (no loss: a lost MAD costs rdma_cm's 6.3 s retransmission timeout;
/// the loss test below brings its own).
pub fn hosts() -> &'static FabricHosts {
    static HOSTS: OnceLock<FabricHosts> = OnceLock::new();
    HOSTS.get_or_init(|| FabricHosts::new(&LocalFabric::new(), FabricHosts::NO_LOSS))
}

/// The address `s`; on the fabric, with a device at it.
pub fn ip(s: &str) -> IpAddr {
    let ip: IpAddr = s.parse().unwrap();
    if on_fabric() {
        hosts()
            .host(ip)
            .unwrap_or_else(|e| panic!("a host at {ip} on the fabric: {e}"));
    }
    ip
}

/// The socket address `s`; on the fabric, with a device at its address.
pub fn addr(s: &str) -> SocketAddr {
    let a: SocketAddr = s.parse().unwrap();
    ip(&a.ip().to_string());
    a
}

/// `config` on this binary's network.
pub fn on_network(config: DeviceConfig) -> DeviceConfig {
    if on_fabric() {
        config.fabric(hosts().fabric())
    } else {
        config
    }
}
