//! XRC (IBTA Annex A14) between two engines: an initiator on node 0, a target on node 1 whose
//! XRC domain has two SRQs of different protection domains and CQs, and an SRQ of another
//! domain. Each message goes where its XRCETH says, with that SRQ's PD and CQ; the packets
//! carry XRC opcodes and the XRCETH on the wire.

mod common;

use std::sync::Arc;

use common::*;
use softrdma_proto::*;
use softrdma_wire::{Headers, Opcode, PacketRepr, Psn, Transport};

/// Where node 1's second protection domain's region lives.
const BASE2: u64 = 0x80_0000;

struct Xrc {
    net: Net,
    ini: u32,
    tgt: u32,
    xrcd: XrcdHandle,
    /// SRQ of node 1's own PD, completing on its CQ.
    srq_a: SrqHandle,
    /// SRQ of `pd2`, completing on `cq2`.
    srq_b: SrqHandle,
    /// An XRC SRQ of another domain.
    srq_other: SrqHandle,
    cq2: CqHandle,
    mem2: Arc<VecMemory>,
    key2: u32,
}

fn srq_attr() -> SrqAttr {
    SrqAttr {
        max_wr: 16,
        max_sge: 1,
        srq_limit: 0,
    }
}

fn setup() -> Xrc {
    let mut net = Net::new(2);
    let n = &mut net.nodes[1];
    let e = &mut n.engine;
    let xrcd = e.open_xrcd();
    let pd2 = e.alloc_pd();
    let cq2 = e.create_cq(64);
    let mem2 = Arc::new(VecMemory::new(MEM));
    let key2 = e
        .reg_mr(pd2, BASE2, MEM as u64, AccessFlags::all(), mem2.clone())
        .unwrap();
    let srq_a = e.create_xrc_srq(n.pd, xrcd, n.cq, srq_attr()).unwrap();
    let srq_b = e.create_xrc_srq(pd2, xrcd, cq2, srq_attr()).unwrap();
    let other = e.open_xrcd();
    let srq_other = e.create_xrc_srq(n.pd, other, n.cq, srq_attr()).unwrap();
    let tgt = e.create_xrc_tgt_qp(xrcd).unwrap();
    let n0 = &mut net.nodes[0];
    let ini = n0
        .engine
        .create_qp(n0.pd, n0.cq, n0.cq, QpType::XrcIni, QpCaps::default())
        .unwrap();
    let av = |i: usize| AddressVector {
        dest_ip: ip(i),
        traffic_class: 0,
        hop_limit: 64,
    };
    // Each side with only what its type requires (the kernel's table): the initiator reaches
    // RTR without responder attributes, the target RTS without retry counts.
    let e0 = &mut net.nodes[0].engine;
    e0.modify_qp(ini, &QpAttr::rc_init(AccessFlags::empty()))
        .unwrap();
    let ini_rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(Mtu::Mtu1024),
        ah_attr: Some(av(1)),
        dest_qp_num: Some(tgt),
        rq_psn: Some(Psn::new(0x10)),
        ..QpAttr::default()
    };
    e0.modify_qp(ini, &ini_rtr).unwrap();
    e0.modify_qp(ini, &QpAttr::rc_rts(Psn::new(0x300), 8, 3, 7, 4))
        .unwrap();
    let e1 = &mut net.nodes[1].engine;
    e1.modify_qp(tgt, &QpAttr::rc_init(AccessFlags::all()))
        .unwrap();
    e1.modify_qp(
        tgt,
        &QpAttr::rc_rtr(Mtu::Mtu1024, av(0), ini, Psn::new(0x300), 4, 1),
    )
    .unwrap();
    let tgt_rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(Psn::new(0x10)),
        timeout: Some(8),
        ..QpAttr::default()
    };
    e1.modify_qp(tgt, &tgt_rts).unwrap();
    Xrc {
        net,
        ini,
        tgt,
        xrcd,
        srq_a,
        srq_b,
        srq_other,
        cq2,
        mem2,
        key2,
    }
}

impl Xrc {
    fn post_srq(&mut self, srq: SrqHandle, wr_id: u64, sge: Sge) {
        self.net.nodes[1]
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

    /// `len` bytes at `offset` of node 1's second region.
    fn sge2(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: BASE2 + offset,
            length: len,
            lkey: self.key2,
        }
    }

    fn post(&mut self, wr_id: u64, op: SendOp, sge: Sge, srqn: SrqHandle) {
        let w = SendWr {
            xrc_srqn: Some(srqn.0),
            ..wr(wr_id, op, sge)
        };
        let now = self.net.now;
        self.net.nodes[0]
            .engine
            .post_send(now, self.ini, w)
            .unwrap();
    }

    fn cq2(&mut self) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        self.net.nodes[1]
            .engine
            .poll_cq(self.cq2, usize::MAX, &mut out)
            .unwrap();
        out
    }
}

#[test]
fn each_message_lands_in_the_srq_its_packets_name() {
    let mut x = setup();
    let a = pattern(1, 3000);
    let b = pattern(2, 700);
    x.net.write_mem(0, 0, &a);
    x.net.write_mem(0, 4096, &b);
    let into_a = x.net.sge(1, 0, 4096);
    x.post_srq(x.srq_a, 11, into_a);
    let into_b = x.sge2(0, 4096);
    x.post_srq(x.srq_b, 22, into_b);
    let (sa, sb) = (x.net.sge(0, 0, 3000), x.net.sge(0, 4096, 700));
    x.post(1, SendOp::Send, sa, x.srq_a);
    x.post(2, SendOp::SendWithImm { imm: 0xabcd }, sb, x.srq_b);
    x.net.run();

    let sent = x.net.completions(0);
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|w| w.status == WcStatus::Success));
    // Node 1's own CQ has SRQ A's receive, the second CQ SRQ B's: both name the target QP.
    let ra = x.net.completions(1);
    assert_eq!(ra.len(), 1);
    assert_eq!((ra[0].wr_id, ra[0].status), (11, WcStatus::Success));
    assert_eq!((ra[0].byte_len, ra[0].qp_num), (3000, x.tgt));
    assert_eq!(x.net.read_mem(1, 0, 3000), a);
    let rb = x.cq2();
    assert_eq!(rb.len(), 1);
    assert_eq!((rb[0].wr_id, rb[0].imm_data), (22, Some(0xabcd)));
    assert_eq!((rb[0].byte_len, rb[0].qp_num), (700, x.tgt));
    assert_eq!(x.mem2.snapshot()[..700], b[..]);

    // On the wire: requests are XRC SENDs whose XRCETH names the SRQ, answers XRC ACKs.
    let mut requests = 0;
    for bytes in &x.net.log {
        let p = PacketRepr::parse(bytes).unwrap();
        let info = p.bth.opcode.info().unwrap();
        assert_eq!(info.transport, Transport::Xrc, "{p}");
        if info.is_request() {
            requests += 1;
            let srq = if p.payload.len() == 700 {
                x.srq_b
            } else {
                x.srq_a
            };
            assert_eq!(p.ext.xrceth.map(|h| h.srqn), Some(srq.0), "{p}");
        } else {
            assert_eq!(p.bth.opcode, Opcode::XRC_ACKNOWLEDGE);
            assert!(!info.headers.contains(Headers::XRCETH));
        }
    }
    // 3000 bytes at MTU 1024 are three packets, then one for the second SEND.
    assert_eq!(requests, 4);
}

#[test]
fn remote_memory_is_that_of_the_named_srqs_protection_domain() {
    let mut x = setup();
    let data = pattern(3, 2500);
    x.net.write_mem(0, 0, &data);
    let rkey2 = x.key2;
    let src = x.net.sge(0, 0, 2500);
    let write = SendOp::RdmaWrite {
        remote_addr: BASE2 + 128,
        rkey: rkey2,
    };
    x.post(1, write, src, x.srq_b);
    x.net.run();
    let wc = x.net.completions(0);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    assert_eq!(x.mem2.snapshot()[128..128 + 2500], data[..]);

    // READ back through the same SRQ: XRC READ responses, no XRCETH in them.
    let into = x.net.sge(0, 8192, 2500);
    let read = SendOp::RdmaRead {
        remote_addr: BASE2 + 128,
        rkey: rkey2,
    };
    x.post(2, read, into, x.srq_b);
    x.net.run();
    let wc = x.net.completions(0);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::Success));
    assert_eq!(x.net.read_mem(0, 8192, 2500), data);
    let responses: Vec<Opcode> = x
        .net
        .log
        .iter()
        .map(|b| PacketRepr::parse(b).unwrap().bth.opcode)
        .filter(|o| o.0 & 0x1f >= 0x0d && o.0 & 0x1f <= 0x10)
        .collect();
    assert_eq!(
        responses,
        [
            Opcode::XRC_RDMA_READ_RESPONSE_FIRST,
            Opcode::XRC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::XRC_RDMA_READ_RESPONSE_LAST
        ]
    );

    // Fetch-and-add on the second region: the atomic ACK is XRC's.
    x.mem2.write(0, &40u64.to_ne_bytes());
    let orig = x.net.sge(0, 16384, 8);
    let fadd = SendOp::AtomicFetchAdd {
        remote_addr: BASE2,
        rkey: rkey2,
        add: 2,
    };
    x.post(3, fadd, orig, x.srq_b);
    x.net.run();
    let wc = x.net.completions(0);
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::Success));
    assert_eq!(x.net.read_mem(0, 16384, 8), 40u64.to_ne_bytes());
    assert_eq!(x.mem2.snapshot()[..8], 42u64.to_ne_bytes());
    let last = PacketRepr::parse(x.net.log.last().unwrap()).unwrap();
    assert_eq!(last.bth.opcode, Opcode::XRC_ATOMIC_ACKNOWLEDGE);

    // The same key through SRQ A, of node 1's first PD, names nothing: remote access error,
    // and the target QP goes to the error state.
    let src = x.net.sge(0, 0, 64);
    let write = SendOp::RdmaWrite {
        remote_addr: BASE2,
        rkey: rkey2,
    };
    x.post(4, write, src, x.srq_a);
    x.net.run();
    let wc = x.net.completions(0);
    assert_eq!((wc[0].wr_id, wc[0].status), (4, WcStatus::RemAccessErr));
    assert_eq!(
        x.net.nodes[1].engine.qp(x.tgt).unwrap().state(),
        QpState::Err
    );
    assert_eq!(x.mem2.snapshot()[..8], 42u64.to_ne_bytes());
}

#[test]
fn an_srq_outside_the_targets_domain_is_an_invalid_request() {
    let mut x = setup();
    let into = x.net.sge(1, 0, 64);
    x.post_srq(x.srq_other, 9, into);
    let src = x.net.sge(0, 0, 64);
    x.post(1, SendOp::Send, src, x.srq_other);
    x.net.run();
    let wc = x.net.completions(0);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::RemInvReqErr));
    // The other domain's SRQ kept its WQE; the target reports why it failed.
    assert_eq!(x.net.nodes[1].engine.srq(x.srq_other).unwrap().len(), 1);
    let events: Vec<AsyncEvent> =
        std::iter::from_fn(|| x.net.nodes[1].engine.poll_async_event()).collect();
    assert!(
        events.contains(&AsyncEvent::QpRequestError(x.tgt)),
        "{events:?}"
    );

    // A number that is no SRQ at all likewise, on a fresh pair.
    let mut x = setup();
    let src = x.net.sge(0, 0, 64);
    x.post(1, SendOp::Send, src, SrqHandle(0xab_cdef));
    x.net.run();
    let wc = x.net.completions(0);
    assert_eq!(wc[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn messages_arrive_exactly_once_in_order_under_loss() {
    let mut x = setup();
    x.net.fate = Box::new(|_, _, i| {
        if i % 7 == 3 {
            Fate::Drop
        } else if i % 11 == 5 {
            Fate::Duplicate
        } else {
            Fate::Deliver
        }
    });
    for k in 0..12u64 {
        let (srq, sge) = if k % 2 == 0 {
            (x.srq_a, x.net.sge(1, k * 2048, 2048))
        } else {
            (x.srq_b, x.sge2(k * 2048, 2048))
        };
        x.post_srq(srq, 100 + k, sge);
    }
    for k in 0..12u64 {
        let data = pattern(k as u8, 1500 + k as usize);
        x.net.write_mem(0, (k * 2048) as usize, &data);
        let src = x.net.sge(0, k * 2048, data.len() as u32);
        let srq = if k % 2 == 0 { x.srq_a } else { x.srq_b };
        x.post(k, SendOp::Send, src, srq);
    }
    x.net.run_for(Duration::from_secs(5));
    let sent = x.net.completions(0);
    assert_eq!(sent.len(), 12);
    assert!(sent.iter().all(|w| w.status == WcStatus::Success));
    let (ra, rb) = (x.net.completions(1), x.cq2());
    let ids = |v: &[WorkCompletion]| v.iter().map(|w| w.wr_id).collect::<Vec<_>>();
    assert_eq!(ids(&ra), [100, 102, 104, 106, 108, 110]);
    assert_eq!(ids(&rb), [101, 103, 105, 107, 109, 111]);
    for k in 0..12u64 {
        let data = pattern(k as u8, 1500 + k as usize);
        let at = (k * 2048) as usize;
        let got = if k % 2 == 0 {
            x.net.read_mem(1, at, data.len())
        } else {
            x.mem2.snapshot()[at..at + data.len()].to_vec()
        };
        assert_eq!(got, data, "message {k}");
    }
    assert!(x.net.nodes[0].engine.stats().retransmitted_packets > 0);
}

#[test]
fn misuse_is_refused() {
    let mut x = setup();
    let now = x.net.now;
    let sge = x.net.sge(0, 0, 8);
    // An initiator's WR must name the target's SRQ; nothing else may name one.
    let e0 = &mut x.net.nodes[0].engine;
    assert!(matches!(
        e0.post_send(now, x.ini, wr(1, SendOp::Send, sge)),
        Err(EngineError::InvalidArgument(_))
    ));
    let rwr = RecvWr {
        wr_id: 1,
        sg_list: vec![sge],
    };
    assert!(matches!(
        e0.post_recv(x.ini, rwr.clone()),
        Err(EngineError::InvalidArgument(_))
    ));
    let e1 = &mut x.net.nodes[1].engine;
    let with_srq = SendWr {
        xrc_srqn: Some(x.srq_a.0),
        ..wr(1, SendOp::Send, sge)
    };
    assert!(e1.post_send(now, x.tgt, with_srq).is_err());
    assert!(matches!(
        e1.post_recv(x.tgt, rwr),
        Err(EngineError::InvalidArgument(_))
    ));
    // An XRC SRQ is not a QP's receive queue; a target is made from its domain only.
    let (pd, cq) = (x.net.nodes[1].pd, x.net.nodes[1].cq);
    let e1 = &mut x.net.nodes[1].engine;
    assert!(e1
        .create_qp_with_srq(pd, cq, cq, QpType::Rc, QpCaps::default(), Some(x.srq_a))
        .is_err());
    assert!(e1
        .create_qp(pd, cq, cq, QpType::XrcTgt, QpCaps::default())
        .is_err());
    assert!(e1.create_xrc_tgt_qp(XrcdHandle(999)).is_err());
    // The domain stays while SRQs or target QPs are in it; its CQ and PD too.
    assert_eq!(e1.close_xrcd(x.xrcd), Err(EngineError::Busy));
    assert_eq!(e1.destroy_cq(x.cq2), Err(EngineError::Busy));
    e1.destroy_qp(x.tgt).unwrap();
    e1.destroy_srq(x.srq_a).unwrap();
    assert_eq!(e1.close_xrcd(x.xrcd), Err(EngineError::Busy));
    e1.destroy_srq(x.srq_b).unwrap();
    e1.destroy_cq(x.cq2).unwrap();
    e1.close_xrcd(x.xrcd).unwrap();
}

#[test]
fn a_destroyed_srq_releases_its_domain_objects_from_the_target() {
    let mut x = setup();
    let into = x.sge2(0, 64);
    x.post_srq(x.srq_b, 1, into);
    let src = x.net.sge(0, 0, 64);
    x.post(1, SendOp::Send, src, x.srq_b);
    x.net.run();
    assert_eq!(x.cq2().len(), 1);
    // The target QP delivered into SRQ B last; B may still go, and then its CQ.
    let e1 = &mut x.net.nodes[1].engine;
    e1.destroy_srq(x.srq_b).unwrap();
    e1.destroy_cq(x.cq2).unwrap();
    // A message that names it now finds no SRQ.
    let src = x.net.sge(0, 0, 64);
    x.post(2, SendOp::Send, src, x.srq_b);
    x.net.run();
    let wc = x.net.completions(0);
    assert_eq!(wc.last().map(|w| w.status), Some(WcStatus::RemInvReqErr));
}
