//! perftest's output: the banner, the address lines, the result tables (column layout from
//! perftest's `RESULT_FMT*` / `REPORT_FMT*` printf formats), the statistics behind them, and
//! the `--json` rendering.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use softrdma_oob::perftest::{BwReport, PerftestDest, Role};

use super::args::{Config, OutputLevel, TestName, Verb};

/// perftest's `RESULT_LINE`.
pub(crate) const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
const RESULT_FMT: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const RESULT_FMT_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
const RESULT_FMT_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
const RESULT_FMT_LAT_DUR: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// The server's greeting while it waits (perftest prints it before accepting).
pub(crate) const WAITING: &str = "\n************************************\n\
    * Waiting for client to connect... *\n\
    ************************************";

/// C's `%#0Nx`: zero-padded to `width` including the `0x`, which C omits for zero.
fn alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// The title of the banner: `RDMA_Write BW Test`, `Atomic FETCH_AND_ADD Latency Test`, ...
pub(crate) fn title(cfg: &Config) -> String {
    let verb = match cfg.test.verb() {
        Verb::Send => "Send",
        Verb::Write => "RDMA_Write",
        Verb::Read => "RDMA_Read",
        Verb::Atomic => "Atomic",
    };
    let mut t = verb.to_string();
    if cfg.test.verb() == Verb::Atomic {
        t.push(' ');
        t.push_str(cfg.atomic.as_str());
    }
    t.push_str(if cfg.test.is_bw() && cfg.duplex {
        " Bidirectional BW Test"
    } else if cfg.test.is_bw() {
        " BW Test"
    } else {
        " Latency Test"
    });
    t
}

/// `ctx_print_test_info`: the block describing the run.
pub(crate) fn banner(cfg: &Config, role: Role, device: &str, mtu: u32) -> String {
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "{RESULT_LINE}");
    let _ = writeln!(w, "                    {}", title(cfg));
    if cfg.events {
        // perftest names the completion vector it sleeps on: the device's first.
        let _ = writeln!(w, " Test with events. Using {device}_comp0");
    }
    let _ = writeln!(w, " Dual-port       : OFF\t\tDevice         : {device}");
    let _ = writeln!(w, " Number of qps   : {}\t\tTransport type : IB", cfg.qps);
    let _ = writeln!(
        w,
        " Connection type : {}\t\tUsing SRQ      : {}",
        cfg.transport.as_str(),
        if cfg.use_srq { "ON " } else { "OFF" }
    );
    // With -b both sides send and, in SEND tests, both receive.
    if role == Role::Client || cfg.duplex {
        let _ = writeln!(w, " TX depth        : {}", cfg.tx_depth);
    }
    if cfg.test.verb() == Verb::Send && (role == Role::Server || cfg.duplex) {
        let _ = writeln!(w, " RX depth        : {}", rx_depth(cfg));
    }
    if cfg.test.is_bw() {
        let _ = writeln!(w, " CQ Moderation   : {}", cfg.cq_mod);
    }
    let _ = writeln!(w, " Mtu             : {mtu}[B]");
    let _ = writeln!(w, " Link type       : Ethernet");
    let _ = writeln!(w, " GID index       : {}", cfg.gid_index);
    match cfg.test.verb() {
        Verb::Read | Verb::Atomic => {
            let _ = writeln!(w, " Outstand reads  : {}", cfg.out_reads);
        }
        _ => {
            let _ = writeln!(w, " Max inline data : {}[B]", cfg.inline);
        }
    }
    if cfg.rdma_cm {
        let _ = writeln!(w, " rdma_cm QPs\t : ON");
        let _ = write!(w, " Data ex. method : rdma_cm");
        if role == Role::Server {
            let _ = write!(
                w,
                "\n{RESULT_LINE}\n Waiting for client rdma_cm QP to connect\n \
                 Please run the same command with the IB/RoCE interface IP"
            );
        }
        let _ = writeln!(w);
    } else {
        let _ = writeln!(w, " rdma_cm QPs\t : OFF");
        let _ = writeln!(w, " Data ex. method : Ethernet");
    }
    let _ = write!(w, "{RESULT_LINE}");
    s
}

/// Receives the receiving side of a SEND test keeps posted.
pub(crate) fn rx_depth(cfg: &Config) -> u32 {
    let iters = u32::try_from(cfg.iters).unwrap_or(u32::MAX);
    if cfg.duration.is_some() {
        cfg.rx_depth
    } else {
        cfg.rx_depth.min(iters)
    }
}

/// `ctx_print_pingpong_data`: ` local address: LID 0000 QPN 0x0011 PSN 0x... [OUT ..] [RKey
/// .. VAddr ..]` and the GID line (decimal bytes, as perftest prints them).
pub(crate) fn address(side: &str, verb: Verb, d: &PerftestDest) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        alt_hex(u64::from(d.lid), 4),
        alt_hex(u64::from(d.qpn), 6),
        alt_hex(u64::from(d.psn), 6)
    );
    if verb == Verb::Read {
        let _ = write!(s, " OUT {}", alt_hex(u64::from(d.out_reads), 4));
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        let _ = write!(
            s,
            " RKey {} VAddr {}",
            alt_hex(u64::from(d.rkey), 8),
            alt_hex(d.vaddr, 16)
        );
    }
    let gid: Vec<String> = d.gid.0.iter().map(|b| format!("{b:02}")).collect();
    let _ = write!(s, "\n GID: {}", gid.join(":"));
    s
}

/// The header line of the result table.
pub(crate) fn table_header(cfg: &Config) -> &'static str {
    match (cfg.test.is_bw(), cfg.gbits, cfg.duration.is_some()) {
        (true, false, _) => RESULT_FMT,
        (true, true, _) => RESULT_FMT_G,
        (false, _, false) => RESULT_FMT_LAT,
        (false, _, true) => RESULT_FMT_LAT_DUR,
    }
}

/// One row of a bandwidth table (`struct bw_report_data`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BwRow {
    pub size: u64,
    pub iters: u64,
    /// In the run's unit (MB/s = MiB/s as perftest counts, or Gb/s).
    pub bw_peak: f64,
    pub bw_avg: f64,
    /// Millions of messages per second.
    pub msg_rate: f64,
}

impl BwRow {
    /// `REPORT_FMT` (or `REPORT_FMT_EXT` for tiny Gb/s figures, as perftest does).
    pub(crate) fn render(&self, gbits: bool) -> String {
        self.render_ext(gbits && self.bw_avg < 0.1)
    }

    /// The row in `REPORT_FMT_EXT`'s extra precision (`ext`) or `REPORT_FMT`'s.
    pub(crate) fn render_ext(&self, ext: bool) -> String {
        if ext {
            format!(
                " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
                self.size, self.iters, self.bw_peak, self.bw_avg, self.msg_rate
            )
        } else {
            format!(
                " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                self.size, self.iters, self.bw_peak, self.bw_avg, self.msg_rate
            )
        }
    }

    /// The report the peer gets (perftest's `bw_report_data`).
    pub(crate) fn to_report(self) -> BwReport {
        BwReport {
            size: self.size,
            iters: self.iters,
            bw_peak: self.bw_peak,
            bw_avg: self.bw_avg,
            msg_rate_avg: self.msg_rate,
        }
    }

    /// What a bidirectional run shows (`print_full_bw_report` with the peer's report): this
    /// side's size and iterations, both sides' peaks, averages and message rates added up.
    pub(crate) fn plus(&self, theirs: &BwRow) -> BwRow {
        BwRow {
            size: self.size,
            iters: self.iters,
            bw_peak: self.bw_peak + theirs.bw_peak,
            bw_avg: self.bw_avg + theirs.bw_avg,
            msg_rate: self.msg_rate + theirs.msg_rate,
        }
    }

    /// `peak`: whether the peak was measured (else it is `null`, where perftest prints 0.00).
    fn json(&self, gbits: bool, peak: bool) -> String {
        let unit = if gbits { "gbps" } else { "mbps" };
        format!(
            "{{\"bytes\":{},\"iterations\":{},\"bw_peak_{unit}\":{},\"bw_avg_{unit}\":{},\"msg_rate_mpps\":{}}}",
            self.size,
            self.iters,
            if peak { num(self.bw_peak) } else { "null".into() },
            num(self.bw_avg),
            num(self.msg_rate)
        )
    }
}

impl From<BwReport> for BwRow {
    /// The peer's report as a row (a passive server shows its client's; `-b` adds it up).
    fn from(r: BwReport) -> BwRow {
        BwRow {
            size: r.size,
            iters: r.iters,
            bw_peak: r.bw_peak,
            bw_avg: r.bw_avg,
            msg_rate: r.msg_rate_avg,
        }
    }
}

/// A finite JSON number (NaN and infinities become `null`).
fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

/// perftest's bandwidth unit divisor: MB/s are MiB/s; Gb/s are 10^9 bits.
fn format_factor(gbits: bool) -> f64 {
    if gbits {
        125_000_000.0
    } else {
        f64::from(0x10_0000)
    }
}

/// `print_report_bw`: average over the whole run and perftest's peak, the best rate over any
/// window from a post to a moderated completion (`tposted[i]`, `tcompleted[j]`).
pub(crate) fn bw_row(
    size: u64,
    posted: &[Instant],
    completed: &[Instant],
    gbits: bool,
    cq_mod: u32,
) -> BwRow {
    let n = posted.len().min(completed.len());
    if n == 0 {
        return BwRow {
            size,
            iters: 0,
            bw_peak: 0.0,
            bw_avg: 0.0,
            msg_rate: 0.0,
        };
    }
    let total = completed[n - 1].duration_since(posted[0]).as_secs_f64();
    let ff = format_factor(gbits);
    let bw_avg = size as f64 * n as f64 / total / ff;
    let msg_rate = n as f64 / total / 1e6;
    // The shortest time per message over any [post i, completion j] window, with j on the
    // moderation grid (where completion times are real), as perftest computes it. For long
    // runs the starts are taken on the same grid to keep this quadratic loop short.
    let m = cq_mod.max(1) as usize;
    let step_i = if n > 50_000 { m } else { 1 };
    let mut best = f64::INFINITY;
    let mut i = 0;
    while i < n {
        let mut j = (i + 1).div_ceil(m) * m - 1;
        while j < n {
            let t = completed[j].duration_since(posted[i]).as_secs_f64() / (j - i + 1) as f64;
            best = best.min(t);
            j += m;
        }
        if n % m != 0 {
            let j = n - 1;
            let t = completed[j].duration_since(posted[i]).as_secs_f64() / (j - i + 1) as f64;
            best = best.min(t);
        }
        i += step_i;
    }
    let bw_peak = if best.is_finite() && best > 0.0 {
        size as f64 / best / ff
    } else {
        bw_avg
    };
    BwRow {
        size,
        iters: n as u64,
        bw_peak,
        bw_avg,
        msg_rate,
    }
}

/// A run without a measured peak (`-D`, more than 20,000 iterations, a SEND server): rates
/// over the measured interval, and 0 for the peak, which is what perftest prints then.
pub(crate) fn bw_row_duration(size: u64, msgs: u64, elapsed: Duration, gbits: bool) -> BwRow {
    let secs = elapsed.as_secs_f64().max(1e-9);
    BwRow {
        size,
        iters: msgs,
        bw_peak: 0.0,
        bw_avg: size as f64 * msgs as f64 / secs / format_factor(gbits),
        msg_rate: msgs as f64 / secs / 1e6,
    }
}

/// One row of a latency table, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LatRow {
    pub size: u64,
    pub iters: u64,
    pub min: f64,
    pub max: f64,
    pub typical: f64,
    pub avg: f64,
    pub stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

/// perftest drops this many of the largest samples (`LAT_MEASURE_TAIL`).
const LAT_MEASURE_TAIL: usize = 2;

impl LatRow {
    /// `print_report_lat`: samples are the intervals between consecutive posts, divided by
    /// `rtt_factor` (2 for ping-pong tests, which report one-way latency), sorted. As in
    /// perftest, the two largest are left out of the median, average and deviation; t_max
    /// is the smaller of those two, the percentiles are samples at `ceil(kept * p)`, and the
    /// median of an even count is the mean of the middle two (in whole nanoseconds, as
    /// perftest's is in whole cycles). Every figure is a sample, so
    /// min <= typical <= 99% <= 99.9% <= max always holds (a histogram's bucket bounds once
    /// put the median above the maximum).
    pub(crate) fn from_posts(size: u64, posted: &[Instant], rtt_factor: u32) -> LatRow {
        let mut ns: Vec<u64> = posted
            .windows(2)
            .map(|w| u64::try_from(w[1].duration_since(w[0]).as_nanos()).unwrap_or(u64::MAX))
            .collect();
        ns.sort_unstable();
        let f = 1000.0 * f64::from(rtt_factor.max(1));
        let us = |v: u64| v as f64 / f;
        let iters = posted.len() as u64;
        if ns.is_empty() {
            return LatRow {
                size,
                iters,
                min: 0.0,
                max: 0.0,
                typical: 0.0,
                avg: 0.0,
                stdev: 0.0,
                p99: 0.0,
                p999: 0.0,
            };
        }
        // perftest needs at least 5 iterations (4 samples); fewer keep every sample.
        let kept = if ns.len() > LAT_MEASURE_TAIL + 1 {
            ns.len() - LAT_MEASURE_TAIL
        } else {
            ns.len()
        };
        let at = |i: usize| ns[i.min(ns.len() - 1)];
        let median = if kept % 2 == 0 {
            let sum = u128::from(at(kept / 2)) + u128::from(at(kept / 2 - 1));
            u64::try_from(sum / 2).unwrap_or(u64::MAX)
        } else {
            at(kept / 2)
        };
        let rank = |p: f64| (kept as f64 * p).ceil() as usize;
        let avg = ns[..kept].iter().map(|&v| us(v)).sum::<f64>() / kept as f64;
        let var = ns[..kept]
            .iter()
            .map(|&v| (us(v) - avg).powi(2))
            .sum::<f64>()
            / kept as f64;
        LatRow {
            size,
            iters,
            min: us(ns[0]),
            max: us(at(kept)),
            typical: us(median),
            avg,
            stdev: var.sqrt(),
            p99: us(at(rank(0.99))),
            p999: us(at(rank(0.999))),
        }
    }

    /// `REPORT_FMT_LAT`.
    pub(crate) fn render(&self) -> String {
        format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            self.size,
            self.iters,
            self.min,
            self.max,
            self.typical,
            self.avg,
            self.stdev,
            self.p99,
            self.p999
        )
    }

    fn json(&self) -> String {
        format!(
            "{{\"bytes\":{},\"iterations\":{},\"t_min_us\":{},\"t_max_us\":{},\"t_typical_us\":{},\"t_avg_us\":{},\"t_stdev_us\":{},\"p99_us\":{},\"p99_9_us\":{}}}",
            self.size,
            self.iters,
            num(self.min),
            num(self.max),
            num(self.typical),
            num(self.avg),
            num(self.stdev),
            num(self.p99),
            num(self.p999)
        )
    }
}

/// A timed latency run (`-D`, read/atomic tests): average only, and transactions per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LatDurRow {
    pub size: u64,
    pub iters: u64,
    pub avg: f64,
    pub tps: f64,
}

impl LatDurRow {
    /// `REPORT_FMT_LAT_DUR`.
    pub(crate) fn render(&self) -> String {
        format!(
            " {:<7}       {}            {:<7.2}        {:<7.2}",
            self.size, self.iters, self.avg, self.tps
        )
    }

    fn json(&self) -> String {
        format!(
            "{{\"bytes\":{},\"iterations\":{},\"t_avg_us\":{},\"tps\":{}}}",
            self.size,
            self.iters,
            num(self.avg),
            num(self.tps)
        )
    }
}

/// A result row of any test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Row {
    Bw(BwRow),
    Lat(LatRow),
    LatDur(LatDurRow),
}

impl Row {
    /// The figure perftest's `--output` prints for the row: the average bandwidth or message
    /// rate of a bandwidth row, the average of a latency row.
    pub(crate) fn figure(&self, level: OutputLevel) -> f64 {
        match (self, level) {
            (Row::Bw(r), OutputLevel::MessageRate) => r.msg_rate,
            (Row::Bw(r), _) => r.bw_avg,
            (Row::Lat(r), _) => r.avg,
            (Row::LatDur(r), _) => r.avg,
        }
    }

    pub(crate) fn render(&self, gbits: bool) -> String {
        match self {
            Row::Bw(r) => r.render(gbits),
            Row::Lat(r) => r.render(),
            Row::LatDur(r) => r.render(),
        }
    }

    fn json(&self, gbits: bool, peak: bool) -> String {
        match self {
            Row::Bw(r) => r.json(gbits, peak),
            Row::Lat(r) => r.json(),
            Row::LatDur(r) => r.json(),
        }
    }
}

/// What one side of a run produced.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// The table rows, in size order (a passive RDMA server shows the client's report).
    pub rows: Vec<Row>,
    /// What the data check found, if one ran (`--check`).
    pub check: Option<String>,
    /// The negotiated path MTU, bytes.
    pub mtu: u32,
    /// The device's counters at the end of the run (with `--loopback`, both devices summed).
    pub counters: Counters,
    /// Every counter of the device after the run (`--counters`).
    pub device_counters: Option<Vec<(String, u64)>>,
    /// `-b`: per size, what this side measured and what the peer reported (`rows` holds
    /// their sums).
    pub directions: Vec<(BwRow, BwRow)>,
    /// Test QP ends this side created (with `--loopback`, both sides').
    pub qp_ends: u64,
}

/// What the process holds in memory at its peak, and its share per QP end: how a user sizes a
/// host for thousands of connections (`--json`'s `memory`). Read from the kernel's high-water
/// mark of the resident set (`VmHWM`), so it covers the buffers the run registered too, as
/// perftest's would (one `-s`-sized buffer per QP, twice for the loopback's two ends).
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn memory_json(qp_ends: u64) -> String {
    match peak_rss_bytes() {
        Some(rss) => format!(
            ",\"memory\":{{\"peak_rss_bytes\":{rss},\"qp_ends\":{qp_ends},\"per_qp_end_bytes\":{}}}",
            rss / qp_ends.max(1)
        ),
        None => String::new(),
    }
}

/// What a run cost on the wire: the device counters `--json` reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub packets_retransmitted: u64,
    pub retransmit_timeouts: u64,
    pub selective_repeats: u64,
    pub packets_dropped: u64,
}

impl Counters {
    pub(crate) fn of(s: &softrdma_proto::Stats) -> Counters {
        Counters {
            packets_sent: s.tx_packets,
            packets_received: s.rx_packets,
            packets_retransmitted: s.retransmitted_packets,
            retransmit_timeouts: s.retransmit_timeouts,
            selective_repeats: s.selective_repeats,
            packets_dropped: s.total_drops(),
        }
    }

    pub(crate) fn add(self, o: Counters) -> Counters {
        Counters {
            packets_sent: self.packets_sent + o.packets_sent,
            packets_received: self.packets_received + o.packets_received,
            packets_retransmitted: self.packets_retransmitted + o.packets_retransmitted,
            retransmit_timeouts: self.retransmit_timeouts + o.retransmit_timeouts,
            selective_repeats: self.selective_repeats + o.selective_repeats,
            packets_dropped: self.packets_dropped + o.packets_dropped,
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"packets_sent\":{},\"packets_received\":{},\"packets_retransmitted\":{},\"retransmit_timeouts\":{},\"selective_repeats\":{},\"packets_dropped\":{}}}",
            self.packets_sent,
            self.packets_received,
            self.packets_retransmitted,
            self.retransmit_timeouts,
            self.selective_repeats,
            self.packets_dropped
        )
    }
}

/// The `--json` document for a finished run.
pub(crate) fn json(cfg: &Config, role: Role, out: &Outcome) -> String {
    // The server of a SEND test measures no peak (perftest's `noPeak` there too), unless it
    // sends as well (-b).
    let peak =
        !(cfg.no_peak || role == Role::Server && cfg.test.verb() == Verb::Send && !cfg.duplex);
    let rows: Vec<String> = out.rows.iter().map(|r| r.json(cfg.gbits, peak)).collect();
    let role = match role {
        Role::Client => "client",
        Role::Server => "server",
    };
    let check = match &out.check {
        Some(c) => format!("\"{}\"", c.replace('\\', "\\\\").replace('"', "\\\"")),
        None => "null".into(),
    };
    let atomic = if cfg.test.verb() == Verb::Atomic {
        format!("\"{}\"", cfg.atomic.as_str())
    } else {
        "null".into()
    };
    // -b: both directions' own figures, whose sums are the results.
    let directions = if cfg.duplex {
        let side = |pick: fn(&(BwRow, BwRow)) -> &BwRow| -> String {
            let v: Vec<String> = out
                .directions
                .iter()
                .map(|d| pick(d).json(cfg.gbits, peak))
                .collect();
            v.join(",")
        };
        format!(
            ",\"bidirectional\":{{\"local\":[{}],\"remote\":[{}]}}",
            side(|d| &d.0),
            side(|d| &d.1)
        )
    } else {
        String::new()
    };
    let device_counters = match &out.device_counters {
        Some(c) => {
            let body: Vec<String> = c.iter().map(|(k, n)| format!("\"{k}\":{n}")).collect();
            format!(",\"device_counters\":{{{}}}", body.join(","))
        }
        None => String::new(),
    };
    format!(
        "{{\"test\":\"{}\",\"connection\":\"{}\",\"role\":\"{role}\",\"qps\":{},\"mtu\":{},\"tx_depth\":{},\"cq_mod\":{},\"atomic_type\":{atomic},\"check\":{check},\"results\":[{}]{directions},\"counters\":{}{device_counters}{}}}",
        cfg.test.as_str(),
        cfg.transport.as_str(),
        cfg.qps,
        out.mtu,
        cfg.tx_depth,
        cfg.cq_mod,
        rows.join(","),
        out.counters.json(),
        memory_json(out.qp_ends)
    )
}

/// perftest's `rtt_factor`: ping-pong tests report half the round trip, READ and atomic
/// tests the whole one.
pub(crate) fn one_way_factor(t: TestName) -> u32 {
    match t.verb() {
        Verb::Read | Verb::Atomic => 1,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_alt_hex() {
        assert_eq!(alt_hex(0, 4), "0000");
        assert_eq!(alt_hex(0x11, 6), "0x0011");
        assert_eq!(alt_hex(0x928761, 6), "0x928761");
        assert_eq!(alt_hex(0x202, 8), "0x000202");
        assert_eq!(alt_hex(0x55fa_6b64_b000, 16), "0x0055fa6b64b000");
    }

    #[test]
    fn bw_row_layout_matches_perftest() {
        let r = BwRow {
            size: 65536,
            iters: 5000,
            bw_peak: 11030.78,
            bw_avg: 11030.45,
            msg_rate: 0.176487,
        };
        assert_eq!(
            r.render(false),
            " 65536      5000             11030.78            11030.45\t\t   0.176487"
        );
    }

    /// perftest's figures for 5 iterations (4 samples, 2 kept), where a histogram's median
    /// (3 significant digits) came out above the maximum: rxe lab, write-lat -a at 8 MiB.
    #[test]
    fn latency_stats_are_perftests_and_ordered() {
        let t0 = Instant::now();
        let mut posted = vec![t0];
        for d in [3_975_600u64, 9_000_000, 3_975_481, 3_975_500] {
            let last = *posted.last().unwrap();
            posted.push(last + Duration::from_nanos(d));
        }
        let r = LatRow::from_posts(8, &posted, 1);
        assert_eq!(r.iters, 5);
        assert_eq!(r.min, 3975.481);
        assert_eq!(r.typical, 3975.49, "the mean of the two kept, in whole ns");
        assert_eq!(r.max, 3975.6, "the smaller of the two left out");
        assert_eq!((r.p99, r.p999), (3975.6, 3975.6));
        assert!((r.avg - 3975.4905).abs() < 1e-9, "{r:?}");
        assert!(r.min <= r.typical && r.typical <= r.p99 && r.p99 <= r.p999);
        assert!(r.p999 <= r.max);
        // 1000 iterations: 999 samples 1..=999 us, 997 kept: median the 499th, 99% the
        // 988th (ceil(997 * 0.99) = 988, 0-based), 99.9% and max the 998th.
        let posted: Vec<Instant> = (0..1000u64)
            .map(|i| t0 + Duration::from_micros(i * (i + 1) / 2))
            .collect();
        let r = LatRow::from_posts(8, &posted, 1);
        assert_eq!((r.min, r.typical, r.max), (1.0, 499.0, 998.0));
        assert_eq!((r.p99, r.p999), (989.0, 998.0));
    }

    #[test]
    fn latency_stats() {
        let t0 = Instant::now();
        let posted: Vec<Instant> = (0..=100u64)
            .map(|i| t0 + Duration::from_micros(10 * i))
            .collect();
        let r = LatRow::from_posts(8, &posted, 2);
        assert_eq!(r.iters, 101);
        assert!((r.avg - 5.0).abs() < 1e-6, "{r:?}");
        assert!((r.typical - 5.0).abs() < 0.01);
        assert!(r.stdev < 1e-6);
    }
}
