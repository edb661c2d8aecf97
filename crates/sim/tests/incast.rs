//! Incast over switches, the real engines at both ends: DCQCN keeps the bottleneck busy,
//! shared fairly and its queue under `Kmax`, without drops; without congestion control the
//! buffer overflows and packets are resent; PFC trades the drops for pauses; in every case
//! the data arrives exactly once and in order, and one seed gives one result.

use softrdma_proto::Duration;
use softrdma_sim::incast::{run_incast, IncastCc, IncastConfig, IncastReport};
use softrdma_sim::switch::Topology;

fn run(cfg: IncastConfig) -> IncastReport {
    let r = run_incast(&cfg).unwrap();
    assert_eq!(r.mismatches, 0, "{cfg:?}");
    r
}

#[test]
fn dcqcn_keeps_sixteen_senders_fair_busy_and_shallow() {
    let cfg = IncastConfig::new(16);
    let r = run(cfg);
    assert!(r.utilization >= 0.95, "{}", r.utilization);
    assert!(r.jain >= 0.98, "{}", r.jain);
    assert!(r.queue_p99_bytes <= cfg.red.kmax, "{}", r.queue_p99_bytes);
    assert_eq!((r.drops, r.retransmissions, r.pause_frames), (0, 0, 0));
    assert!(r.cnps > 0 && r.ecn_marks > 0);
    // The start: every sender at line rate until the first CNPs, so the queue was deep once.
    assert!(r.queue_max_bytes > cfg.red.kmax);
}

#[test]
fn without_congestion_control_the_buffer_overflows() {
    let cfg = IncastConfig {
        cc: IncastCc::None,
        ..IncastConfig::new(16)
    };
    let r = run(cfg);
    assert!(r.drops > 0 && r.retransmissions > 0, "{r:?}");
    assert!(r.queue_max_bytes + 5000 > cfg.buffer_bytes, "{r:?}");
    assert_eq!((r.cnps, r.ecn_marks), (0, 0));
}

#[test]
fn pfc_pauses_instead_of_dropping() {
    let r = run(IncastConfig {
        cc: IncastCc::None,
        pfc: true,
        ..IncastConfig::new(16)
    });
    assert_eq!(r.drops, 0);
    assert!(r.pause_frames > 0);
    assert!(r.utilization > 0.95, "{}", r.utilization);
}

#[test]
fn leaf_spine_with_dcqcn() {
    let r = run(IncastConfig {
        topology: Topology::LeafSpine {
            leaves: 4,
            spines: 2,
        },
        ..IncastConfig::new(16)
    });
    assert_eq!(r.drops, 0);
    assert!(r.utilization >= 0.95 && r.jain >= 0.98, "{r:?}");
}

#[test]
fn one_seed_one_result() {
    let cfg = IncastConfig {
        duration: Duration::from_millis(4),
        ..IncastConfig::new(8)
    };
    assert_eq!(run(cfg), run(cfg));
    let other = run(IncastConfig { seed: 2, ..cfg });
    assert_ne!(run(cfg).ecn_marks, 0);
    assert_ne!(run(cfg), other, "the seed drives the marking");
}

#[test]
fn timely_needs_no_marks_and_keeps_the_data_intact() {
    let r = run(IncastConfig {
        cc: IncastCc::Timely,
        duration: Duration::from_millis(10),
        ..IncastConfig::new(8)
    });
    assert_eq!((r.ecn_marks, r.cnps), (0, 0));
    assert!(r.messages > 0);
}
