//! The requester's recovery when answers stop coming: a QP timing out towards a dead peer
//! must not hold the device budget that live QPs share, and a lost NAK must cost the lost
//! packet, not a window.

mod common;

use common::*;
use softrdma_proto::*;
use softrdma_wire::Syndrome;

fn write(net: &Net, wr_id: u64, to: usize, offset: u64, len: u32) -> SendWr {
    let op = SendOp::RdmaWrite {
        remote_addr: BASE + offset,
        rkey: net.nodes[to].key,
    };
    wr(wr_id, op, net.sge(0, offset, len))
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
    let wcs: Vec<(u64, WcStatus)> = net
        .completions(0)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    let mut want: Vec<(u64, WcStatus)> = (100..108).map(|id| (id, WcStatus::Success)).collect();
    want.push((1, WcStatus::RetryExcErr));
    assert_eq!(
        wcs, want,
        "the live QP's WRITEs complete while the dead QP spends its retries, not after"
    );
    assert_eq!(net.read_mem(2, 50_000, 8 * 1024), pattern(7, 8 * 1024));
}

/// Writes `pkts` packets (MTU 1024) from node 0 to node 1 at `offset`, drops the first
/// transmission of its packets numbered in `lost` and, when `lose_nak`, node 1's first NAK;
/// runs to the end and returns node 0's retransmitted packets for it.
fn write_losing(
    net: &mut Net,
    qpn: u32,
    wr_id: u64,
    pkts: u32,
    lost: &[u32],
    lose_nak: bool,
) -> u64 {
    let lost = lost.to_vec();
    let before = net.nodes[0].engine.stats().retransmitted_packets;
    // Node 0's first packets of the phase are the WRITE's, in order.
    let (mut sent, mut dropped_nak) = (0u32, !lose_nak);
    net.fate = Box::new(move |from, p, _| {
        let nak = p
            .ext
            .aeth
            .is_some_and(|a| !matches!(a.syndrome, Syndrome::Ack { .. }));
        if from == 0 {
            sent += 1;
        }
        if from == 0 && sent <= pkts && lost.contains(&(sent - 1)) {
            Fate::Drop
        } else if from == 1 && nak && !dropped_nak {
            dropped_nak = true;
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

#[test]
fn a_lost_nak_costs_a_probe_and_the_lost_packet_not_a_window() {
    let mut net = Net::new(2);
    let [qpn, _] = net.rc_pair_on([None, None]);
    // A first loss shows that the responder keeps what follows a gap.
    assert_eq!(write_losing(&mut net, qpn, 1, 16, &[3], false), 1);
    // Now the NAK of the gap is lost too: the retransmit timer fires, the probe (the oldest
    // unacknowledged packet) is answered with an ACK of where the responder's run stopped,
    // and the packet after it alone goes again; the twelve it kept are not resent.
    let resent = write_losing(&mut net, qpn, 20, 16, &[3], true);
    assert_eq!(net.nodes[0].engine.stats().retransmit_timeouts, 1);
    assert_eq!(resent, 2, "the probe and the lost packet");
}

#[test]
fn a_lost_tail_is_probed_long_before_the_retransmit_timeout() {
    let mut net = Net::new(2);
    let [qpn, _] = net.rc_pair_on([None, None]);
    // perftest's local ACK timeout (14: 67 ms), far above the round trip.
    let attr = QpAttr {
        timeout: Some(14),
        ..QpAttr::default()
    };
    net.nodes[0].engine.modify_qp(qpn, &attr).unwrap();
    // A clean WRITE first: the round trip is measured.
    assert_eq!(write_losing(&mut net, qpn, 1, 4, &[], false), 0);
    // The last three packets of the next one are lost, the one asking for the ACK among
    // them: nothing follows them to make the responder NAK.
    let start = net.now;
    let resent = write_losing(&mut net, qpn, 20, 16, &[13, 14, 15], false);
    let took = net.now.saturating_duration_since(start);
    let stats = net.nodes[0].engine.stats();
    assert_eq!(stats.tail_probes, 1);
    assert_eq!(stats.retransmit_timeouts, 0);
    // The probe (the newest packet) and the two before it, repaired one by one.
    assert_eq!(resent, 3);
    // The probe after 5 ms of silence, not the retransmit timer after 67.
    assert!(took < Duration::from_millis(10), "recovered after {took:?}");
}
