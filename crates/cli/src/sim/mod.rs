//! `softrdma sim`: a randomized RC workload between simulated nodes over a faulty fabric,
//! checked against a reference model (see `softrdma_sim::workload`), with UD and UC traffic
//! beside it on request (`--ud`, `--uc`; see `softrdma_sim::datagrams`).
//!
//! Faults (`--loss`, `--dup`, `--reorder`, `--corrupt`) apply to every link in both directions
//! for the whole run; when the workload is done, or the safety bound is hit, the network heals
//! and whatever is outstanding must complete within a liveness bound. Everything is virtual
//! time, so a run takes as long as its events take to compute, and one seed always replays
//! the same run.
//!
//! Memory: buffers are sparse, so a QP end costs about 7 KB plus the pages its traffic
//! touches (`softrdma_sim::workload::MemoryEstimate`). The estimate is printed first; a run
//! whose estimate exceeds the memory available (`MemAvailable`, or `--max-memory`) is refused
//! before anything is allocated.
//!
//! Output: a few summary lines; with `--json` the last line is one JSON object, whose
//! `completions_by_status` maps status names (`success`, `remote_access_error`,
//! `wr_flush_error`, `rnr_retry_exceeded_error`, `retry_exceeded_error`, …) to counts. Exit
//! status: 0 when every op completed as the model predicts — successfully, or with
//! `--errors` the predicted failures — and the model agrees; 1 otherwise (the seed and the
//! first divergence are printed); 2 when the run could not be set up (bad arguments, capture
//! file not writable, not enough memory).

pub(crate) mod incast;

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant as WallClock;

use clap::Args as ClapArgs;
use softrdma_proto::{Duration, Mtu};
use softrdma_sim::datagrams::DatagramConfig;
use softrdma_sim::errors::ErrorConfig;
use softrdma_sim::link::LinkConfig;
use softrdma_sim::swarm::{run, RunConfig, RunReport, SEED_ENV};
use softrdma_sim::workload::{MemoryEstimate, WorkloadConfig};

/// Virtual time the faulty phase may last at most (the workload normally finishes first).
const SAFETY_BOUND: Duration = Duration::from_secs(600);

/// `softrdma sim`'s experiments besides the default workload.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Experiment {
    /// Many senders to one receiver across switches, with DCQCN or none, PFC or none: the
    /// bottleneck's utilization, fairness, queue, drops, pauses, CNPs and retransmissions.
    ///
    /// Exit status: 0 when all data arrived exactly once and in order, 1 otherwise, 2 on
    /// bad arguments.
    Incast(incast::Args),
}

/// Arguments of `softrdma sim`.
#[derive(Debug, ClapArgs)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Args {
    /// An experiment to run instead of the workload.
    #[command(subcommand)]
    experiment: Option<Experiment>,
    /// Seed of every random choice: data, op mix, sizes, PSNs, faults.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated nodes (every pair is connected).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(2..=250))]
    nodes: u16,
    /// RC connections per pair of nodes (both ends post work).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    qps: u16,
    /// Work requests to post in total (0..1000000000).
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(..=1_000_000_000))]
    ops: u64,
    /// UD SENDs to post besides (every node to every other, and to a multicast group with
    /// three or more nodes); they may be lost, never corrupted.
    #[arg(long, default_value_t = 0)]
    ud: u64,
    /// UC operations (SEND, SEND and WRITE with immediate) to post besides, on one UC
    /// connection per node pair; they may be lost, never corrupted, duplicated or reordered.
    #[arg(long, default_value_t = 0)]
    uc: u64,
    /// Share of failing operations (0..1): this many of `--ops` more are posted, each on a
    /// connection of its own, each failing as the model predicts (wrong rkey, out of bounds,
    /// missing right, deregistered region, RNR retries or transport retries exhausted), with
    /// the work around it completing or flushing (see `softrdma_sim::errors`).
    #[arg(long, default_value_t = 0.0, value_parser = crate::limits::probability)]
    errors: f64,
    /// Probability that a datagram is lost (per link traversal).
    #[arg(long, default_value_t = 0.0, value_parser = crate::limits::probability)]
    loss: f64,
    /// Probability that a datagram is duplicated.
    #[arg(long, default_value_t = 0.0, value_parser = crate::limits::probability)]
    dup: f64,
    /// Probability that a datagram is delayed by up to 20 µs extra, so later ones overtake it.
    #[arg(long, default_value_t = 0.0, value_parser = crate::limits::probability)]
    reorder: f64,
    /// Probability that one ICRC-covered bit of a datagram is flipped.
    #[arg(long, default_value_t = 0.0, value_parser = crate::limits::probability)]
    corrupt: f64,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 1024, value_parser = mtu)]
    mtu: u32,
    /// One-way link delay in microseconds (0..1000000).
    #[arg(long, default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(..=1_000_000))]
    delay_us: u64,
    /// Link rate in Gb/s (0 = infinite; at most 100000).
    #[arg(long, default_value_t = 25,
          value_parser = clap::value_parser!(u64).range(..=100_000))]
    bandwidth_gbps: u64,
    /// Most work requests each QP keeps outstanding.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    window: u16,
    /// Responders drop requests that arrive after a lost one, as Linux rxe does (IBTA
    /// C9-92), instead of keeping them for when it comes: requesters fall back to go-back-N.
    #[arg(long)]
    rxe_responders: bool,
    /// The chance (0..1) that a datagram is received into the direct placement plan of
    /// another QP than its engine expects: stray bytes land in RDMA WRITE targets, which
    /// the engine must sort out (and the reference model finds if it does not).
    #[arg(long, default_value_t = 0.0, value_parser = crate::limits::probability)]
    mispredict: f64,
    /// Write every datagram that crossed the fabric to this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// End the output with one JSON object.
    #[arg(long)]
    json: bool,
    /// Refuse runs estimated to need more than this many MiB (default: the memory the system
    /// has available, `MemAvailable`).
    #[arg(long, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    max_memory: Option<u64>,
}

/// The memory the system can give this process without swapping (`MemAvailable`), if known.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

const MIB: u64 = 1 << 20;

/// This process's peak resident set size (`VmHWM`), if the system says.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The estimate's line: `memory: estimated 331 MiB for 20022 QP ends (...)`.
fn estimate_line(e: &MemoryEstimate) -> String {
    format!(
        "memory: estimated {} MiB for {} QP ends ({} MiB fixed, {} MiB in flight, {} MiB of written target pages)",
        e.total().div_ceil(MIB),
        e.qp_ends,
        e.fixed.div_ceil(MIB),
        e.in_flight.div_ceil(MIB),
        e.written.div_ceil(MIB)
    )
}

fn mtu(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|e| format!("{e}"))?;
    Mtu::from_bytes(v)
        .map(|_| v)
        .ok_or_else(|| format!("{v} is not a path MTU (256, 512, 1024, 2048, 4096)"))
}

impl Args {
    fn run_config(&self) -> RunConfig {
        let mtu = Mtu::from_bytes(self.mtu).unwrap_or(Mtu::Mtu1024);
        let workload = WorkloadConfig {
            nodes: usize::from(self.nodes),
            qps_per_pair: usize::from(self.qps),
            window: usize::from(self.window),
            recv_depth: usize::from(self.window),
            ..WorkloadConfig::new(self.seed, self.ops).with_mtu(mtu)
        };
        let link = LinkConfig {
            delay: Duration::from_micros(self.delay_us),
            bandwidth_bps: self.bandwidth_gbps.saturating_mul(1_000_000_000),
            loss: self.loss,
            duplicate: self.dup,
            reorder: self.reorder,
            reorder_jitter: Duration::from_micros(20),
            corrupt: self.corrupt,
        };
        let datagrams = (self.ud > 0 || self.uc > 0).then(|| DatagramConfig {
            mtu,
            window: usize::from(self.window),
            recv_depth: usize::from(self.window),
            ..DatagramConfig::new(self.seed, usize::from(self.nodes), self.ud, self.uc)
        });
        let scenarios = (self.errors * self.ops as f64).round() as u64;
        let errors = (scenarios > 0).then(|| ErrorConfig {
            seed: self.seed,
            nodes: usize::from(self.nodes),
            scenarios,
            lossy: self.loss > 0.0 || self.corrupt > 0.0,
            mtu,
            only: None,
        });
        RunConfig {
            datagrams,
            errors,
            cm: None,
            rxe_like_responders: self.rxe_responders,
            mispredict: self.mispredict,
            ..RunConfig::uniform(workload, link, SAFETY_BOUND)
        }
    }
}

/// Runs the subcommand and maps the outcome to the documented exit status.
pub(crate) fn run_cmd(args: &Args) -> ExitCode {
    if let Some(Experiment::Incast(a)) = &args.experiment {
        return incast::run(a);
    }
    let capture: Option<Box<dyn Write>> = match &args.pcap {
        None => None,
        Some(path) => match File::create(path) {
            Ok(f) => Some(Box::new(BufWriter::new(f))),
            Err(e) => {
                eprintln!("softrdma sim: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let config = args.run_config();
    let estimate = config.workload.memory_estimate();
    let limit = args
        .max_memory
        .map(|m| (m * MIB, "--max-memory"))
        .or_else(|| available_memory().map(|b| (b, "available")));
    if let Some((limit, what)) = limit {
        if estimate.total() > limit {
            eprintln!(
                "softrdma sim: error: this run needs an estimated {} MiB, more than the {} MiB {what} \
                 ({} QP ends: {} nodes, {} QPs per pair, {} ops); use fewer --nodes, --qps or --ops",
                estimate.total().div_ceil(MIB),
                limit / MIB,
                estimate.qp_ends,
                args.nodes,
                args.qps,
                args.ops
            );
            return ExitCode::from(2);
        }
    }
    {
        let mut out = io::stdout().lock();
        let _ = writeln!(out, "{}", estimate_line(&estimate));
        let _ = out.flush();
    }
    let started = WallClock::now();
    let report = match run(&config, capture) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("softrdma sim: {e}");
            return ExitCode::from(2);
        }
    };
    let wall = started.elapsed();
    let mut out = io::stdout().lock();
    let text = render(args, &report, wall.as_secs_f64());
    // A closed pipe (`| head`) is not the simulation's failure: the verdict is the exit code.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn render(args: &Args, r: &RunReport, wall_s: f64) -> String {
    let w = &r.workload;
    let f = &r.fabric;
    let e = &r.engines;
    let virtual_us = r.end.as_nanos() / 1_000;
    let ops_per_s = if wall_s > 0.0 {
        w.ops_completed as f64 / wall_s
    } else {
        0.0
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "softrdma sim: seed {} | {} nodes, {} QPs per pair, {} ops, mtu {} | loss {} dup {} reorder {} corrupt {}",
        r.seed, args.nodes, args.qps, args.ops, args.mtu, args.loss, args.dup, args.reorder, args.corrupt
    );
    let kinds: Vec<String> = w
        .posted_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(
        s,
        "ops: posted {}, completed {}, ok {}, mismatches {}, recvs {} ({})",
        w.ops_posted,
        w.ops_completed,
        w.ops_ok,
        w.mismatches,
        w.recvs_completed,
        kinds.join(", ")
    );
    if let Some(er) = &r.errors {
        let kinds: Vec<String> = er
            .scenarios_by_kind
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let statuses: Vec<String> = er
            .completions_by_status
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            s,
            "errors: {} ({}), completions: {}, mismatches {}",
            er.scenarios_by_kind.values().sum::<u64>(),
            kinds.join(", "),
            statuses.join(", "),
            er.mismatches
        );
    }
    if let Some(d) = &r.datagrams {
        let _ = writeln!(
            s,
            "ud: sent {}, delivered {}, lost {}, duplicates {} | multicast: sent {}, deliveries {} of {} | uc: sent {}, delivered {}, lost {} | mismatches {}",
            d.ud_sent,
            d.ud_delivered,
            d.ud_lost(),
            d.ud_duplicates,
            d.mcast_sent,
            d.mcast_delivered,
            d.mcast_expected,
            d.uc_sent,
            d.uc_delivered,
            d.uc_lost(),
            d.mismatches
        );
    }
    let _ = writeln!(
        s,
        "fabric: sent {}, delivered {}, dropped {}, duplicated {}, corrupted {}, reordered {}, \
         placed {}, placement misses {}",
        f.packets_sent,
        f.packets_delivered,
        f.packets_dropped,
        f.packets_duplicated,
        f.packets_corrupted,
        f.packets_reordered,
        f.packets_placed,
        f.placement_misses
    );
    let _ = writeln!(s, "engines: icrc_drops={} {e}", e.icrc_drops);
    let _ = writeln!(
        s,
        "time: virtual {virtual_us} us (healed at {} us), wall {:.3} s, {:.0} simulated ops/s",
        r.healed_at.as_nanos() / 1_000,
        wall_s,
        ops_per_s
    );
    let rss = peak_rss();
    if let Some(b) = rss {
        let _ = writeln!(s, "memory: peak RSS {} MiB", b.div_ceil(MIB));
    }
    let failure = r.first_failure();
    match &failure {
        None => {
            let _ = writeln!(s, "PASS");
        }
        Some(what) => {
            let _ = writeln!(s, "FAIL {SEED_ENV}={}", r.seed);
            let _ = writeln!(s, "first divergence: {what}");
            for err in &w.error_completions {
                let _ = writeln!(s, "  error completion {err}");
            }
        }
    }
    if args.json {
        let mut fields: Vec<(&str, String)> = vec![
            ("seed", r.seed.to_string()),
            ("passed", r.passed().to_string()),
            ("ops_posted", w.ops_posted.to_string()),
            ("ops_completed", w.ops_completed.to_string()),
            ("ops_ok", w.ops_ok.to_string()),
            (
                "mismatches",
                (w.mismatches + r.errors.as_ref().map_or(0, |e| e.mismatches)).to_string(),
            ),
            (
                "completions_by_status",
                format!(
                    "{{{}}}",
                    r.completions_by_status()
                        .iter()
                        .map(|(k, v)| format!("\"{k}\":{v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ),
            ("recvs_completed", w.recvs_completed.to_string()),
            ("retransmissions", e.retransmissions.to_string()),
            ("retransmit_timeouts", e.retransmit_timeouts.to_string()),
            ("naks_sent", e.naks_sent.to_string()),
            ("packets_sent", f.packets_sent.to_string()),
            ("packets_delivered", f.packets_delivered.to_string()),
            ("packets_dropped", f.packets_dropped.to_string()),
            ("packets_duplicated", f.packets_duplicated.to_string()),
            ("packets_corrupted", f.packets_corrupted.to_string()),
            ("packets_reordered", f.packets_reordered.to_string()),
            ("packets_placed", f.packets_placed.to_string()),
            ("placement_misses", f.placement_misses.to_string()),
            ("icrc_drops", e.icrc_drops.to_string()),
            (
                "peak_rss_mib",
                rss.map_or_else(|| "null".to_string(), |b| b.div_ceil(MIB).to_string()),
            ),
            (
                "memory_estimate_mib",
                args.run_config()
                    .workload
                    .memory_estimate()
                    .total()
                    .div_ceil(MIB)
                    .to_string(),
            ),
            ("virtual_time_us", virtual_us.to_string()),
            ("wall_ms", format!("{:.1}", wall_s * 1e3)),
            (
                "first_divergence",
                failure.map_or_else(|| "null".to_string(), |d| json_string(&d)),
            ),
        ];
        if let Some(d) = &r.datagrams {
            // After the engine counters, before the wall-clock fields.
            let at = fields
                .iter()
                .position(|(k, _)| *k == "virtual_time_us")
                .unwrap_or(fields.len());
            let datagram_fields = [
                ("ud_sent", d.ud_sent.to_string()),
                ("ud_delivered", d.ud_delivered.to_string()),
                ("ud_lost", d.ud_lost().to_string()),
                ("ud_duplicates", d.ud_duplicates.to_string()),
                ("mcast_sent", d.mcast_sent.to_string()),
                ("mcast_expected", d.mcast_expected.to_string()),
                ("mcast_delivered", d.mcast_delivered.to_string()),
                ("uc_sent", d.uc_sent.to_string()),
                ("uc_delivered", d.uc_delivered.to_string()),
                ("uc_lost", d.uc_lost().to_string()),
                ("datagram_mismatches", d.mismatches.to_string()),
            ];
            fields.splice(at..at, datagram_fields);
        }
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        let _ = writeln!(s, "{{{}}}", body.join(","));
    }
    s
}

/// A JSON string literal (RFC 8259 escaping).
fn json_string(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", u32::from(c));
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_json_string() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    #[test]
    fn test_parsers() {
        assert_eq!(crate::limits::probability("0.5"), Ok(0.5));
        assert!(crate::limits::probability("1.5").is_err());
        assert!(crate::limits::probability("-0.1").is_err());
        assert_eq!(mtu("4096"), Ok(4096));
        assert!(mtu("1500").is_err());
    }
}
