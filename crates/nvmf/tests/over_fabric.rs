//! The NVMe-oF host and target tests once more, every device on an in-process `LocalFabric`
//! that duplicates and reorders datagrams (see `common/mod.rs`): connect, every admin and I/O
//! command, rejections, several hosts, a lossy run with remote invalidation — through the
//! same rdma_cm and verbs, without a socket.
// `loopback.rs` declares `mod common;` for its own binary; here it is a module of this one.
#![allow(clippy::duplicate_mod)]

#[path = "loopback.rs"]
mod loopback;

mod common;

use std::sync::Arc;
use std::time::Duration;

use softrdma_nvmf::backend::MemoryBackend;
use softrdma_nvmf::controller::{Namespace, Subsystem};
use softrdma_nvmf::host::{HostConfig, RemoteController};
use softrdma_nvmf::transport::{Target, TargetConfig};

/// The controllers of the tests above connect across the fabric, not a socket.
#[test]
fn a_controller_connects_across_the_fabric() {
    const NQN: &str = "nqn.2026-12.io.softrdma:fabric";
    let ns = Arc::new(Namespace::new(1, Arc::new(MemoryBackend::new(1 << 20)), 512, NQN).unwrap());
    let subsystem = Subsystem::new(NQN, vec![ns], Vec::new()).unwrap();
    let before = common::hosts().fabric().stats().delivered;
    let t = Target::start(TargetConfig::new(
        common::addr("127.0.39.1:4420"),
        vec![subsystem],
    ))
    .unwrap();
    let mut cfg = HostConfig::new(t.local_addr());
    cfg.source = Some(common::ip("127.0.39.2"));
    cfg.timeout = Duration::from_secs(10);
    let c = RemoteController::connect(&cfg, NQN, 1).unwrap();
    drop(c);
    assert!(common::hosts().fabric().stats().delivered > before + 4);
}
