//! RC corners where IBTA and rxe are specific: zero-length operations, empty LAST packets,
//! READ/atomic depth 0 and exhausted responder resources, a duplicate READ that overtakes its
//! own response; and the IBTA 1.5 placement operations ATOMIC_WRITE and FLUSH.

mod common;

use std::sync::Arc;

use common::*;
use softrdma_proto::*;
use softrdma_wire::{
    emit_headers, packet_len, Bth, ExtHeaders, IcrcContext, Opcode, PacketRepr, Psn, Reth,
};

fn rdma(wr_id: u64, op: SendOp, sg_list: Vec<Sge>) -> SendWr {
    SendWr::signaled(wr_id, op, sg_list)
}

/// Every packet node `i` has to send (with its UDP source port), without delivering any.
fn drain(net: &mut Net, i: usize) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = net.nodes[i].engine.poll_transmit(net.now, &mut buf) {
        out.push((t.src_port, buf[..t.len].to_vec()));
    }
    out
}

/// Hands `pkt`, sent from UDP port `port` of node `from`, to node `to`.
fn deliver(net: &mut Net, from: usize, to: usize, (port, pkt): &(u16, Vec<u8>)) {
    let meta = DatagramMeta::new(std::net::SocketAddr::new(ip(from), *port), ip(to));
    net.nodes[to].engine.handle_datagram(net.now, &meta, pkt);
}

/// A request packet from node 0 to QP `qpn` of node 1, ICRC included.
fn forge(bth: Bth, ext: &ExtHeaders, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; packet_len(bth.opcode, payload.len())];
    let h = emit_headers(&bth, ext, payload.len(), &mut out);
    out[h..h + payload.len()].copy_from_slice(payload);
    IcrcContext::new(ip(0), ip(1), 0xc000, 4791)
        .fill(&mut out)
        .unwrap();
    out
}

#[test]
fn zero_length_read_and_write_name_no_memory() {
    let mut net = Net::new(2);
    let [a, b] = net.rc_pair_on([None, None]);
    // rkey 0 and address 0: nothing to check, nothing to touch (IBTA C9-88, rxe).
    let write = rdma(
        1,
        SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: 0,
        },
        vec![],
    );
    let read = rdma(
        2,
        SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 0,
        },
        vec![],
    );
    let imm = rdma(
        3,
        SendOp::RdmaWriteWithImm {
            remote_addr: 0,
            rkey: 0,
            imm: 5,
        },
        vec![],
    );
    net.recv(1, b, 9, 0, 0);
    for w in [write, read, imm] {
        net.nodes[0].engine.post_send(net.now, a, w).unwrap();
    }
    net.run_for(Duration::from_millis(10));
    let got = net.completions(0);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    let recv = net.completions(1);
    assert_eq!(
        (recv[0].wr_id, recv[0].byte_len, recv[0].imm_data),
        (9, 0, Some(5))
    );
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Rts);
}

#[test]
fn an_empty_send_last_is_an_invalid_request() {
    let mut net = Net::new(2);
    let [_a, b] = net.rc_pair_on([None, None]);
    net.recv(1, b, 1, 0, 4096);
    let psn = Psn::new(0x700);
    let first = forge(
        Bth::new(Opcode::RC_SEND_FIRST, b, psn),
        &ExtHeaders::default(),
        &[7u8; 1024],
    );
    let mut last_bth = Bth::new(Opcode::RC_SEND_LAST, b, psn.next());
    last_bth.ack_req = true;
    let last = forge(last_bth, &ExtHeaders::default(), &[]);
    deliver(&mut net, 0, 1, &(0xc000, first));
    deliver(&mut net, 0, 1, &(0xc000, last));
    let answers = drain(&mut net, 1);
    let nak = PacketRepr::parse(&answers.last().unwrap().1).unwrap();
    assert_eq!(
        nak.ext.aeth.unwrap().syndrome,
        softrdma_wire::Syndrome::Nak(softrdma_wire::NakCode::InvalidRequest)
    );
    assert_eq!(nak.bth.psn, psn.next());
    assert_eq!(
        net.nodes[1]
            .engine
            .stats()
            .naks_sent_of(NakKind::InvalidRequest),
        1
    );
    // The receive the message was going into is reported, not lost.
    let got = net.completions(1);
    assert_eq!(got.len(), 1);
    assert_ne!(got[0].status, WcStatus::Success);
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Err);
}

#[test]
fn read_depth_zero_is_refused_at_both_ends() {
    let mut net = Net::new(2);
    // Node 0 may not issue READs; node 1 holds no resources for them.
    let [a, b] = net.rc_pair_with([None, None], [0, 4], [4, 0], AccessFlags::all());
    let s = net.sge(0, 0, 8);
    let read = |id| {
        rdma(
            id,
            SendOp::RdmaRead {
                remote_addr: BASE,
                rkey: 0,
            },
            vec![s],
        )
    };
    assert_eq!(
        net.nodes[0].engine.post_send(net.now, a, read(1)),
        Err(EngineError::InvalidArgument(
            "max_rd_atomic is 0: the QP may not issue READ, atomics or FLUSH"
        ))
    );
    // Node 1 asks node 0, which holds resources: fine. Node 0 asks nothing; the other way
    // round node 0 has 4 resources, node 1's READs go through.
    let s1 = net.sge(1, 0, 8);
    let mut r = rdma(
        2,
        SendOp::RdmaRead {
            remote_addr: BASE,
            rkey: net.nodes[0].key,
        },
        vec![s1],
    );
    net.nodes[1]
        .engine
        .post_send(net.now, b, r.clone())
        .unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(1)[0].status, WcStatus::Success);
    // A fresh pair where the responder has depth 0 and the requester 4: NAK invalid request.
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_with([None, None], [4, 4], [4, 0], AccessFlags::all());
    r.sg_list = vec![net.sge(0, 0, 8)];
    r.op = SendOp::RdmaRead {
        remote_addr: BASE,
        rkey: net.nodes[1].key,
    };
    net.nodes[0].engine.post_send(net.now, a, r).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(0)[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn a_requester_beyond_the_responder_resources_gets_invalid_request_not_silence() {
    let mut net = Net::new(2);
    // Misconfigured: the requester may have 4 READs out, the responder keeps 1 resource.
    let [a, _b] = net.rc_pair_with([None, None], [4, 4], [4, 1], AccessFlags::all());
    let key1 = net.nodes[1].key;
    for k in 0..2u64 {
        let sge = net.sge(0, k * 8192, 8192);
        let r = rdma(
            k,
            SendOp::RdmaRead {
                remote_addr: BASE + k * 8192,
                rkey: key1,
            },
            vec![sge],
        );
        net.nodes[0].engine.post_send(net.now, a, r).unwrap();
    }
    // Both requests reach the responder before it sends a byte of the first answer.
    let requests = drain(&mut net, 0);
    assert_eq!(requests.len(), 2);
    for p in &requests {
        deliver(&mut net, 0, 1, p);
    }
    net.run_for(Duration::from_millis(20));
    let got = net.completions(0);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(0, WcStatus::Success), (1, WcStatus::RemInvReqErr)]
    );
}

#[test]
fn a_duplicate_read_replaces_the_partly_sent_response() {
    let mut net = Net::new(2);
    let [a, _b] = net.rc_pair_on([None, None]);
    let data = pattern(4, 4096);
    net.write_mem(1, 0, &data);
    let sge = net.sge(0, 0, 4096);
    let r = rdma(
        1,
        SendOp::RdmaRead {
            remote_addr: BASE,
            rkey: net.nodes[1].key,
        },
        vec![sge],
    );
    net.nodes[0].engine.post_send(net.now, a, r).unwrap();
    let request = drain(&mut net, 0).remove(0);
    deliver(&mut net, 0, 1, &request);
    // Two of the four response packets leave; then the requester's READ arrives again.
    let mut buf = Vec::new();
    let mut first_two = Vec::new();
    for _ in 0..2 {
        let t = net.nodes[1]
            .engine
            .poll_transmit(net.now, &mut buf)
            .unwrap();
        first_two.push((t.src_port, buf[..t.len].to_vec()));
    }
    deliver(&mut net, 0, 1, &request);
    let rest = drain(&mut net, 1);
    let psns: Vec<Psn> = rest
        .iter()
        .map(|(_, p)| PacketRepr::parse(p).unwrap().bth.psn)
        .collect();
    let start = PacketRepr::parse(&request.1).unwrap().bth.psn;
    assert_eq!(
        psns,
        (0..4).map(|k| start.add(k)).collect::<Vec<_>>(),
        "one whole response from the start, not the old remainder and a new one"
    );
    for p in first_two.iter().chain(&rest) {
        deliver(&mut net, 1, 0, p);
    }
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    assert_eq!(net.read_mem(0, 0, 4096), data);
}

#[test]
fn atomic_write_stores_once_and_replays_its_acknowledgement() {
    let mut net = Net::new(2);
    let [a, _b] = net.rc_pair_on([None, None]);
    net.write_mem(0, 0, &0x1122_3344_5566_7788u64.to_ne_bytes());
    let sge = net.sge(0, 0, 8);
    let key1 = net.nodes[1].key;
    let aw = rdma(
        1,
        SendOp::AtomicWrite {
            remote_addr: BASE + 64,
            rkey: key1,
        },
        vec![sge],
    );
    // The acknowledgement (an empty READ RESPONSE ONLY) is lost once.
    let mut lost = false;
    net.fate = Box::new(move |_, p, _| {
        if p.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY && !lost {
            lost = true;
            assert!(p.payload.is_empty());
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    net.nodes[0].engine.post_send(net.now, a, aw).unwrap();
    net.run();
    assert_eq!(
        net.read_mem(1, 64, 8),
        0x1122_3344_5566_7788u64.to_ne_bytes()
    );
    // The responder's application changes the word before the requester retransmits: the
    // duplicate must not store again.
    net.write_mem(1, 64, &[0xaa; 8]);
    net.run_for(Duration::from_millis(50));
    let got = net.completions(0);
    assert_eq!(
        (got[0].status, got[0].opcode),
        (WcStatus::Success, WcOpcode::AtomicWrite)
    );
    assert_eq!(net.read_mem(1, 64, 8), [0xaa; 8]);
    assert!(net.nodes[1].engine.stats().duplicate_requests >= 1);
    // Misaligned: refused at post; a region without remote write: remote access error.
    let misaligned = rdma(
        2,
        SendOp::AtomicWrite {
            remote_addr: BASE + 4,
            rkey: key1,
        },
        vec![sge],
    );
    assert!(net.nodes[0]
        .engine
        .post_send(net.now, a, misaligned)
        .is_err());
    let ro = {
        let n = &mut net.nodes[1];
        n.engine
            .reg_mr(
                n.pd,
                0x9000_0000,
                64,
                AccessFlags::REMOTE_READ,
                Arc::new(VecMemory::new(64)),
            )
            .unwrap()
    };
    let denied = rdma(
        3,
        SendOp::AtomicWrite {
            remote_addr: 0x9000_0000,
            rkey: ro,
        },
        vec![sge],
    );
    net.nodes[0].engine.post_send(net.now, a, denied).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(0)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn flush_checks_its_placement_rights_range_and_region() {
    let mut net = Net::new(2);
    let [a, _b] = net.rc_pair_on([None, None]);
    let key1 = net.nodes[1].key;
    let global_only = {
        let n = &mut net.nodes[1];
        n.engine
            .reg_mr(
                n.pd,
                0x9000_0000,
                4096,
                AccessFlags::FLUSH_GLOBAL | AccessFlags::REMOTE_READ,
                Arc::new(VecMemory::new(4096)),
            )
            .unwrap()
    };
    let flush = |id, rkey, addr, len, placement, level| {
        rdma(
            id,
            SendOp::Flush {
                remote_addr: addr,
                rkey,
                len,
                placement,
                level,
            },
            vec![],
        )
    };
    let ops = [
        flush(1, key1, BASE, 4096, FLUSH_GLOBAL, FlushLevel::Range),
        flush(2, key1, 0, 0, FLUSH_PERSISTENT, FlushLevel::Region),
        flush(
            3,
            global_only,
            0x9000_0000,
            4096,
            FLUSH_GLOBAL,
            FlushLevel::Range,
        ),
    ];
    for w in ops {
        net.nodes[0].engine.post_send(net.now, a, w).unwrap();
    }
    net.run_for(Duration::from_millis(10));
    let got = net.completions(0);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::Flush),
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Flush)
        ]
    );
    // Outside the region, or a placement the region does not grant: remote access error.
    let beyond = flush(
        4,
        key1,
        BASE + MEM as u64 - 8,
        64,
        FLUSH_GLOBAL,
        FlushLevel::Range,
    );
    net.nodes[0].engine.post_send(net.now, a, beyond).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(0)[0].status, WcStatus::RemAccessErr);
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_on([None, None]);
    let no_persist = {
        let n = &mut net.nodes[1];
        n.engine
            .reg_mr(
                n.pd,
                0x9000_0000,
                64,
                AccessFlags::FLUSH_GLOBAL,
                Arc::new(VecMemory::new(64)),
            )
            .unwrap()
    };
    let w = flush(
        5,
        no_persist,
        0x9000_0000,
        64,
        FLUSH_PERSISTENT,
        FlushLevel::Range,
    );
    net.nodes[0].engine.post_send(net.now, a, w).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(0)[0].status, WcStatus::RemAccessErr);
    // A QP that does not grant FLUSH does not take it at all: an invalid request, as rxe's
    // check_qp_attr_access decides before it looks at the key.
    let mut net = Net::new(2);
    let no_flush = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let [a, _] = net.rc_pair_with([None, None], [4, 4], [4, 4], no_flush);
    let key1 = net.nodes[1].key;
    let w = flush(6, key1, BASE, 8, FLUSH_GLOBAL, FlushLevel::Range);
    net.nodes[0].engine.post_send(net.now, a, w).unwrap();
    net.run_for(Duration::from_millis(10));
    assert_eq!(net.completions(0)[0].status, WcStatus::RemInvReqErr);
    // Refused at post: no placement type, a scatter list.
    let bad = flush(7, key1, BASE, 8, 0, FlushLevel::Range);
    assert!(net.nodes[0].engine.post_send(net.now, a, bad).is_err());
    let mut with_sgl = flush(8, key1, BASE, 8, FLUSH_GLOBAL, FlushLevel::Range);
    with_sgl.sg_list = vec![net.sge(0, 0, 8)];
    assert!(net.nodes[0].engine.post_send(net.now, a, with_sgl).is_err());
    let _ = Reth::default();
}

/// The opcodes of `pkts`.
fn opcodes(pkts: &[(u16, Vec<u8>)]) -> Vec<Opcode> {
    pkts.iter()
        .map(|(_, p)| PacketRepr::parse(p).unwrap().bth.opcode)
        .collect()
}

#[test]
fn an_answer_goes_out_before_the_ack_of_the_message_it_answers() {
    let mut net = Net::new(2);
    let [a, b] = net.rc_pair_on([None, None]);
    net.recv(1, b, 1, 0, 64);
    net.recv(0, a, 1, 0, 64);
    let now = net.now;
    let ping = wr(1, SendOp::Send, net.sge(0, 128, 8));
    net.nodes[0].engine.post_send(now, a, ping).unwrap();
    let out = drain(&mut net, 0);
    assert_eq!(opcodes(&out), [Opcode::RC_SEND_ONLY]);
    deliver(&mut net, 0, 1, &out[0]);
    // b answers before its device sent the ACK of the ping: the answer leaves first, one
    // packet ahead, then the ACK.
    let pong = wr(2, SendOp::Send, net.sge(1, 128, 8));
    net.nodes[1].engine.post_send(now, b, pong).unwrap();
    let out = drain(&mut net, 1);
    assert_eq!(
        opcodes(&out),
        [Opcode::RC_SEND_ONLY, Opcode::RC_ACKNOWLEDGE]
    );
    // An ACK waits behind one request at most: a, with the ACK of the pong queued, posts
    // three messages.
    for p in &out {
        deliver(&mut net, 1, 0, p);
    }
    for id in 3..6 {
        let w = wr(id, SendOp::Send, net.sge(0, 128, 8));
        net.nodes[0].engine.post_send(now, a, w).unwrap();
    }
    assert_eq!(
        opcodes(&drain(&mut net, 0)),
        [
            Opcode::RC_SEND_ONLY,
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_SEND_ONLY,
            Opcode::RC_SEND_ONLY
        ]
    );
}

/// Packets are built over whatever the caller's buffer held (zero-filling every packet first
/// cost a pass over it): a short, padded SEND built where a full-MTU WRITE was carries none of
/// it — its pad is zero and its ICRC covers exactly what is on the wire.
#[test]
fn a_packet_built_over_an_older_one_carries_nothing_of_it() {
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_on([None, None]);
    net.write_mem(0, 0, &pattern(5, 4096));
    net.write_mem(0, 8192, b"hello");
    let now = net.now;
    let write = SendOp::RdmaWrite {
        remote_addr: BASE,
        rkey: net.nodes[1].key,
    };
    let (w, s) = (
        rdma(1, write, vec![net.sge(0, 0, 1024)]),
        rdma(2, SendOp::Send, vec![net.sge(0, 8192, 5)]),
    );
    net.nodes[0].engine.post_send(now, a, w).unwrap();
    net.nodes[0].engine.post_send(now, a, s).unwrap();
    let mut buf = vec![0xa5; 5000];
    let first = net.nodes[0].engine.poll_transmit(now, &mut buf).unwrap();
    assert_eq!(
        buf[first.len - 1024 - 4..first.len - 4],
        pattern(5, 1024)[..]
    );
    let t = net.nodes[0].engine.poll_transmit(now, &mut buf).unwrap();
    let pkt = &buf[..t.len];
    assert_eq!(t.len, 12 + 5 + 3 + 4, "BTH, payload, pad, ICRC");
    let parsed = PacketRepr::parse(pkt).unwrap();
    assert_eq!(parsed.bth.opcode, Opcode::RC_SEND_ONLY);
    assert_eq!(parsed.payload, b"hello");
    assert_eq!(pkt[17..20], [0, 0, 0], "the pad");
    IcrcContext::new(ip(0), ip(1), t.src_port, 4791)
        .verify(pkt)
        .unwrap();
}

/// A duplicate READ whose repeat the responder queues, then a SEND_WITH_INV that revokes the
/// window the READ read through, both before the repeat leaves (an NVMe-oF target's stale
/// READ retransmission reaching the host after the response that invalidated its key, under
/// loss): the requester completed the READ long ago, so the repeat is dropped, not answered
/// with a remote access NAK that fails both QPs.
#[test]
fn a_stale_duplicate_read_through_a_revoked_window_is_dropped() {
    let mut net = Net::new(2);
    let [a, b] = net.rc_pair_on([None, None]);
    let data = pattern(6, 4 * 1024);
    net.write_mem(1, 0, &data);
    let pd = net.nodes[1].pd;
    let mw = net.nodes[1].engine.alloc_mw(pd, MwType::Type2).unwrap();
    let bind = MwBind {
        mw_rkey: mw,
        new_rkey: (mw & !0xff) | u32::from((mw as u8).wrapping_add(1)),
        mr_lkey: net.nodes[1].key,
        addr: BASE,
        length: 4 * 1024,
        access: AccessFlags::REMOTE_READ,
    };
    let rkey = bind.new_rkey;
    let bind_wr = rdma(9, SendOp::BindMw(bind), vec![]);
    net.nodes[1].engine.post_send(net.now, b, bind_wr).unwrap();
    net.run();
    net.completions(1);
    let read = rdma(
        1,
        SendOp::RdmaRead {
            remote_addr: BASE,
            rkey,
        },
        vec![net.sge(0, 0, 4 * 1024)],
    );
    net.nodes[0].engine.post_send(net.now, a, read).unwrap();
    let request = drain(&mut net, 0).remove(0);
    deliver(&mut net, 0, 1, &request);
    for p in drain(&mut net, 1) {
        deliver(&mut net, 1, 0, &p);
    }
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    assert_eq!(net.read_mem(0, 0, 4 * 1024), data);
    // The requester ends its use of the window; a stale copy of its READ arrives first.
    net.recv(1, b, 20, 0x8000, 64);
    let inv = rdma(
        2,
        SendOp::SendWithInv { rkey },
        vec![net.sge(0, 0x8000, 16)],
    );
    net.nodes[0].engine.post_send(net.now, a, inv).unwrap();
    let send = drain(&mut net, 0);
    deliver(&mut net, 0, 1, &request);
    for p in &send {
        deliver(&mut net, 0, 1, p);
    }
    let answers = drain(&mut net, 1);
    for (_, p) in &answers {
        let pkt = PacketRepr::parse(p).unwrap();
        assert!(
            !matches!(pkt.ext.aeth, Some(a) if a.syndrome != softrdma_wire::Syndrome::ACK),
            "no NAK: {:?}",
            pkt.ext.aeth
        );
    }
    for p in &answers {
        deliver(&mut net, 1, 0, p);
    }
    net.run_for(Duration::from_millis(10));
    let recv = net.completions(1);
    assert_eq!(recv[0].invalidated_rkey, Some(rkey));
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Rts);
    assert_eq!(net.nodes[0].engine.qp(a).unwrap().state(), QpState::Rts);
    assert!(net.drops(1, DropReason::Duplicate) >= 1);
}
