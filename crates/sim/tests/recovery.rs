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

/// The `softrdma sim` run of the reliability issue: 4 nodes, 2 QPs per pair, 3000 ops of the
/// default mix, 1 KiB MTU, `loss` with 10 % duplication, 10 % reordering and 5 % corruption on
/// every link.
fn heavy_loss(seed: u64, loss: f64, rxe_like: bool) -> RunReport {
    let wl = WorkloadConfig {
        nodes: 4,
        qps_per_pair: 2,
        ..WorkloadConfig::new(seed, 3000).with_mtu(Mtu::Mtu1024)
    };
    let link = LinkConfig {
        delay: Duration::from_micros(2),
        bandwidth_bps: 25_000_000_000,
        loss,
        duplicate: 0.1,
        reorder: 0.1,
        reorder_jitter: Duration::from_micros(20),
        corrupt: 0.05,
    };
    let cfg = RunConfig {
        rxe_like_responders: rxe_like,
        ..RunConfig::uniform(wl, link, Duration::from_secs(600))
    };
    run(&cfg, None).expect("setup")
}

/// Every op completes, correctly, at 20 % and 30 % loss per link against both kinds of
/// responder. Before retries sent copies and backed off, a retransmit timeout resent one
/// packet, as likely to be lost as what it repaired: at 20 % loss 13 of seeds 1–20 ended in
/// `RetryExcErr`, and at 30 % a third of the ops completed. IBTA's retry counter runs out only
/// after `retry_cnt` retries without progress, which on these links means losing well over a
/// hundred packets in a row: the model predicts no `RetryExcErr` here, so any is a failure.
/// (`softrdma sim --loss 0.2 --dup 0.1 --reorder 0.1 --corrupt 0.05 --nodes 4 --qps 2 --ops
/// 3000` runs one seed; the 100 seeds at 0.2 and 20 at 0.3 passed when this landed.)
#[test]
fn heavy_loss_completes_every_op() {
    let mut failures = Vec::new();
    let mut timeouts = 0;
    let cases = (1..=6)
        .map(|s| (s, 0.2, false))
        .chain((1..=4).map(|s| (s, 0.3, false)))
        .chain((1..=2).map(|s| (s, 0.2, true)))
        .chain((1..=2).map(|s| (s, 0.3, true)));
    for (seed, loss, rxe_like) in cases {
        let r = heavy_loss(seed, loss, rxe_like);
        timeouts += r.engines.retransmit_timeouts;
        if !r.passed() || r.workload.ops_ok != 3000 {
            eprintln!(
                "seed {seed} loss {loss} rxe_like {rxe_like}: {} ok, {:?}",
                r.workload.ops_ok,
                r.first_failure()
            );
            failures.push((seed, loss, rxe_like));
        }
    }
    assert!(
        failures.is_empty(),
        "failing (seed, loss, rxe_like): {failures:?}"
    );
    assert!(timeouts > 1000, "the runs must time out often: {timeouts}");
}
