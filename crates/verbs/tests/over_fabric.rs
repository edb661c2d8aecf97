//! The verbs-level integration tests once more, every device they open on an in-process
//! `LocalFabric` instead of UDP sockets (see `common/mod.rs`): the same assertions — bytes in
//! memory, completion statuses, counters — must hold over the simulated network.
// Each test file declares `mod common;` for its own binary; here they are modules of one
// binary, so the helpers are compiled once per file.
#![allow(clippy::duplicate_mod)]

#[path = "datagrams.rs"]
mod datagrams;
#[path = "rc_ops.rs"]
mod rc_ops;
#[path = "security.rs"]
mod security;
#[path = "srq.rs"]
mod srq;
#[path = "windows.rs"]
mod windows;
#[path = "xrc.rs"]
mod xrc;

mod common;

use common::{fabric, open, pair, wait_one};
use softrdma::{wr, WcStatus};

/// The devices of the tests above sit on the fabric: their traffic crosses it, an address
/// there is taken once, and an address no host of this machine has works like any other.
#[test]
fn the_devices_here_are_on_the_fabric() {
    let (a, b) = pair("127.0.51.1", "192.0.2.51", 4096);
    let before = fabric().expect("on the fabric").stats().delivered;
    a.mr.write(0, b"fabric").unwrap();
    let r = b.mr.remote();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 6)], r.at(8), r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(b.mr.read_vec(8, 6).unwrap(), b"fabric");
    assert!(fabric().unwrap().stats().delivered >= before + 2);
    let again =
        softrdma::Device::open(softrdma::DeviceConfig::new(b.dev.ip()).fabric(fabric().unwrap()));
    assert!(matches!(
        again,
        Err(softrdma::OpenDeviceError::FabricAddressInUse { .. })
    ));
    drop(open("127.0.51.3"));
}
