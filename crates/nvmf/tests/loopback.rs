//! Host and target over real RoCEv2 on loopback (one softrdma device per 127.0.38.x).

use std::net::SocketAddr;
use std::sync::Arc;

use softrdma_nvmf::backend::MemoryBackend;
use softrdma_nvmf::controller::{Namespace, Subsystem};
use softrdma_nvmf::host::{HostConfig, RemoteController};
use softrdma_nvmf::transport::{Target, TargetConfig};
use softrdma_nvmf::wire::fabrics::DISCOVERY_NQN;

const NQN: &str = "nqn.2026-12.io.softrdma:loop";

fn target(ip: &str, size: u64) -> Target {
    let ns = Namespace::new(1, Arc::new(MemoryBackend::new(size)), 512, NQN).unwrap();
    let s = Subsystem::new(NQN, vec![Arc::new(ns)], Vec::new()).unwrap();
    let addr: SocketAddr = format!("{ip}:4420").parse().unwrap();
    Target::start(TargetConfig::new(addr, vec![s])).unwrap()
}

fn host(target: &Target, src: &str) -> HostConfig {
    let mut c = HostConfig::new(target.local_addr());
    c.source = Some(src.parse().unwrap());
    c
}

#[test]
fn smoke() {
    let t = target("127.0.38.1", 64 << 20);
    let cfg = host(&t, "127.0.38.2");
    let d = RemoteController::connect(&cfg, DISCOVERY_NQN, 0).unwrap();
    let log = d.discovery_log().unwrap();
    assert_eq!(log.entries[0].subnqn, NQN);
    d.shutdown().unwrap();
    let c = RemoteController::connect(&cfg, NQN, 2).unwrap();
    let ns = c.namespace(1).unwrap();
    let mut q = c.io_queue(1).unwrap();
    let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 253) as u8).collect();
    q.write(&ns, 8, &data).unwrap();
    let back = q.read(&ns, 8, (data.len() / 512) as u64).unwrap();
    assert!(back == data);
    q.disconnect();
    c.shutdown().unwrap();
}
