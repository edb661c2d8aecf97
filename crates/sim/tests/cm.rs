//! rdma_cm handshakes (the IB CM's MADs on each node's QP 1) over the simulated fabric:
//! every connection comes up and goes down exactly once on each side, loss-free and with
//! MADs lost, duplicated, reordered and corrupted.

use softrdma_proto::Duration;
use softrdma_sim::cm::CmWorkloadConfig;
use softrdma_sim::link::LinkConfig;
use softrdma_sim::swarm::{run, RunConfig};
use softrdma_sim::workload::WorkloadConfig;

fn config(seed: u64, nodes: usize, connections: usize, link: LinkConfig) -> RunConfig {
    config_with_ops(seed, nodes, connections, link, 20)
}

/// [`config`] with `ops` operations on the data QPs the swarm connects beside the CM's.
fn config_with_ops(
    seed: u64,
    nodes: usize,
    connections: usize,
    link: LinkConfig,
    ops: u64,
) -> RunConfig {
    let workload = WorkloadConfig {
        nodes,
        ..WorkloadConfig::new(seed, ops)
    };
    RunConfig {
        cm: Some(CmWorkloadConfig {
            seed,
            nodes,
            connections,
        }),
        // The CM's retransmission timers are seconds long: room for several rounds.
        liveness: Duration::from_secs(120),
        ..RunConfig::uniform(workload, link, Duration::from_secs(60))
    }
}

#[test]
fn handshakes_on_a_clean_fabric() {
    let link = LinkConfig {
        delay: Duration::from_micros(5),
        ..LinkConfig::IDEAL
    };
    let r = run(&config(1, 3, 2, link), None).unwrap();
    let cm = r.cm.clone().unwrap();
    assert!(r.passed(), "{:?}", r.first_failure());
    // 3 nodes, 2 connections from each to each other: 12, up and down on both sides.
    assert_eq!(
        (cm.connections, cm.established, cm.disconnected),
        (12, 12, 12)
    );
    // REQ, REP, RTU, DREQ, DREP per connection, nothing lost.
    assert_eq!(cm.mads_sent, 5 * 12);
    assert_eq!(cm.mads_received, 5 * 12);
}

#[test]
fn handshakes_survive_lost_duplicated_and_corrupted_mads() {
    let link = LinkConfig {
        delay: Duration::from_micros(5),
        loss: 0.15,
        duplicate: 0.1,
        reorder: 0.2,
        reorder_jitter: Duration::from_micros(30),
        corrupt: 0.03,
        ..LinkConfig::IDEAL
    };
    let mut retransmitted = 0;
    // No data operations: at 18 % loss each way a data QP's seven retries run out now and
    // then (one seed in a hundred), which is the transport doing as IBTA says, not the CM's
    // business; the swarm tests the data path under faults.
    for seed in 1..=12 {
        let r = run(&config_with_ops(seed, 2, 3, link, 0), None).unwrap();
        assert!(r.passed(), "seed {seed}: {:?}", r.first_failure());
        let cm = r.cm.unwrap();
        assert_eq!(cm.established, 6);
        retransmitted += cm.mads_sent.saturating_sub(5 * 6);
    }
    assert!(retransmitted > 0, "the faults never cost a MAD");
}
