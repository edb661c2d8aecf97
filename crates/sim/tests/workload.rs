//! The reference model must be able to fail: runs on a perfect network pass, and tampering
//! with memory behind the engines' back, or losing a packet for good, is reported.

use softrdma_proto::{Duration, Instant, Mtu};
use softrdma_sim::swarm::{run, RunConfig};
use softrdma_sim::workload::{Workload, WorkloadConfig};
use softrdma_sim::{Fabric, FabricConfig, LinkConfig, NodeId, RunOutcome};

#[test]
fn workload_passes_on_a_perfect_network_for_every_mtu() {
    for (k, mtu) in [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ]
    .into_iter()
    .enumerate()
    {
        let wl = WorkloadConfig {
            nodes: 3,
            ..WorkloadConfig::new(100 + k as u64, 300).with_mtu(mtu)
        };
        let report = run(
            &RunConfig::uniform(wl, LinkConfig::IDEAL, Duration::from_secs(10)),
            None,
        )
        .expect("setup");
        assert!(report.passed(), "{mtu:?}: {:?}", report.first_failure());
        assert_eq!(report.workload.ops_ok, 300);
        assert_eq!(report.engines.retransmissions, 0);
        assert!(
            report.workload.posted_by_kind.len() == 7,
            "{:?}",
            report.workload.posted_by_kind
        );
    }
}

#[test]
fn workload_detects_tampered_target_memory() {
    let mut fabric = Fabric::new(FabricConfig::new(5));
    let mut wl = Workload::setup(&mut fabric, WorkloadConfig::new(5, 100)).expect("setup");
    let out = fabric
        .run_until(Instant::from_nanos(1_000_000_000), |f| wl.pump(f))
        .expect("run");
    assert_eq!(out, RunOutcome::Done);
    // Flip one byte of every region node 1 registered: some of them are targets.
    let engine = fabric.engine(NodeId(1)).unwrap();
    for mr in engine.mrs().iter() {
        let mut b = [0u8; 1];
        mr.memory
            .read(0, &mut b)
            .expect("simulated memory never faults");
        mr.memory
            .write(0, &[b[0] ^ 0x40])
            .expect("simulated memory never faults");
    }
    let report = wl.finish(&fabric);
    assert!(!report.passed());
    let d = report.first_divergence.expect("divergence");
    assert!(d.what.contains("target memory"), "{d}");
}

#[test]
fn workload_reports_ops_that_never_complete() {
    // Every datagram from node 0 is lost, forever: its ops exhaust their retries (an error
    // completion), and node 1's ops are never acknowledged either.
    let wl = WorkloadConfig {
        timeout: 8,
        ..WorkloadConfig::new(9, 20)
    };
    let mut cfg = RunConfig::uniform(wl, LinkConfig::IDEAL, Duration::from_millis(50));
    cfg.links[0][1].loss = 1.0;
    cfg.liveness = Duration::from_millis(10);
    let report = run(&cfg, None).expect("setup");
    assert!(!report.passed());
    assert!(report.first_failure().is_some());
    assert!(report.workload.ops_ok < 20);
}
