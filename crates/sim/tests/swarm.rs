//! The seeded swarm: many small workloads, each with faults drawn from its seed, each ending
//! in a healed phase where everything must complete. `SOFTRDMA_SEED=<n>` replays one seed
//! (and prints its full report).

use std::time::Instant as WallClock;

use softrdma_sim::swarm::{run_seed, run_seed_with_capture, seed_from_env, RunConfig};

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
    for seed in first..first.saturating_add(count) {
        match run_seed(seed) {
            Ok(r) => {
                totals.0 += r.workload.ops_ok;
                totals.1 += r.engines.retransmissions;
                totals.2 += r.engines.icrc_drops;
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
    assert!(
        failures.is_empty(),
        "failing seeds (replay with SOFTRDMA_SEED=<n>): {failures:?}"
    );
}
