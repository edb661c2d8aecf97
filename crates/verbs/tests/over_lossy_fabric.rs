//! The reliable-transport integration tests once more, every device on an in-process
//! `LocalFabric` that loses, duplicates and reorders datagrams (`common::LOSSY`, each device
//! drawing from a seed of its own): every RC operation must still complete exactly once, in
//! order, with the right bytes in memory.
// Each test file declares `mod common;` for its own binary; here they are modules of one
// binary, so the helpers are compiled once per file.
#![allow(clippy::duplicate_mod)]

#[path = "rc_ops.rs"]
mod rc_ops;
#[path = "srq.rs"]
mod srq;
#[path = "windows.rs"]
mod windows;
#[path = "xrc.rs"]
mod xrc;

mod common;

use common::{fabric, pair, pattern, wait_wcs};
use softrdma::{wr, WcStatus};

/// The network under the tests above is the lossy fabric: a burst of WRITEs crosses it, is
/// hit by every kind of fault on the way, and still lands whole.
#[test]
fn the_fabric_under_these_tests_loses_duplicates_and_reorders() {
    let (a, b) = pair("127.0.50.1", "127.0.50.2", 1 << 20);
    let before = fabric().expect("on the fabric").stats();
    let data = pattern(1 << 20, 5);
    a.mr.write(0, &data).unwrap();
    let r = b.mr.remote();
    let n = 256;
    let chunk = (1 << 20) / n;
    let wrs: Vec<_> = (0..n)
        .map(|i| {
            let at = i * chunk;
            wr::write(
                i as u64,
                vec![a.mr.sge(at, chunk as u32)],
                r.at(at as u64),
                r.rkey,
            )
        })
        .collect();
    a.qp.post_send(wrs).unwrap();
    let wcs = wait_wcs(&a.cq, n);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        (0..n as u64).collect::<Vec<_>>(),
        "in order, once each"
    );
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(b.mr.read_vec(0, 1 << 20).unwrap(), data);
    let (sa, sb) = (a.dev.stats().io, b.dev.stats().io);
    let drops = sa.injected_tx_drops + sa.injected_rx_drops + sb.injected_tx_drops;
    let dups = sa.injected_tx_duplicates + sb.injected_rx_duplicates;
    let held = sa.injected_tx_delays + sb.injected_rx_delays;
    assert!(drops > 0 && dups > 0 && held > 0, "{sa:?} {sb:?}");
    assert!(fabric().unwrap().stats().delivered > before.delivered);
}
