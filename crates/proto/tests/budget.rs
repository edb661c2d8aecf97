//! The device's in-flight budget, shared by every QP of an engine: a QP that times out
//! towards a dead peer must not hold it while live QPs wait.

mod common;

use common::*;
use softrdma_proto::*;

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
