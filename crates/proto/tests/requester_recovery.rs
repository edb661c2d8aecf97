//! The requester's recovery when answers stop coming: a QP timing out towards a dead peer
//! must not hold the device budget that live QPs share; a lost NAK, repair or probe must
//! cost the lost packets, not a window, and a tail probe, not the retransmit timer.

mod common;

use std::net::SocketAddr;

use common::*;
use softrdma_proto::*;
use softrdma_wire::{Opcode, PacketRepr, Psn, Syndrome};

fn write(net: &Net, wr_id: u64, to: usize, offset: u64, len: u32) -> SendWr {
    let op = SendOp::RdmaWrite {
        remote_addr: BASE + offset,
        rkey: net.nodes[to].key,
    };
    wr(wr_id, op, net.sge(0, offset, len))
}

/// A 16 KiB READ of node 1's bytes at 16384 into node 0's at 16384.
fn read_16k(net: &Net, wr_id: u64) -> SendWr {
    let op = SendOp::RdmaRead {
        remote_addr: BASE + 16384,
        rkey: net.nodes[1].key,
    };
    wr(wr_id, op, net.sge(0, 16384, 16 * 1024))
}

/// Node 0's completions so far: work request and status.
fn statuses(net: &mut Net) -> Vec<(u64, WcStatus)> {
    net.completions(0)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect()
}

#[test]
fn a_qp_timing_out_towards_a_dead_peer_does_not_hold_the_budget_of_live_ones() {
    // Node 0 talks to node 1, which answers nothing (the wire drops all it sends), and to
    // node 2. The device budget starts at 64 packets; the dead QP puts 48 in flight.
    let mut net = Net::with_config(3, |c| EngineConfig {
        device_inflight_packets: 64,
        ..c
    });
    net.fate = Box::new(|from, _, _| if from == 1 { Fate::Drop } else { Fate::Deliver });
    let all = AccessFlags::all();
    let [dead, _] = net.rc_connect([0, 1], [None, None], [4, 4], [4, 4], all);
    let [live, _] = net.rc_connect([0, 2], [None, None], [4, 4], [4, 4], all);
    let w = write(&net, 1, 1, 0, 48 * 1024);
    let now = net.now;
    net.nodes[0].engine.post_send(now, dead, w).unwrap();
    // Its first retransmit timeout (local ACK timeout 8: about 1 ms) halves the budget to 32,
    // below what the dead QP has in flight.
    net.run_for(Duration::from_millis(3));
    assert!(net.nodes[0].engine.stats().retransmit_timeouts >= 1);
    assert!(net.completions(0).is_empty(), "retries are left");
    net.write_mem(0, 50_000, &pattern(7, 8 * 1024));
    for i in 0..8 {
        let w = write(&net, 100 + i, 2, 50_000 + i * 1024, 1024);
        let now = net.now;
        net.nodes[0].engine.post_send(now, live, w).unwrap();
    }
    net.run_for(Duration::from_secs(1));
    let wcs = statuses(&mut net);
    let mut want: Vec<(u64, WcStatus)> = (100..108).map(|id| (id, WcStatus::Success)).collect();
    want.push((1, WcStatus::RetryExcErr));
    assert_eq!(
        wcs, want,
        "the live QP's WRITEs complete while the dead QP spends its retries, not after"
    );
    assert_eq!(net.read_mem(2, 50_000, 8 * 1024), pattern(7, 8 * 1024));
}

/// Moves packets between nodes 0 and 1 in batches, as a progress loop does: everything
/// node 0 has to send reaches node 1, then everything node 1 answers reaches node 0 (a
/// `recvmmsg` batch of ACKs), until both are quiet.
fn pump_batches(net: &mut Net) {
    loop {
        let mut moved = false;
        for i in 0..2 {
            let batch = drain(net, i);
            moved |= !batch.is_empty();
            deliver(net, 1 - i, &batch);
            net.now = net.now + Duration::from_micros(5);
        }
        if !moved {
            return;
        }
    }
}

/// Everything node `i` has to send now, with the address each datagram leaves from.
fn drain(net: &mut Net, i: usize) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = net.nodes[i].engine.poll_transmit(net.now, &mut buf) {
        out.push((SocketAddr::new(ip(i), t.src_port), buf[..t.len].to_vec()));
    }
    out
}

/// Hands `datagrams` to node `to`.
fn deliver(net: &mut Net, to: usize, datagrams: &[(SocketAddr, Vec<u8>)]) {
    for (src, data) in datagrams {
        let meta = DatagramMeta::new(*src, ip(to));
        net.nodes[to].engine.handle_datagram(net.now, &meta, data);
    }
}

#[test]
fn an_ack_wakes_as_many_budget_starved_qps_as_the_room_it_freed_lets_send() {
    // 100 QPs each WRITE twice 32 packets (MTU 1024) at once through a 256-packet device budget:
    // most of them wait for room most of the time. An ACK frees the room of a turn (60
    // packets); waking a QP for each 8 packets of all the room there was, on every ACK of a
    // batch, woke many more than the room let send, each polled only to be refused again.
    const QPS: u64 = 100;
    let mut net = Net::with_config(2, |c| EngineConfig {
        device_inflight_packets: 256,
        ..c
    });
    let all = AccessFlags::all();
    let qps: Vec<u32> = (0..QPS)
        .map(|_| net.rc_connect([0, 1], [None, None], [4, 4], [4, 4], all)[0])
        .collect();
    net.write_mem(0, 0, &pattern(3, 32 * 1024));
    for (i, &qpn) in qps.iter().enumerate() {
        for k in 0..2 {
            let w = write(&net, 2 * i as u64 + k, 1, 0, 32 * 1024);
            let now = net.now;
            net.nodes[0].engine.post_send(now, qpn, w).unwrap();
        }
    }
    pump_batches(&mut net);
    let wcs = statuses(&mut net);
    assert_eq!(wcs.len(), 2 * QPS as usize);
    assert!(wcs.iter().all(|&(_, s)| s == WcStatus::Success), "{wcs:?}");
    assert_eq!(net.read_mem(1, 0, 32 * 1024), pattern(3, 32 * 1024));
    let st = net.nodes[0].engine.stats();
    assert_eq!(st.retransmitted_packets, 0);
    // Waking for all the room on every ACK refused each QP 20 times; for the room each ACK
    // freed, 7 (the first burst refuses all but the first few once, and a QP refused mid-turn
    // once the room is used up counts too).
    assert!(
        st.budget_waits <= 10 * QPS,
        "{} refusals for {} packets sent",
        st.budget_waits,
        st.tx_packets
    );
}

#[test]
fn a_qp_destroyed_after_an_ack_woke_it_leaves_the_room_to_the_next_one() {
    // An 8-packet budget: A fills it, X and Y are refused. A's ACK frees the 8 packets, a
    // turn's worth, and wakes X alone; the application destroys X before its turn. Y must
    // get the room: nothing is in flight any more, so no other ACK would wake it.
    let mut net = Net::with_config(2, |c| EngineConfig {
        device_inflight_packets: 8,
        ..c
    });
    let all = AccessFlags::all();
    let [[a, _], [x, _], [y, y_peer]] =
        [0; 3].map(|_| net.rc_connect([0, 1], [None, None], [4, 4], [4, 4], all));
    let w = write(&net, 1, 1, 0, 8 * 1024);
    let now = net.now;
    net.nodes[0].engine.post_send(now, a, w).unwrap();
    let a_pkts = drain(&mut net, 0);
    assert_eq!(a_pkts.len(), 8);
    for (qpn, wr_id) in [(x, 2), (y, 3)] {
        let w = write(&net, wr_id, 1, 16 * 1024, 1024);
        let now = net.now;
        net.nodes[0].engine.post_send(now, qpn, w).unwrap();
    }
    assert!(drain(&mut net, 0).is_empty(), "the budget is full");
    deliver(&mut net, 1, &a_pkts);
    let acks = drain(&mut net, 1);
    deliver(&mut net, 0, &acks[acks.len() - 1..]);
    assert_eq!(net.nodes[0].engine.packets_in_flight().0, 0);
    net.nodes[0].engine.destroy_qp(x).unwrap();
    let sent = drain(&mut net, 0);
    assert_eq!(sent.len(), 1, "Y's WRITE goes in the same round");
    let pkt = softrdma_wire::PacketRepr::parse(&sent[0].1).unwrap();
    assert_eq!(pkt.bth.dest_qpn, y_peer);
}

/// What the wire loses while a WRITE runs: transmissions of its packets (packet number, and
/// how many of its first transmissions) and node 1's NAKs (by their number in the phase).
#[derive(Default)]
struct Losses {
    packets: Vec<(u32, u32)>,
    naks: Vec<u32>,
}

impl Losses {
    /// The first transmission of each of `pkts`.
    fn first_of(pkts: &[u32]) -> Losses {
        Losses {
            packets: pkts.iter().map(|&p| (p, 1)).collect(),
            naks: Vec::new(),
        }
    }
}

/// Writes `pkts` packets (MTU 1024) from node 0 to node 1 at `offset`, losing what `losses`
/// names; runs to the end and returns node 0's retransmitted packets for it.
fn write_losing(net: &mut Net, qpn: u32, wr_id: u64, pkts: u32, losses: Losses) -> u64 {
    let before = net.nodes[0].engine.stats().retransmitted_packets;
    // Node 0's first packet of the phase is the WRITE's first.
    let mut first_psn = None;
    let mut sent = vec![0u32; pkts as usize];
    let mut naks = 0u32;
    net.fate = Box::new(move |from, p, _| {
        let nak = p
            .ext
            .aeth
            .is_some_and(|a| !matches!(a.syndrome, Syndrome::Ack { .. }));
        if from == 1 && nak {
            naks += 1;
            return if losses.naks.contains(&(naks - 1)) {
                Fate::Drop
            } else {
                Fate::Deliver
            };
        }
        if from != 0 {
            return Fate::Deliver;
        }
        let first = *first_psn.get_or_insert(p.bth.psn);
        let k = p.bth.psn.distance(first);
        let Some(n) = usize::try_from(k).ok().and_then(|k| sent.get_mut(k)) else {
            return Fate::Deliver;
        };
        *n += 1;
        let lose = losses
            .packets
            .iter()
            .any(|&(pkt, times)| i64::from(pkt) == i64::from(k) && *n <= times);
        if lose {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let offset = wr_id * 1024;
    net.write_mem(
        0,
        offset as usize,
        &pattern(wr_id as u8, (pkts * 1024) as usize),
    );
    let w = write(net, wr_id, 1, offset, pkts * 1024);
    let now = net.now;
    net.nodes[0].engine.post_send(now, qpn, w).unwrap();
    net.run_for(Duration::from_secs(1));
    let wcs = net.completions(0);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (wr_id, WcStatus::Success));
    assert_eq!(
        net.read_mem(1, offset as usize, (pkts * 1024) as usize),
        pattern(wr_id as u8, (pkts * 1024) as usize)
    );
    net.nodes[0].engine.stats().retransmitted_packets - before
}

/// Posts FETCH_ADD `wr_id` on `qpn` (node 0 to node 1), its first transmission lost.
fn post_fetch_add_losing_it(net: &mut Net, qpn: u32, wr_id: u64) {
    let mut lost = false;
    net.fate = Box::new(move |from, p, _| {
        if from == 0 && p.ext.atomic_eth.is_some() && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    let add = SendOp::AtomicFetchAdd {
        remote_addr: BASE + 8192,
        rkey: net.nodes[1].key,
        add: 1,
    };
    let w = wr(wr_id, add, net.sge(0, 16, 8));
    let now = net.now;
    net.nodes[0].engine.post_send(now, qpn, w).unwrap();
}

/// An RC pair on `net` whose requester (node 0) runs with local ACK timeout `timeout`.
fn pair_with_timeout(mut net: Net, timeout: u8) -> (Net, u32) {
    let [qpn, _] = net.rc_pair_on([None, None]);
    let attr = QpAttr {
        timeout: Some(timeout),
        ..QpAttr::default()
    };
    net.nodes[0].engine.modify_qp(qpn, &attr).unwrap();
    (net, qpn)
}

/// A pair whose requester runs with perftest's local ACK timeout (14: 67 ms, far above the
/// round trip, so tail probes go before it), the round trip measured by a clean WRITE and,
/// when `learn`, the responder known to keep early packets (a first loss showed it).
fn perftest_pair(learn: bool) -> (Net, u32) {
    let (mut net, qpn) = pair_with_timeout(Net::new(2), 14);
    assert_eq!(write_losing(&mut net, qpn, 1, 4, Losses::default()), 0);
    if learn {
        assert_eq!(
            write_losing(&mut net, qpn, 2, 16, Losses::first_of(&[3])),
            1
        );
    }
    (net, qpn)
}

#[test]
fn a_lost_nak_costs_a_probe_and_the_lost_packet_not_a_window() {
    let mut net = Net::new(2);
    let [qpn, _] = net.rc_pair_on([None, None]);
    // A first loss shows that the responder keeps what follows a gap.
    assert_eq!(
        write_losing(&mut net, qpn, 1, 16, Losses::first_of(&[3])),
        1
    );
    // Now the NAK of the gap is lost too: the retransmit timer fires, the probe (the oldest
    // unacknowledged packet) is answered with an ACK of where the responder's run stopped,
    // and the packet after it alone goes again; the twelve it kept are not resent.
    let losses = Losses {
        naks: vec![0],
        ..Losses::first_of(&[3])
    };
    let resent = write_losing(&mut net, qpn, 20, 16, losses);
    assert_eq!(net.nodes[0].engine.stats().retransmit_timeouts, 1);
    assert_eq!(resent, 2, "the probe and the lost packet");
}

#[test]
fn a_lost_tail_is_probed_long_before_the_retransmit_timeout() {
    let (mut net, qpn) = perftest_pair(false);
    // The last three packets of the next one are lost, the one asking for the ACK among
    // them: nothing follows them to make the responder NAK.
    let start = net.now;
    let resent = write_losing(&mut net, qpn, 20, 16, Losses::first_of(&[13, 14, 15]));
    let took = net.now.saturating_duration_since(start);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.tail_probes, 1);
    assert_eq!(stats.retransmit_timeouts, 0);
    // The probe (the newest packet) and the two before it, repaired one by one.
    assert_eq!(resent, 3);
    // The probe after 5 ms of silence, not the retransmit timer after 67.
    assert!(took < Duration::from_millis(10), "recovered after {took:?}");
}

/// The repair a NAK asked for is lost too: the tail probe sends it again after 5 ms, where
/// the retransmit timer took 67 (what made 1 % loss on loopback cost a timeout every few
/// thousand WRITEs).
#[test]
fn a_lost_repair_is_sent_again_by_the_tail_probe() {
    let (mut net, qpn) = perftest_pair(true);
    let start = net.now;
    let losses = Losses {
        packets: vec![(3, 2)],
        naks: vec![],
    };
    let resent = write_losing(&mut net, qpn, 20, 16, losses);
    let took = net.now.saturating_duration_since(start);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(stats.tail_probes, 1);
    assert_eq!(resent, 2, "the repair, twice");
    assert!(took < Duration::from_millis(10), "recovered after {took:?}");
}

/// Two packets in a row are lost, and the NAK of the second gap (sent when the first was
/// repaired) too. The tail probe resends the repair; the duplicate's answer stops short of
/// the horizon, and the packet after it alone is repaired, not the eleven the responder kept
/// beyond it (going back N there resent 127 packets for 7 lost on loopback).
#[test]
fn a_lost_nak_of_a_second_gap_costs_one_packet_not_a_window() {
    let (mut net, qpn) = perftest_pair(true);
    let losses = Losses {
        packets: vec![(3, 1), (4, 1)],
        naks: vec![1],
    };
    let resent = write_losing(&mut net, qpn, 20, 16, losses);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(stats.tail_probes, 1);
    assert_eq!(resent, 3, "packet 3, 3 again as the probe, then 4");
}

/// A lost probe is followed by another, twice as late, before the retransmit timer.
#[test]
fn a_lost_probe_is_followed_by_another() {
    let (mut net, qpn) = perftest_pair(true);
    let start = net.now;
    // The last packet and its first resend (the probe) are lost.
    let losses = Losses {
        packets: vec![(15, 2)],
        naks: vec![],
    };
    let resent = write_losing(&mut net, qpn, 20, 16, losses);
    let took = net.now.saturating_duration_since(start);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(stats.tail_probes, 2);
    assert!(resent <= 3, "resent {resent}");
    // 5 ms, then 10 more: well before the 67 ms timer.
    assert!(took < Duration::from_millis(20), "recovered after {took:?}");
}

/// The first ACKs of a QP are lost, so no round trip is measured yet: the probe still goes
/// after the 5 ms floor, not the 67 ms timer.
#[test]
fn a_probe_goes_before_the_first_round_trip_is_measured() {
    let (mut net, qpn) = pair_with_timeout(Net::new(2), 14);
    let start = net.now;
    let mut acks = 0;
    net.fate = Box::new(move |from, _, _| {
        acks += u32::from(from == 1);
        if from == 1 && acks == 1 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    net.write_mem(0, 0, &pattern(3, 4096));
    let w = write(&net, 9, 1, 0, 4096);
    let now = net.now;
    net.nodes[0].engine.post_send(now, qpn, w).unwrap();
    net.run_for(Duration::from_secs(1));
    let wcs = net.completions(0);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (9, WcStatus::Success));
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(stats.tail_probes, 1);
    let took = net.now.saturating_duration_since(start);
    assert!(took < Duration::from_millis(10), "recovered after {took:?}");
}

/// Runs `net` with every datagram delayed by `one_way` (nothing lost) until nothing is pending
/// or `limit` has passed.
fn run_delayed(net: &mut Net, one_way: Duration, limit: Duration) {
    let end = net.now + limit;
    let mut queue: Vec<(Instant, SocketAddr, std::net::IpAddr, Vec<u8>)> = Vec::new();
    let mut buf = Vec::new();
    loop {
        for i in 0..net.nodes.len() {
            while let Some(t) = net.nodes[i].engine.poll_transmit(net.now, &mut buf) {
                let src = SocketAddr::new(ip(i), t.src_port);
                queue.push((net.now + one_way, src, t.dst.ip(), buf[..t.len].to_vec()));
            }
        }
        let next_packet = queue.iter().map(|p| p.0).min();
        let next_timer = net
            .nodes
            .iter()
            .filter_map(|n| n.engine.poll_timeout())
            .min();
        let Some(next) = next_packet.into_iter().chain(next_timer).min() else {
            return;
        };
        if next > end {
            return;
        }
        net.now = net.now.max(next);
        let now = net.now;
        let (due, rest): (Vec<_>, Vec<_>) = queue.into_iter().partition(|p| p.0 <= now);
        queue = rest;
        for (_, src, dst, data) in due {
            let to = (0..net.nodes.len()).find(|&j| ip(j) == dst).unwrap();
            let meta = DatagramMeta::new(src, dst);
            net.nodes[to].engine.handle_datagram(now, &meta, &data);
        }
        for n in &mut net.nodes {
            n.engine.handle_timeout(now);
        }
    }
}

/// A path slower than the probe's delay (a 10 ms round trip: a WAN, or a loaded peer), nothing
/// lost: the first WRITE is probed (no round trip measured yet), but the probe keeps the
/// round-trip sample, so the round trip is learned and no later WRITE is probed. (A probe that
/// dropped the sample left it unmeasured: each of the 20 WRITEs went twice.)
#[test]
fn a_slow_path_is_measured_despite_the_probe() {
    let (mut net, qpn) = pair_with_timeout(Net::new(2), 14);
    net.write_mem(0, 0, &pattern(1, 1024));
    for i in 0..20u64 {
        let w = write(&net, i, 1, 0, 1024);
        let now = net.now;
        net.nodes[0].engine.post_send(now, qpn, w).unwrap();
        run_delayed(&mut net, Duration::from_millis(5), Duration::from_secs(1));
        let wcs = net.completions(0);
        assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::Success));
    }
    let stats = net.nodes[0].engine.stats();
    assert!(
        stats.retransmitted_packets <= 2,
        "nothing lost, yet {} WRITEs went twice",
        stats.retransmitted_packets
    );
}

/// Towards a responder that drops early packets (as rxe): a lost atomic is repaired on the
/// NAK, and its ATOMIC ACK ends the repair as an ACK would, so the WRITE the responder
/// dropped after it goes again at once. (The repair used to stand: the tail probe resent its
/// PSN, already acknowledged — nothing — and the WRITE waited 67 ms for the timer.)
#[test]
fn an_atomic_ack_answers_the_repair_of_the_atomic() {
    let (mut net, qpn) = pair_with_timeout(
        Net::with_config(2, |c| EngineConfig {
            reorder_packets: 0,
            ..c
        }),
        14,
    );
    assert_eq!(write_losing(&mut net, qpn, 1, 1, Losses::default()), 0);
    let start = net.now;
    post_fetch_add_losing_it(&mut net, qpn, 2);
    let now = net.now;
    let w = write(&net, 3, 1, 0, 1024);
    net.nodes[0].engine.post_send(now, qpn, w).unwrap();
    net.run_for(Duration::from_secs(1));
    let wcs = statuses(&mut net);
    assert_eq!(wcs, [(2, WcStatus::Success), (3, WcStatus::Success)]);
    let took = net.now.saturating_duration_since(start);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0, "recovered after {took:?}");
    assert!(took < Duration::from_millis(5), "recovered after {took:?}");
}

/// A tail loss the probe repairs leaves a round-trip sample that holds the probe's delay: the
/// estimate takes it, but not the device budget, which halves on a round trip above half the
/// local ACK timeout (at timeout 11, 4.2 ms: one recovered loss halved it).
#[test]
fn a_probe_recovered_tail_loss_does_not_halve_the_budget() {
    let (mut net, qpn) = pair_with_timeout(Net::new(2), 11);
    assert_eq!(write_losing(&mut net, qpn, 1, 4, Losses::default()), 0);
    let before = net.nodes[0].engine.packets_in_flight().1;
    assert_eq!(write_losing(&mut net, qpn, 2, 1, Losses::first_of(&[0])), 1);
    let stats = net.nodes[0].engine.stats();
    assert_eq!((stats.tail_probes, stats.retransmit_timeouts), (1, 0));
    let after = net.nodes[0].engine.packets_in_flight().1;
    assert!(after >= before, "budget {before} -> {after}");
}

/// Towards a responder known to keep early packets: a lost atomic, then a READ it keeps. The
/// atomic's ACK ends the repair without resending the READ request, whose duplicate would
/// restart the READ's answer (16 duplicate responses for 16 KiB).
#[test]
fn an_atomic_ack_does_not_resend_the_read_after_it() {
    let (mut net, qpn) = perftest_pair(true);
    let resent_before = net.nodes[0].engine.stats().retransmitted_packets;
    post_fetch_add_losing_it(&mut net, qpn, 2);
    let now = net.now;
    let w = read_16k(&net, 3);
    net.nodes[0].engine.post_send(now, qpn, w).unwrap();
    let w = write(&net, 4, 1, 0, 1024);
    net.nodes[0].engine.post_send(now, qpn, w).unwrap();
    net.run_for(Duration::from_secs(1));
    let wcs = statuses(&mut net);
    let ok = WcStatus::Success;
    assert_eq!(wcs, [(2, ok), (3, ok), (4, ok)]);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(
        stats.drops_for(DropReason::Duplicate),
        0,
        "duplicate READ responses"
    );
    assert_eq!(
        stats.retransmitted_packets - resent_before,
        1,
        "the atomic alone"
    );
}

/// Posts a 4-packet WRITE (id 10), a 16 KiB READ (id 11) and, with `then_write`, a
/// one-packet WRITE (id 12) on `qpn` towards node 1, losing the first WRITE's packet
/// `lost` and, with `lose_read`, the READ request's first transmission; runs to the end.
/// Returns node 0's packets resent for them and how long they took.
fn write_read_write_losing(
    net: &mut Net,
    qpn: u32,
    lost: i32,
    lose_read: bool,
    then_write: bool,
) -> (u64, Duration) {
    let resent_before = net.nodes[0].engine.stats().retransmitted_packets;
    let (mut first_psn, mut write_lost, mut read_lost) = (None, false, !lose_read);
    net.fate = Box::new(move |from, p, _| {
        if from != 0 {
            return Fate::Deliver;
        }
        let first = *first_psn.get_or_insert(p.bth.psn);
        if !write_lost && p.bth.psn.distance(first) == lost {
            write_lost = true;
            return Fate::Drop;
        }
        if !read_lost && p.bth.opcode == Opcode::RC_RDMA_READ_REQUEST {
            read_lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    net.write_mem(0, 0, &pattern(9, 4096));
    net.write_mem(1, 16384, &pattern(11, 16384));
    let start = net.now;
    let w = write(net, 10, 1, 0, 4096);
    net.nodes[0].engine.post_send(start, qpn, w).unwrap();
    let w = read_16k(net, 11);
    net.nodes[0].engine.post_send(start, qpn, w).unwrap();
    if then_write {
        let w = write(net, 12, 1, 8192, 1024);
        net.nodes[0].engine.post_send(start, qpn, w).unwrap();
    }
    net.run_for(Duration::from_secs(1));
    let took = net.now.saturating_duration_since(start);
    let wcs = statuses(net);
    let ok = WcStatus::Success;
    let mut want = vec![(10, ok), (11, ok)];
    if then_write {
        want.push((12, ok));
    }
    assert_eq!(wcs, want);
    assert_eq!(net.read_mem(1, 0, 4096), pattern(9, 4096));
    assert_eq!(net.read_mem(0, 16384, 16384), pattern(11, 16384));
    let resent = net.nodes[0].engine.stats().retransmitted_packets - resent_before;
    (resent, took)
}

/// A responder that keeps early packets replays them when the gap is filled: the WRITE's ACK
/// goes out, then the kept READ's responses. That ACK stops short of the repair's horizon, and
/// the packet after it is the READ request, which the responder has and is answering: it must
/// not go again (its duplicate restarts the answer), as after an atomic's repair. Nor when
/// the responder's kind is not known yet and the lost packet is the one before the READ: its
/// ACK then stops at the repaired packet, which does not show a responder that drops early
/// packets (the READ's response, which follows it, shows one that keeps them).
#[test]
fn a_short_answer_does_not_resend_the_kept_read_after_it() {
    for (learn, lost) in [(true, 1), (false, 1), (true, 3), (false, 3)] {
        let learn = format!("{learn}, packet {lost} lost");
        let (mut net, qpn) = perftest_pair(learn.starts_with("true"));
        let (resent, _) = write_read_write_losing(&mut net, qpn, lost, false, true);
        let stats = net.nodes[0].engine.stats();
        assert_eq!(stats.retransmit_timeouts, 0, "learn {learn}");
        assert_eq!(
            stats.drops_for(DropReason::Duplicate),
            0,
            "learn {learn}: duplicate READ responses"
        );
        assert_eq!(resent, 1, "learn {learn}: the lost WRITE packet alone");
        let qp = net.nodes[0].engine.qp(qpn).unwrap();
        assert_eq!(qp.peer_keeps_early_packets(), Some(true), "learn {learn}");
    }
}

/// The same, the READ request lost too, and nothing after it: the repair of the READ waits
/// for its answer instead of resending it at once, and when none comes, the tail probe sends
/// it — not the retransmit timer, 67 ms later (a review found the repair dropped there, and a
/// READ is never a tail probe of its own).
#[test]
fn a_lost_read_after_a_short_answer_goes_again_with_the_tail_probe() {
    let (mut net, qpn) = perftest_pair(true);
    let (resent, took) = write_read_write_losing(&mut net, qpn, 1, true, false);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(stats.drops_for(DropReason::Duplicate), 0);
    assert_eq!(resent, 2, "the lost WRITE packet and the READ request");
    assert!(took < Duration::from_millis(20), "recovered after {took:?}");
}

/// With a WRITE after the lost READ, the responder NAKs the READ's gap and the READ goes again
/// at once; its last response passes the repair, and the WRITE it kept is acknowledged right
/// after: it must not go again too (it did, as the next packet repaired alone).
#[test]
fn the_write_after_a_repaired_read_is_not_resent() {
    let (mut net, qpn) = perftest_pair(true);
    let (resent, _) = write_read_write_losing(&mut net, qpn, 1, true, true);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(stats.drops_for(DropReason::Duplicate), 0);
    assert_eq!(resent, 2, "the lost WRITE packet and the READ request");
}

/// A lone READ at the end of the queue, its request lost: nothing answers, and nothing after
/// it is a probe of its own. After a silence the tail probe sends the request again — not the
/// retransmit timer, 67 ms later — towards a responder that keeps early packets, known or not.
#[test]
fn a_lone_lost_read_request_goes_again_with_the_tail_probe() {
    for learn in [false, true] {
        let (_, stats, resent, took) =
            lone_read_losing(learn, 0, Opcode::RC_RDMA_READ_REQUEST, 30, 12);
        assert_eq!(stats.retransmit_timeouts, 0, "learn {learn}");
        assert_eq!(resent, 1, "learn {learn}");
        assert!(took < Duration::from_millis(20), "learn {learn}: {took:?}");
    }
}

/// Posts a lone 16 KiB READ (id `wr_id`, of node 1's bytes `pattern(seed, …)`) on a
/// [`perftest_pair`], losing the first packet of `opcode` that node `from` sends; runs to the
/// end and checks its completion and data. Returns the net, node 0's counters, its packets
/// resent for the READ, and how long the READ took.
fn lone_read_losing(
    learn: bool,
    from: usize,
    opcode: Opcode,
    wr_id: u64,
    seed: u8,
) -> (Net, Stats, u64, Duration) {
    let (mut net, qpn) = perftest_pair(learn);
    let resent_before = net.nodes[0].engine.stats().retransmitted_packets;
    let mut lost = false;
    net.fate = Box::new(move |sender, p, _| {
        if sender == from && !lost && p.bth.opcode == opcode {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    net.write_mem(1, 16384, &pattern(seed, 16384));
    let start = net.now;
    let w = read_16k(&net, wr_id);
    net.nodes[0].engine.post_send(start, qpn, w).unwrap();
    net.run_for(Duration::from_secs(1));
    let took = net.now.saturating_duration_since(start);
    let wcs = statuses(&mut net);
    assert_eq!(wcs, [(wr_id, WcStatus::Success)], "learn {learn}");
    assert_eq!(net.read_mem(0, 16384, 16384), pattern(seed, 16384));
    let stats = net.nodes[0].engine.stats().clone();
    let resent = stats.retransmitted_packets - resent_before;
    (net, stats, resent, took)
}

/// A peer whose answers are all lost: each retransmit timeout without progress resends the
/// oldest packet twice as often as the one before (1, 2, 4, then 8), and waits twice as long
/// for the next, within 4T. Before, every retry was one packet after T: at 20 % loss each way
/// one QP in a few hundred lost eight such round trips in a row and failed with `RetryExcErr`
/// on a path that delivered most packets.
#[test]
fn retries_without_progress_send_more_copies_and_back_off() {
    let mut net = Net::new(2);
    net.fate = Box::new(|from, _, _| if from == 1 { Fate::Drop } else { Fate::Deliver });
    let all = AccessFlags::all();
    let qpns = [0, 1].map(|i| {
        let n = &mut net.nodes[i];
        n.engine
            .create_qp_with_srq(n.pd, n.cq, n.cq, QpType::Rc, QpCaps::default(), None)
            .unwrap()
    });
    for i in 0..2 {
        let e = &mut net.nodes[i].engine;
        e.modify_qp(qpns[i], &QpAttr::rc_init(all)).unwrap();
        let av = AddressVector {
            dest_ip: ip(1 - i),
            traffic_class: 0,
            hop_limit: 64,
        };
        let rtr = QpAttr::rc_rtr(Mtu::Mtu1024, av, qpns[1 - i], Psn::new(0x100), 4, 1);
        e.modify_qp(qpns[i], &rtr).unwrap();
        // Local ACK timeout 8: T = 4.096 µs × 2^8 ≈ 1.05 ms; retry_cnt 7.
        let rts = QpAttr::rc_rts(Psn::new(0x100), 8, 7, 7, 4);
        e.modify_qp(qpns[i], &rts).unwrap();
    }
    let w = write(&net, 1, 1, 0, 1024);
    let now = net.now;
    net.nodes[0].engine.post_send(now, qpns[0], w).unwrap();
    let t = Duration::from_nanos(4096 * 256);
    // At each moment (in units of T), the transmissions of the one packet so far. The
    // timeouts fire at T, 3T (T + 2T), 7T (+ 4T) and every 4T after.
    let mut sent_by = Vec::new();
    let mut at = Duration::ZERO;
    for mark in [0.5, 2.5, 6.5, 10.5, 14.5, 18.5, 22.5, 26.5] {
        let next = t.mul_f64(mark);
        net.run_for(next - at);
        at = next;
        sent_by.push(writes(&net).len());
        assert!(net.completions(0).is_empty(), "retries left at {mark} T");
    }
    assert_eq!(sent_by, [1, 2, 4, 8, 16, 24, 32, 40]);
    assert!(
        writes(&net)
            .iter()
            .all(|&(psn, ack_req)| psn == Psn::new(0x100) && ack_req),
        "every transmission is the WRITE's one packet, asking for an ACK"
    );
    // The seventh retry was the last: the next timeout ends it.
    net.run_for(t * 4);
    assert_eq!(statuses(&mut net), [(1, WcStatus::RetryExcErr)]);
    assert_eq!(writes(&net).len(), 40);
}

/// The WRITE packets on the wire so far: PSN and AckReq.
fn writes(net: &Net) -> Vec<(Psn, bool)> {
    net.log
        .iter()
        .map(|p| PacketRepr::parse(p).unwrap())
        .filter(|p| p.bth.opcode == Opcode::RC_RDMA_WRITE_ONLY)
        .map(|p| (p.bth.psn, p.bth.ack_req))
        .collect()
}

/// A lone READ at the end of the queue, its last response lost: it is answered in part and
/// then nothing comes. After a silence the tail probe asks for the rest (one request for the
/// missing response) — not the retransmit timer, T later (2.1 s at the timeout 19 rdma_cm
/// gives RoCE: the kernel's NVMe-oF target fetching a host's write data waited that long for
/// each such loss).
#[test]
fn a_read_answered_in_part_asks_for_the_rest_with_the_tail_probe() {
    for learn in [false, true] {
        let (net, stats, resent, took) =
            lone_read_losing(learn, 1, Opcode::RC_RDMA_READ_RESPONSE_LAST, 31, 13);
        assert_eq!(stats.retransmit_timeouts, 0, "learn {learn}");
        assert_eq!(resent, 1, "learn {learn}");
        // The missing response asked for again, not the whole READ.
        let peer = net.nodes[1].engine.stats();
        let count = |v: &[u64], op: Opcode| v[usize::from(op.0)];
        assert_eq!(
            count(&peer.rx_by_opcode, Opcode::RC_RDMA_READ_REQUEST),
            2,
            "learn {learn}"
        );
        assert_eq!(
            count(&peer.tx_by_opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY),
            1,
            "learn {learn}"
        );
        assert!(took < Duration::from_millis(20), "learn {learn}: {took:?}");
    }
}

/// A READ request lost, then a WRITE the responder keeps, and the NAK of the gap lost too:
/// the responder keeps what follows silently. The tail probe sends the READ request (the
/// oldest, unanswered) — not the newest packet, the WRITE, which the responder drops without
/// a word behind its gap — and the retransmit timer is not needed.
#[test]
fn a_lost_read_whose_nak_is_lost_goes_again_with_the_tail_probe() {
    for learn in [false, true] {
        let (mut net, qpn) = perftest_pair(learn);
        let (mut read_lost, mut nak_lost) = (false, false);
        net.fate = Box::new(move |from, p, _| {
            if from == 0 && !read_lost && p.bth.opcode == Opcode::RC_RDMA_READ_REQUEST {
                read_lost = true;
                return Fate::Drop;
            }
            let nak = p
                .ext
                .aeth
                .is_some_and(|a| !matches!(a.syndrome, Syndrome::Ack { .. }));
            if from == 1 && nak && !nak_lost {
                nak_lost = true;
                return Fate::Drop;
            }
            Fate::Deliver
        });
        net.write_mem(1, 16384, &pattern(14, 16384));
        net.write_mem(0, 40960, &pattern(15, 1024));
        let start = net.now;
        let wrs = [read_16k(&net, 40), write(&net, 41, 1, 40960, 1024)];
        for w in wrs {
            net.nodes[0].engine.post_send(start, qpn, w).unwrap();
        }
        net.run_for(Duration::from_secs(1));
        let took = net.now.saturating_duration_since(start);
        let wcs = statuses(&mut net);
        assert_eq!(
            wcs,
            [(40, WcStatus::Success), (41, WcStatus::Success)],
            "learn {learn}"
        );
        assert_eq!(net.read_mem(0, 16384, 16384), pattern(14, 16384));
        assert_eq!(net.read_mem(1, 40960, 1024), pattern(15, 1024));
        assert_eq!(
            net.nodes[0].engine.stats().retransmit_timeouts,
            0,
            "learn {learn}"
        );
        assert!(took < Duration::from_millis(30), "learn {learn}: {took:?}");
    }
}

/// A packet lost and the NAK of its gap lost too, the responder's kind not yet known: the
/// first tail probe (the newest packet) is dropped without a word behind the gap the
/// responder NAKed already. The next probe sends the oldest unacknowledged packet, which is
/// always answered — not the newest again at every probe until the retransmit timer.
#[test]
fn an_unanswered_probe_is_followed_by_the_oldest_packet() {
    let (mut net, qpn) = perftest_pair(false);
    let start = net.now;
    let losses = Losses {
        packets: vec![(3, 1)],
        naks: vec![0],
    };
    write_losing(&mut net, qpn, 20, 16, losses);
    let took = net.now.saturating_duration_since(start);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, 0);
    assert_eq!(stats.tail_probes, 2);
    // Two probes, 5 ms and 10 ms after the silence began, not the timer's 67 ms.
    assert!(took < Duration::from_millis(30), "recovered after {took:?}");
}

/// Towards a responder that drops early packets (as rxe), known as such: a lost packet in
/// the middle, and the NAK of its gap lost too. The tail probe sends the oldest packet, which
/// the responder answers, and what it dropped after it goes again — not the retransmit timer,
/// T later (2.1 s at the timeout rdma_cm gives RoCE; 67 ms here).
#[test]
fn a_responder_that_drops_early_packets_is_probed_too() {
    let (mut net, qpn) = pair_with_timeout(
        Net::with_config(2, |c| EngineConfig {
            reorder_packets: 0,
            ..c
        }),
        14,
    );
    assert_eq!(write_losing(&mut net, qpn, 1, 4, Losses::default()), 0);
    // A first loss shows that the responder drops what follows a gap.
    write_losing(&mut net, qpn, 2, 16, Losses::first_of(&[3]));
    assert_eq!(
        net.nodes[0]
            .engine
            .qp(qpn)
            .unwrap()
            .peer_keeps_early_packets(),
        Some(false)
    );
    let before = net.nodes[0].engine.stats().clone();
    let start = net.now;
    let losses = Losses {
        packets: vec![(5, 1)],
        naks: vec![0],
    };
    write_losing(&mut net, qpn, 20, 16, losses);
    let took = net.now.saturating_duration_since(start);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.retransmit_timeouts, before.retransmit_timeouts);
    assert!(stats.tail_probes > before.tail_probes);
    assert!(took < Duration::from_millis(30), "recovered after {took:?}");
}
