//! UD and UC queue pairs between engines joined by an in-memory wire with scripted faults:
//! what arrives, byte for byte; what is lost; what the counters say; that a loss never
//! corrupts, duplicates or half-delivers a message, and never breaks the QP.

mod common;

use std::net::IpAddr;

use common::*;
use softrdma_proto::*;
use softrdma_wire::pcap::ipv4_checksum;
use softrdma_wire::{GrhArea, Opcode, PacketRepr, Psn, GRH_LEN};

// --- UD ---------------------------------------------------------------------------------

#[test]
fn ud_send_arrives_with_grh_src_qp_and_immediate() {
    let mut net = Net::new(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    let msg = pattern(1, 700);
    net.write_mem(0, 0, &msg);
    net.recv(1, b, 77, 0x1000, (GRH_LEN + 1024) as u32);
    let s = net.sge(0, 0, 700);
    net.nodes[0]
        .engine
        .post_send(net.now, a, ud_send(5, s, 1, b, QKEY, Some(0xabcd)))
        .unwrap();
    net.run();

    // On the wire: one UD SEND ONLY with immediate, DETH with the Q_Key and our QPN, from
    // rxe's UD source port, no AckReq.
    assert_eq!(net.log.len(), 1);
    let p = PacketRepr::parse(&net.log[0]).unwrap();
    assert_eq!(p.bth.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!(p.bth.dest_qpn, b);
    assert_eq!(p.bth.psn, Psn::new(0x100));
    assert!(!p.bth.ack_req);
    let deth = p.ext.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qpn), (QKEY, a));
    assert_eq!(p.ext.imm_dt.unwrap().imm, 0xabcd);

    let sent = net.completions(0);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (
            sent[0].wr_id,
            sent[0].status,
            sent[0].opcode,
            sent[0].byte_len
        ),
        (5, WcStatus::Success, WcOpcode::Send, 700)
    );
    let got = net.completions(1);
    assert_eq!(got.len(), 1);
    let wc = got[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (77, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(
        wc.byte_len,
        (GRH_LEN + 700) as u32,
        "UD byte_len counts the GRH area"
    );
    assert_eq!((wc.src_qp, wc.qp_num, wc.grh), (a, b, true));
    assert_eq!(wc.imm_data, Some(0xabcd));

    // The GRH area: 20 zero bytes, then the IPv4 header the sender's kernel would have written.
    let area = net.read_mem(1, 0x1000, GRH_LEN);
    assert_eq!(area[..20], [0u8; 20]);
    let iph = &area[20..];
    assert_eq!(iph[0], 0x45);
    assert_eq!(
        usize::from(u16::from_be_bytes([iph[2], iph[3]])),
        20 + 8 + net.log[0].len()
    );
    assert_eq!(iph[6], 0x40, "don't fragment");
    assert_eq!((iph[8], iph[9]), (64, 17));
    assert_eq!(ipv4_checksum(iph), 0);
    let g = GrhArea::parse(&area).unwrap();
    assert_eq!((g.src, g.dst), (ip(0), ip(1)));
    assert_eq!(net.read_mem(1, 0x1000 + GRH_LEN, 700), msg);
}

#[test]
fn ud_controlled_qkey_sends_the_qps_own() {
    let mut net = Net::new(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    net.recv(1, b, 1, 0, 2048);
    let s = net.sge(0, 0, 16);
    net.nodes[0]
        .engine
        .post_send(net.now, a, ud_send(1, s, 1, b, 0x8000_0000, None))
        .unwrap();
    net.run();
    let deth = PacketRepr::parse(&net.log[0]).unwrap().ext.deth.unwrap();
    assert_eq!(deth.qkey, QKEY);
    assert_eq!(net.completions(1).len(), 1);
}

#[test]
fn ud_wrong_qkey_is_dropped_counted_and_costs_nothing() {
    let mut net = Net::new(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    net.recv(1, b, 9, 0, 2048);
    net.write_mem(0, 0, &pattern(2, 32));
    let s = net.sge(0, 0, 32);
    let e = &mut net.nodes[0].engine;
    e.post_send(Instant::ZERO, a, ud_send(1, s, 1, b, 0x2222_2222, None))
        .unwrap();
    e.post_send(Instant::ZERO, a, ud_send(2, s, 1, b, QKEY, None))
        .unwrap();
    net.run();
    assert_eq!(net.drops(1, DropReason::BadQkey), 1);
    // The one receive WQE went to the datagram with the right Q_Key.
    let got = net.completions(1);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id, got[0].status), (9, WcStatus::Success));
    assert_eq!(net.read_mem(1, GRH_LEN, 32), pattern(2, 32));
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Rts);
}

#[test]
fn ud_without_receive_or_room_loses_the_datagram_not_the_qp() {
    let mut net = Net::new(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    let s = net.sge(0, 0, 100);
    net.nodes[0]
        .engine
        .post_send(net.now, a, ud_send(1, s, 1, b, QKEY, None))
        .unwrap();
    net.run();
    assert_eq!(net.drops(1, DropReason::NoReceiveWqe), 1);
    // A buffer too small for GRH + payload: dropped, the WQE stays for the next datagram.
    net.recv(1, b, 10, 0, (GRH_LEN + 99) as u32);
    net.nodes[0]
        .engine
        .post_send(net.now, a, ud_send(2, s, 1, b, QKEY, None))
        .unwrap();
    net.run();
    assert_eq!(net.drops(1, DropReason::TooLong), 1);
    assert!(net.completions(1).is_empty());
    let small = net.sge(0, 0, 99);
    net.nodes[0]
        .engine
        .post_send(net.now, a, ud_send(3, small, 1, b, QKEY, None))
        .unwrap();
    net.run();
    let got = net.completions(1);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (10, (GRH_LEN + 99) as u32));
    // The sender saw three successful sends: UD does not know what happened to them.
    let sent = net.completions(0);
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn ud_message_longer_than_the_port_mtu_is_refused_at_post() {
    let mut net = Net::new(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    let s = net.sge(0, 0, 1025);
    let r = net.nodes[0]
        .engine
        .post_send(net.now, a, ud_send(1, s, 1, b, QKEY, None));
    assert_eq!(
        r,
        Err(EngineError::InvalidArgument(
            "UD message longer than the port MTU"
        ))
    );
    // Other refusals: no destination, an RDMA WRITE.
    let mut no_dest = ud_send(2, net.sge(0, 0, 8), 1, b, QKEY, None);
    no_dest.ud = None;
    assert!(net.nodes[0].engine.post_send(net.now, a, no_dest).is_err());
    let write = SendWr {
        op: SendOp::RdmaWrite {
            remote_addr: BASE,
            rkey: 1,
        },
        ..ud_send(3, net.sge(0, 0, 8), 1, b, QKEY, None)
    };
    assert!(net.nodes[0].engine.post_send(net.now, a, write).is_err());
    net.run();
    assert!(net.log.is_empty(), "nothing was sent");
    assert_eq!(net.nodes[0].engine.qp(a).unwrap().state(), QpState::Rts);
}

#[test]
fn ud_to_a_missing_qp_or_an_rc_qp_is_dropped() {
    let mut net = Net::new(2);
    let a = net.ud_qp(0, QKEY);
    let rc = {
        let n = &mut net.nodes[1];
        n.engine
            .create_qp(n.pd, n.cq, n.cq, QpType::Rc, QpCaps::default())
            .unwrap()
    };
    let s = net.sge(0, 0, 8);
    let e = &mut net.nodes[0].engine;
    e.post_send(Instant::ZERO, a, ud_send(1, s, 1, 0x4242, QKEY, None))
        .unwrap();
    e.post_send(Instant::ZERO, a, ud_send(2, s, 1, rc, QKEY, None))
        .unwrap();
    net.run();
    assert_eq!(net.drops(1, DropReason::UnknownQp), 1);
    assert_eq!(net.drops(1, DropReason::WrongTransport), 1);
}

#[test]
fn ud_multicast_reaches_every_attached_qp_and_only_those() {
    let group: IpAddr = "239.1.2.3".parse().unwrap();
    let mut net = Net::new(3);
    let sender = net.ud_qp(0, QKEY);
    let r1 = net.ud_qp(1, QKEY);
    let r2 = net.ud_qp(1, QKEY);
    let r3 = net.ud_qp(2, QKEY);
    let bystander = net.ud_qp(2, QKEY);
    for (i, q) in [(1, r1), (1, r2), (2, r3)] {
        net.nodes[i].engine.attach_mcast(q, group).unwrap();
    }
    net.nodes[1].engine.attach_mcast(r1, group).unwrap();
    for (i, q, at) in [
        (1, r1, 0),
        (1, r2, 0x2000),
        (2, r3, 0),
        (2, bystander, 0x2000),
    ] {
        net.recv(i, q, u64::from(q), at, 2048);
    }
    net.write_mem(0, 0, &pattern(3, 64));
    let mut wr = ud_send(1, net.sge(0, 0, 64), 1, MULTICAST_QPN, QKEY, None);
    wr.ud.as_mut().unwrap().av.dest_ip = group;
    net.nodes[0]
        .engine
        .post_send(net.now, sender, wr.clone())
        .unwrap();
    net.run();
    assert_eq!(net.log.len(), 1, "one datagram for the whole group");
    let got1 = net.completions(1);
    let got2 = net.completions(2);
    let mut at1: Vec<u32> = got1.iter().map(|w| w.qp_num).collect();
    at1.sort_unstable();
    assert_eq!(at1, vec![r1, r2], "both QPs of node 1, once each");
    assert_eq!(got2.iter().map(|w| w.qp_num).collect::<Vec<_>>(), vec![r3]);
    assert!(got1.iter().chain(&got2).all(|w| w.src_qp == sender));
    assert_eq!(net.read_mem(1, 0x2000 + GRH_LEN, 64), pattern(3, 64));
    assert_eq!(net.read_mem(2, GRH_LEN, 64), pattern(3, 64));
    let g = GrhArea::parse(&net.read_mem(2, 0, GRH_LEN)).unwrap();
    assert_eq!(g.dst, group, "the GRH area names the group");

    // Destroying an attached QP is refused; detached, it hears nothing more.
    assert_eq!(net.nodes[1].engine.destroy_qp(r2), Err(EngineError::Busy));
    net.nodes[1].engine.detach_mcast(r2, group).unwrap();
    assert!(net.nodes[1].engine.detach_mcast(r2, group).is_err());
    net.nodes[1].engine.destroy_qp(r2).unwrap();
    net.recv(1, r1, 100, 0x4000, 2048);
    net.recv(2, r3, 101, 0x4000, 2048);
    net.nodes[0].engine.post_send(net.now, sender, wr).unwrap();
    net.run();
    assert_eq!(net.completions(1).len(), 1);
    assert_eq!(net.completions(2).len(), 1);
    // Only UD QPs join groups, and only groups.
    let rc = {
        let n = &mut net.nodes[1];
        n.engine
            .create_qp(n.pd, n.cq, n.cq, QpType::Rc, QpCaps::default())
            .unwrap()
    };
    assert!(net.nodes[1].engine.attach_mcast(rc, group).is_err());
    assert!(net.nodes[1].engine.attach_mcast(r1, ip(0)).is_err());
}

#[test]
fn ud_losses_lose_messages_but_never_corrupt_duplicate_or_reorder() {
    let mut net = Net::new(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    const N: u64 = 200;
    for k in 0..N {
        net.recv(1, b, k, k * 256, 256);
        let off = k * 64;
        net.write_mem(0, off as usize, &pattern(k as u8, 64));
    }
    // Drop every third datagram, duplicate every fifth.
    net.fate = Box::new(|_, _, k| match (k % 3, k % 5) {
        (0, _) => Fate::Drop,
        (_, 0) => Fate::Duplicate,
        _ => Fate::Deliver,
    });
    for k in 0..N {
        let s = net.sge(0, k * 64, 64);
        let mut w = ud_send(k, s, 1, b, QKEY, Some(k as u32));
        w.flags = SendFlags::empty();
        net.nodes[0].engine.post_send(net.now, a, w).unwrap();
        net.run();
    }
    let got = net.completions(1);
    // Each received datagram carries its own immediate; its payload is the one that message
    // carried; immediates only increase, except the duplicates, which are complete copies.
    let mut last = None;
    let mut dups = 0;
    for wc in &got {
        assert_eq!(wc.status, WcStatus::Success);
        let k = u64::from(wc.imm_data.unwrap());
        let slot = wc.wr_id * 256 + GRH_LEN as u64;
        assert_eq!(
            net.read_mem(1, slot as usize, 64),
            pattern(k as u8, 64),
            "datagram {k} intact"
        );
        if last == Some(k) {
            dups += 1;
        } else {
            assert!(last.map_or(true, |l| l < k));
        }
        last = Some(k);
    }
    let lost = N - (got.len() as u64 - dups);
    assert_eq!(lost, N.div_ceil(3));
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Rts);
}

// --- UC ---------------------------------------------------------------------------------

#[test]
fn uc_send_and_write_with_imm_complete_on_send_and_arrive_whole() {
    let mut net = Net::new(2);
    let [a, b] = net.uc_pair(Mtu::Mtu1024);
    let msg = pattern(4, 3000);
    net.write_mem(0, 0, &msg);
    net.recv(1, b, 50, 0x8000, 4096);
    net.recv(1, b, 51, 0, 0);
    let s = net.sge(0, 0, 3000);
    let rkey = net.nodes[1].key;
    let write = wr(
        2,
        SendOp::RdmaWriteWithImm {
            remote_addr: BASE + 0x4000,
            rkey,
            imm: 0x77,
        },
        s,
    );
    let e = &mut net.nodes[0].engine;
    e.post_send(Instant::ZERO, a, wr(1, SendOp::Send, s))
        .unwrap();
    e.post_send(Instant::ZERO, a, write).unwrap();
    net.run();
    let ops: Vec<Opcode> = net
        .log
        .iter()
        .map(|p| PacketRepr::parse(p).unwrap().bth.opcode)
        .collect();
    assert_eq!(
        ops,
        vec![
            Opcode::UC_SEND_FIRST,
            Opcode::UC_SEND_MIDDLE,
            Opcode::UC_SEND_LAST,
            Opcode::UC_RDMA_WRITE_FIRST,
            Opcode::UC_RDMA_WRITE_MIDDLE,
            Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        ]
    );
    assert!(net
        .log
        .iter()
        .all(|p| !PacketRepr::parse(p).unwrap().bth.ack_req));
    let sent = net.completions(0);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let got = net.completions(1);
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].wr_id, got[0].opcode, got[0].byte_len),
        (50, WcOpcode::Recv, 3000)
    );
    assert_eq!(
        (
            got[1].wr_id,
            got[1].opcode,
            got[1].byte_len,
            got[1].imm_data
        ),
        (51, WcOpcode::RecvRdmaWithImm, 3000, Some(0x77))
    );
    assert_eq!(net.read_mem(1, 0x8000, 3000), msg);
    assert_eq!(net.read_mem(1, 0x4000, 3000), msg);
    // Nothing ever went back: UC has no acknowledgements.
    assert!(net
        .log
        .iter()
        .all(|p| PacketRepr::parse(p).unwrap().bth.dest_qpn == b));
}

/// The RC in-flight window (`max_inflight_packets`) counts unacknowledged PSNs; UC has no
/// acknowledgements, so a UC message longer than the window still leaves whole (a per-packet
/// window applied to UC would wait forever for ACKs that never come).
#[test]
fn uc_message_longer_than_the_inflight_window_goes_out_whole() {
    let mut net = Net::new(2);
    let [a, b] = net.uc_pair(Mtu::Mtu256);
    let window = net.nodes[0].engine.config().max_inflight_packets as usize;
    let len = (window + 64) * 256;
    assert!(len <= MEM);
    let msg = pattern(6, len);
    net.write_mem(0, 0, &msg);
    let s = net.sge(0, 0, len as u32);
    let rkey = net.nodes[1].key;
    let write = wr(
        3,
        SendOp::RdmaWrite {
            remote_addr: BASE,
            rkey,
        },
        s,
    );
    net.nodes[0]
        .engine
        .post_send(Instant::ZERO, a, write)
        .unwrap();
    net.run();
    assert_eq!(net.log.len(), window + 64);
    let sent = net.completions(0);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(3, WcStatus::Success)]
    );
    assert_eq!(net.read_mem(1, 0, len), msg);
    assert!(net
        .log
        .iter()
        .all(|p| PacketRepr::parse(p).unwrap().bth.dest_qpn == b));
}

/// The device budget grows only by acknowledged packets: they are its evidence that the path
/// absorbs what was sent. A UC message is never acknowledged; its packets leave the budget
/// when it completes on send, and used to grow it as if acknowledged (64 -> 256 after one
/// 192-packet UC WRITE), so unreliable traffic alone opened the way for RC bursts no round
/// trip had vouched for. The same WRITE over RC, acknowledged, grows it by its packets.
#[test]
fn only_acknowledged_packets_grow_the_device_budget() {
    let mut net = Net::new(2);
    let [uc, _] = net.uc_pair(Mtu::Mtu256);
    let [rc, _] = net.rc_pair_on([None, None]);
    let len = 192 * 256;
    assert!(len <= MEM);
    net.write_mem(0, 0, &pattern(7, len));
    let rkey = net.nodes[1].key;
    let write = |wr_id| {
        wr(
            wr_id,
            SendOp::RdmaWrite {
                remote_addr: BASE,
                rkey,
            },
            net.sge(0, 0, len as u32),
        )
    };
    let (uc_write, rc_write) = (write(1), write(2));
    let initial = net.nodes[0].engine.packets_in_flight().1;

    net.nodes[0]
        .engine
        .post_send(Instant::ZERO, uc, uc_write)
        .unwrap();
    net.run();
    assert_eq!(net.log.len(), 192);
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    assert_eq!(net.nodes[0].engine.packets_in_flight(), (0, initial));

    // RC at MTU 1024: 48 packets, each acknowledged (slow start: +1 per packet).
    net.nodes[0]
        .engine
        .post_send(net.now, rc, rc_write)
        .unwrap();
    net.run();
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    assert_eq!(net.nodes[0].engine.packets_in_flight(), (0, initial + 48));
}

/// Sends three 3-packet SENDs over UC with `fate` on the wire; checks every delivered message
/// is intact; returns the messages delivered, as (message, receive WQE) in order.
fn uc_three_sends(
    fate: impl FnMut(usize, &PacketRepr<'_>, u64) -> Fate + 'static,
) -> (Net, Vec<(u64, u64)>) {
    let mut net = Net::new(2);
    let [a, b] = net.uc_pair(Mtu::Mtu1024);
    for k in 0..3u64 {
        net.write_mem(0, (k * 4096) as usize, &pattern(10 + k as u8, 3000));
        net.recv(1, b, 100 + k, k * 4096, 4096);
    }
    net.fate = Box::new(fate);
    for k in 0..3u64 {
        let s = net.sge(0, k * 4096, 3000);
        net.nodes[0]
            .engine
            .post_send(net.now, a, wr(k, SendOp::SendWithImm { imm: k as u32 }, s))
            .unwrap();
    }
    net.run();
    let got = net.completions(1);
    let mut delivered = Vec::new();
    for wc in &got {
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 3000));
        let k = u64::from(wc.imm_data.unwrap());
        let slot = (wc.wr_id - 100) * 4096;
        assert_eq!(
            net.read_mem(1, slot as usize, 3000),
            pattern(10 + k as u8, 3000),
            "message {k} intact in WQE {}",
            wc.wr_id
        );
        delivered.push((k, wc.wr_id));
    }
    assert_eq!(
        net.completions(0).len(),
        3,
        "the sender completes every SEND"
    );
    assert_eq!(net.nodes[1].engine.qp(b).unwrap().state(), QpState::Rts);
    (net, delivered)
}

#[test]
fn uc_lost_middle_drops_that_message_and_reuses_its_receive() {
    let (net, delivered) = uc_three_sends(|_, p, _| {
        if p.bth.opcode == Opcode::UC_SEND_MIDDLE && p.bth.psn == Psn::new(0x501) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    // Message 1 landed in the first receive WQE, which message 0 had given back.
    assert_eq!(delivered, vec![(1, 100), (2, 101)]);
    assert!(net.drops(1, DropReason::OutOfSequence) >= 1);
}

#[test]
fn uc_lost_last_loses_only_its_own_message() {
    let (_, delivered) = uc_three_sends(|_, p, _| {
        if p.bth.opcode == Opcode::UC_SEND_LAST_WITH_IMMEDIATE && p.bth.psn == Psn::new(0x502) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert_eq!(delivered, vec![(1, 100), (2, 101)]);
}

#[test]
fn uc_lost_first_drops_the_rest_of_that_message() {
    let (net, delivered) = uc_three_sends(|_, p, _| {
        if p.bth.psn == Psn::new(0x503) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert_eq!(delivered, vec![(0, 100), (2, 101)]);
    assert!(net.drops(1, DropReason::OutOfSequence) >= 2);
}

#[test]
fn uc_duplicates_are_never_delivered_twice() {
    let (net, delivered) = uc_three_sends(|_, _, _| Fate::Duplicate);
    assert_eq!(delivered, vec![(0, 100), (1, 101), (2, 102)]);
    assert_eq!(net.drops(1, DropReason::Duplicate), 9);
}

#[test]
fn uc_without_receive_drops_the_message_and_the_sender_never_knows() {
    let mut net = Net::new(2);
    let [a, b] = net.uc_pair(Mtu::Mtu1024);
    let s = net.sge(0, 0, 2048);
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(1, SendOp::Send, s))
        .unwrap();
    net.run();
    assert_eq!(net.drops(1, DropReason::NoReceiveWqe), 1);
    assert_eq!(
        net.drops(1, DropReason::OutOfSequence),
        1,
        "the LAST had no message"
    );
    assert_eq!(net.completions(0)[0].status, WcStatus::Success);
    // A receive posted now takes the next message.
    net.recv(1, b, 7, 0, 4096);
    net.write_mem(0, 0, &pattern(5, 2048));
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(2, SendOp::Send, s))
        .unwrap();
    net.run();
    let got = net.completions(1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (7, 2048));
    assert_eq!(net.read_mem(1, 0, 2048), pattern(5, 2048));
}

#[test]
fn uc_write_with_a_bad_rkey_touches_nothing_and_the_qp_lives_on() {
    let mut net = Net::new(2);
    let [a, _b] = net.uc_pair(Mtu::Mtu1024);
    net.write_mem(0, 0, &pattern(6, 2000));
    let before = net.read_mem(1, 0, MEM);
    let s = net.sge(0, 0, 2000);
    let bad = wr(
        1,
        SendOp::RdmaWrite {
            remote_addr: BASE,
            rkey: net.nodes[1].key ^ 0x100,
        },
        s,
    );
    let out_of_bounds = wr(
        2,
        SendOp::RdmaWrite {
            remote_addr: BASE + MEM as u64 - 100,
            rkey: net.nodes[1].key,
        },
        s,
    );
    net.nodes[0].engine.post_send(net.now, a, bad).unwrap();
    net.nodes[0]
        .engine
        .post_send(net.now, a, out_of_bounds)
        .unwrap();
    net.run();
    assert_eq!(net.read_mem(1, 0, MEM), before);
    assert_eq!(net.drops(1, DropReason::RemoteAccess), 2);
    let good = wr(
        3,
        SendOp::RdmaWrite {
            remote_addr: BASE + 0x100,
            rkey: net.nodes[1].key,
        },
        s,
    );
    net.nodes[0].engine.post_send(net.now, a, good).unwrap();
    net.run();
    assert_eq!(net.read_mem(1, 0x100, 2000), pattern(6, 2000));
    assert_eq!(net.completions(0).len(), 3);
}

#[test]
fn uc_send_longer_than_the_receive_is_dropped_and_the_receive_kept() {
    let mut net = Net::new(2);
    let [a, b] = net.uc_pair(Mtu::Mtu1024);
    net.recv(1, b, 9, 0, 1500);
    let long = net.sge(0, 0, 2500);
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(1, SendOp::Send, long))
        .unwrap();
    let short = net.sge(0, 0, 1500);
    net.write_mem(0, 0, &pattern(7, 1500));
    net.nodes[0]
        .engine
        .post_send(net.now, a, wr(2, SendOp::Send, short))
        .unwrap();
    net.run();
    assert_eq!(net.drops(1, DropReason::TooLong), 1);
    let got = net.completions(1);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (9, 1500));
    assert_eq!(net.read_mem(1, 0, 1500), pattern(7, 1500));
}

#[test]
fn uc_refuses_read_and_atomics_at_post() {
    let mut net = Net::new(2);
    let [a, _] = net.uc_pair(Mtu::Mtu1024);
    let s = net.sge(0, 0, 8);
    for op in [
        SendOp::RdmaRead {
            remote_addr: BASE,
            rkey: 1,
        },
        SendOp::AtomicFetchAdd {
            remote_addr: BASE,
            rkey: 1,
            add: 1,
        },
        SendOp::SendWithInv { rkey: 1 },
    ] {
        assert!(matches!(
            net.nodes[0].engine.post_send(net.now, a, wr(1, op, s)),
            Err(EngineError::InvalidArgument(_))
        ));
    }
}

#[test]
fn the_gsi_qp_is_qp1_and_takes_only_the_gsi_qkey() {
    let mut net = Net::new(2);
    let gsi = [0, 1].map(|i| {
        let n = &mut net.nodes[i];
        let qpn = n
            .engine
            .create_gsi_qp(n.pd, n.cq, n.cq, QpCaps::default())
            .unwrap();
        n.engine.modify_qp(qpn, &QpAttr::ud_init(0)).unwrap();
        n.engine.modify_qp(qpn, &QpAttr::ud_rtr()).unwrap();
        n.engine
            .modify_qp(qpn, &QpAttr::unreliable_rts(Psn::new(0)))
            .unwrap();
        qpn
    });
    assert_eq!(gsi, [1, 1]);
    let n = &mut net.nodes[0];
    assert_eq!(
        n.engine.create_gsi_qp(n.pd, n.cq, n.cq, QpCaps::default()),
        Err(EngineError::Busy)
    );
    // A 256-byte MAD with the GSI Q_Key arrives, from QP 1; one with another Q_Key does not.
    net.recv(1, 1, 7, 0x1000, (GRH_LEN + 256) as u32);
    net.recv(1, 1, 8, 0x2000, (GRH_LEN + 256) as u32);
    net.write_mem(0, 0, &pattern(4, 256));
    let mad = net.sge(0, 0, 256);
    for (id, qkey) in [(1, GSI_QKEY), (2, 0x1234)] {
        let w = ud_send(id, mad, 1, 1, qkey, None);
        net.nodes[0].engine.post_send(net.now, 1, w).unwrap();
    }
    net.run();
    let got = net.completions(1);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].wr_id, got[0].src_qp, got[0].byte_len),
        (7, 1, (GRH_LEN + 256) as u32)
    );
    assert_eq!(net.read_mem(1, 0x1000 + GRH_LEN, 256), pattern(4, 256));
    assert_eq!(net.drops(1, DropReason::BadQkey), 1);
}
