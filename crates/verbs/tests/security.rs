//! Who may touch registered memory (issue 15, items 15 and 16): forged requests from another
//! host, the device's allow-list of peer networks, unpredictable memory keys and counted rkey
//! probes. Real devices on 127.0.8.x, over UDP sockets and over the in-process fabric
//! (`over_fabric.rs`), where the forger sends through the fabric.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use softrdma::{
    wr, Device, DeviceConfig, DeviceStats, DropReason, IpNetwork, NakKind, QpInitAttr, QpState,
    WcStatus,
};
use softrdma_wire::{AtomicEth, ExtHeaders, Opcode, Psn, Reth};

/// Waits until `cond` holds for the device's counters; a deadline only bounds a failure.
fn wait_stats(dev: &Device, what: &str, cond: impl Fn(&DeviceStats) -> bool) -> DeviceStats {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = dev.stats();
        if cond(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: {s:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn reth(va: u64, rkey: u32, len: u32) -> ExtHeaders {
    ExtHeaders {
        reth: Some(Reth {
            va,
            rkey,
            dma_len: len,
        }),
        ..Default::default()
    }
}

/// A third host that knows the QPN, the PSN the responder expects next and a valid rkey sends
/// requests that would all execute — a WRITE, a SEND, a FETCH_ADD — but from its own
/// address: the connected QP drops them (counted as `wrong_source`), memory and receive
/// queue stay untouched, and the real peer's next request, carrying that same PSN, executes.
/// What still stands is documented by the last part: the same bytes with the real peer's
/// source address (spoofed on the same L2 segment; here a second socket on the peer's IP)
/// are executed — no RoCE peer can tell them from its peer's.
#[test]
fn forged_requests_from_another_host_are_dropped_and_counted() {
    let (a, b) = pair("127.0.8.1", "127.0.8.2", 4096);
    let forger = RawSender::bind("127.0.8.3:4791".parse().unwrap());
    let from = forger.local_addr();
    let to = b.dev.local_addr();
    let expected = Psn::new(a.qp.local_psn());
    b.qp.post_recv([wr::recv(7, vec![b.mr.sge(2048, 64)])])
        .unwrap();
    let (canary, rkey) = (b.mr.addr() + 1024, b.mr.rkey());
    let forged = [
        forge(
            from,
            to,
            Opcode::RC_RDMA_WRITE_ONLY,
            b.qp.qp_num(),
            expected,
            reth(canary, rkey, 8),
            &[0xEE; 8],
        ),
        forge(
            from,
            to,
            Opcode::RC_SEND_ONLY,
            b.qp.qp_num(),
            expected,
            ExtHeaders::default(),
            &[0xEE; 16],
        ),
        forge(
            from,
            to,
            Opcode::RC_FETCH_ADD,
            b.qp.qp_num(),
            expected,
            ExtHeaders {
                atomic_eth: Some(AtomicEth {
                    va: canary,
                    rkey,
                    swap_add: 0xEE,
                    compare: 0,
                }),
                ..Default::default()
            },
            &[],
        ),
    ];
    for p in &forged {
        forger.send_to(p, to);
    }
    let s = wait_stats(&b.dev, "three wrong-source drops", |s| {
        s.engine.drops_for(DropReason::WrongSource) >= 3
    });
    assert_eq!(s.engine.drops_for(DropReason::WrongSource), 3);
    assert_eq!(s.engine.tx_packets, 0, "B answered a forgery");
    assert_eq!(b.mr.read_vec(0, 4096).unwrap(), vec![0u8; 4096]);
    assert!(b.cq.is_empty(), "a forged SEND consumed the receive");

    // The real peer's request with the same PSN executes.
    a.mr.write(0, b"genuine!").unwrap();
    let r = b.mr.remote();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 8)], r.at(1024), r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(b.mr.read_vec(1024, 8).unwrap(), b"genuine!");

    // What a source check cannot stop: a spoofed source address.
    let spoofer = RawSender::bind(SocketAddr::new(a.dev.ip(), 0));
    let spoofed = forge(
        spoofer.local_addr(),
        to,
        Opcode::RC_RDMA_WRITE_ONLY,
        b.qp.qp_num(),
        expected.add(1),
        reth(canary + 8, rkey, 8),
        &[0xEE; 8],
    );
    spoofer.send_to(&spoofed, to);
    wait_stats(&b.dev, "the spoofed WRITE executed and ACKed", |s| {
        s.engine.rx_packets >= 5 && s.engine.tx_packets >= 2
    });
    assert_eq!(b.mr.read_vec(1032, 8).unwrap(), [0xEE; 8]);
}

/// `DeviceConfig::allowed_peers`: datagrams from outside the listed networks never reach the
/// transport (counted in `io.rx_denied`, not even in the engine's `rx_packets`), while the
/// listed peer's traffic flows.
#[test]
fn allow_list_drops_datagrams_from_other_networks() {
    let a = Side::new("127.0.8.4", 4096);
    let allow: IpNetwork = "127.0.8.4/32".parse().unwrap();
    let dev = open_with(DeviceConfig::new(ip("127.0.8.5")).allowed_peers([allow]));
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInitAttr::rc(&cq)).unwrap();
    let mr = pd.reg_mr(4096, all_access()).unwrap();
    connect(&a.qp, &qp);
    a.mr.write(0, b"allowed").unwrap();
    let r = mr.remote();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 7)], r.at(100), r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(mr.read_vec(100, 7).unwrap(), b"allowed");
    let before = dev.stats();
    assert_eq!(before.io.rx_denied, 0);

    let outsider = RawSender::bind("127.0.8.6:4791".parse().unwrap());
    let to = dev.local_addr();
    for _ in 0..5 {
        let p = forge(
            outsider.local_addr(),
            to,
            Opcode::RC_RDMA_WRITE_ONLY,
            qp.qp_num(),
            Psn::new(a.qp.local_psn()).add(1),
            reth(r.at(200), r.rkey, 8),
            &[0xEE; 8],
        );
        outsider.send_to(&p, to);
        outsider.send_to(b"not even RoCE", to);
    }
    let s = wait_stats(&dev, "ten denied datagrams", |s| s.io.rx_denied >= 10);
    assert_eq!(s.io.rx_denied, 10);
    assert_eq!(s.engine.rx_packets, before.engine.rx_packets);
    assert_eq!(mr.read_vec(200, 8).unwrap(), [0u8; 8]);
}

/// Keys are drawn per registration from a random source, so the first region of every device
/// no longer has key 0x102 (nor any other fixed value), and an rkey probe — a request with a
/// wrong key — is NAKed, ends the prober's connection, and is counted at the responder.
#[test]
fn keys_are_random_and_rkey_probes_are_counted() {
    let (a, b) = pair("127.0.8.7", "127.0.8.8", 4096);
    let keys: Vec<u32> = [&a, &b].iter().map(|s| s.mr.rkey()).collect();
    assert_ne!(keys[0], keys[1], "two devices' first keys agree: {keys:x?}");
    assert!(keys.iter().all(|&k| k >= 0x100 && k != 0x102), "{keys:x?}");
    // More regions on one device: no key counts up from the one before.
    let regions: Vec<_> = (0..8)
        .map(|_| b.pd.reg_mr(64, all_access()).unwrap())
        .collect();
    let more: Vec<u32> = regions.iter().map(|m| m.rkey()).collect();
    assert!(more
        .windows(2)
        .any(|w| w[1] != w[0] + 0x100 && w[1] != w[0] + 1));

    let r = b.mr.remote();
    let probe = r.rkey ^ 0x0100;
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 8)], r.addr, probe)])
        .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!(wc.status, WcStatus::RemAccessErr);
    assert_eq!(a.qp.state(), QpState::Err);
    let s = wait_stats(&b.dev, "one remote access NAK sent", |s| {
        s.engine.naks_sent_of(NakKind::RemoteAccess) == 1
    });
    assert_eq!(s.engine.naks_sent_of(NakKind::RemoteAccess), 1);
    assert_eq!(
        a.dev.stats().engine.naks_received_of(NakKind::RemoteAccess),
        1
    );
}
