//! Fault injection on a device's own wire (`DeviceConfig::faults`), over real UDP on loopback:
//! RC survives it with every byte in place, every fault is counted and the counters add up,
//! and the draws repeat for a seed. Addresses 127.0.64.x.

mod common;

use std::time::Duration;

use common::{all_access, open, pattern, wait_wcs, Side};
use softrdma::{
    wr, AhAttr, Device, DeviceConfig, DropReason, FaultConfig, FaultSpecError, OpenDeviceError,
    QpInitAttr, WcStatus,
};

fn faulty(addr: &str, faults: FaultConfig) -> Device {
    Device::open(DeviceConfig::new(addr.parse().unwrap()).faults(faults)).unwrap()
}

/// 64 WRITEs of 16 KiB and 64 READs back, from a device that loses, duplicates, reorders,
/// delays and corrupts its datagrams both ways. Everything completes, the memory is right,
/// and the counters add up: what the engine built is what the socket took, plus what was
/// dropped, less the duplicates; every corruption sent fails the peer's ICRC check.
#[test]
fn rc_survives_every_fault_and_the_counters_add_up() {
    let faults = FaultConfig {
        loss: 0.05,
        duplicate: 0.05,
        reorder: 0.1,
        delay: Duration::from_micros(20),
        corrupt: 0.02,
        seed: 5,
    };
    let a = Side::on(faulty("127.0.64.1", faults), 2 << 20);
    let b = Side::new("127.0.64.2", 2 << 20);
    common::connect(&a.qp, &b.qp);
    const LEN: usize = 16 << 10;
    let remote = b.mr.remote();
    let data = pattern(64 * LEN, 11);
    a.mr.write(0, &data).unwrap();
    let writes = (0..64u64).map(|i| {
        let at = i as usize * LEN;
        wr::write(
            i,
            vec![a.mr.sge(at, LEN as u32)],
            remote.at(at as u64),
            remote.rkey,
        )
    });
    a.qp.post_send(writes.collect::<Vec<_>>()).unwrap();
    let wcs = wait_wcs(&a.cq, 64);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(b.mr.read_vec(0, 64 * LEN).unwrap(), data);
    let reads = (0..64u64).map(|i| {
        let at = i as usize * LEN;
        let local = a.mr.sge(64 * LEN + at, LEN as u32);
        wr::read(100 + i, vec![local], remote.at(at as u64), remote.rkey)
    });
    a.qp.post_send(reads.collect::<Vec<_>>()).unwrap();
    let wcs = wait_wcs(&a.cq, 64);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(a.mr.read_vec(64 * LEN, 64 * LEN).unwrap(), data);

    // Let held datagrams go and the last ACKs land.
    std::thread::sleep(Duration::from_millis(50));
    let (sa, sb) = (a.dev.stats(), b.dev.stats());
    let io = sa.io;
    for (what, n) in [
        ("tx drops", io.injected_tx_drops),
        ("rx drops", io.injected_rx_drops),
        ("tx duplicates", io.injected_tx_duplicates),
        ("rx duplicates", io.injected_rx_duplicates),
        ("tx corruptions", io.injected_tx_corruptions),
        ("rx corruptions", io.injected_rx_corruptions),
        ("tx delays", io.injected_tx_delays),
        ("rx delays", io.injected_rx_delays),
    ] {
        assert!(n > 0, "no injected {what}: {io:?}");
    }
    assert!(sa.engine.retransmitted_packets > 0);
    assert_eq!(io.tx_errors, 0);
    assert_eq!(
        sa.engine.tx_packets + io.injected_tx_duplicates,
        io.tx_datagrams + io.injected_tx_drops,
        "{io:?}"
    );
    // Loopback loses nothing else: each side received what the other sent.
    assert_eq!(sb.io.rx_datagrams, io.tx_datagrams);
    assert_eq!(io.rx_datagrams, sb.io.tx_datagrams);
    // Every corrupted datagram, sent or received, failed its ICRC check.
    assert_eq!(
        sb.engine.drops_for(DropReason::BadIcrc),
        io.injected_tx_corruptions
    );
    // (One received both corrupted and duplicated reaches the engine twice, corrupted.)
    let bad = sa.engine.drops_for(DropReason::BadIcrc);
    let corrupted = io.injected_rx_corruptions;
    assert!(
        (corrupted..=corrupted + io.injected_rx_duplicates).contains(&bad),
        "{bad} bad ICRCs for {corrupted} corrupted: {io:?}"
    );
    // The counters are in the list `devinfo` and `perf --counters` print.
    let listed = sa.counters();
    assert!(listed.contains(&("io.injected_tx_drops".into(), io.injected_tx_drops)));
}

/// UD SENDs from one thread through a device losing 30 % of what it sends: which messages
/// arrive is the same for the same seed, and differs for another.
#[test]
fn the_same_seed_loses_the_same_datagrams() {
    let run = |seed: u64, addrs: (&str, &str)| -> Vec<u64> {
        let faults = FaultConfig {
            loss: 0.3,
            seed,
            ..FaultConfig::NONE
        };
        let (a, b) = (faulty(addrs.0, faults), open(addrs.1));
        let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
        let (ca, cb) = (a.create_cq(512).unwrap(), b.create_cq(512).unwrap());
        let mut init = QpInitAttr::ud(&ca);
        init.cap.max_send_wr = 256;
        let qa = pa.create_qp(&init).unwrap();
        let mut init = QpInitAttr::ud(&cb);
        init.cap.max_recv_wr = 256;
        let qb = pb.create_qp(&init).unwrap();
        qa.ready_ud(7).unwrap();
        qb.ready_ud(7).unwrap();
        let (ma, mb) = (
            pa.reg_mr(1 << 16, all_access()).unwrap(),
            pb.reg_mr(256 * 128, all_access()).unwrap(),
        );
        for i in 0..200u64 {
            qb.post_recv([wr::recv(i, vec![mb.sge(i as usize * 128, 128)])])
                .unwrap();
        }
        let ah = pa
            .create_ah(&AhAttr::new(b.gid(), a.gid_index() as u8))
            .unwrap();
        for i in 0..200u64 {
            ma.write(i as usize * 8, &i.to_le_bytes()).unwrap();
            let sge = ma.sge(i as usize * 8, 8);
            qa.post_send([wr::ud_send(i, vec![sge], &ah, qb.qp_num(), 7)])
                .unwrap();
            // One at a time, so the device sends them in posting order.
            assert_eq!(wait_wcs(&ca, 1)[0].status, WcStatus::Success);
        }
        std::thread::sleep(Duration::from_millis(100));
        let mut got = Vec::new();
        while let Some(wc) = cb.poll_one() {
            assert_eq!(wc.status, WcStatus::Success);
            let at = wc.wr_id as usize * 128 + softrdma::GRH_LEN;
            let v = mb.read_vec(at, 8).unwrap();
            got.push(u64::from_le_bytes(v.try_into().unwrap()));
        }
        assert_eq!(a.stats().io.injected_tx_drops, 200 - got.len() as u64);
        got
    };
    let first = run(21, ("127.0.64.3", "127.0.64.4"));
    assert!(
        (100..180).contains(&first.len()),
        "{} of 200 arrived",
        first.len()
    );
    assert_eq!(run(21, ("127.0.64.5", "127.0.64.6")), first);
    assert_ne!(run(22, ("127.0.64.7", "127.0.64.8")), first);
}

/// A probability outside 0..=1 is refused at open, with the reason.
#[test]
fn bad_faults_are_refused_at_open() {
    let faults = FaultConfig {
        loss: 1.5,
        ..FaultConfig::NONE
    };
    let cfg = DeviceConfig::new("127.0.64.9".parse().unwrap()).faults(faults);
    match Device::open(cfg) {
        Err(OpenDeviceError::Faults(FaultSpecError::BadValue { key, .. })) => {
            assert_eq!(key, "loss")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}
