//! `softrdma nvmf-target`: an NVMe over Fabrics target (RDMA transport, RoCEv2) serving a
//! discovery controller and one NVM subsystem whose namespaces live in files or memory — a
//! disk Linux's `nvme connect -t rdma` (or `softrdma nvmf`) mounts, from any container,
//! without an RDMA NIC or root. The NVMe-oF logic is the `softrdma-nvmf` crate.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use softrdma::{Device, DeviceConfig};
use softrdma_nvmf::backend::{Backend, FileBackend, MemoryBackend};
use softrdma_nvmf::controller::{Limits, Namespace, Subsystem};
use softrdma_nvmf::transport::{Target, TargetConfig, NVMF_PORT};
use softrdma_nvmf::wire::fabrics::DISCOVERY_NQN;

/// The subsystem NQN when none is given.
pub(crate) const DEFAULT_NQN: &str = "nqn.2026-12.io.softrdma:disk";

/// Arguments of `softrdma nvmf-target`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// Address to listen on (default: the address this host sends from towards the outside,
    /// else 127.0.0.1).
    #[arg(long)]
    ip: Option<IpAddr>,
    /// Port (NVMe-oF's 4420 by default).
    #[arg(long, short = 'p', default_value_t = NVMF_PORT)]
    port: u16,
    /// The NVM subsystem's NQN.
    #[arg(long, default_value = DEFAULT_NQN)]
    nqn: String,
    /// A namespace in this file or block device (repeat for more namespaces; created or
    /// grown to --size when given).
    #[arg(long, value_name = "PATH")]
    file: Vec<PathBuf>,
    /// Namespace size (K, M, G, T suffixes, powers of 1024): of each memory namespace, or
    /// of each --file created or grown. Default 1G for memory namespaces.
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Memory namespaces to serve when there is no --file.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    namespaces: u32,
    /// Logical block size: 512 or 4096.
    #[arg(long, default_value_t = 512)]
    block_size: u64,
    /// Only these host NQNs may connect to the subsystem (repeat; default: any host).
    #[arg(long = "host-nqn", value_name = "NQN")]
    host_nqn: Vec<String>,
    /// I/O queues a controller may have.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024))]
    max_io_queues: u16,
    /// In-capsule data an I/O command may carry, bytes (0 to 65536, a multiple of 16).
    #[arg(long, default_value_t = 8192, value_parser = in_capsule)]
    in_capsule: u32,
    /// Answer with plain SENDs even when the host asks for remote invalidation (the host
    /// then invalidates its keys itself).
    #[arg(long)]
    no_remote_invalidate: bool,
    /// Write every RoCEv2 datagram of the device to this pcap file (`softrdma decode`).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Stop after this many seconds (default: serve until killed).
    #[arg(long, value_name = "SECS")]
    duration: Option<u64>,
    /// Print the target's counters every this many seconds.
    #[arg(long, value_name = "SECS")]
    stats_every: Option<u64>,
}

/// `64M`, `1G`, `4096`, `512k`: bytes.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, shift) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_lowercase() {
                'k' => 10,
                'm' => 20,
                'g' => 30,
                't' => 40,
                _ => return Err(format!("unknown suffix in {s:?}")),
            };
            (&s[..i], shift)
        }
        _ => (s, 0),
    };
    let n: u64 = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("too large: {s:?}"))
}

fn in_capsule(s: &str) -> Result<u32, String> {
    let n = parse_size(s)?;
    if n > 65536 || n % 16 != 0 {
        return Err("0 to 65536, a multiple of 16".into());
    }
    Ok(n as u32)
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 40 && b % (1 << 40) == 0 => format!("{} TiB", b >> 40),
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b => format!("{b} bytes"),
    }
}

pub(crate) fn run(args: &Args) -> ExitCode {
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma nvmf-target: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: &Args) -> Result<(), String> {
    let ip = args.ip.unwrap_or_else(|| {
        crate::route::local_ip_towards(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    });
    let mut namespaces = Vec::new();
    let mut describe = Vec::new();
    let backends: Vec<(Arc<dyn Backend>, String)> = if args.file.is_empty() {
        let size = args.size.unwrap_or(1 << 30);
        (0..args.namespaces)
            .map(|_| {
                (
                    Arc::new(MemoryBackend::new(size)) as Arc<dyn Backend>,
                    "memory".into(),
                )
            })
            .collect()
    } else {
        args.file
            .iter()
            .map(|p| {
                FileBackend::open(p, args.size)
                    .map(|b| (Arc::new(b) as Arc<dyn Backend>, p.display().to_string()))
                    .map_err(|e| format!("{}: {e}", p.display()))
            })
            .collect::<Result<_, _>>()?
    };
    for (i, (backend, what)) in backends.into_iter().enumerate() {
        let nsid = i as u32 + 1;
        let size = backend.size();
        let ns = Namespace::new(nsid, backend, args.block_size, &args.nqn)
            .map_err(|e| format!("namespace {nsid} ({what}): {e}"))?;
        describe.push(format!(
            "  namespace {nsid}: {} ({} blocks of {} bytes), {what}",
            human(size),
            ns.blocks(),
            ns.block_size()
        ));
        namespaces.push(Arc::new(ns));
    }
    let subsys =
        Subsystem::new(&args.nqn, namespaces, args.host_nqn.clone()).map_err(|e| e.to_string())?;
    let mut config = TargetConfig::new(SocketAddr::new(ip, args.port), vec![subsys]);
    config.limits = Limits {
        max_io_queues: args.max_io_queues,
        in_capsule_data: args.in_capsule,
        remote_invalidate: !args.no_remote_invalidate,
        ..Limits::default()
    };
    if let Some(pcap) = &args.pcap {
        let device = Device::open(DeviceConfig::new(ip).pcap(pcap))
            .map_err(|e| format!("device on {ip}: {e}"))?;
        config.device = Some(device);
    }
    let target = Target::start(config).map_err(|e| e.to_string())?;
    println!(
        "softrdma nvmf-target: listening on {} (rdma, RoCEv2)",
        target.local_addr()
    );
    println!("  discovery: {DISCOVERY_NQN}");
    println!("  subsystem: {}", args.nqn);
    for d in &describe {
        println!("{d}");
    }
    if args.host_nqn.is_empty() {
        println!("  hosts: any");
    } else {
        println!("  hosts: {}", args.host_nqn.join(", "));
    }
    println!(
        "connect with: nvme connect -t rdma -a {} -s {} -n {}",
        target.local_addr().ip(),
        target.local_addr().port(),
        args.nqn
    );
    let start = Instant::now();
    let mut last_stats = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        if args
            .duration
            .is_some_and(|d| start.elapsed() >= Duration::from_secs(d))
        {
            break;
        }
        if let Some(every) = args.stats_every {
            if last_stats.elapsed() >= Duration::from_secs(every.max(1)) {
                last_stats = Instant::now();
                println!("{:?}", target.stats());
            }
        }
    }
    let stats = target.stats();
    target.shutdown();
    println!(
        "softrdma nvmf-target: done: {} queues accepted, {} rejected, {} capsules, {} errors answered, {} transport errors, {} keep-alive expiries",
        stats.accepted,
        stats.rejected,
        stats.capsules,
        stats.errors_answered,
        stats.fatal_errors,
        stats.keep_alive_expired
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert!(parse_size("1x").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert!(in_capsule("100").is_err());
        assert_eq!(in_capsule("8k"), Ok(8192));
        assert_eq!(human(1 << 30), "1 GiB");
    }
}
