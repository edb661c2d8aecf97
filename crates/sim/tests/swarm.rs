//! The seeded swarm: many small workloads, each with faults drawn from its seed, each ending
//! in a healed phase where everything must complete. `SOFTRDMA_SEED=<n>` replays one seed
//! (and prints its full report).

use std::time::Instant as WallClock;

use softrdma_proto::{Duration, Mtu};
use softrdma_sim::swarm::{run, run_seed, run_seed_with_capture, seed_from_env, RunConfig};
use softrdma_sim::workload::WorkloadConfig;
use softrdma_sim::LinkConfig;

/// Seeds per CI run; every one must pass. `SOFTRDMA_SWARM_SEEDS=<n>` and
/// `SOFTRDMA_SWARM_FIRST=<seed>` run a longer or different batch (bug hunting).
const SWARM_SEEDS: u64 = 1000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

#[test]
fn swarm_seeds_pass() {
    if let Some(seed) = seed_from_env() {
        eprintln!(
            "replaying seed {seed}: {}",
            RunConfig::swarm(seed).describe()
        );
        // SOFTRDMA_PCAP=<file> also writes the run's capture (open it with `softrdma decode`).
        let capture: Option<Box<dyn std::io::Write>> = std::env::var_os("SOFTRDMA_PCAP").map(|p| {
            let f = std::fs::File::create(p).expect("create SOFTRDMA_PCAP file");
            Box::new(std::io::BufWriter::new(f)) as Box<dyn std::io::Write>
        });
        match run_seed_with_capture(seed, capture) {
            Ok(r) => eprintln!("passed: {r:#?}"),
            Err(f) => panic!("{f}"),
        }
        return;
    }
    let first = env_u64("SOFTRDMA_SWARM_FIRST").unwrap_or(1);
    let count = env_u64("SOFTRDMA_SWARM_SEEDS").unwrap_or(SWARM_SEEDS);
    let started = WallClock::now();
    let mut failures = Vec::new();
    let mut totals = (0u64, 0u64, 0u64);
    let mut by_status = std::collections::BTreeMap::new();
    for seed in first..first.saturating_add(count) {
        match run_seed(seed) {
            Ok(r) => {
                totals.0 += r.workload.ops_ok;
                totals.1 += r.engines.retransmissions;
                totals.2 += r.engines.icrc_drops;
                for (k, v) in r.completions_by_status() {
                    *by_status.entry(k).or_insert(0u64) += v;
                }
            }
            Err(f) => {
                eprintln!("{f}\n");
                failures.push(f.seed);
            }
        }
    }
    eprintln!(
        "{count} seeds from {first} in {:.1?}: {} ops ok, {} retransmissions, {} icrc drops",
        started.elapsed(),
        totals.0,
        totals.1,
        totals.2
    );
    eprintln!("completions by status: {by_status:?}");
    assert!(
        failures.is_empty(),
        "failing seeds (replay with SOFTRDMA_SEED=<n>): {failures:?}"
    );
    // Half the seeds carry failing operations: every expected kind of failure happened,
    // and each matched the model (or the seed would have failed above).
    if count >= 200 {
        for status in [
            "remote_access_error",
            "wr_flush_error",
            "rnr_retry_exceeded_error",
            "retry_exceeded_error",
        ] {
            assert!(
                by_status.get(status).copied().unwrap_or(0) > 0,
                "no {status} in {count} seeds: {by_status:?}"
            );
        }
    }
}

/// Many QPs on a slow link (issue 13): 16 and 64 connections, 64 WRs outstanding each, 4 KiB
/// MTU, 1 Gb/s and 20 µs, loss-free and with 1 % loss, 100 seeds each. Megabytes of requests
/// compete for a link that drains 125 KB per millisecond: without a device budget and a
/// timeout that follows the round trip, queueing delay outgrows the local ACK timeout and
/// spurious retransmissions exhaust the retry budget (`RetryExcErr`) even with no loss at all.
/// Seed 2721 (found in a 20 000-seed hunt): the fabric duplicates a REQ and holds the copy
/// until after its connection was established and disconnected. The passive CM dropped the
/// REQ's identity on entering time-wait, as Linux's does, so the copy reads as a new request;
/// the simulator's listener must refuse it as a program whose connection is gone would,
/// where the workload used to call it a divergence ("an unexpected request").
#[test]
fn a_duplicate_req_that_outlives_its_connection_is_refused() {
    let r = run_seed(2721).unwrap_or_else(|f| panic!("{f}"));
    let cm = r.cm.expect("seed 2721 runs CM handshakes");
    assert!(cm.passed(), "{cm:?}");
    assert_eq!(cm.established, cm.connections);
}

#[test]
fn many_qps_on_a_slow_link() {
    let seeds = env_u64("SOFTRDMA_SLOW_LINK_SEEDS").unwrap_or(100);
    let started = WallClock::now();
    let mut failures = Vec::new();
    for qps in [16, 64] {
        for loss in [0.0, 0.01] {
            for seed in 1..=seeds {
                let wl = WorkloadConfig {
                    qps_per_pair: qps,
                    window: 64,
                    recv_depth: 64,
                    ..WorkloadConfig::new(seed, 1500).with_mtu(Mtu::Mtu4096)
                };
                let link = LinkConfig {
                    delay: Duration::from_micros(20),
                    bandwidth_bps: 1_000_000_000,
                    loss,
                    ..LinkConfig::IDEAL
                };
                let cfg = RunConfig::uniform(wl, link, Duration::from_secs(10));
                let r = run(&cfg, None).expect("setup");
                if !r.passed() {
                    eprintln!("qps {qps} loss {loss} seed {seed}: {:?}", r.first_failure());
                    failures.push((qps, loss, seed));
                }
            }
        }
    }
    eprintln!("{} slow-link runs in {:.1?}", 4 * seeds, started.elapsed());
    assert!(
        failures.is_empty(),
        "failing (qps, loss, seed): {failures:?}"
    );
}
