//! The command line of `softrdma pingpong`: rc_pingpong's flags (and ud_pingpong's and
//! srq_pingpong's), with softrdma's own beside them. A file of its own because one command
//! line serves both programs, `run` and `srq::run`, which `main` picks between after parsing.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args as ClapArgs;
use softrdma::Mtu;

use crate::transport::Transport;

/// Arguments of `softrdma pingpong`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Without SERVER, waits for a client (like `ibv_rc_pingpong`); with SERVER, connects to it.
Either side may be rdma-core's ibv_rc_pingpong on a Soft-RoCE host, e.g.
  guest:    ibv_rc_pingpong -d rxe0 -g 1 -c -s 4096 -n 100
  softrdma: softrdma pingpong --bind 10.88.0.1 -c -s 4096 -n 100 10.88.0.11")]
pub(crate) struct Args {
    /// Server to connect to; without it, run as the server.
    pub(crate) server: Option<String>,
    /// Listen on / connect to TCP port PORT for the address exchange.
    #[arg(short = 'p', long = "port", default_value_t = softrdma_oob::DEFAULT_PORT)]
    pub(crate) port: u16,
    /// Device name (accepted for compatibility and ignored: softrdma picks its device by
    /// address, see --bind).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub(crate) ib_dev: Option<String>,
    /// Port of the device (only 1 exists).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub(crate) ib_port: u8,
    /// Size of each message in bytes (0..8388608, the device's max_msg_sz) [default: 4096;
    /// UD: 1024, the payload without the GRH].
    #[arg(short = 's', long = "size",
          value_parser = clap::value_parser!(u32).range(..=i64::from(softrdma::MAX_MSG_SZ)))]
    pub(crate) size: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: 1024; not with UD].
    #[arg(short = 'm', long = "mtu", value_parser = path_mtu)]
    pub(crate) mtu: Option<Mtu>,
    /// Number of receives to post at a time (1..32766: the completion queue holds one more).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..i64::from(softrdma::MAX_CQE)))]
    pub(crate) rx_depth: u32,
    /// Number of exchanges (at least 1).
    #[arg(short = 'n', long = "iters", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) iters: u32,
    /// Service level (accepted; RoCEv2 over UDP carries none).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub(crate) sl: u8,
    /// Sleep on completion events instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub(crate) events: bool,
    /// Local GID index to advertise: 0 and 1 are both the device's address (1 is the
    /// IPv4-mapped GID's index on rxe); -1 advertises no GID (all zeros) like ibv_rc_pingpong without -g. Default 1, because
    /// RoCE cannot work without a GID.
    #[arg(
        short = 'g',
        long = "gid-idx",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub(crate) gid_idx: i32,
    /// Validate the received buffer (rc_pingpong's pattern, with --srq srq_pingpong's; see
    /// the module docs).
    #[arg(short = 'c', long = "chk")]
    pub(crate) chk: bool,
    /// Local IP address of the softrdma device. Default: for a client, the address that
    /// routes to the server; for a server, the address the client connects to.
    #[arg(long, value_name = "IP")]
    pub(crate) bind: Option<IpAddr>,
    /// Send every packet to loopback peers as a datagram of its own instead of batching
    /// equal-sized ones into UDP GSO sends (for `tcpdump -i lo`, which records those unsplit).
    #[arg(long = "no-gso")]
    pub(crate) no_gso: bool,
    /// Write every RoCEv2 datagram the device sends and receives to this pcap file.
    #[arg(long, value_name = "FILE")]
    pub(crate) pcap: Option<PathBuf>,
    /// Print the device's counters (drops, NAKs, retransmissions, opcodes) at the end.
    #[arg(long)]
    pub(crate) counters: bool,
    /// Give up after SECS seconds without progress: waiting for a client (server), each
    /// address exchange, each completion. 0 (the default) waits forever, like rc_pingpong,
    /// e.g. for a peer that died; either way the wait sleeps and uses no CPU.
    #[arg(long, value_name = "SECS", default_value = "0",
          value_parser = crate::limits::wait_seconds)]
    pub(crate) timeout: Duration,
    /// The transport: RC (ibv_rc_pingpong), UC (ibv_uc_pingpong) or UD (ibv_ud_pingpong).
    #[arg(long, value_enum, default_value = "RC", ignore_case = true)]
    pub(crate) transport: Transport,
    /// Many RC QPs on one shared receive queue: a peer of rdma-core's `ibv_srq_pingpong`
    /// (its out-of-band exchange carries 256 addresses each way; -c checks its all-zero
    /// buffer).
    #[arg(long)]
    pub(crate) srq: bool,
    /// With --srq: the number of QPs (1..256) [default: 16].
    #[arg(short = 'q', long = "num-qp", requires = "srq",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) num_qp: Option<u32>,
}

/// clap value parser of `-m`.
fn path_mtu(s: &str) -> Result<Mtu, String> {
    s.parse::<u32>()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("invalid MTU {s} (256, 512, 1024, 2048 or 4096)"))
}
