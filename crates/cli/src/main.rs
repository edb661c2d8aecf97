//! `softrdma`: the command-line face of softrdma, RDMA in userspace over the real RoCEv2 wire
//! protocol.
//!
//! Each subcommand lives in its own module with an `Args` struct (clap derive) and a
//! `run(&Args) -> ExitCode`; this file only parses the command line and dispatches, so adding
//! `perf`, `pingpong`, `devinfo`, `exec` or `sim` means one module and one enum variant.
#![forbid(unsafe_code)]

mod cmatose_common;
mod completions;
mod decode;
mod devinfo;
mod exec;
#[cfg(test)]
#[allow(unreachable_pub)] // `pub` for the fuzz binary
#[path = "../../../fuzz/body/pcap_read.rs"]
mod fuzz_pcap_read;
#[cfg(test)]
mod fuzz_stable;
mod limits;
mod nvmf;
mod perf;
mod pingpong;
mod route;
mod rping;
mod sim;
mod sysfs;
mod transport;
mod ucmatose;
mod udaddy;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// RDMA in userspace: RoCEv2 tools.
#[derive(Debug, Parser)]
#[command(name = "softrdma", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode the RoCEv2 packets of a pcap/pcapng capture and check every ICRC.
    ///
    /// Exit status: 0 if every RoCEv2 packet parsed and had a valid ICRC, 1 if any was
    /// malformed or had a bad ICRC, 2 if the file could not be read.
    Decode(decode::Args),
    /// Show the attributes of a softrdma device like `ibv_devinfo` (-v: all of them and the
    /// GID table; --counters: the engine's counters).
    Devinfo(devinfo::Args),
    /// Run an unmodified libibverbs program (ibv_rc_pingpong, perftest, pyverbs scripts...)
    /// on softrdma: sets LD_LIBRARY_PATH to the built libibverbs.so.1 and the device's
    /// address.
    ///
    /// Exit status: the program's; 1 if the address's UDP port 4791 is taken, 2 if the
    /// library is missing, 127 if the program cannot be run.
    Exec(exec::Args),
    /// An NVMe over Fabrics host (RDMA): discover, identify, read, write, verify, bench.
    ///
    /// Exit status: 0 on success, 1 on any failure, 2 on usage errors.
    Nvmf(nvmf::host::Args),
    /// An NVMe over Fabrics target (RDMA, port 4420): a discovery controller and an NVM
    /// subsystem whose namespaces are files or memory, for Linux's `nvme connect -t rdma`.
    ///
    /// Exit status: 0 after --duration, 1 if the target could not start, 2 on usage errors.
    NvmfTarget(nvmf::target::Args),
    /// perftest's benchmarks (write-bw, read-bw, send-bw, atomic-bw, write-lat, read-lat,
    /// send-lat, atomic-lat), interoperable with perftest's `ib_*` programs.
    ///
    /// Exit status: 0 on success, 1 if the run failed, 2 on usage errors.
    Perf(perf::Args),
    /// Ping-pong SENDs over an RC, UC or UD QP: a drop-in peer for rdma-core's
    /// `ibv_rc_pingpong`, `ibv_uc_pingpong` and `ibv_ud_pingpong` (--transport).
    ///
    /// Without SERVER it waits for a client; with SERVER it connects to it. Exit status 0 on
    /// success, 1 on any failure (including a `-c` data mismatch).
    Pingpong(pingpong::Args),
    /// A peer of librdmacm's rping: RDMA READ/WRITE/SEND pings over an rdma_cm connection.
    ///
    /// Exit status: 0 when every ping completed (and, with -V, verified) and the connection
    /// closed; 1 on any failure; 2 on usage errors.
    Rping(rping::Args),
    /// Run a randomized RC workload over a simulated faulty fabric and check every result
    /// against a reference model.
    ///
    /// Exit status: 0 if every op completed successfully and the model agrees, 1 otherwise
    /// (the seed and the first divergence are printed), 2 if the run could not be set up.
    Sim(sim::Args),
    /// A peer of librdmacm's ucmatose (cmatose): RC connections through rdma_cm, messages
    /// exchanged on each, then torn down.
    ///
    /// Exit status: 0 on success; a connection error's status (e.g. 8 for a REJ "invalid
    /// service ID") or 1 otherwise; 2 on usage errors.
    Ucmatose(ucmatose::Args),
    /// A peer of librdmacm's udaddy: UD QPs resolved through rdma_cm's SIDR, datagrams
    /// exchanged on each.
    ///
    /// Exit status: 0 on success; a connection error's status or 1 otherwise; 2 on usage
    /// errors.
    Udaddy(udaddy::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Command::Decode(args) => decode::run(args),
        Command::Devinfo(args) => devinfo::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Nvmf(args) => nvmf::host::run(args),
        Command::NvmfTarget(args) => nvmf::target::run(args),
        Command::Perf(args) => perf::run(args),
        Command::Pingpong(args) if args.srq => pingpong::srq::run(args),
        Command::Pingpong(args) => pingpong::run(args),
        Command::Rping(args) => rping::run(args),
        Command::Sim(args) => sim::run_cmd(args),
        Command::Ucmatose(args) => ucmatose::run(args),
        Command::Udaddy(args) => udaddy::run(args),
    }
}
