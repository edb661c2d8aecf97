//! Every RC operation, with exact memory and completion checks: over real UDP on loopback,
//! and over the in-process fabric, clean and lossy (`over_fabric.rs`, `over_lossy_fabric.rs`).
//! Addresses 127.0.5.x, two per connection.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use softrdma::{
    wr, AccessFlags, ConnectOptions, Mtu, PostErrorKind, QpAttr, QpInitAttr, QpState, SendFlags,
    SendOp, SendWr, WcOpcode, WcStatus,
};

#[test]
fn send_recv() {
    let (a, b) = pair("127.0.5.1", "127.0.5.2", 4096);
    b.qp.post_recv([wr::recv(7, vec![b.mr.sge(100, 200)])])
        .unwrap();
    let data = pattern(123, 1);
    a.mr.write(0, &data).unwrap();
    a.qp.post_send([wr::send(8, vec![a.mr.sge(0, 123)])])
        .unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!(wc.wr_id, 7);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.opcode, WcOpcode::Recv);
    assert_eq!(wc.byte_len, 123);
    assert_eq!(wc.imm_data, None);
    assert_eq!(wc.qp_num, b.qp.qp_num());
    assert_eq!(wc.src_qp, a.qp.qp_num());
    let mem = b.mr.to_vec().unwrap();
    assert_eq!(&mem[100..223], &data[..]);
    assert!(mem[..100].iter().all(|&x| x == 0) && mem[223..].iter().all(|&x| x == 0));
    let wc = wait_one(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (8, WcStatus::Success, WcOpcode::Send, 123)
    );
}

#[test]
fn send_with_imm_and_inline() {
    let (a, b) = pair("127.0.5.3", "127.0.5.4", 4096);
    b.qp.post_recv([
        wr::recv(1, vec![b.mr.sge(0, 64)]),
        wr::recv(2, vec![b.mr.sge(64, 64)]),
    ])
    .unwrap();
    a.mr.write(0, b"immediate!").unwrap();
    a.qp.post_send([
        wr::send_with_imm(10, vec![a.mr.sge(0, 10)], 0xdead_beef),
        wr::send_inline(11, b"inline data"),
    ])
    .unwrap();
    let wcs = wait_wcs(&b.cq, 2);
    assert_eq!(wcs[0].wr_id, 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].imm_data, Some(0xdead_beef));
    assert_eq!(wcs[0].byte_len, 10);
    assert_eq!(wcs[1].wr_id, 2);
    assert_eq!(wcs[1].imm_data, None);
    assert_eq!(wcs[1].byte_len, 11);
    assert_eq!(b.mr.read_vec(0, 10).unwrap(), b"immediate!");
    assert_eq!(b.mr.read_vec(64, 11).unwrap(), b"inline data");
    let wcs = wait_wcs(&a.cq, 2);
    assert_eq!((wcs[0].wr_id, wcs[1].wr_id), (10, 11));
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn rdma_write() {
    let (a, b) = pair("127.0.5.5", "127.0.5.6", 8192);
    let data = pattern(1000, 2);
    a.mr.write(0, &data).unwrap();
    let r = b.mr.remote();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 1000)], r.at(4000), r.rkey)])
        .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (1, WcStatus::Success, WcOpcode::RdmaWrite, 1000)
    );
    let mem = b.mr.to_vec().unwrap();
    assert_eq!(&mem[4000..5000], &data[..]);
    assert!(mem[..4000].iter().chain(&mem[5000..]).all(|&x| x == 0));
    // The target saw nothing.
    assert!(b.cq.is_empty());
}

#[test]
fn rdma_write_with_imm() {
    let (a, b) = pair("127.0.5.7", "127.0.5.8", 4096);
    b.qp.post_recv([wr::recv(5, vec![])]).unwrap();
    let data = pattern(300, 3);
    a.mr.write(0, &data).unwrap();
    let r = b.mr.remote();
    a.qp.post_send([wr::write_with_imm(
        1,
        vec![a.mr.sge(0, 300)],
        r.at(10),
        r.rkey,
        42,
    )])
    .unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!(wc.wr_id, 5);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(wc.imm_data, Some(42));
    assert_eq!(wc.byte_len, 300);
    assert_eq!(b.mr.read_vec(10, 300).unwrap(), data);
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
}

#[test]
fn rdma_read() {
    let (a, b) = pair("127.0.5.9", "127.0.5.10", 4096);
    let data = pattern(777, 4);
    b.mr.write(1000, &data).unwrap();
    let r = b.mr.remote();
    a.qp.post_send([wr::read(3, vec![a.mr.sge(5, 777)], r.at(1000), r.rkey)])
        .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (3, WcStatus::Success, WcOpcode::RdmaRead, 777)
    );
    let mem = a.mr.to_vec().unwrap();
    assert_eq!(&mem[5..782], &data[..]);
    assert!(mem[..5].iter().chain(&mem[782..]).all(|&x| x == 0));
    assert!(b.cq.is_empty());
}

#[test]
fn atomic_cmp_swap() {
    let (a, b) = pair("127.0.5.11", "127.0.5.12", 4096);
    b.mr.write_u64(64, 100).unwrap();
    let r = b.mr.remote();
    // Fails: compare 99 != 100; original value returned, memory unchanged.
    a.qp.post_send([wr::compare_swap(1, a.mr.sge(0, 8), r.at(64), r.rkey, 99, 5)])
        .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::CompSwap, 8)
    );
    assert_eq!(a.mr.read_u64(0).unwrap(), 100);
    assert_eq!(b.mr.read_u64(64).unwrap(), 100);
    // Succeeds.
    a.qp.post_send([wr::compare_swap(
        2,
        a.mr.sge(8, 8),
        r.at(64),
        r.rkey,
        100,
        5,
    )])
    .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(a.mr.read_u64(8).unwrap(), 100);
    assert_eq!(b.mr.read_u64(64).unwrap(), 5);
}

#[test]
fn atomic_fetch_add() {
    let (a, b) = pair("127.0.5.13", "127.0.5.14", 4096);
    b.mr.write_u64(0, u64::MAX - 1).unwrap();
    let r = b.mr.remote();
    for i in 0..10u64 {
        a.qp.post_send([wr::fetch_add(
            i,
            a.mr.sge(8 * i as usize, 8),
            r.addr,
            r.rkey,
            1,
        )])
        .unwrap();
    }
    let wcs = wait_wcs(&a.cq, 10);
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (i as u64, WcStatus::Success, WcOpcode::FetchAdd)
        );
        assert_eq!(
            a.mr.read_u64(8 * i).unwrap(),
            (u64::MAX - 1).wrapping_add(i as u64)
        );
    }
    assert_eq!(b.mr.read_u64(0).unwrap(), 8); // wrapped
}

#[test]
fn multi_packet_messages() {
    const LEN: usize = 200_000; // ~49 packets at MTU 4096, ~196 at 1024
    for (mtu, addrs) in [
        (Mtu::Mtu4096, ("127.0.5.15", "127.0.5.16")),
        (Mtu::Mtu1024, ("127.0.5.17", "127.0.5.18")),
    ] {
        let a = Side::new(addrs.0, 2 * LEN);
        let b = Side::new(addrs.1, 2 * LEN);
        let opts = ConnectOptions {
            path_mtu: Some(mtu),
            ..Default::default()
        };
        a.qp.connect(&b.qp.endpoint(), &opts).unwrap();
        b.qp.connect(&a.qp.endpoint(), &opts).unwrap();
        let data = pattern(LEN, 5);
        a.mr.write(0, &data).unwrap();
        // SEND
        b.qp.post_recv([wr::recv(1, vec![b.mr.sge(0, LEN as u32)])])
            .unwrap();
        a.qp.post_send([wr::send(1, vec![a.mr.sge(0, LEN as u32)])])
            .unwrap();
        let wc = wait_one(&b.cq);
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, LEN as u32));
        assert_eq!(b.mr.read_vec(0, LEN).unwrap(), data);
        assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
        // WRITE
        let r = b.mr.remote();
        a.qp.post_send([wr::write(
            2,
            vec![a.mr.sge(0, LEN as u32)],
            r.at(LEN as u64),
            r.rkey,
        )])
        .unwrap();
        assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
        assert_eq!(b.mr.read_vec(LEN, LEN).unwrap(), data);
        // READ back
        a.qp.post_send([wr::read(
            3,
            vec![a.mr.sge(LEN, LEN as u32)],
            r.at(LEN as u64),
            r.rkey,
        )])
        .unwrap();
        let wc = wait_one(&a.cq);
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, LEN as u32));
        assert_eq!(a.mr.read_vec(LEN, LEN).unwrap(), data);
    }
}

#[test]
fn multi_sge() {
    let (a, b) = pair("127.0.5.19", "127.0.5.20", 16384);
    let data = pattern(5000, 6);
    // Gather from three pieces, scatter into three others.
    a.mr.write(0, &data[..1000]).unwrap();
    a.mr.write(3000, &data[1000..3500]).unwrap();
    a.mr.write(9000, &data[3500..]).unwrap();
    let gather = vec![
        a.mr.sge(0, 1000),
        a.mr.sge(3000, 2500),
        a.mr.sge(9000, 1500),
    ];
    b.qp.post_recv([wr::recv(
        1,
        vec![
            b.mr.sge(100, 10),
            b.mr.sge(2000, 4000),
            b.mr.sge(8000, 2000),
        ],
    )])
    .unwrap();
    a.qp.post_send([wr::send(1, gather.clone())]).unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 5000));
    assert_eq!(b.mr.read_vec(100, 10).unwrap(), &data[..10]);
    assert_eq!(b.mr.read_vec(2000, 4000).unwrap(), &data[10..4010]);
    assert_eq!(b.mr.read_vec(8000, 990).unwrap(), &data[4010..]);
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    // Multi-SGE WRITE and READ.
    let r = b.mr.remote();
    a.qp.post_send([wr::write(2, gather, r.at(11000), r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(b.mr.read_vec(11000, 5000).unwrap(), data);
    a.qp.post_send([wr::read(
        3,
        vec![
            a.mr.sge(12000, 2),
            a.mr.sge(13900, 2398),
            a.mr.sge(5000, 2600),
        ],
        r.at(11000),
        r.rkey,
    )])
    .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(a.mr.read_vec(12000, 2).unwrap(), &data[..2]);
    assert_eq!(a.mr.read_vec(13900, 2398).unwrap(), &data[2..2400]);
    assert_eq!(a.mr.read_vec(5000, 2600).unwrap(), &data[2400..]);
}

#[test]
fn several_qps_at_once() {
    let a = Side::new("127.0.5.21", 1 << 16);
    let b = Side::new("127.0.5.22", 1 << 16);
    let mut qps = Vec::new();
    for _ in 0..8 {
        let qa = a.pd.create_qp(&QpInitAttr::rc(&a.cq)).unwrap();
        let qb = b.pd.create_qp(&QpInitAttr::rc(&b.cq)).unwrap();
        connect(&qa, &qb);
        qps.push((qa, qb));
    }
    let r = b.mr.remote();
    for (i, (qa, qb)) in qps.iter().enumerate() {
        let off = i * 4096;
        a.mr.write(off, &pattern(4096, i as u64)).unwrap();
        qb.post_recv([wr::recv(i as u64, vec![b.mr.sge(off, 2048)])])
            .unwrap();
        qa.post_send([
            wr::send(i as u64, vec![a.mr.sge(off, 2048)]),
            wr::write(
                100 + i as u64,
                vec![a.mr.sge(off + 2048, 2048)],
                r.at(off as u64 + 2048),
                r.rkey,
            ),
        ])
        .unwrap();
    }
    let wcs = wait_wcs(&a.cq, 16);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let recvs = wait_wcs(&b.cq, 8);
    for wc in &recvs {
        assert_eq!(wc.status, WcStatus::Success);
        let i = wc.wr_id as usize;
        assert_eq!(wc.qp_num, qps[i].1.qp_num());
    }
    for i in 0..8 {
        assert_eq!(
            b.mr.read_vec(i * 4096, 4096).unwrap(),
            pattern(4096, i as u64)
        );
    }
}

#[test]
fn several_threads_posting() {
    let (a, b) = pair("127.0.5.23", "127.0.5.24", 1 << 16);
    let a = Arc::new(a);
    let r = b.mr.remote();
    const THREADS: usize = 4;
    const PER: usize = 200;
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let a = a.clone();
        handles.push(std::thread::spawn(move || {
            for i in 0..PER {
                let slot = (t * PER + i) * 8;
                a.mr.write_u64(slot, (t * PER + i) as u64 + 1).unwrap();
                let wr = if i % 2 == 0 {
                    wr::write(
                        slot as u64,
                        vec![a.mr.sge(slot, 8)],
                        r.at(slot as u64),
                        r.rkey,
                    )
                } else {
                    wr::fetch_add(
                        slot as u64,
                        a.mr.sge(slot + 32768, 8),
                        r.at(60000),
                        r.rkey,
                        1,
                    )
                };
                // The send queue may be full for a moment: retry, as ibverbs callers do.
                loop {
                    match a.qp.post_send([wr.clone()]) {
                        Ok(()) => break,
                        Err(e) if e.kind == PostErrorKind::QueueFull => {
                            std::thread::sleep(Duration::from_micros(50))
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let wcs = wait_wcs(&a.cq, THREADS * PER);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), THREADS * PER);
    for n in 0..THREADS * PER {
        if n % PER % 2 == 0 {
            assert_eq!(b.mr.read_u64(n * 8).unwrap(), n as u64 + 1);
        }
    }
    assert_eq!(b.mr.read_u64(60000).unwrap(), (THREADS * PER / 2) as u64);
}

/// One-sided operations need nothing from the remote application: its thread owns its
/// objects and blocks until the test is over — on a channel, so the proof does not depend on
/// how long anything takes.
#[test]
fn one_sided_served_while_remote_app_sleeps() {
    let (a, b) = pair("127.0.5.25", "127.0.5.26", 1 << 20);
    let data = pattern(1 << 19, 7);
    b.mr.write(0, &data).unwrap();
    let r = b.mr.remote();
    let (wake, asleep) = std::sync::mpsc::channel::<()>();
    let sleeper = std::thread::spawn(move || {
        let _b = b;
        asleep.recv().unwrap();
        _b
    });
    a.qp.post_send([wr::read(1, vec![a.mr.sge(0, 1 << 19)], r.addr, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(a.mr.read_vec(0, 1 << 19).unwrap(), data);
    let back = pattern(1 << 19, 8);
    a.mr.write(0, &back).unwrap();
    a.qp.post_send([
        wr::write(2, vec![a.mr.sge(0, 1 << 19)], r.at(1 << 19), r.rkey),
        wr::fetch_add(3, a.mr.sge(1 << 19, 8), r.addr, r.rkey, 5),
    ])
    .unwrap();
    let wcs = wait_wcs(&a.cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert!(
        !sleeper.is_finished(),
        "the remote thread was supposed to be blocked"
    );
    wake.send(()).unwrap();
    let b = sleeper.join().unwrap();
    assert_eq!(b.mr.read_vec(1 << 19, 1 << 19).unwrap(), back);
    assert!(b.cq.is_empty());
}

#[test]
fn bad_rkey_gives_remote_access_error() {
    let (a, b) = pair("127.0.5.27", "127.0.5.28", 4096);
    let r = b.mr.remote();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 8)], r.addr, r.rkey ^ 0x100)])
        .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemAccessErr));
    assert_eq!(a.qp.state(), QpState::Err);
    // Later work flushes.
    a.qp.post_send([wr::write(2, vec![a.mr.sge(0, 8)], r.addr, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::WrFlushErr);
}

#[test]
fn out_of_bounds_and_rights_give_remote_access_error() {
    let a = Side::new("127.0.5.29", 4096);
    let b = Side::new("127.0.5.30", 4096);
    let ro = b.pd.reg_mr(64, AccessFlags::REMOTE_READ).unwrap();
    let r = b.mr.remote();
    let cases: Vec<SendWr> = vec![
        // past the end of the region
        wr::write(1, vec![a.mr.sge(0, 16)], r.at(4090), r.rkey),
        // READ past the end
        wr::read(2, vec![a.mr.sge(0, 16)], r.at(4095), r.rkey),
        // WRITE into a read-only region
        wr::write(3, vec![a.mr.sge(0, 8)], ro.addr(), ro.rkey()),
        // atomic on a region without REMOTE_ATOMIC
        wr::fetch_add(4, a.mr.sge(0, 8), ro.addr(), ro.rkey(), 1),
    ];
    for wr in cases {
        let id = wr.wr_id;
        connect(&a.qp, &b.qp);
        a.qp.post_send([wr]).unwrap();
        let wc = wait_one(&a.cq);
        assert_eq!(
            (wc.wr_id, wc.status),
            (id, WcStatus::RemAccessErr),
            "case {id}"
        );
        // the responder went to ERR too; reconnect both for the next case
        while b.cq.poll_one().is_some() {}
    }
    assert_eq!(b.mr.to_vec().unwrap(), vec![0; 4096]);
}

#[test]
fn local_misuse() {
    let (a, b) = pair("127.0.5.31", "127.0.5.32", 4096);
    let r = b.mr.remote();
    // SGE beyond the MR: local protection error in the completion (as rxe).
    a.qp.post_send([wr::write(1, vec![a.mr.sge(4000, 200)], r.addr, r.rkey)])
        .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocProtErr));

    // Wrong lkey.
    connect(&a.qp, &b.qp);
    let mut sge = a.mr.sge(0, 8);
    sge.lkey ^= 0x300;
    a.qp.post_send([wr::write(2, vec![sge], r.addr, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::LocProtErr);

    // READ into a region without local write.
    connect(&a.qp, &b.qp);
    let ro = a.pd.reg_mr(64, AccessFlags::empty()).unwrap();
    a.qp.post_send([wr::read(3, vec![ro.sge(0, 8)], r.addr, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::LocProtErr);

    // Posting in the wrong state: errors, with the index of the bad WR.
    let fresh = a.pd.create_qp(&QpInitAttr::rc(&a.cq)).unwrap();
    let err = fresh.post_send([wr::send(4, vec![])]).unwrap_err();
    assert_eq!(err.bad_wr, 0);
    assert_eq!(err.kind, PostErrorKind::InvalidState(QpState::Reset));
    let err = fresh.post_recv([wr::recv(5, vec![])]).unwrap_err();
    assert_eq!(err.kind, PostErrorKind::InvalidState(QpState::Reset));
    fresh.to_init(all_access()).unwrap();
    fresh.post_recv([wr::recv(6, vec![])]).unwrap();
    let err = fresh.post_send([wr::send(7, vec![])]).unwrap_err();
    assert_eq!(err.kind, PostErrorKind::InvalidState(QpState::Init));

    // A batch stops at the bad WR; the ones before it are posted.
    connect(&a.qp, &b.qp);
    while b.cq.poll_one().is_some() {}
    let too_many_sges = vec![a.mr.sge(0, 1); 5];
    let bad_atomic = SendWr {
        wr_id: 10,
        op: SendOp::AtomicFetchAdd {
            remote_addr: r.addr + 4,
            rkey: r.rkey,
            add: 1,
        },
        sg_list: vec![a.mr.sge(0, 8)],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
        xrc_srqn: None,
    };
    let err =
        a.qp.post_send([
            wr::write(8, vec![a.mr.sge(0, 8)], r.addr, r.rkey),
            wr::write(9, too_many_sges, r.addr, r.rkey),
            bad_atomic.clone(),
        ])
        .unwrap_err();
    assert_eq!(err.bad_wr, 1);
    assert!(matches!(err.kind, PostErrorKind::InvalidArgument(_)));
    assert_eq!(wait_one(&a.cq).wr_id, 8);
    let err = a.qp.post_send([bad_atomic]).unwrap_err();
    assert!(
        matches!(err.kind, PostErrorKind::InvalidArgument(_)),
        "{err}"
    );

    // Illegal transitions are refused and change nothing.
    let err =
        a.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("RTR") || err.to_string().contains("Rtr"),
        "{err}"
    );
    assert_eq!(a.qp.state(), QpState::Rts);

    // MR out-of-bounds copies are errors, not panics.
    assert!(a.mr.read(4090, &mut [0u8; 10]).is_err());
    assert!(a.mr.write(usize::MAX, &[1]).is_err());
    // Remote write without local write is refused at registration.
    assert!(a.pd.reg_mr(8, AccessFlags::REMOTE_WRITE).is_err());
}

#[test]
fn rnr_then_late_receive() {
    let (a, b) = pair("127.0.5.33", "127.0.5.34", 4096);
    a.mr.write(0, b"late").unwrap();
    a.qp.post_send([wr::send(1, vec![a.mr.sge(0, 4)])]).unwrap();
    // The SEND meets no receive: wait for the RNR NAK it earns (an event, not a delay).
    let deadline = std::time::Instant::now() + WAIT;
    while b.dev.stats().engine.naks_sent_of(softrdma::NakKind::Rnr) == 0 {
        assert!(std::time::Instant::now() < deadline, "no RNR NAK");
        std::thread::yield_now();
    }
    assert!(a.cq.is_empty());
    b.qp.post_recv([wr::recv(2, vec![b.mr.sge(0, 64)])])
        .unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 4));
    assert_eq!(b.mr.read_vec(0, 4).unwrap(), b"late");
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert!(b.dev.stats().engine.naks_sent_of(softrdma::NakKind::Rnr) >= 1);
}

#[test]
fn dropping_a_qp_flushes_its_work() {
    let (a, b) = pair("127.0.5.35", "127.0.5.36", 4096);
    b.qp.post_recv([
        wr::recv(1, vec![b.mr.sge(0, 64)]),
        wr::recv(2, vec![b.mr.sge(0, 64)]),
    ])
    .unwrap();
    let cq = b.cq.clone();
    drop(b.qp);
    let wcs = wait_wcs(&cq, 2);
    assert!(wcs
        .iter()
        .all(|w| w.status == WcStatus::WrFlushErr && w.opcode == WcOpcode::Recv));
    // Objects keep parents alive: the CQ still works after its device handle is dropped.
    drop(b.dev);
    drop(b.pd);
    assert!(cq.poll_one().is_none());
    drop(a);
}

#[test]
fn device_attributes_and_gids() {
    let d = open("127.0.5.37");
    let attr = d.query_device();
    assert_eq!(attr.vendor_id, 0xffffff);
    assert_eq!(attr.max_qp_rd_atom, 128);
    assert_eq!(attr.max_sge, 32);
    assert_eq!(attr.phys_port_cnt, 1);
    let port = d.query_port(1).unwrap();
    assert_eq!(port.max_msg_sz, 0x800000);
    assert_eq!(port.max_mtu, Mtu::Mtu4096);
    assert!(d.query_port(2).is_err());
    // Index 0 (what programs take by default) and index 1 (the IPv4 GID's index on rxe) are
    // both the device's address; the link-local GID comes last.
    assert_eq!(d.query_gid(1, 0).unwrap().to_string(), "::ffff:127.0.5.37");
    assert_eq!(d.query_gid(1, 1).unwrap().to_string(), "::ffff:127.0.5.37");
    assert_eq!(
        d.query_gid(1, 2).unwrap().to_string(),
        "fe80::7fff:fe00:525"
    );
    assert_eq!(d.gid_table().len(), 3);
    // The table has room for more: its other entries are empty.
    assert_eq!(
        d.query_port(1).unwrap().gid_tbl_len,
        softrdma::gid::GID_TABLE_LEN
    );
    assert_eq!(attr.node_guid, 0x0000_7fff_fe00_0525);
    assert_eq!(d.gid_index(), 0);
    assert_eq!(d.query_gid(1, 3), Err(softrdma::QueryError::EmptyGid(3)));
    assert_eq!(d.query_gid(1, 15), Err(softrdma::QueryError::EmptyGid(15)));
    assert_eq!(d.query_gid(1, 16), Err(softrdma::QueryError::NoSuchGid(16)));
}

#[test]
fn async_wait_without_a_runtime() {
    use std::future::Future;
    use std::task::{Context, Poll, Wake, Waker};
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park_timeout(Duration::from_secs(10));
        }
    }
    let (a, b) = pair("127.0.5.39", "127.0.5.40", 4096);
    b.qp.post_recv([wr::recv(1, vec![b.mr.sge(0, 64)])])
        .unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        a.mr.write(0, b"async").unwrap();
        a.qp.post_send([wr::send(1, vec![a.mr.sge(0, 5)])]).unwrap();
        wait_one(&a.cq);
    });
    let mut out = Vec::new();
    let n = block_on(b.cq.poll_async(4, &mut out));
    assert_eq!(n, 1);
    assert_eq!((out[0].status, out[0].byte_len), (WcStatus::Success, 5));
    sender.join().unwrap();
}

#[test]
fn busy_poll_and_progress_thread_transmit() {
    let open = |addr: &str, busy: bool| {
        open_with(
            softrdma::DeviceConfig::new(ip(addr))
                .busy_poll(busy)
                .inline_transmit(false),
        )
    };
    let (da, db) = (open("127.0.5.41", true), open("127.0.5.42", false));
    let mut sides = Vec::new();
    for d in [&da, &db] {
        let pd = d.alloc_pd();
        let cq = d.create_cq(16).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq)).unwrap();
        let mr = pd.reg_mr(4096, all_access()).unwrap();
        sides.push((qp, cq, mr));
    }
    let (qb, cb, mb) = sides.pop().unwrap();
    let (qa, ca, ma) = sides.pop().unwrap();
    connect(&qa, &qb);
    for i in 0..50u64 {
        qb.post_recv([wr::recv(i, vec![mb.sge(0, 64)])]).unwrap();
        ma.write_u64(0, i).unwrap();
        qa.post_send([wr::send(i, vec![ma.sge(0, 8)])]).unwrap();
        assert_eq!(wait_one(&cb).status, WcStatus::Success);
        assert_eq!(mb.read_u64(0).unwrap(), i);
        assert_eq!(wait_one(&ca).status, WcStatus::Success);
    }
}

/// Two application threads wait on two CQs of the same device. Whichever thread happens to
/// drive the device may consume the datagram that completes the *other* thread's work; that
/// thread must still get it (through its CQ's event fd or the socket). RNR retries keep
/// datagrams coming here, so this test cannot tell how a waiter woke: the next one can.
#[test]
fn waiters_on_one_device_wake_for_completions_another_thread_produced() {
    let a = Side::new("127.0.5.61", 4096);
    let b = Side::new("127.0.5.62", 4096);
    let b2_cq = b.dev.create_cq(64).unwrap();
    let b2_qp = b.pd.create_qp(&QpInitAttr::rc(&b2_cq)).unwrap();
    let a2_qp = a.pd.create_qp(&QpInitAttr::rc(&a.cq)).unwrap();
    connect(&a.qp, &b.qp);
    connect(&a2_qp, &b2_qp);
    const ROUNDS: usize = 300;
    let waiter = |cq: softrdma::CompletionQueue,
                  qp: softrdma::QueuePair,
                  mr: softrdma::MemoryRegion,
                  off: usize| {
        std::thread::spawn(move || {
            let mut wcs = Vec::new();
            for i in 0..ROUNDS {
                qp.post_recv([wr::recv(i as u64, vec![mr.sge(off, 64)])])
                    .unwrap();
                wcs.clear();
                cq.poll_blocking(1, &mut wcs, Some(WAIT));
                assert_eq!(wcs.len(), 1, "round {i}: no completion within {WAIT:?}");
                assert_eq!(wcs[0].status, WcStatus::Success);
            }
        })
    };
    let t1 = waiter(b.cq.clone(), b.qp.clone(), b.mr.clone(), 0);
    let t2 = waiter(b2_cq, b2_qp, b.mr.clone(), 1024);
    let mut sent = 0;
    let mut wcs = Vec::new();
    for i in 0..ROUNDS {
        // A SEND that beats its receive is RNR-NAKed and retried (rnr_retry 7 by default).
        a.qp.post_send([wr::send(i as u64, vec![a.mr.sge(0, 8)])])
            .unwrap();
        a2_qp
            .post_send([wr::send(i as u64, vec![a.mr.sge(8, 8)])])
            .unwrap();
        sent += 2;
        while wcs.len() < sent {
            let n = a.cq.poll_blocking(8, &mut wcs, Some(WAIT));
            assert!(n > 0, "round {i}: sender saw no completion within {WAIT:?}");
        }
    }
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    t1.join().unwrap();
    t2.join().unwrap();
}

/// Issue 15, item 7: a thread sleeping in `CompletionQueue::wait` is woken by its CQ's event
/// fd when another thread produces its completion. Here nothing else could wake it: the
/// completion is a flush that `post_send` on a QP in the error state produces on the posting
/// thread — no datagram arrives, no timer runs, and the waiter's own timeout is far away. A
/// lost wake-up leaves the waiter asleep until that timeout, and the test fails; the device
/// counts the event fd writes, which shows the path was taken.
#[test]
fn a_waiter_is_woken_by_its_event_fd_alone() {
    let dev = open("127.0.5.63");
    let pd = dev.alloc_pd();
    let mr = pd.reg_mr(64, all_access()).unwrap();
    const ROUNDS: u64 = 20;
    const FAR: Duration = Duration::from_secs(60);
    let mut woken_by_fd = 0;
    for round in 0..ROUNDS {
        let cq = dev.create_cq(4).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq)).unwrap();
        qp.modify(&softrdma::QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        })
        .unwrap();
        let (ready, started) = std::sync::mpsc::channel();
        let (done, finished) = std::sync::mpsc::channel();
        let waiter = {
            let cq = cq.clone();
            std::thread::spawn(move || {
                ready.send(()).unwrap();
                let t0 = std::time::Instant::now();
                let woke = cq.wait(Some(FAR));
                done.send((woke, t0.elapsed() < FAR)).unwrap();
            })
        };
        started.recv().unwrap();
        // Give the waiter the chance to fall asleep (if it has not, it finds the completion
        // without sleeping, which proves nothing but breaks nothing).
        for _ in 0..1000 {
            std::thread::yield_now();
        }
        let before = dev.stats().io.cq_signals;
        qp.post_send([wr::send(round, vec![mr.sge(0, 8)])]).unwrap();
        let (woke, early) = finished
            .recv_timeout(FAR + WAIT)
            .expect("the waiter never returned");
        assert!(
            woke && early,
            "round {round}: the waiter slept until its timeout"
        );
        woken_by_fd += dev.stats().io.cq_signals - before;
        waiter.join().unwrap();
        assert_eq!(cq.poll_one().unwrap().status, WcStatus::WrFlushErr);
    }
    assert!(
        woken_by_fd > 0,
        "no round had its waiter asleep: the event fd path was never exercised"
    );
}

/// Issue 15, item 8: the sanctioned way to share a word between local atomics and remote ones
/// is the region's own `AtomicU64` for it; local and remote fetch-and-adds racing on it lose
/// nothing.
#[test]
fn local_and_remote_atomics_share_a_word() {
    let (a, b) = pair("127.0.5.64", "127.0.5.65", 4096);
    let r = b.mr.remote();
    const N: u64 = 200;
    let local = {
        let mr = b.mr.clone();
        std::thread::spawn(move || {
            let word = mr.atomic_u64(64).expect("an aligned word of the region");
            for _ in 0..N {
                word.fetch_add(1_000, std::sync::atomic::Ordering::AcqRel);
            }
        })
    };
    for i in 0..N {
        a.qp.post_send([wr::fetch_add(i, a.mr.sge(0, 8), r.at(64), r.rkey, 1)])
            .unwrap();
        assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    }
    local.join().unwrap();
    assert_eq!(b.mr.read_u64(64).unwrap(), N * 1_000 + N);
    assert!(b.mr.atomic_u64(65).is_none() && b.mr.atomic_u64(4096).is_none());
    assert_eq!(b.mr.atomic_words(), 0..4096);
}

/// A region registered at an iova of its own (`ibv_reg_mr_iova2`, or zero-based) may map an
/// 8-aligned virtual address onto a misaligned host word. An atomic or ATOMIC_WRITE there
/// cannot be one word's update: rxe checks the host address and NAKs Invalid Request. Found
/// by review: the engine checked only the virtual address, and the region's memory asserted
/// on the host one — a remote peer could panic the progress thread.
#[test]
fn an_atomic_on_a_misaligned_host_word_is_an_invalid_request() {
    let a = Side::new("127.0.5.66", 4096);
    let b = Side::new("127.0.5.67", 4096);
    let mut backing = vec![0u64; 8];
    let before = backing.clone();
    let iova = 0x1_0000;
    // SAFETY: `backing` outlives the region (dropped at the end of the test, after `mr`) and
    // is not otherwise touched while the region is registered.
    let mr = unsafe {
        b.pd.reg_mr_raw_iova(
            backing.as_mut_ptr().cast::<u8>().add(4),
            56,
            iova,
            AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        )
    }
    .unwrap();
    let cases = [
        wr::fetch_add(1, a.mr.sge(0, 8), iova, mr.rkey(), 1),
        wr::compare_swap(2, a.mr.sge(0, 8), iova + 8, mr.rkey(), 0, 7),
        wr::atomic_write(3, a.mr.sge(0, 8), iova + 16, mr.rkey()),
    ];
    for wr in cases {
        let id = wr.wr_id;
        connect(&a.qp, &b.qp);
        a.qp.post_send([wr]).unwrap();
        let wc = wait_one(&a.cq);
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::RemInvReqErr));
        while b.cq.poll_one().is_some() {}
    }
    // The device lives on: an atomic on its own region still works.
    connect(&a.qp, &b.qp);
    let r = b.mr.remote();
    a.qp.post_send([wr::fetch_add(4, a.mr.sge(0, 8), r.addr, r.rkey, 5)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(b.mr.read_u64(0).unwrap(), 5);
    drop(mr);
    assert_eq!(backing, before);
}

/// A QP with neither send nor receive queue entries is a passive target, as rxe and
/// hardware accept one: it serves WRITEs, READs and atomics (which need no WQE of its own),
/// and only refuses what it would need a queue entry for.
#[test]
fn a_qp_without_queue_entries_serves_one_sided_operations() {
    let a = Side::new("127.0.5.68", 4096);
    // The target side's own QP stays unused: `target` is the QP under test.
    let b = Side::new("127.0.5.69", 4096);
    let mut init = QpInitAttr::rc(&b.cq);
    init.cap.max_send_wr = 0;
    init.cap.max_recv_wr = 0;
    let target = b.pd.create_qp(&init).unwrap();
    assert_eq!((target.cap().max_send_wr, target.cap().max_recv_wr), (0, 0));
    let mr = &b.mr;
    connect(&a.qp, &target);
    let r = mr.remote();

    let data = pattern(300, 9);
    a.mr.write(0, &data).unwrap();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 300)], r.addr + 100, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(mr.read_vec(100, 300).unwrap(), data);

    mr.write(1000, &pattern(64, 3)).unwrap();
    a.qp.post_send([wr::read(2, vec![a.mr.sge(2000, 64)], r.addr + 1000, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(a.mr.read_vec(2000, 64).unwrap(), pattern(64, 3));

    a.qp.post_send([wr::fetch_add(3, a.mr.sge(0, 8), r.addr + 8, r.rkey, 5)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(mr.read_u64(8).unwrap(), 5);

    let e = target
        .post_send([wr::write(4, vec![mr.sge(0, 8)], 0, 0)])
        .unwrap_err();
    assert_eq!(e.kind, PostErrorKind::QueueFull);
    let e = target
        .post_recv([wr::recv(5, vec![mr.sge(0, 8)])])
        .unwrap_err();
    assert_eq!(e.kind, PostErrorKind::QueueFull);
    // A SEND finds no receive WQE: receiver not ready, as on any QP with none posted.
    let opts = ConnectOptions {
        rnr_retry: 0,
        ..ConnectOptions::default()
    };
    a.qp.connect(&target.endpoint(), &opts).unwrap();
    target
        .connect(&a.qp.endpoint(), &ConnectOptions::default())
        .unwrap();
    a.qp.post_send([wr::send(6, vec![a.mr.sge(0, 8)])]).unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::RnrRetryExcErr);
    assert!(b.cq.poll_one().is_none());
}

/// `MemoryRegion::rereg` and `rereg_raw_iova` (ibverbs `ibv_rereg_mr`) keep the keys a peer
/// was given, as rxe and mlx5 do: the peer's next WRITE with the same rkey lands in the new
/// memory at the new address, the old memory is left alone, and new rights apply at once.
#[test]
fn reregistration_keeps_the_keys_and_moves_the_memory() {
    let mut buffer = vec![0u64; 512];
    let (a, b) = pair("127.0.5.70", "127.0.5.71", 4096);
    let old = b.mr.remote();
    let iova = 0x7000_0000;
    // SAFETY: `buffer` outlives every handle of the region (declared before them, dropped
    // after), and the test reads it only through the region.
    let moved = unsafe {
        b.mr.rereg_raw_iova(&b.pd, buffer.as_mut_ptr().cast(), 4096, iova, all_access())
    }
    .unwrap();
    assert_eq!((moved.lkey(), moved.rkey()), (b.mr.lkey(), old.rkey));
    assert_eq!((moved.addr(), moved.len()), (iova, 4096));
    let data = pattern(500, 9);
    a.mr.write(0, &data).unwrap();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 500)], iova + 100, old.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(moved.read_vec(100, 500).unwrap(), data);
    assert!(
        b.mr.to_vec().unwrap().iter().all(|&x| x == 0),
        "the old memory was written"
    );
    // The old address is no longer the region's.
    a.qp.post_send([wr::write(2, vec![a.mr.sge(0, 8)], old.addr, old.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::RemAccessErr);

    // New rights under the same key: read-only now.
    let (a, b) = pair("127.0.5.72", "127.0.5.73", 4096);
    let read_only =
        b.mr.rereg(&b.pd, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
    assert_eq!(read_only.rkey(), b.mr.rkey());
    let r = read_only.remote();
    a.qp.post_send([wr::read(3, vec![a.mr.sge(0, 8)], r.addr, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    a.qp.post_send([wr::write(4, vec![a.mr.sge(0, 8)], r.addr, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::RemAccessErr);
    drop((read_only, moved));
}

/// `CompletionQueue::resize` (`ibv_resize_cq`) keeps the completions waiting and refuses to
/// shrink below them or to grow past `MAX_CQE`; a grown CQ takes what the old size would have
/// refused.
#[test]
fn a_cq_resizes_around_the_completions_waiting_in_it() {
    let (a, b) = pair("127.0.5.74", "127.0.5.75", 4096);
    let cq = a.dev.create_cq(2).unwrap();
    let mut init = QpInitAttr::rc(&cq);
    init.cap.max_send_wr = 8;
    let qp = a.pd.create_qp(&init).unwrap();
    let peer = b.pd.create_qp(&QpInitAttr::rc(&b.cq)).unwrap();
    connect(&qp, &peer);
    let r = b.mr.remote();
    let write = |wr_id| wr::write(wr_id, vec![a.mr.sge(0, 8)], r.addr, r.rkey);
    qp.post_send([write(1), write(2)]).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while cq.len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "two WRITEs never completed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        cq.resize(1),
        Err(softrdma::ResizeCqError::TooManyWaiting {
            requested: 1,
            waiting: 2
        })
    );
    assert!(matches!(
        cq.resize(softrdma::MAX_CQE + 1),
        Err(softrdma::ResizeCqError::TooManyEntries { .. })
    ));
    assert_eq!(cq.capacity(), 2);
    cq.resize(4).unwrap();
    assert_eq!(cq.capacity(), 4);
    qp.post_send([write(3), write(4)]).unwrap();
    let ids: Vec<u64> = wait_wcs(&cq, 4).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    assert_eq!(qp.state(), QpState::Rts, "no overrun");
}
