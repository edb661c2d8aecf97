//! Memory windows end to end between two engines: type 2 binds through the send queue, remote
//! access through the window only (bounds, rights, the binding QP), LOCAL_INV and the peer's
//! SEND_WITH_INV revoking it, the errors and their completions as rxe gives them.

mod common;

use common::*;
use softrdma_proto::*;

fn local(wr_id: u64, op: SendOp) -> SendWr {
    SendWr::signaled(wr_id, op, vec![])
}

/// A bind of `len` bytes at offset `off` of node `i`'s region, with a new key byte.
fn bind(
    net: &Net,
    i: usize,
    mw: u32,
    key_byte: u8,
    off: u64,
    len: u64,
    access: AccessFlags,
) -> MwBind {
    MwBind {
        mw_rkey: mw,
        new_rkey: (mw & !0xff) | u32::from(key_byte),
        mr_lkey: net.nodes[i].key,
        addr: BASE + off,
        length: len,
        access,
    }
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus, WcOpcode)> {
    wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
}

fn write(net: &Net, wr_id: u64, off: u64, len: u32, remote_addr: u64, rkey: u32) -> SendWr {
    wr(
        wr_id,
        SendOp::RdmaWrite { remote_addr, rkey },
        net.sge(0, off, len),
    )
}

#[test]
fn type2_window_serves_a_write_until_send_with_inv_revokes_it() {
    let mut net = Net::new(2);
    let [a, b] = net.rc_pair_on([None, None]);
    let pd = net.nodes[1].pd;
    let mw = net.nodes[1].engine.alloc_mw(pd, MwType::Type2).unwrap();
    // The responder binds 256 bytes at offset 0x1000 for remote write, through its QP.
    let bind = bind(
        &net,
        1,
        mw,
        (mw as u8).wrapping_add(1),
        0x1000,
        256,
        AccessFlags::REMOTE_WRITE,
    );
    let rkey = bind.new_rkey;
    net.nodes[1]
        .engine
        .post_send(net.now, b, local(7, SendOp::BindMw(bind)))
        .unwrap();
    net.run();
    assert_eq!(
        statuses(&net.completions(1)),
        vec![(7, WcStatus::Success, WcOpcode::BindMw)]
    );
    assert_eq!(net.nodes[1].engine.mw_rkey(mw).unwrap(), rkey);

    // A WRITE through the window lands in the region underneath.
    let data = pattern(3, 256);
    net.write_mem(0, 0, &data);
    let w = write(&net, 1, 0, 256, BASE + 0x1000, rkey);
    net.nodes[0].engine.post_send(net.now, a, w).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(
        statuses(&net.completions(0)),
        vec![(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(net.read_mem(1, 0x1000, 256), data);

    // SEND_WITH_INV names the window: the receive reports the rkey it invalidated.
    net.recv(1, b, 20, 0x3000, 64);
    let s = wr(2, SendOp::SendWithInv { rkey }, net.sge(0, 0, 16));
    net.nodes[0].engine.post_send(net.now, a, s).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(
        statuses(&net.completions(0)),
        vec![(2, WcStatus::Success, WcOpcode::Send)]
    );
    let recv = net.completions(1);
    assert_eq!(
        statuses(&recv),
        vec![(20, WcStatus::Success, WcOpcode::Recv)]
    );
    assert_eq!(recv[0].invalidated_rkey, Some(rkey));

    // The same rkey now names nothing: remote access error, memory untouched, both QPs in
    // the error state (rxe moves the responder to ERR after its access NAK).
    net.write_mem(0, 0, &pattern(9, 256));
    let w = write(&net, 3, 0, 256, BASE + 0x1000, rkey);
    net.nodes[0].engine.post_send(net.now, a, w).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(
        statuses(&net.completions(0)),
        vec![(3, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]
    );
    assert_eq!(net.read_mem(1, 0x1000, 256), data);
    assert_eq!(net.nodes[0].engine.qp(a).unwrap().state(), QpState::Err);
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Err);
    assert_eq!(
        net.nodes[1]
            .engine
            .stats()
            .naks_sent_of(NakKind::RemoteAccess),
        1
    );
}

#[test]
fn a_window_grants_only_its_range_its_rights_and_its_qp() {
    // Each refused access costs the connection: one fresh pair per probe.
    let cases: [(&str, u64, u32, AccessFlags, bool); 5] = [
        ("inside", 0x1000, 64, AccessFlags::REMOTE_WRITE, true),
        ("below", 0x0ff8, 16, AccessFlags::REMOTE_WRITE, false),
        ("beyond", 0x1000, 65, AccessFlags::REMOTE_WRITE, false),
        (
            "read-only window",
            0x1000,
            8,
            AccessFlags::REMOTE_READ,
            false,
        ),
        ("other QP", 0x1000, 8, AccessFlags::REMOTE_WRITE, false),
    ];
    for (what, off, len, access, ok) in cases {
        let mut net = Net::new(2);
        let [a, b] = net.rc_pair_on([None, None]);
        let [a2, b2] = net.rc_pair_on([None, None]);
        let pd = net.nodes[1].pd;
        let mw = net.nodes[1].engine.alloc_mw(pd, MwType::Type2).unwrap();
        let bind = bind(&net, 1, mw, 0x5a, 0x1000, 64, access);
        net.nodes[1]
            .engine
            .post_send(net.now, b, local(1, SendOp::BindMw(bind)))
            .unwrap();
        net.run();
        net.completions(1);
        let (qp, peer) = if what == "other QP" { (a2, b2) } else { (a, b) };
        net.write_mem(0, 0, &pattern(1, 128));
        let w = write(&net, 5, 0, len, BASE + off, bind.new_rkey);
        net.nodes[0].engine.post_send(net.now, qp, w).unwrap();
        net.run_for(Duration::from_millis(10));
        let want = if ok {
            WcStatus::Success
        } else {
            WcStatus::RemAccessErr
        };
        assert_eq!(net.completions(0)[0].status, want, "{what}");
        let touched = net.read_mem(1, 0x0ff8, 80) != vec![0u8; 80];
        assert_eq!(
            touched, ok,
            "{what}: memory touched only by the allowed write"
        );
        let state = net.nodes[1].engine.qp(peer).unwrap().state();
        assert_eq!(state == QpState::Err, !ok, "{what}");
    }
}

#[test]
fn local_invalidation_and_failed_binds_complete_in_order() {
    let mut net = Net::new(2);
    let [a, _b] = net.rc_pair_on([None, None]);
    let pd = net.nodes[0].pd;
    let mw = net.nodes[0].engine.alloc_mw(pd, MwType::Type2).unwrap();
    let bind = bind(&net, 0, mw, 0x11, 0, 4096, AccessFlags::REMOTE_READ);
    let e = &mut net.nodes[0].engine;
    e.post_send(net.now, a, local(1, SendOp::BindMw(bind)))
        .unwrap();
    e.post_send(
        net.now,
        a,
        local(
            2,
            SendOp::LocalInv {
                rkey: bind.new_rkey,
            },
        ),
    )
    .unwrap();
    // The window is free again: a second invalidation is a local QP operation error, and
    // what follows is flushed.
    e.post_send(
        net.now,
        a,
        local(
            3,
            SendOp::LocalInv {
                rkey: bind.new_rkey,
            },
        ),
    )
    .unwrap();
    e.post_send(net.now, a, local(4, SendOp::BindMw(bind)))
        .unwrap();
    net.run();
    assert_eq!(
        statuses(&net.completions(0)),
        vec![
            (1, WcStatus::Success, WcOpcode::BindMw),
            (2, WcStatus::Success, WcOpcode::LocalInv),
            (3, WcStatus::LocQpOpErr, WcOpcode::LocalInv),
            (4, WcStatus::WrFlushErr, WcOpcode::BindMw),
        ]
    );
    assert_eq!(net.nodes[0].engine.qp(a).unwrap().state(), QpState::Err);

    // A bind over a region without MW_BIND is a bind error.
    let mut net = Net::new(2);
    let [a, _b] = net.rc_pair_on([None, None]);
    let pd = net.nodes[0].pd;
    let e = &mut net.nodes[0].engine;
    let plain = e
        .reg_mr(
            pd,
            0x9000_0000,
            64,
            AccessFlags::LOCAL_WRITE,
            std::sync::Arc::new(VecMemory::new(64)),
        )
        .unwrap();
    let mw = e.alloc_mw(pd, MwType::Type2).unwrap();
    let bad = MwBind {
        mw_rkey: mw,
        new_rkey: mw ^ 1,
        mr_lkey: plain,
        addr: 0x9000_0000,
        length: 64,
        access: AccessFlags::REMOTE_READ,
    };
    e.post_send(net.now, a, local(1, SendOp::BindMw(bad)))
        .unwrap();
    net.run();
    assert_eq!(
        statuses(&net.completions(0)),
        vec![(1, WcStatus::MwBindErr, WcOpcode::BindMw)]
    );
}

#[test]
fn type1_window_serves_any_qp_of_its_domain_and_rebinds() {
    let mut net = Net::new(2);
    let [a, b] = net.rc_pair_on([None, None]);
    let [a2, _b2] = net.rc_pair_on([None, None]);
    let pd = net.nodes[1].pd;
    let mw = net.nodes[1].engine.alloc_mw(pd, MwType::Type1).unwrap();
    let first = bind(
        &net,
        1,
        mw,
        (mw as u8).wrapping_add(1),
        0x2000,
        8,
        AccessFlags::REMOTE_READ,
    );
    net.nodes[1]
        .engine
        .post_send(net.now, b, local(1, SendOp::BindMw(first)))
        .unwrap();
    net.run();
    net.write_mem(1, 0x2000, &[0xab; 8]);
    let rd = wr(
        2,
        SendOp::RdmaRead {
            remote_addr: BASE + 0x2000,
            rkey: first.new_rkey,
        },
        net.sge(0, 0x100, 8),
    );
    net.nodes[0].engine.post_send(net.now, a2, rd).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    assert_eq!(net.read_mem(0, 0x100, 8), vec![0xab; 8]);
    // Rebinding moves the window (and changes its rkey): the old rkey is dead.
    let second = bind(
        &net,
        1,
        first.new_rkey,
        (mw as u8).wrapping_add(2),
        0x3000,
        8,
        AccessFlags::REMOTE_READ,
    );
    net.nodes[1]
        .engine
        .post_send(net.now, b, local(3, SendOp::BindMw(second)))
        .unwrap();
    net.run();
    assert_eq!(
        statuses(&net.completions(1)),
        vec![
            (1, WcStatus::Success, WcOpcode::BindMw),
            (3, WcStatus::Success, WcOpcode::BindMw)
        ]
    );
    let rd = wr(
        4,
        SendOp::RdmaRead {
            remote_addr: BASE + 0x2000,
            rkey: first.new_rkey,
        },
        net.sge(0, 0x100, 8),
    );
    net.nodes[0].engine.post_send(net.now, a, rd).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(0)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn send_with_inv_of_a_region_key_fails_the_receive_as_rxe() {
    let mut net = Net::new(2);
    let [a, b] = net.rc_pair_on([None, None]);
    net.recv(1, b, 9, 0, 64);
    let region = net.nodes[1].key;
    let s = wr(1, SendOp::SendWithInv { rkey: region }, net.sge(0, 0, 8));
    net.nodes[0].engine.post_send(net.now, a, s).unwrap();
    net.run_for(Duration::from_millis(10));
    // The sender's SEND is acknowledged; the receive fails and the responder's QP errs.
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    let recv = net.completions(1);
    assert_eq!(recv[0].status, WcStatus::RemInvReqErr);
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Err);
    assert_eq!(net.nodes[1].engine.stats().invalid_invalidations, 1);
    // The region itself is untouched by the attempt.
    assert!(net.nodes[1].engine.mrs().get(region).is_some());
}

#[test]
fn bound_windows_pin_their_region_and_die_with_their_qp() {
    let mut net = Net::new(2);
    let [_a, b] = net.rc_pair_on([None, None]);
    let pd = net.nodes[1].pd;
    let key = net.nodes[1].key;
    let mw = net.nodes[1].engine.alloc_mw(pd, MwType::Type2).unwrap();
    let bind = bind(&net, 1, mw, 0x42, 0, 64, AccessFlags::REMOTE_READ);
    let e = &mut net.nodes[1].engine;
    e.post_send(net.now, b, local(1, SendOp::BindMw(bind)))
        .unwrap();
    net.run();
    let e = &mut net.nodes[1].engine;
    assert!(matches!(
        e.dereg_mr(key),
        Err(EngineError::InvalidArgument(_))
    ));
    assert!(matches!(e.dealloc_pd(pd), Err(EngineError::Busy)));
    // Re-registration: new rights keep the window bound (as rxe); new memory or a new range
    // is refused as deregistration is, since the window's rkey would reach memory never
    // bound to it.
    let mem = net.nodes[1].mem.clone();
    let e = &mut net.nodes[1].engine;
    let len = mem.len() as u64;
    let rights = AccessFlags::all();
    e.rereg_mr(key, pd, BASE, len, rights, mem.clone()).unwrap();
    assert_eq!(e.mrs().windows_bound_to(key), 1);
    // The window is read-only: the region may drop local write, not bind rights.
    let read_only = AccessFlags::REMOTE_READ | AccessFlags::MW_BIND;
    e.rereg_mr(key, pd, BASE, len, read_only, mem.clone())
        .unwrap();
    let no_bind = AccessFlags::from_bits_truncate(rights.bits() & !AccessFlags::MW_BIND.bits());
    assert!(matches!(
        e.rereg_mr(key, pd, BASE, len, no_bind, mem.clone()),
        Err(EngineError::InvalidArgument(_))
    ));
    assert_eq!(
        e.mrs().get(key).unwrap().access,
        read_only,
        "a refusal changes nothing"
    );
    for (iova, length, memory) in [
        (
            BASE + 4096,
            len,
            mem.clone() as std::sync::Arc<dyn RegionMemory>,
        ),
        (BASE, len / 2, mem.clone()),
        (BASE, len, std::sync::Arc::new(VecMemory::new(mem.len()))),
    ] {
        assert!(
            matches!(
                e.rereg_mr(key, pd, iova, length, rights, memory),
                Err(EngineError::InvalidArgument(_))
            ),
            "{iova:#x} {length}"
        );
    }
    e.destroy_qp(b).unwrap();
    assert_eq!(e.mrs().windows_bound_to(key), 0);
    e.dealloc_mw(mw).unwrap();
    assert_eq!(e.dealloc_mw(mw), Err(EngineError::NoSuchMw));
    e.dereg_mr(key).unwrap();
}

#[test]
fn local_operations_are_refused_where_rxe_refuses_them() {
    let mut net = Net::new(2);
    let ud = net.ud_qp(0, 0x1111);
    let e = &mut net.nodes[0].engine;
    let inv = local(1, SendOp::LocalInv { rkey: 0x1234 });
    assert!(matches!(
        e.post_send(net.now, ud, inv),
        Err(EngineError::InvalidArgument(_))
    ));
    let [a, _] = net.rc_pair_on([None, None]);
    let sge = net.sge(0, 0, 8);
    let with_data = SendWr {
        sg_list: vec![sge],
        ..local(2, SendOp::LocalInv { rkey: 0x1234 })
    };
    let e = &mut net.nodes[0].engine;
    assert!(matches!(
        e.post_send(net.now, a, with_data),
        Err(EngineError::InvalidArgument(_))
    ));
}

/// A bind between a SEND and a WRITE, the SEND turned back (RNR NAK) until a receive is
/// posted: the RNR retry resends the SEND and passes over the bind (done already, it is not done
/// twice) to the WRITE. The nvmf host's window per command once spun the requester forever
/// on such a bind, at 3 % loss.
#[test]
fn a_retransmission_passes_over_a_bind_done_already() {
    let mut net = Net::new(2);
    let [a, b] = net.rc_pair_on([None, None]);
    let pd = net.nodes[0].pd;
    let mw = net.nodes[0].engine.alloc_mw(pd, MwType::Type2).unwrap();
    let bind = bind(&net, 0, mw, 0x21, 0x2000, 512, AccessFlags::REMOTE_READ);
    let (one, two) = (pattern(1, 256), pattern(2, 256));
    net.write_mem(0, 0, &one);
    net.write_mem(0, 0x400, &two);
    let key = net.nodes[1].key;
    let wrs = [
        wr(1, SendOp::Send, net.sge(0, 0, 256)),
        local(2, SendOp::BindMw(bind)),
    ];
    for wr in wrs {
        net.nodes[0].engine.post_send(net.now, a, wr).unwrap();
    }
    net.run_for(Duration::from_micros(100));
    assert!(net.nodes[1].engine.stats().naks_sent[NakKind::Rnr as usize] >= 1);
    assert_eq!(statuses(&net.completions(0)), vec![]);
    net.recv(1, b, 10, 0x800, 256);
    let w = write(&net, 3, 0x400, 256, BASE + 0xc00, key);
    net.nodes[0].engine.post_send(net.now, a, w).unwrap();
    net.run_for(Duration::from_secs(1));
    assert_eq!(
        statuses(&net.completions(0)),
        vec![
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::BindMw),
            (3, WcStatus::Success, WcOpcode::RdmaWrite),
        ]
    );
    assert_eq!(
        statuses(&net.completions(1)),
        vec![(10, WcStatus::Success, WcOpcode::Recv)]
    );
    assert_eq!(net.read_mem(1, 0x800, 256), one);
    assert_eq!(net.read_mem(1, 0xc00, 256), two);
    assert_eq!(net.nodes[0].engine.mw_rkey(mw).unwrap(), bind.new_rkey);
}

/// A bind after a WRITE the responder refuses completes flushed, not successful: rxe's
/// completer reaches it only after the failure, and flushes what follows.
#[test]
fn a_bind_after_a_failed_request_is_flushed() {
    let mut net = Net::new(2);
    let [a, _b] = net.rc_pair_on([None, None]);
    let pd = net.nodes[0].pd;
    let mw = net.nodes[0].engine.alloc_mw(pd, MwType::Type2).unwrap();
    let bind = bind(&net, 0, mw, 0x31, 0, 512, AccessFlags::REMOTE_READ);
    let wrong = net.nodes[1].key ^ 0x100;
    let wrs = [
        write(&net, 1, 0, 64, BASE, wrong),
        local(2, SendOp::BindMw(bind)),
    ];
    for wr in wrs {
        net.nodes[0].engine.post_send(net.now, a, wr).unwrap();
    }
    net.run_for(Duration::from_millis(10));
    assert_eq!(
        statuses(&net.completions(0)),
        vec![
            (1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite),
            (2, WcStatus::WrFlushErr, WcOpcode::BindMw),
        ]
    );
}
