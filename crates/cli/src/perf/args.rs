//! The command line of `softrdma perf`: perftest's flags where they make sense, checked and
//! resolved into a [`Config`] with perftest's defaults.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use softrdma::Mtu;
use softrdma_oob::perftest::Test;

use crate::transport::Transport;

/// perftest's `MAX_SIZE`: the largest message, and the top of `-a`'s range (2^23).
pub(crate) const MAX_SIZE: u64 = 8 * 1024 * 1024;
/// perftest's `MIN_ITER` / `MAX_ITER`.
const ITERS_RANGE: (u64, u64) = (5, 100_000_000);
/// perftest's `-D` is a positive C `int`.
const MAX_DURATION_SECS: u64 = i32::MAX as u64;
/// Above this many iterations perftest does not measure the bandwidth peak (it would have to
/// keep two timestamps per message): it warns and reports 0.
const PEAK_MAX_ITERS: u64 = 20_000;
/// perftest's warning when the bandwidth peak is not measured (`-D`, more than
/// [`PEAK_MAX_ITERS`] iterations, the server of `ib_send_bw`).
pub(crate) const NO_PEAK_WARNING: &str = " WARNING: BW peak won't be measured in this run.";
/// perftest's `DEF_RX_SEND`: receives posted by the receiving side of SEND tests.
const DEF_RX_SEND: u32 = 512;
/// perftest's `UC_MAX_RX`: a UC or UD receiver left at the default `-r` posts a receive for
/// every message of the run, up to this many (nothing retries a message that found none).
const UC_MAX_RX: u32 = 16_000;
/// The largest path MTU: a UD message is one packet, so no `-s` above it can ever fit.
const MAX_MTU: u64 = 4096;
/// Outstanding READ/atomic requests, the device's `max_qp_rd_atom` (128, like rxe).
pub(crate) const MAX_OUT_READS: u16 = 128;

/// Which benchmark (perftest's program name without `ib_`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TestName {
    /// `ib_write_bw`: RDMA WRITE bandwidth; the server is passive.
    WriteBw,
    /// `ib_read_bw`: RDMA READ bandwidth; the server is passive.
    ReadBw,
    /// `ib_send_bw`: SEND bandwidth; the server posts receives and measures too.
    SendBw,
    /// `ib_atomic_bw`: 8-byte atomics bandwidth; the server is passive.
    AtomicBw,
    /// `ib_write_lat`: RDMA WRITE ping-pong, each side polling the last byte of its buffer.
    WriteLat,
    /// `ib_read_lat`: RDMA READ round trips; the server is passive.
    ReadLat,
    /// `ib_send_lat`: SEND ping-pong.
    SendLat,
    /// `ib_atomic_lat`: atomic round trips; the server is passive.
    AtomicLat,
}

/// The verb a test exercises (perftest's `VerbType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Send,
    Write,
    Read,
    Atomic,
}

impl TestName {
    pub(crate) fn verb(self) -> Verb {
        match self {
            TestName::SendBw | TestName::SendLat => Verb::Send,
            TestName::WriteBw | TestName::WriteLat => Verb::Write,
            TestName::ReadBw | TestName::ReadLat => Verb::Read,
            TestName::AtomicBw | TestName::AtomicLat => Verb::Atomic,
        }
    }

    pub(crate) fn is_bw(self) -> bool {
        matches!(
            self,
            TestName::WriteBw | TestName::ReadBw | TestName::SendBw | TestName::AtomicBw
        )
    }

    /// The out-of-band schedule this test follows.
    pub(crate) fn cm_test(self) -> Test {
        match self {
            TestName::WriteBw => Test::WriteBw,
            TestName::ReadBw => Test::ReadBw,
            TestName::SendBw => Test::SendBw,
            TestName::AtomicBw => Test::AtomicBw,
            TestName::WriteLat => Test::WriteLat,
            TestName::ReadLat => Test::ReadLat,
            TestName::SendLat => Test::SendLat,
            TestName::AtomicLat => Test::AtomicLat,
        }
    }

    /// The name as typed on the command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TestName::WriteBw => "write-bw",
            TestName::ReadBw => "read-bw",
            TestName::SendBw => "send-bw",
            TestName::AtomicBw => "atomic-bw",
            TestName::WriteLat => "write-lat",
            TestName::ReadLat => "read-lat",
            TestName::SendLat => "send-lat",
            TestName::AtomicLat => "atomic-lat",
        }
    }
}

/// perftest's `-A` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub(crate) enum AtomicKind {
    /// Fetch-and-add of 1 (perftest's default).
    #[value(name = "FETCH_AND_ADD")]
    FETCH_AND_ADD,
    /// Compare-and-swap (compare 0, swap 0).
    #[value(name = "CMP_AND_SWAP")]
    CMP_AND_SWAP,
}

impl AtomicKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AtomicKind::FETCH_AND_ADD => "FETCH_AND_ADD",
            AtomicKind::CMP_AND_SWAP => "CMP_AND_SWAP",
        }
    }
}

/// Run a perftest benchmark (ib_write_bw ... ib_atomic_lat) against perftest or softrdma.
///
/// Without SERVER this side is the server: it waits for a client on TCP port 18515 (`-p`).
/// With SERVER it connects to a server there. Both sides must use the same test and flags
/// (as with perftest). With `--loopback` both sides run in this process, over 127.0.0.1 and
/// 127.0.0.2, and the client's results are printed.
///
/// Against Linux Soft-RoCE, give perftest `-x 1` (the IPv4-mapped GID).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    softrdma perf write-bw --loopback\n  \
    softrdma perf send-lat --loopback -s 8 -n 10000\n  \
    softrdma perf write-bw 10.88.0.11        # against `ib_write_bw -x 1` on that host\n  \
    softrdma perf read-bw --bind 10.88.0.1   # server for `ib_read_bw -x 1 10.88.0.1`")]
pub(crate) struct Args {
    /// The benchmark.
    #[arg(value_enum)]
    pub test: TestName,
    /// The server to connect to (host name or address); none: be the server.
    pub server: Option<String>,
    /// Message size in bytes (default 65536 for bandwidth tests, 2 for latency tests, 8 for
    /// atomics).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Run every size from 2 to 2^23 bytes (perftest's `-a`).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// With -a: stop at this size instead of 2^23 (softrdma extension; a perftest peer must
    /// run the same range, which it cannot: use it between softrdma peers only).
    #[arg(long = "max-size", value_name = "BYTES", requires = "all")]
    pub max_size: Option<u64>,
    /// Iterations per size (default 5000 for bandwidth tests, 1000 for latency tests).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations (1..2147483647; the
    /// bandwidth peak is then not measured, as in perftest).
    #[arg(short = 'D', long = "duration", value_name = "SECS")]
    pub duration: Option<u64>,
    /// Number of queue pairs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Send queue depth: outstanding work requests per QP (default 128 for bandwidth tests,
    /// 1 for latency tests).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Receive queue depth of the receiving side in SEND tests.
    #[arg(short = 'r', long = "rx-depth", default_value_t = DEF_RX_SEND)]
    pub rx_depth: u32,
    /// Completion moderation: request a completion every N sends (bandwidth tests).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100)]
    pub cq_mod: u32,
    /// GID index to advertise: 0 and 1 are both the device's address (1 is the IPv4-mapped
    /// GID's index on rxe); a device on an IPv6 link-local address has index 0 only.
    #[arg(short = 'x', long = "gid-index", default_value_t = 1)]
    pub gid_index: u32,
    /// Path MTU in bytes (256..4096); the smaller of both sides' is used.
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// TCP port of the out-of-band exchange [default: 18515; with --loopback: any free port].
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Accepted for perftest compatibility (no CPU frequency check is needed).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Atomic operation of atomic tests.
    #[arg(short = 'A', long = "atomic_type", value_enum, value_name = "TYPE")]
    pub atomic_type: Option<AtomicKind>,
    /// Report bandwidth in Gb/s instead of MB/s.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub report_gbits: bool,
    /// Print only each result's figure, one line per size, as perftest's --output does:
    /// `bandwidth` or `message_rate` (bandwidth tests), `latency` (latency tests: the
    /// average).
    #[arg(long = "output", value_enum, value_name = "LEVEL")]
    pub output: Option<OutputLevel>,
    /// Do not measure the bandwidth peak (reported as 0.00): no timestamp per message.
    #[arg(short = 'N', long = "noPeak", alias = "no-peak")]
    pub no_peak: bool,
    /// Sleep on the completion queue's events instead of polling it (perftest's -e; not with
    /// WRITE tests, whose latency test polls memory, nor with -D).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// The RDMA device (perftest's -d): softrdma0, the software device this command runs.
    #[arg(short = 'd', long = "ib-dev", value_name = "NAME")]
    pub ib_dev: Option<String>,
    /// The device's port (perftest's -i): 1, its only one.
    #[arg(short = 'i', long = "ib-port", value_name = "PORT")]
    pub ib_port: Option<u32>,
    /// Measure both directions at once (bandwidth tests; both sides must give it): each side
    /// sends to the other as a client does, and each prints the sum of both sides' figures.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Before each size's measurement, have every QP post a send queue's worth (-t, at most
    /// -n) of the run's first message and wait for them all, so caches and the path are warm
    /// (write-bw, read-bw, atomic-bw).
    #[arg(long = "perform_warm_up", alias = "perform-warm-up")]
    pub perform_warm_up: bool,
    /// Outstanding RDMA READ/atomic requests (read and atomic tests, 1..128).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u16>,
    /// Send payloads up to this size inline (0..256 bytes).
    #[arg(short = 'I', long = "inline_size", alias = "inline-size")]
    pub inline: Option<u32>,
    /// Local IP address of the softrdma device (default: the address the out-of-band TCP
    /// connection uses).
    #[arg(long = "bind", value_name = "IP")]
    pub bind: Option<IpAddr>,
    /// Run both sides in this process over 127.0.0.1 (server) and 127.0.0.2 (client).
    #[arg(long = "loopback", conflicts_with_all = ["server", "bind"])]
    pub loopback: bool,
    /// Print the results as one JSON object instead of perftest's text.
    #[arg(long = "json")]
    pub json: bool,
    /// Check the data that arrived (pattern written by the peer); implied by --loopback,
    /// meaningful only between softrdma peers.
    #[arg(long = "check")]
    pub check: bool,
    /// Spin on the socket in the device's progress thread (lowest latency, burns a core).
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,
    /// Send every packet to loopback peers as a datagram of its own, instead of batching
    /// equal-sized ones into UDP GSO sends (the default: several times the throughput) — for
    /// `tcpdump -i lo`, which records a GSO send unsplit (--pcap records every packet anyway).
    #[arg(long = "no-gso", overrides_with = "gso")]
    pub no_gso: bool,
    /// GSO batching on (the default; undoes an earlier --no-gso).
    #[arg(long = "gso", hide = true, overrides_with = "no_gso")]
    pub gso: bool,
    /// Write every RoCEv2 packet the device sends and receives to this pcap file (with
    /// --loopback: the client's device, which sees both directions).
    #[arg(long = "pcap", value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Give up when the peer shows no sign of life — no out-of-band message, no RoCEv2
    /// packet, no completion — for SECS seconds, including while waiting for a client.
    /// Default 0: wait as perftest does (forever for the out-of-band steps and for a client;
    /// 30 s for a completion).
    #[arg(long = "timeout", value_name = "SECS", default_value = "0",
          value_parser = crate::limits::wait_seconds)]
    pub timeout: Duration,
    /// Print the device's counters (drops by reason, NAKs by kind, retransmissions, packets
    /// by opcode) after the run; they are printed on a failure in any case.
    #[arg(long = "counters")]
    pub counters: bool,
    /// Connection type (perftest's -c): RC, UC (WRITE and SEND tests) or UD (SEND tests; a
    /// message is at most the path MTU, default size the MTU).
    #[arg(short = 'c', long = "connection", value_enum, default_value = "RC")]
    pub connection: Transport,
    /// Receive from one shared receive queue for all QPs (perftest's --use-srq; SEND tests).
    #[arg(long = "use-srq")]
    pub use_srq: bool,
    /// Connect through rdma_cm (perftest's -R): the control QP and every test QP are rdma_cm
    /// connections to the port (-p), and the out-of-band exchange runs over the control QP,
    /// without TCP. RC only. A server needs --bind (a softrdma device needs an address).
    #[arg(short = 'R', long = "rdma_cm", alias = "rdma-cm")]
    pub rdma_cm: bool,
    /// Congestion control (softrdma extension): `dcqcn` marks this side's requests ECT(0),
    /// answers CE-marked packets with CNPs and paces each QP at DCQCN's rate; `none` (the
    /// default, as rxe) does none of it.
    #[arg(long = "cc", value_enum, default_value = "none")]
    pub cc: CcChoice,
    /// With --cc dcqcn: the line rate DCQCN starts at and never exceeds, Gb/s.
    #[arg(long = "cc-line-gbps", default_value_t = 40,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub cc_line_gbps: u64,
}

/// `--output`: the one figure perftest prints per result instead of its tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputLevel {
    /// The average bandwidth (MB/s, or Gb/s with --report_gbits).
    #[value(name = "bandwidth")]
    Bandwidth,
    /// The average message rate (Mpps).
    #[value(name = "message_rate")]
    MessageRate,
    /// The average latency (usec).
    #[value(name = "latency")]
    Latency,
}

/// The name of the device `softrdma perf` opens, which `-d` may give: what libibverbs calls
/// the one softrdma device of a process (`softrdma exec -- ibv_devices`).
pub(crate) const DEVICE_NAME: &str = "softrdma0";

/// `--cc`: congestion control of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CcChoice {
    /// None (rxe's behaviour).
    None,
    /// DCQCN (ECT marks, CNPs, rate control).
    Dcqcn,
}

/// What to run, resolved from [`Args`] with perftest's defaults and limits.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub test: TestName,
    /// Message sizes, in order.
    pub sizes: Vec<u64>,
    /// Whether `-a` was given (the out-of-band schedule depends on it).
    pub run_all: bool,
    pub iters: u64,
    pub duration: Option<Duration>,
    pub qps: u32,
    pub tx_depth: u32,
    pub rx_depth: u32,
    pub cq_mod: u32,
    pub gid_index: u32,
    pub mtu: Option<Mtu>,
    /// `None`: 18515, or any free port with `--loopback`.
    pub port: Option<u16>,
    pub atomic: AtomicKind,
    pub gbits: bool,
    pub out_reads: u16,
    pub inline: u32,
    pub bind: Option<IpAddr>,
    pub json: bool,
    pub check: bool,
    pub busy_poll: bool,
    pub gso: bool,
    pub pcap: Option<PathBuf>,
    /// Bandwidth peak not measured (perftest's `noPeak`): `-N`, timed runs and long runs.
    pub no_peak: bool,
    /// `-N` was given: the peak is not measured by request, so no warning says it is not.
    pub no_peak_asked: bool,
    /// `--output`: print one figure per result and nothing else.
    pub output: Option<OutputLevel>,
    /// `-e`: wait for completions asleep on the CQ, never spinning.
    pub events: bool,
    /// How long the peer may show no sign of life (`None`: as perftest).
    pub timeout: Option<Duration>,
    pub counters: bool,
    pub transport: Transport,
    /// Receives come from one shared receive queue (`--use-srq`).
    pub use_srq: bool,
    /// `-R`: connections through rdma_cm.
    pub rdma_cm: bool,
    /// `--cc dcqcn`: DCQCN with this line rate, bits per second.
    pub cc_line_bps: Option<u64>,
    /// Whether `-s` was given (UD: perftest shrinks its default size to the path MTU, but
    /// fails on an `-s` above it).
    pub size_given: bool,
    /// `-b`: both sides send and both measure (perftest's `duplex`).
    pub duplex: bool,
    /// `--perform_warm_up`: a send queue's worth of messages per QP before each size.
    pub warm_up: bool,
}

impl Config {
    /// The largest message of the run (buffers are sized for it).
    pub(crate) fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(2)
    }

    /// The sizes a UD run really uses once the path MTU is known, as perftest's `check_mtu`
    /// decides: the default size (65536) becomes the MTU and `-a` stops at it, with
    /// perftest's note (returned); an `-s` above the MTU fails, with perftest's message.
    /// Other transports keep their sizes.
    pub(crate) fn for_path_mtu(&self, mtu: u64) -> Result<(Config, Option<String>), String> {
        if self.transport != Transport::UD || self.max_size() <= mtu {
            return Ok((self.clone(), None));
        }
        if self.size_given {
            return Err("Max message size in UD cannot be greater than MTU".into());
        }
        let sizes: Vec<u64> = if self.run_all {
            self.sizes.iter().copied().filter(|&s| s <= mtu).collect()
        } else {
            vec![mtu]
        };
        let note = format!(" Max msg size in UD is MTU {mtu}\n Changing to this MTU");
        Ok((
            Config {
                sizes,
                ..self.clone()
            },
            Some(note),
        ))
    }
}

/// A usage error: printed as `softrdma perf: error: ...`, exit status 2.
#[derive(Debug)]
pub(crate) struct UsageError(pub String);

fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

impl Args {
    /// Checks the flags against each other and perftest's limits, filling in defaults.
    pub(crate) fn resolve(&self) -> Result<Config, UsageError> {
        let t = self.test;
        let verb = t.verb();
        let bw = t.is_bw();
        // perftest's change_conn_type refuses these while parsing the arguments.
        match (self.connection, verb) {
            (Transport::UC, Verb::Read | Verb::Atomic) => {
                return usage("UC connection not possible in READ/ATOMIC verbs")
            }
            (Transport::UD, Verb::Write | Verb::Read | Verb::Atomic) => {
                return usage("UD connection only possible in SEND verb")
            }
            _ => {}
        }
        if self.rdma_cm {
            match self.connection {
                // perftest's own refusal.
                Transport::UC => return usage("UC is not supported in librdmacm"),
                Transport::UD => {
                    return usage("-R with -c UD is not supported by softrdma perf (RC only)")
                }
                Transport::RC => {}
            }
        }
        if self.bidirectional && !bw {
            return usage(
                "-b (--bidirectional) applies to the bandwidth tests (write-bw, read-bw, send-bw, \
                 atomic-bw): a latency test already sends both ways",
            );
        }
        if self.bidirectional && verb == Verb::Send && self.duration.is_some() {
            // perftest's timed bidirectional SEND counts both directions on each side and
            // stops polling at its own deadline, leaving the peer's last SENDs to retry
            // against an emptied receive queue; softrdma does not reproduce that.
            return usage(
                "send-bw -b with -D is not supported by softrdma perf: use -n (bidirectional \
                 SEND runs a number of iterations)",
            );
        }
        if self.perform_warm_up && !(bw && verb != Verb::Send) {
            return usage(
                "--perform_warm_up applies to write-bw, read-bw and atomic-bw (perftest ignores \
                 it in its other tests)",
            );
        }
        if self.use_srq && self.test.verb() != Verb::Send {
            return usage("--use-srq applies to the SEND tests (send-bw, send-lat)");
        }
        if self.connection == Transport::UD && self.size.is_some_and(|s| s > MAX_MTU) {
            return usage(format!(
                "a UD message is one packet: -s must be at most the path MTU ({MAX_MTU} at most)"
            ));
        }
        if self.qps == 0 || self.qps > 16384 {
            return usage("-q must be between 1 and 16384");
        }
        if !bw && self.qps != 1 {
            return usage("latency tests use one QP (-q 1)");
        }
        let default_size = match (verb, bw) {
            (Verb::Atomic, _) => 8,
            (_, true) => 65536,
            (_, false) => 2,
        };
        if verb == Verb::Atomic {
            if self.size.is_some_and(|s| s != 8) {
                return usage("atomic tests move 8 bytes: -s must be 8 (or left out)");
            }
            if self.all {
                return usage("-a is not supported by atomic tests (their size is always 8)");
            }
        } else if self.atomic_type.is_some() {
            return usage("-A applies to atomic tests only");
        }
        if self.all && self.size.is_some() {
            return usage("-a runs every size: do not combine it with -s");
        }
        let sizes = if self.all {
            let top = self.max_size.unwrap_or(MAX_SIZE);
            if !top.is_power_of_two() || !(2..=MAX_SIZE).contains(&top) {
                return usage(format!(
                    "--max-size must be a power of two between 2 and {MAX_SIZE}"
                ));
            }
            (1..=23)
                .map(|i| 1u64 << i)
                .take_while(|&s| s <= top)
                .collect()
        } else {
            let s = self.size.unwrap_or(default_size);
            if s == 0 || s > MAX_SIZE {
                return usage(format!("-s must be between 1 and {MAX_SIZE} bytes"));
            }
            vec![s]
        };
        let duration = match self.duration {
            None => None,
            Some(d) if !(1..=MAX_DURATION_SECS).contains(&d) => {
                return usage(format!(
                    "-D must be between 1 and {MAX_DURATION_SECS} seconds"
                ))
            }
            Some(d) => {
                if self.iters.is_some() {
                    return usage("-D and -n exclude each other (a run is timed or counted)");
                }
                if self.all {
                    return usage("-D cannot be combined with -a");
                }
                if matches!(t, TestName::SendLat | TestName::WriteLat) {
                    return usage(format!(
                        "{} does not support -D (ping-pong tests run a number of iterations)",
                        t.as_str()
                    ));
                }
                Some(Duration::from_secs(d))
            }
        };
        let iters = self.iters.unwrap_or(if bw { 5000 } else { 1000 });
        if !(ITERS_RANGE.0..=ITERS_RANGE.1).contains(&iters) {
            return usage(format!(
                "-n must be between {} and {}",
                ITERS_RANGE.0, ITERS_RANGE.1
            ));
        }
        let tx_depth = self.tx_depth.unwrap_or(if bw { 128 } else { 1 });
        if !(1..=15000).contains(&tx_depth) {
            return usage("-t must be between 1 and 15000");
        }
        if !(1..=16384).contains(&self.rx_depth) {
            return usage("-r must be between 1 and 16384");
        }
        if !(1..=1024).contains(&self.cq_mod) {
            return usage("-Q must be between 1 and 1024");
        }
        // perftest lowers the moderation to the queue depth, so a full queue always has a
        // signaled request in it.
        let cq_mod = self.cq_mod.min(tx_depth);
        let mtu = match self.mtu {
            None => None,
            Some(m) => match Mtu::from_bytes(m) {
                Some(m) => Some(m),
                None => return usage("-m must be one of 256, 512, 1024, 2048, 4096"),
            },
        };
        let out_reads = match (verb, self.outs) {
            (Verb::Read | Verb::Atomic, None) => MAX_OUT_READS,
            (Verb::Read | Verb::Atomic, Some(o)) if (1..=MAX_OUT_READS).contains(&o) => o,
            (Verb::Read | Verb::Atomic, Some(_)) => {
                return usage(format!("-o must be between 1 and {MAX_OUT_READS}"))
            }
            (_, Some(_)) => return usage("-o applies to read and atomic tests only"),
            (_, None) => 1,
        };
        let inline = match (verb, self.inline) {
            (_, None) => 0,
            (Verb::Read | Verb::Atomic, Some(_)) => {
                return usage("-I applies to write and send tests only")
            }
            (_, Some(i)) if i <= softrdma::MAX_INLINE_DATA => i,
            (_, Some(_)) => {
                return usage(format!(
                    "-I must be at most {} bytes",
                    softrdma::MAX_INLINE_DATA
                ))
            }
        };
        if self.gid_index > 1 {
            return usage(
                "-x must be 0 or 1 (both the device's address; 1 is the IPv4-mapped GID's index \
                 on rxe)",
            );
        }
        // The GID table of a device bound to an IPv6 link-local address has index 0 only.
        let link_local =
            matches!(self.bind, Some(IpAddr::V6(v6)) if v6.segments()[0] & 0xffc0 == 0xfe80);
        if self.gid_index == 1 && link_local {
            return usage(
                "a device bound to an IPv6 link-local address has one GID, index 0: use -x 0",
            );
        }
        if self.port == Some(0) {
            return usage("-p must not be 0");
        }
        if let Some(name) = self.ib_dev.as_deref().filter(|&n| n != DEVICE_NAME) {
            return usage(format!(
                "IB device {name} not found: softrdma perf runs its own device, {DEVICE_NAME} \
                 (omit -d)"
            ));
        }
        if self.no_peak && !bw {
            return usage("-N (NoPeak) is only valid for bandwidth tests");
        }
        if self.ib_port.is_some_and(|p| p != 1) {
            return usage("-i: the device has one port, 1");
        }
        match (self.output, bw) {
            (Some(OutputLevel::Latency), true) => {
                return usage("--output for bandwidth tests is bandwidth or message_rate")
            }
            (Some(OutputLevel::Bandwidth | OutputLevel::MessageRate), false) => {
                return usage("--output for latency tests is latency")
            }
            _ => {}
        }
        if self.events && verb == Verb::Write {
            return usage("Events feature not available on WRITE verb");
        }
        if self.events && duration.is_some() {
            return usage("Duration mode doesn't work with events");
        }
        if self.output.is_some() && self.json {
            return usage("--output and --json exclude each other");
        }
        Ok(Config {
            test: t,
            sizes,
            run_all: self.all,
            iters,
            duration,
            qps: self.qps,
            tx_depth,
            rx_depth: match (self.connection, duration) {
                (Transport::UC | Transport::UD, None) if self.rx_depth == DEF_RX_SEND => {
                    u32::try_from(iters).unwrap_or(u32::MAX).min(UC_MAX_RX)
                }
                _ => self.rx_depth,
            },
            cq_mod,
            gid_index: self.gid_index,
            mtu,
            port: self.port,
            atomic: self.atomic_type.unwrap_or(AtomicKind::FETCH_AND_ADD),
            gbits: self.report_gbits,
            out_reads,
            inline,
            bind: self.bind,
            json: self.json,
            check: self.check || self.loopback,
            busy_poll: self.busy_poll,
            gso: !self.no_gso,
            pcap: self.pcap.clone(),
            no_peak: bw && (self.no_peak || duration.is_some() || iters > PEAK_MAX_ITERS),
            no_peak_asked: bw && self.no_peak,
            output: self.output,
            events: self.events,
            timeout: crate::limits::limit(self.timeout),
            counters: self.counters,
            transport: self.connection,
            use_srq: self.use_srq,
            rdma_cm: self.rdma_cm,
            cc_line_bps: (self.cc == CcChoice::Dcqcn).then_some(self.cc_line_gbps * 1_000_000_000),
            size_given: self.size.is_some(),
            duplex: self.bidirectional,
            warm_up: self.perform_warm_up,
        })
    }
}
