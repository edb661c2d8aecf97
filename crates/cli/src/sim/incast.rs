//! `softrdma sim incast`: many senders to one receiver across simulated switches, with DCQCN,
//! TIMELY or no congestion control, with or without PFC (see `softrdma_sim::incast` and
//! `softrdma_sim::switch`), the real engines on both ends.
//!
//! The defaults follow the DCQCN paper's setting — 40 Gb/s links, 1 µs of propagation each,
//! a 4 MiB buffer per switch port, `Kmin` 5 KB, `Kmax` 200 KB, CNPs at most every 50 µs per
//! QP, DCQCN's reaction point with the paper's parameters (g = 1/256, 55 µs timers, 10 MB
//! byte counter, F = 5, 40 Mb/s additive and 100 Mb/s hyper increase) — except `Pmax`, 20 %
//! rather than the paper's 1 %: with 1 % the 16-sender queue settles just above `Kmax` here
//! (`--pmax 0.01` shows it). Senders keep eight 64 KiB messages posted; 40 ms of virtual time.
//! Utilization, fairness and the queue's p99 are measured over the second half of the run
//! (the steady state); the queue's maximum over all of it.
//!
//! Output: a summary, or with `--json` one line of JSON; `--plot FILE.svg` draws each
//! sender's rate and the bottleneck queue over time. Exit status: 0 when all data arrived
//! exactly once and in order (`mismatches` 0), 1 otherwise, 2 on bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant as WallClock;

use clap::{Args as ClapArgs, ValueEnum};
use plotters::prelude::*;
use softrdma_proto::cc::DcqcnParams;
use softrdma_proto::{Duration, Mtu};
use softrdma_sim::incast::{run_incast_captured, IncastCc, IncastConfig, IncastReport};
use softrdma_sim::switch::{Red, Topology};

/// Congestion control of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Cc {
    /// DCQCN at every QP, CNPs from the receiver, ECN marking at the switches.
    Dcqcn,
    /// None: senders send at will, switches do not mark.
    None,
    /// TIMELY at every QP: the rate follows the round trips' gradient; switches do not
    /// mark.
    Timely,
}

/// Topology of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Topo {
    /// Every host on one switch.
    Star,
    /// Four leaves (hosts spread over them), two spines.
    LeafSpine,
}

/// Arguments of `softrdma sim incast`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// Senders (the receiver is one more host).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=200))]
    senders: u16,
    /// Congestion control.
    #[arg(long, value_enum, default_value = "dcqcn")]
    cc: Cc,
    /// PFC at the switches: pause upstream above 96 KiB held per ingress, resume below 64.
    #[arg(long)]
    pfc: bool,
    /// Topology.
    #[arg(long, value_enum, default_value = "star")]
    topology: Topo,
    /// Virtual time the senders send, milliseconds.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    duration_ms: u64,
    /// Seed (ECN marking decisions, PSNs).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Link rate, Gb/s.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=1000))]
    link_gbps: u64,
    /// Propagation delay of each link, microseconds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    delay_us: u64,
    /// Buffer of each switch port, KiB.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(16..=1 << 20))]
    buffer_kb: u64,
    /// ECN marking starts at this queue depth, KB (1000 bytes).
    #[arg(long, default_value_t = 5)]
    kmin_kb: u64,
    /// Every ECN-capable packet is marked from this depth on, KB.
    #[arg(long, default_value_t = 200)]
    kmax_kb: u64,
    /// Marking probability just below Kmax (0..1).
    #[arg(long, default_value_t = 0.2, value_parser = crate::limits::probability)]
    pmax: f64,
    /// DCQCN: additive increase step, Mb/s (R_AI).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    rai_mbps: u64,
    /// DCQCN: hyper increase step, Mb/s (R_HAI).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    rhai_mbps: u64,
    /// DCQCN: rate-increase timer, microseconds (T).
    #[arg(long, default_value_t = 55, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    increase_timer_us: u64,
    /// DCQCN: α-update timer, microseconds (K).
    #[arg(long, default_value_t = 55, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    alpha_timer_us: u64,
    /// DCQCN: byte counter, KiB (B).
    #[arg(long, default_value_t = 10240, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    byte_counter_kb: u64,
    /// DCQCN: g = 1/G, the α estimate's gain.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    g_denominator: u32,
    /// DCQCN: fast-recovery steps (F).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    fast_recovery: u32,
    /// DCQCN: the lowest rate a cut goes to, Mb/s.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    min_rate_mbps: u64,
    /// The receiver's interval between CNPs per QP, microseconds.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    cnp_interval_us: u64,
    /// Message size, KiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    message_kb: u32,
    /// Messages each sender keeps posted.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    window: u32,
    /// Print one line of JSON.
    #[arg(long)]
    json: bool,
    /// Draw each sender's rate and the bottleneck queue over time into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Write every datagram as it reaches its host (CE marks and CNPs included) to this pcap
    /// file (large: keep --duration-ms short).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
}

impl Args {
    fn config(&self) -> Result<IncastConfig, String> {
        if self.kmin_kb >= self.kmax_kb {
            return Err("--kmin-kb must be below --kmax-kb".into());
        }
        let senders = usize::from(self.senders);
        Ok(IncastConfig {
            senders,
            cc: match self.cc {
                Cc::Dcqcn => IncastCc::Dcqcn,
                Cc::None => IncastCc::None,
                Cc::Timely => IncastCc::Timely,
            },
            pfc: self.pfc,
            topology: match self.topology {
                Topo::Star => Topology::Star,
                Topo::LeafSpine => Topology::LeafSpine {
                    leaves: 4.min(senders + 1),
                    spines: 2,
                },
            },
            duration: Duration::from_millis(self.duration_ms),
            seed: self.seed,
            link_bps: self.link_gbps * 1_000_000_000,
            delay: Duration::from_micros(self.delay_us),
            buffer_bytes: self.buffer_kb * 1024,
            red: Red {
                kmin: self.kmin_kb * 1000,
                kmax: self.kmax_kb * 1000,
                pmax: self.pmax,
            },
            message_bytes: self.message_kb * 1024,
            dcqcn_params: Some(DcqcnParams {
                line_rate_bps: self.link_gbps * 1_000_000_000,
                min_rate_bps: self.min_rate_mbps * 1_000_000,
                g_denominator: self.g_denominator,
                alpha_timer: Duration::from_micros(self.alpha_timer_us),
                increase_timer: Duration::from_micros(self.increase_timer_us),
                byte_counter: self.byte_counter_kb * 1024,
                fast_recovery_steps: self.fast_recovery,
                ai_rate_bps: self.rai_mbps * 1_000_000,
                hai_rate_bps: self.rhai_mbps * 1_000_000,
            }),
            cnp_interval: Duration::from_micros(self.cnp_interval_us),
            window: self.window,
            mtu: Mtu::Mtu4096,
            ..IncastConfig::new(senders)
        })
    }
}

/// Runs `softrdma sim incast`.
pub(crate) fn run(args: &Args) -> ExitCode {
    let cfg = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("softrdma sim incast: error: {e}");
            return ExitCode::from(2);
        }
    };
    let capture: Option<Box<dyn std::io::Write>> = match &args.pcap {
        None => None,
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => Some(Box::new(std::io::BufWriter::new(f))),
            Err(e) => {
                eprintln!("softrdma sim incast: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let started = WallClock::now();
    let report = match run_incast_captured(&cfg, capture) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("softrdma sim incast: {e}");
            return ExitCode::FAILURE;
        }
    };
    let wall = started.elapsed().as_secs_f64();
    if let Some(path) = &args.plot {
        if let Err(e) = plot(path, args, &report) {
            eprintln!("softrdma sim incast: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if args.json {
        println!("{}", json(args, &report));
    } else {
        print!("{}", summary(args, &report, wall));
    }
    if report.mismatches == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn names(args: &Args) -> (&'static str, &'static str) {
    let cc = match args.cc {
        Cc::Dcqcn => "dcqcn",
        Cc::None => "none",
        Cc::Timely => "timely",
    };
    let topo = match args.topology {
        Topo::Star => "star",
        Topo::LeafSpine => "leaf-spine",
    };
    (cc, topo)
}

/// One JSON object; floats with fixed decimals so one seed prints the same bytes.
fn json(args: &Args, r: &IncastReport) -> String {
    let (cc, topo) = names(args);
    format!(
        "{{\"senders\":{},\"cc\":\"{cc}\",\"pfc\":{},\"topology\":\"{topo}\",\"seed\":{},\
         \"duration_ms\":{},\"utilization\":{:.4},\"jain\":{:.4},\"queue_p99_bytes\":{},\
         \"queue_max_bytes\":{},\"drops\":{},\"pause_frames\":{},\"ecn_marks\":{},\"cnps\":{},\
         \"retransmissions\":{},\"messages\":{},\"fct_p99_us\":{:.1},\"goodput_gbps\":{:.3},\
         \"mismatches\":{}}}",
        args.senders,
        args.pfc,
        args.seed,
        args.duration_ms,
        r.utilization,
        r.jain,
        r.queue_p99_bytes,
        r.queue_max_bytes,
        r.drops,
        r.pause_frames,
        r.ecn_marks,
        r.cnps,
        r.retransmissions,
        r.messages,
        r.fct_p99_us,
        r.goodput_gbps,
        r.mismatches
    )
}

fn summary(args: &Args, r: &IncastReport, wall: f64) -> String {
    let (cc, topo) = names(args);
    format!(
        "incast: {} senders -> 1, cc {cc}, pfc {}, {topo}, {} ms virtual ({wall:.2} s)\n\
         bottleneck: utilization {:.3} (second half), queue p99 {} B (second half), max {} B\n\
         fairness: Jain {:.4} (second half), goodput {:.2} Gb/s, {} messages, FCT p99 {:.1} us\n\
         congestion: {} drops, {} pause frames, {} ECN marks, {} CNPs, {} retransmissions\n\
         data: {} mismatches\n",
        args.senders,
        if args.pfc { "on" } else { "off" },
        args.duration_ms,
        r.utilization,
        r.queue_p99_bytes,
        r.queue_max_bytes,
        r.jain,
        r.goodput_gbps,
        r.messages,
        r.fct_p99_us,
        r.drops,
        r.pause_frames,
        r.ecn_marks,
        r.cnps,
        r.retransmissions,
        r.mismatches
    )
}

/// Two panels: each sender's rate (Gb/s) and the bottleneck queue (KB), over time (ms).
fn plot(path: &PathBuf, args: &Args, r: &IncastReport) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1000, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(400);
    let t_max = r.samples.last().map_or(1.0, |s| s.t_us / 1e3).max(1e-3);
    let rate_max = r
        .samples
        .iter()
        .flat_map(|s| s.rates_gbps.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.05;
    let (cc, topo) = names(args);
    let mut rates = ChartBuilder::on(&top)
        .caption(
            format!(
                "incast {}:1, {cc}{}, {topo}: per-sender rate",
                args.senders,
                if args.pfc { " + PFC" } else { "" }
            ),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_max, 0.0..rate_max)?;
    rates
        .configure_mesh()
        .x_desc("time (ms)")
        .y_desc("rate (Gb/s)")
        .draw()?;
    let senders = r.samples.first().map_or(0, |s| s.rates_gbps.len());
    for k in 0..senders {
        let color = Palette99::pick(k).to_rgba();
        rates.draw_series(LineSeries::new(
            r.samples.iter().map(|s| (s.t_us / 1e3, s.rates_gbps[k])),
            color.stroke_width(1),
        ))?;
    }
    let q_max = r
        .samples
        .iter()
        .map(|s| s.queue_bytes)
        .max()
        .unwrap_or(0)
        .max(args.kmax_kb * 1000) as f64
        / 1e3
        * 1.05;
    let mut queue = ChartBuilder::on(&bottom)
        .caption("bottleneck queue", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_max, 0.0..q_max)?;
    queue
        .configure_mesh()
        .x_desc("time (ms)")
        .y_desc("queue (KB)")
        .draw()?;
    queue
        .draw_series(LineSeries::new(
            r.samples
                .iter()
                .map(|s| (s.t_us / 1e3, s.queue_bytes as f64 / 1e3)),
            BLUE.stroke_width(1),
        ))?
        .label("queue")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
    if args.cc == Cc::Dcqcn {
        let kmax = args.kmax_kb as f64;
        queue
            .draw_series(LineSeries::new(
                [(0.0, kmax), (t_max, kmax)],
                RED.stroke_width(1),
            ))?
            .label("Kmax")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
    }
    queue
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    root.present()?;
    Ok(())
}
