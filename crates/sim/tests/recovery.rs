//! Loss recovery and load: what a lost packet costs, and that many QPs on a slow link neither
//! overrun it nor time out on their own queueing delay.
//!
//! A softrdma responder keeps requests that follow a gap and a softrdma requester then resends
//! only what was lost (selective repeat); against a responder that drops them, as Linux rxe
//! does, the requester falls back to go-back-N — slower, never wrong. The device's in-flight
//! budget and the adaptive retransmit timeout keep queueing delay below the timeout.

use softrdma_proto::{Duration, Mtu};
use softrdma_sim::swarm::{run, RunConfig, RunReport};
use softrdma_sim::workload::{OpMix, WorkloadConfig};
use softrdma_sim::LinkConfig;

/// RDMA WRITEs of up to 64 KiB, one QP, a 10 Gb/s link with 10 µs delay and `loss`.
fn write_stream(seed: u64, ops: u64, loss: f64, rxe_like: bool) -> RunReport {
    let wl = WorkloadConfig {
        qps_per_pair: 1,
        window: 16,
        max_msg_bytes: 64 * 1024,
        mix: OpMix {
            send: 0,
            send_imm: 0,
            write: 1,
            write_imm: 0,
            read: 0,
            cmp_swap: 0,
            fetch_add: 0,
        },
        timeout: 12,
        psn_wrap_chance: 0.5,
        ..WorkloadConfig::new(seed, ops).with_mtu(Mtu::Mtu4096)
    };
    let link = LinkConfig {
        delay: Duration::from_micros(10),
        bandwidth_bps: 10_000_000_000,
        loss,
        ..LinkConfig::IDEAL
    };
    let cfg = RunConfig {
        rxe_like_responders: rxe_like,
        ..RunConfig::uniform(wl, link, Duration::from_secs(20))
    };
    run(&cfg, None).expect("setup")
}

#[test]
fn one_lost_packet_costs_at_most_two_resent_packets() {
    let mut lost = 0;
    let mut resent = 0;
    for seed in 1..=4 {
        let r = write_stream(seed, 400, 0.01, false);
        assert!(r.passed(), "seed {seed}: {:?}", r.first_failure());
        assert!(
            r.engines.selective_repeats > 0,
            "seed {seed}: {}",
            r.engines
        );
        lost += r.fabric.packets_dropped;
        resent += r.engines.retransmissions;
    }
    assert!(lost > 50, "the test must lose packets: {lost}");
    assert!(
        resent <= 2 * lost,
        "{resent} packets resent for {lost} lost: selective repeat should resend about one each"
    );
}

#[test]
fn against_a_responder_that_drops_after_a_gap_go_back_n_still_delivers() {
    let mut lost = 0;
    let mut resent = 0;
    for seed in 1..=4 {
        let r = write_stream(seed, 400, 0.01, true);
        assert!(r.passed(), "seed {seed}: {:?}", r.first_failure());
        assert_eq!(r.engines.requests_held, 0);
        lost += r.fabric.packets_dropped;
        resent += r.engines.retransmissions;
    }
    // Go-back-N resends a window's tail per loss: the selective figure above is the point.
    assert!(resent > 2 * lost, "{resent} resent for {lost} lost");
}
