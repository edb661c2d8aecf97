//! Over real UDP on loopback: memory windows (bind, use, SEND_WITH_INV, LOCAL_INV) and the
//! IBTA 1.5 placement operations ATOMIC_WRITE and FLUSH, as a user of the verbs API does them.

mod common;

use common::*;
use softrdma::{
    wr, AccessFlags, ConnectOptions, FlushLevel, MwBindInfo, MwType, QpState, SendFlags, WcOpcode,
    WcStatus, FLUSH_GLOBAL,
};

#[test]
fn type2_window_write_invalidated_by_send_with_inv() {
    let (a, b) = pair("127.0.50.1", "127.0.50.2", 8192);
    let window_mr =
        b.pd.reg_mr(4096, all_access() | AccessFlags::MW_BIND)
            .unwrap();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let info = MwBindInfo {
        mr: &window_mr,
        offset: 1024,
        len: 512,
        access: AccessFlags::REMOTE_WRITE,
    };
    let before = mw.rkey();
    b.qp.post_send([mw.bind_wr(7, &info)]).unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (7, WcStatus::Success, WcOpcode::BindMw)
    );
    let rkey = mw.rkey();
    assert_eq!((rkey >> 8, rkey & 0xff), (before >> 8, (before + 1) & 0xff));

    // The peer writes through the window.
    let data = pattern(512, 5);
    a.mr.write(0, &data).unwrap();
    let at = window_mr.addr() + 1024;
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 512)], at, rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(window_mr.read_vec(1024, 512).unwrap(), data);

    // Its SEND_WITH_INV revokes the window; the receive says which rkey.
    b.qp.post_recv([wr::recv(20, vec![b.mr.sge(0, 64)])])
        .unwrap();
    a.qp.post_send([wr::send_with_inv(2, vec![a.mr.sge(0, 16)], rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    let recv = wait_one(&b.cq);
    assert_eq!(
        (recv.wr_id, recv.status, recv.invalidated_rkey),
        (20, WcStatus::Success, Some(rkey))
    );

    // The same WRITE again: remote access error, nothing written, both QPs in error.
    a.mr.write(0, &pattern(512, 6)).unwrap();
    a.qp.post_send([wr::write(3, vec![a.mr.sge(0, 512)], at, rkey)])
        .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::RemAccessErr));
    assert_eq!(window_mr.read_vec(1024, 512).unwrap(), data);
    assert_eq!(a.qp.state(), QpState::Err);
    let naks = b
        .dev
        .stats()
        .engine
        .naks_sent_of(softrdma::NakKind::RemoteAccess);
    assert_eq!(naks, 1, "the forbidden access is counted");
}

#[test]
fn type1_window_bind_unbind_and_local_invalidation_errors() {
    let (a, b) = pair("127.0.50.3", "127.0.50.4", 4096);
    let target =
        b.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
            .unwrap();
    target.write(100, b"window!!").unwrap();
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let info = MwBindInfo {
        mr: &target,
        offset: 100,
        len: 8,
        access: AccessFlags::REMOTE_READ,
    };
    let rkey = b.qp.bind_mw(&mw, 1, &info, SendFlags::SIGNALED).unwrap();
    assert_eq!(wait_one(&b.cq).opcode, WcOpcode::BindMw);
    a.qp.post_send([wr::read(1, vec![a.mr.sge(0, 8)], target.addr() + 100, rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(a.mr.read_vec(0, 8).unwrap(), b"window!!");
    // A type 1 window cannot be invalidated: local QP operation error, and the QP errs.
    b.qp.post_send([wr::local_inv(2, rkey)]).unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (2, WcStatus::LocQpOpErr, WcOpcode::LocalInv)
    );
    assert_eq!(b.qp.state(), QpState::Err);
}

#[test]
fn dropping_the_region_revokes_its_windows() {
    let (a, b) = pair("127.0.50.5", "127.0.50.6", 4096);
    let target =
        b.pd.reg_mr(4096, all_access() | AccessFlags::MW_BIND)
            .unwrap();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let info = MwBindInfo {
        mr: &target,
        offset: 0,
        len: 64,
        access: AccessFlags::REMOTE_WRITE,
    };
    b.qp.post_send([mw.bind_wr(1, &info)]).unwrap();
    assert_eq!(wait_one(&b.cq).status, WcStatus::Success);
    drop(target);
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 8)], 0, mw.rkey())])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::RemAccessErr);
}

#[test]
fn atomic_write_and_flush_round_trips() {
    let a = Side::new("127.0.50.7", 4096);
    let b = Side::new("127.0.50.8", 4096);
    // FLUSH needs the right on the responder's QP too (qp_access_flags, as rxe checks).
    let opts = ConnectOptions {
        access: all_access() | AccessFlags::FLUSH_GLOBAL,
        ..ConnectOptions::default()
    };
    a.qp.connect(&b.qp.endpoint(), &opts).unwrap();
    b.qp.connect(&a.qp.endpoint(), &opts).unwrap();
    let target =
        b.pd.reg_mr(4096, all_access() | AccessFlags::FLUSH_GLOBAL)
            .unwrap();
    a.mr.write_u64(0, 0x0123_4567_89ab_cdef).unwrap();
    let r = target.remote();
    a.qp.post_send([
        wr::write(1, vec![a.mr.sge(8, 64)], r.at(64), r.rkey),
        wr::atomic_write(2, a.mr.sge(0, 8), r.at(8), r.rkey),
        wr::flush(3, r.at(0), r.rkey, 128, FLUSH_GLOBAL, FlushLevel::Range),
        wr::flush(4, 0, r.rkey, 0, FLUSH_GLOBAL, FlushLevel::Region),
    ])
    .unwrap();
    let wcs = wait_wcs(&a.cq, 4);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::AtomicWrite),
            (3, WcStatus::Success, WcOpcode::Flush),
            (4, WcStatus::Success, WcOpcode::Flush),
        ]
    );
    assert_eq!(target.read_u64(8).unwrap(), 0x0123_4567_89ab_cdef);
    // FLUSH needs the right: a region without FLUSH_GLOBAL refuses it.
    let r = b.mr.remote();
    a.qp.post_send([wr::flush(
        5,
        r.at(0),
        r.rkey,
        8,
        FLUSH_GLOBAL,
        FlushLevel::Range,
    )])
    .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::RemAccessErr);
}
