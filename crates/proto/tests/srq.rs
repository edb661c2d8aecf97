//! Shared receive queues and asynchronous events: QPs of every transport taking receives from
//! one SRQ, the limit event, RNR with an SRQ, refusals, last-WQE-reached, CQ overrun.

mod common;

use common::*;
use softrdma_proto::*;

fn srq(net: &mut Net, node: usize, max_wr: u32, limit: u32) -> SrqHandle {
    let n = &mut net.nodes[node];
    n.engine
        .create_srq(
            n.pd,
            SrqAttr {
                max_wr,
                max_sge: 2,
                srq_limit: limit,
            },
        )
        .unwrap()
}

fn post_srq(net: &mut Net, node: usize, srq: SrqHandle, wr_id: u64, offset: u64, len: u32) {
    let sge = net.sge(node, offset, len);
    net.nodes[node]
        .engine
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id,
                sg_list: vec![sge],
            },
        )
        .unwrap();
}

fn events(net: &mut Net, node: usize) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| net.nodes[node].engine.poll_async_event()).collect()
}

#[test]
fn rc_qps_of_two_peers_share_one_srq_in_posting_order() {
    let mut net = Net::new(3);
    let s = srq(&mut net, 1, 16, 0);
    // Node 1 serves two connections, to node 0 and node 2, from one SRQ.
    let [a, b1] = net.rc_pair_on([None, Some(s)]);
    let (c, b2) = {
        // Connect node 2 to node 1 by hand: the harness pairs nodes 0 and 1.
        let qc = {
            let n = &mut net.nodes[2];
            n.engine
                .create_qp(n.pd, n.cq, n.cq, QpType::Rc, QpCaps::default())
                .unwrap()
        };
        let qb = {
            let n = &mut net.nodes[1];
            n.engine
                .create_qp_with_srq(n.pd, n.cq, n.cq, QpType::Rc, QpCaps::default(), Some(s))
                .unwrap()
        };
        for (node, me, peer, peer_node) in [(2, qc, qb, 1), (1, qb, qc, 2)] {
            let e = &mut net.nodes[node].engine;
            e.modify_qp(me, &QpAttr::rc_init(AccessFlags::all()))
                .unwrap();
            let av = AddressVector {
                dest_ip: ip(peer_node),
                traffic_class: 0,
                hop_limit: 64,
            };
            e.modify_qp(
                me,
                &QpAttr::rc_rtr(Mtu::Mtu1024, av, peer, softrdma_wire::Psn::new(5), 4, 1),
            )
            .unwrap();
            e.modify_qp(me, &QpAttr::rc_rts(softrdma_wire::Psn::new(5), 8, 3, 7, 4))
                .unwrap();
        }
        (qc, qb)
    };
    assert_eq!(
        net.nodes[1].engine.post_recv(
            b1,
            RecvWr {
                wr_id: 1,
                sg_list: vec![]
            }
        ),
        Err(EngineError::InvalidArgument(
            "the QP takes its receives from an SRQ: post to the SRQ"
        ))
    );
    for k in 0..4u64 {
        post_srq(&mut net, 1, s, 100 + k, k * 4096, 4096);
    }
    net.write_mem(0, 0, &pattern(1, 3000));
    net.write_mem(2, 0, &pattern(2, 100));
    let (s0, s2) = (net.sge(0, 0, 3000), net.sge(2, 0, 100));
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(1, SendOp::Send, s0))
        .unwrap();
    net.run();
    net.nodes[2]
        .engine
        .post_send(net.now, c, wr(2, SendOp::Send, s2))
        .unwrap();
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(3, SendOp::Send, s0))
        .unwrap();
    net.run_for(Duration::from_millis(10));
    let got = net.completions(1);
    let recvs: Vec<(u64, u32, u32)> = got
        .iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .map(|w| (w.wr_id, w.qp_num, w.byte_len))
        .collect();
    // WQEs go to messages in arrival order, whichever QP they arrive on.
    assert_eq!(recvs[0], (100, b1, 3000));
    assert_eq!(recvs.len(), 3);
    assert!(recvs.contains(&(101, b2, 100)) || recvs.contains(&(102, b2, 100)));
    assert_eq!(net.read_mem(1, 0, 3000), pattern(1, 3000));
    assert_eq!(net.nodes[1].engine.srq(s).unwrap().len(), 1);
    // The SRQ cannot go while QPs use it.
    assert_eq!(net.nodes[1].engine.destroy_srq(s), Err(EngineError::Busy));
    net.nodes[1].engine.destroy_qp(b1).unwrap();
    net.nodes[1].engine.destroy_qp(b2).unwrap();
    net.nodes[1].engine.destroy_srq(s).unwrap();
    assert_eq!(
        net.nodes[1].engine.destroy_srq(s),
        Err(EngineError::NoSuchSrq)
    );
}

#[test]
fn srq_limit_fires_once_and_rearms() {
    let mut net = Net::new(2);
    let s = srq(&mut net, 1, 8, 3);
    let [a, _b] = net.rc_pair_on([None, Some(s)]);
    for k in 0..5u64 {
        post_srq(&mut net, 1, s, k, k * 1024, 1024);
    }
    let sge = net.sge(0, 0, 64);
    for k in 0..2 {
        net.nodes[0]
            .engine
            .post_send(net.now, a, wr(k, SendOp::Send, sge))
            .unwrap();
    }
    net.run();
    // 5 → 3 WQEs: not below the limit yet.
    assert!(events(&mut net, 1).is_empty());
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(9, SendOp::Send, sge))
        .unwrap();
    net.run();
    assert_eq!(events(&mut net, 1), vec![AsyncEvent::SrqLimitReached(s)]);
    assert_eq!(
        net.nodes[1].engine.srq(s).unwrap().attr().srq_limit,
        0,
        "disarmed"
    );
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(10, SendOp::Send, sge))
        .unwrap();
    net.run();
    assert!(events(&mut net, 1).is_empty(), "once");
    // Armed again above the count, it fires at the next WQE taken.
    net.nodes[1].engine.modify_srq(s, None, Some(2)).unwrap();
    assert_eq!(
        net.nodes[1].engine.modify_srq(s, None, Some(9)),
        Err(EngineError::InvalidArgument("srq_limit above max_wr"))
    );
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(11, SendOp::Send, sge))
        .unwrap();
    net.run();
    assert_eq!(events(&mut net, 1), vec![AsyncEvent::SrqLimitReached(s)]);
    // Resizing below the WQEs held is refused; above, fine.
    assert!(net.nodes[1].engine.modify_srq(s, Some(0), None).is_err());
    net.nodes[1].engine.modify_srq(s, Some(64), None).unwrap();
    assert_eq!(net.nodes[1].engine.srq(s).unwrap().attr().max_wr, 64);
}

#[test]
fn empty_srq_answers_rnr_and_a_late_post_lets_the_retry_through() {
    let mut net = Net::new(2);
    let s = srq(&mut net, 1, 8, 0);
    let [a, _b] = net.rc_pair_on([None, Some(s)]);
    net.write_mem(0, 0, &pattern(3, 200));
    let sge = net.sge(0, 0, 200);
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(1, SendOp::Send, sge))
        .unwrap();
    net.run();
    assert_eq!(net.nodes[1].engine.stats().naks_sent_of(NakKind::Rnr), 1);
    assert!(net.completions(0).is_empty());
    post_srq(&mut net, 1, s, 7, 0, 4096);
    net.run_for(Duration::from_millis(50));
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    let got = net.completions(1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (7, 200));
    assert_eq!(net.read_mem(1, 0, 200), pattern(3, 200));
}

#[test]
fn a_qp_leaving_for_error_flushes_its_own_wqe_only_and_reports_last_wqe() {
    let mut net = Net::new(2);
    let s = srq(&mut net, 1, 8, 0);
    let [a, b] = net.rc_pair_on([None, Some(s)]);
    for k in 0..3u64 {
        post_srq(&mut net, 1, s, k, k * 4096, 4096);
    }
    // A 3-packet SEND whose last packet never arrives: WQE 0 is in progress.
    net.fate = Box::new(|_, p, _| {
        if p.bth.opcode == softrdma_wire::Opcode::RC_SEND_LAST {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let sge = net.sge(0, 0, 3000);
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(1, SendOp::Send, sge))
        .unwrap();
    net.run();
    net.nodes[1]
        .engine
        .modify_qp(
            b,
            &QpAttr {
                qp_state: Some(QpState::Err),
                ..Default::default()
            },
        )
        .unwrap();
    let got = net.completions(1);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id, got[0].status), (0, WcStatus::WrFlushErr));
    assert_eq!(events(&mut net, 1), vec![AsyncEvent::QpLastWqeReached(b)]);
    assert_eq!(
        net.nodes[1].engine.srq(s).unwrap().len(),
        2,
        "the SRQ keeps its WQEs"
    );
}

#[test]
fn ud_and_uc_qps_take_from_an_srq_too() {
    let mut net = Net::new(2);
    let s = srq(&mut net, 1, 8, 0);
    let a = net.ud_qp(0, QKEY);
    let b = {
        let n = &mut net.nodes[1];
        let q = n
            .engine
            .create_qp_with_srq(n.pd, n.cq, n.cq, QpType::Ud, QpCaps::default(), Some(s))
            .unwrap();
        n.engine.modify_qp(q, &QpAttr::ud_init(QKEY)).unwrap();
        n.engine.modify_qp(q, &QpAttr::ud_rtr()).unwrap();
        q
    };
    post_srq(&mut net, 1, s, 42, 0, 2048);
    let sge = net.sge(0, 0, 300);
    net.nodes[0]
        .engine
        .post_send(net.now, a, ud_send(1, sge, 1, b, QKEY, None))
        .unwrap();
    net.run();
    let got = net.completions(1);
    assert_eq!((got[0].wr_id, got[0].qp_num, got[0].grh), (42, b, true));
}

#[test]
fn cq_overrun_raises_the_cq_error_and_stops_the_qp() {
    let mut net = Net::new(2);
    let small = net.nodes[1].engine.create_cq(1);
    let b = {
        let n = &mut net.nodes[1];
        n.engine
            .create_qp(n.pd, small, small, QpType::Ud, QpCaps::default())
            .unwrap()
    };
    {
        let e = &mut net.nodes[1].engine;
        e.modify_qp(b, &QpAttr::ud_init(QKEY)).unwrap();
        e.modify_qp(b, &QpAttr::ud_rtr()).unwrap();
    }
    let a = net.ud_qp(0, QKEY);
    for k in 0..3 {
        net.recv(1, b, k, k * 2048, 2048);
    }
    let sge = net.sge(0, 0, 16);
    for k in 0..2 {
        net.nodes[0]
            .engine
            .post_send(net.now, a, ud_send(k, sge, 1, b, QKEY, None))
            .unwrap();
    }
    net.run();
    assert_eq!(events(&mut net, 1), vec![AsyncEvent::CqError(small)]);
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Err);
    assert!(net.nodes[1].engine.cq(small).unwrap().overrun);
    assert!(net.nodes[1].engine.stats().cq_overruns >= 1);
}

#[test]
fn a_responder_access_violation_is_reported_as_an_event() {
    let mut net = Net::new(2);
    let [a, b] = net.rc_pair_on([None, None]);
    let sge = net.sge(0, 0, 64);
    let bad = wr(
        1,
        SendOp::RdmaWrite {
            remote_addr: BASE,
            rkey: net.nodes[1].key ^ 0x100,
        },
        sge,
    );
    net.nodes[0].engine.post_send(net.now, a, bad).unwrap();
    net.run();
    assert_eq!(net.completions(0)[0].status, WcStatus::RemAccessErr);
    assert_eq!(events(&mut net, 1), vec![AsyncEvent::QpAccessError(b)]);
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Err);
}
