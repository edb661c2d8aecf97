//! XRC over real UDP on loopback (127.0.17.x): an initiator QP on one device, a target QP of
//! an XRC domain on the other, two XRC SRQs of that domain with their own protection domains
//! and CQs. Messages land in the SRQ their work request names, RDMA reaches the memory of that
//! SRQ's protection domain only, and misuse gets typed errors.

mod common;

use common::*;
use softrdma::{
    wr, AccessFlags, ConnectOptions, CreateQpError, PostErrorKind, QpInitAttr, QpType, SrqAttr,
    WcOpcode, WcStatus,
};

fn attr() -> SrqAttr {
    SrqAttr {
        max_wr: 64,
        max_sge: 1,
        srq_limit: 0,
    }
}

#[test]
fn xrc_messages_go_to_the_srq_each_names() {
    let a = open("127.0.17.1");
    let b = open("127.0.17.2");
    // The initiator's side: a PD, a CQ, a region and an XRC initiator QP.
    let pd_a = a.alloc_pd();
    let cq_a = a.create_cq(64).unwrap();
    let mr_a = pd_a.reg_mr(1 << 16, all_access()).unwrap();
    let ini = pd_a.create_qp(&QpInitAttr::xrc_ini(&cq_a)).unwrap();
    assert_eq!(ini.qp_type(), QpType::XrcIni);

    // The target's side: one domain, two SRQs of two PDs completing on two CQs.
    let xrcd = b.open_xrcd();
    let (pd1, pd2) = (b.alloc_pd(), b.alloc_pd());
    let (cq1, cq2) = (b.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let mr1 = pd1.reg_mr(1 << 16, all_access()).unwrap();
    let mr2 = pd2.reg_mr(1 << 16, all_access()).unwrap();
    let srq1 = xrcd.create_srq(&pd1, &cq1, attr()).unwrap();
    let srq2 = xrcd.create_srq(&pd2, &cq2, attr()).unwrap();
    assert!(srq1.xrc_domain().is_some_and(|d| d.same_as(&xrcd)));
    let tgt = xrcd.create_qp().unwrap();
    assert_eq!(tgt.qp_type(), QpType::XrcTgt);
    assert!(tgt.pd().is_none() && tgt.xrc_domain().is_some());

    let opts = ConnectOptions::default();
    ini.connect(&tgt.endpoint(), &opts).unwrap();
    tgt.connect(&ini.endpoint(), &opts).unwrap();

    // SENDs to each SRQ (multi-packet to the first), each completing on its SRQ's CQ.
    let big = pattern(10_000, 1);
    let small = pattern(300, 2);
    mr_a.write(0, &big).unwrap();
    mr_a.write(16_384, &small).unwrap();
    srq1.post_recv([wr::recv(1, vec![mr1.sge(0, 16_384)])])
        .unwrap();
    srq2.post_recv([wr::recv(2, vec![mr2.sge(0, 16_384)])])
        .unwrap();
    ini.post_send([
        wr::send(10, vec![mr_a.sge(0, 10_000)]).to_xrc_srq(srq1.id()),
        wr::send_with_imm(11, vec![mr_a.sge(16_384, 300)], 77).to_xrc_srq(srq2.id()),
    ])
    .unwrap();
    let sent = wait_wcs(&cq_a, 2);
    assert!(
        sent.iter().all(|w| w.status == WcStatus::Success),
        "{sent:?}"
    );
    let r1 = wait_one(&cq1);
    assert_eq!(
        (r1.wr_id, r1.status, r1.opcode),
        (1, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!((r1.byte_len, r1.qp_num), (10_000, tgt.qp_num()));
    assert_eq!(mr1.read_vec(0, 10_000).unwrap(), big);
    let r2 = wait_one(&cq2);
    assert_eq!((r2.wr_id, r2.byte_len, r2.imm_data), (2, 300, Some(77)));
    assert_eq!(mr2.read_vec(0, 300).unwrap(), small);

    // RDMA WRITE and READ through SRQ 2 reach PD 2's region.
    let r = mr2.remote();
    ini.post_send([
        wr::write(20, vec![mr_a.sge(0, 5000)], r.at(20_000), r.rkey).to_xrc_srq(srq2.id()),
        wr::read(21, vec![mr_a.sge(30_000, 5000)], r.at(20_000), r.rkey).to_xrc_srq(srq2.id()),
    ])
    .unwrap();
    let done = wait_wcs(&cq_a, 2);
    assert_eq!(
        done.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(20, WcStatus::Success), (21, WcStatus::Success)]
    );
    assert_eq!(mr2.read_vec(20_000, 5000).unwrap(), big[..5000]);
    assert_eq!(mr_a.read_vec(30_000, 5000).unwrap(), big[..5000]);

    // PD 2's key through SRQ 1 (of PD 1) names nothing there: remote access error.
    ini.post_send([wr::write(30, vec![mr_a.sge(0, 8)], r.at(0), r.rkey).to_xrc_srq(srq1.id())])
        .unwrap();
    let wc = wait_one(&cq_a);
    assert_eq!((wc.wr_id, wc.status), (30, WcStatus::RemAccessErr));
    assert_eq!(mr2.read_vec(0, 300).unwrap(), small);
}

#[test]
fn xrc_misuse_gets_typed_errors() {
    let d = open("127.0.17.3");
    let pd = d.alloc_pd();
    let cq = d.create_cq(16).unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let ini = pd.create_qp(&QpInitAttr::xrc_ini(&cq)).unwrap();
    let xrcd = d.open_xrcd();
    let srq = xrcd.create_srq(&pd, &cq, attr()).unwrap();
    let tgt = xrcd.create_qp().unwrap();
    let peer = ConnectOptions::default();
    ini.connect(&tgt.endpoint(), &peer).unwrap();
    tgt.connect(&ini.endpoint(), &peer).unwrap();

    // An initiator's WR must name a target SRQ; an RC QP's must not.
    let e = ini
        .post_send([wr::send(1, vec![mr.sge(0, 8)])])
        .unwrap_err();
    assert!(matches!(e.kind, PostErrorKind::InvalidArgument(_)), "{e:?}");
    // Neither XRC QP has a receive queue; the target has no send queue either.
    assert!(ini.post_recv([wr::recv(1, vec![mr.sge(0, 8)])]).is_err());
    assert!(tgt.post_recv([wr::recv(1, vec![mr.sge(0, 8)])]).is_err());
    assert!(tgt
        .post_send([wr::send(1, vec![mr.sge(0, 8)]).to_xrc_srq(srq.id())])
        .is_err());
    // A target QP comes from its domain, not a PD.
    let mut init = QpInitAttr::rc(&cq);
    init.qp_type = QpType::XrcTgt;
    assert!(matches!(
        pd.create_qp(&init),
        Err(CreateQpError::InvalidCaps(_))
    ));
    // An XRC SRQ cannot be a QP's receive queue.
    let mut init = QpInitAttr::rc(&cq);
    init.srq = Some(srq.clone());
    assert!(pd.create_qp(&init).is_err());
    // Another device's PD is refused.
    let other = open("127.0.17.4");
    let other_pd = other.alloc_pd();
    assert!(xrcd.create_srq(&other_pd, &cq, attr()).is_err());
}
