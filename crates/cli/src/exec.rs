//! `softrdma exec [--ip ADDR] -- PROGRAM ARGS…`: runs an unmodified libibverbs program on
//! softrdma.
//!
//! The program runs with `LD_LIBRARY_PATH` starting with the directory of the `softrdma` binary, where
//! `cargo build --release --workspace` puts `libibverbs.so.1` and the provider stubs, with
//! `SOFTRDMA_IP` set to the device's address, and with `LD_PRELOAD` starting with
//! `libsoftrdma-devnode.so` from that directory: the device node
//! `/dev/infiniband/softrdma0` that UCX requires of a device before it uses it (see
//! `crates/ibverbs/preload/devnode.c`; it answers `stat`/`access` for that one path as for
//! `/dev/null` and leaves every other path alone), and the device's
//! `/sys/class/infiniband/softrdma0`, which the preload answers for from a directory exec
//! writes (see `sysfs.rs`: the netdev rdma-core's tests look for, the GID types UCX reads).
//! Programs of one user share an address (see
//! `softrdma::DeviceConfig::share_address`). Before the program runs, the address's UDP port
//! 4791 is probed: if something that does not share it holds it (the kernel's rdma_rxe,
//! another user's program), `exec` says so instead of letting the program fail later.
//!
//! `exec` stays as the program's parent and ends as it ends (its exit status, or the signal
//! it died of; signals sent to `exec` are passed on, and killing `exec` kills the program):
//! when the program ends, however it ends, `exec` sends what the connection managers of
//! dead processes left to be said — the DREQ of each rdma_cm connection still open, a REJ
//! for one in its handshake — so that their peers get `RDMA_CM_EVENT_DISCONNECTED` at once,
//! as the kernel's CM tells them when a process dies (see `softrdma::farewell`).
//!
//! `--loss`, `--dup`, `--reorder`, `--delay-us`, `--corrupt` and `--seed` make the device
//! inject those faults into its own traffic (`SOFTRDMA_FAULTS`, see `softrdma::FaultConfig`),
//! and `--counters` has it print its counters when the program closes it
//! (`SOFTRDMA_COUNTERS`).

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use clap::Args as ClapArgs;
use softrdma::FaultConfig;

/// The library that gives softrdma's device its node in `/dev/infiniband` (see the module
/// docs), built next to `libibverbs.so.1`.
const DEVNODE_LIB: &str = "libsoftrdma-devnode.so";

/// Arguments of `softrdma exec`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// The device's IP address (default: the host's outgoing address, or 127.0.0.1). Any
    /// number of programs of one user may share an address, as they share rxe's.
    #[arg(long, value_name = "ADDR")]
    ip: Option<IpAddr>,
    /// Directory holding libibverbs.so.1 (default: the directory of this binary).
    #[arg(long, value_name = "DIR")]
    lib_dir: Option<PathBuf>,
    /// Fault injection: probability that a datagram the device sends, or one it receives,
    /// is lost (each path on its own).
    #[arg(long, value_name = "P", value_parser = probability, help_heading = "Faults")]
    loss: Option<f64>,
    /// Probability that a datagram is delivered twice.
    #[arg(long, value_name = "P", value_parser = probability, help_heading = "Faults")]
    dup: Option<f64>,
    /// Probability that a datagram is held back by up to 100 µs, so that later ones overtake
    /// it.
    #[arg(long, value_name = "P", value_parser = probability, help_heading = "Faults")]
    reorder: Option<f64>,
    /// Delay added to every datagram, each path (0..=1000000 µs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=softrdma::MAX_DELAY_US), help_heading = "Faults")]
    delay_us: Option<u64>,
    /// Probability that one ICRC-covered bit of a datagram is flipped (the receiver drops it).
    #[arg(long, value_name = "P", value_parser = probability, help_heading = "Faults")]
    corrupt: Option<f64>,
    /// Seed of the fault draws: the same seed and the same sequence of packets give the
    /// same faults.
    #[arg(long, value_name = "S", help_heading = "Faults")]
    seed: Option<u64>,
    /// Print the device's non-zero counters to stderr when the program closes it
    /// (retransmissions, drops by reason, the faults injected).
    #[arg(long)]
    counters: bool,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    command: Vec<OsString>,
}

/// A probability: a number in 0..=1.
fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{s} is not a probability (0..=1)"))
    }
}

impl Args {
    /// The faults the flags ask for.
    fn faults(&self) -> FaultConfig {
        let none = FaultConfig::NONE;
        FaultConfig {
            loss: self.loss.unwrap_or(none.loss),
            duplicate: self.dup.unwrap_or(none.duplicate),
            reorder: self.reorder.unwrap_or(none.reorder),
            delay: self
                .delay_us
                .map_or(none.delay, std::time::Duration::from_micros),
            corrupt: self.corrupt.unwrap_or(none.corrupt),
            seed: self.seed.unwrap_or(none.seed),
        }
    }
}

/// Why the device's address cannot be used, if it cannot.
fn probe_port(ip: IpAddr) -> Result<(), String> {
    match softrdma::Device::check_address(ip, 4791) {
        Ok(()) => Ok(()),
        Err(e) if is_addr_in_use(&e) => Err(format!(
            "UDP port 4791 on {ip} is held by something that does not share it (the kernel's \
             rdma_rxe, another user's program, or a softrdma device opened alone); give this \
             program another address with --ip, e.g. 127.0.0.2"
        )),
        Err(e) => Err(format!("cannot use {ip}:4791 for the device: {e}")),
    }
}

/// Whether `e` comes from `EADDRINUSE`.
fn is_addr_in_use(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::AddrInUse;
        }
        cause = c.source();
    }
    false
}

/// Runs `softrdma exec`.
pub(crate) fn run(args: &Args) -> ExitCode {
    let lib_dir = match &args.lib_dir {
        Some(d) => d.clone(),
        None => match std::env::current_exe() {
            Ok(exe) => exe.parent().map(PathBuf::from).unwrap_or_default(),
            Err(e) => {
                eprintln!("softrdma exec: cannot locate this binary: {e}");
                return ExitCode::from(2);
            }
        },
    };
    if !lib_dir.join("libibverbs.so.1").exists() {
        eprintln!(
            "softrdma exec: {} has no libibverbs.so.1; build it with `cargo build --release \
             --workspace` (or give --lib-dir)",
            lib_dir.display()
        );
        return ExitCode::from(2);
    }
    let ip = args.ip.unwrap_or_else(|| {
        crate::route::local_ip_towards(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    });
    if let Err(msg) = probe_port(ip) {
        eprintln!("softrdma exec: {msg}");
        return ExitCode::FAILURE;
    }
    let mut path = OsString::from(lib_dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (program, rest) = args.command.split_first().expect("clap requires a program");
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env("LD_LIBRARY_PATH", path)
        .env("SOFTRDMA_IP", ip.to_string());
    let devnode = lib_dir.join(DEVNODE_LIB);
    if devnode.exists() {
        // ld.so takes LD_PRELOAD's entries separated by spaces or colons.
        let mut preload = OsString::from(devnode.as_os_str());
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
            preload.push(":");
            preload.push(old);
        }
        cmd.env("LD_PRELOAD", preload);
        match crate::sysfs::write(ip) {
            Ok(dir) => {
                cmd.env("SOFTRDMA_SYSFS", dir);
            }
            Err(e) => eprintln!(
                "softrdma exec: cannot write softrdma0's sysfs directory ({e}); programs that \
                 read /sys/class/infiniband/softrdma0 will not find it"
            ),
        }
    }
    let faults = args.faults();
    if !faults.is_none() {
        cmd.env(FaultConfig::ENV, faults.to_string());
    }
    if args.counters {
        cmd.env("SOFTRDMA_COUNTERS", "1");
    }
    match softrdma::farewell::run_and_speak(&mut cmd) {
        Ok(status) => softrdma::farewell::exit_as(status),
        Err(err) => {
            eprintln!(
                "softrdma exec: cannot run {}: {err}",
                program.to_string_lossy()
            );
            ExitCode::from(127)
        }
    }
}
