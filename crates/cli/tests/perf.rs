//! End-to-end tests of `softrdma perf`: each benchmark runs with `--loopback` (both sides in
//! one process over real UDP and TCP on 127.0.0.1 and 127.0.0.2), as a user runs it; the exit
//! status, the perftest-style table, the plausibility of the figures and the data checks
//! (which `--loopback` turns on) are verified. Usage errors must be one clean line, exit 2.

use std::path::Path;
use std::process::Command;

#[path = "common/perf_run.rs"]
mod perf_run;
use perf_run::{json_u64, loopback, perf, usage_error, LOOPBACK};

/// The numeric rows of the result table (lines after the `#bytes` header that start with a
/// number), split into fields.
fn rows(stdout: &str) -> Vec<Vec<f64>> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with(" #bytes"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .map(|l| {
            l.split_whitespace()
                .map(|f| {
                    f.parse::<f64>()
                        .unwrap_or_else(|_| panic!("bad field {f:?} in {l:?}"))
                })
                .collect()
        })
        .collect()
}

fn check_banner(stdout: &str, title: &str) {
    for want in [
        title,
        " Dual-port       : OFF",
        " Number of qps   : ",
        " Connection type : RC",
        " Mtu             : 4096[B]",
        " Link type       : Ethernet",
        " GID index       : 1",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        " local address: LID 0000 QPN 0x",
        " remote address: LID 0000 QPN 0x",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:02",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
}

/// Every `Data check` line says OK, and there is at least one.
fn checks_ok(stdout: &str) {
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("Data check"))
        .collect();
    assert!(!lines.is_empty(), "no data check in:\n{stdout}");
    for l in lines {
        assert!(l.contains(": OK"), "{l}");
    }
}

fn bw_test(test: &str, title: &str, args: &[&str], size: f64, iters: f64) {
    let mut a = vec![test];
    a.extend_from_slice(args);
    let (out, _) = loopback(&a);
    check_banner(&out, title);
    assert!(out.contains(
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    ));
    let r = rows(&out);
    assert_eq!(r.len(), 1, "{out}");
    let (bytes, n, peak, avg, rate) = (r[0][0], r[0][1], r[0][2], r[0][3], r[0][4]);
    assert_eq!((bytes, n), (size, iters), "{out}");
    // The client measures a peak; a SEND server reports none (0.00), like perftest's.
    assert!(avg > 0.0 && (peak >= avg * 0.99 || peak == 0.0), "{out}");
    // MB/s is MiB/s in perftest; the rate must agree with the bandwidth, within the rounding
    // of the average to two decimals (which matters for slow 8-byte atomics).
    let implied = avg * 1_048_576.0 / size / 1e6;
    let rounding = 0.005 * 1_048_576.0 / size / 1e6;
    assert!(
        (implied - rate).abs() <= rate * 0.02 + rounding + 1e-6,
        "{out}"
    );
    checks_ok(&out);
}

#[test]
fn write_bw() {
    bw_test(
        "write-bw",
        "RDMA_Write BW Test",
        &["-s", "4096", "-n", "300"],
        4096.0,
        300.0,
    );
}

/// Many QPs and long messages on one device pair do not overrun the receiver: with
/// `-q 64`, `-q 256` and `-q 16 -s 8388608` every WRITE and READ completes and the data
/// check passes (they failed with RetryExcErr when every QP sent its whole window at once, a
/// READ was answered in one burst of all its packets, and the retransmit timer ignored the
/// queueing delay). Each row: exactly the iterations asked for, per QP.
#[test]
fn many_qps_and_long_messages_complete() {
    for (test, title) in [
        ("write-bw", "RDMA_Write BW Test"),
        ("read-bw", "RDMA_Read BW Test"),
    ] {
        for (args, size, iters) in [
            (&["-q", "64", "-s", "65536", "-n", "10"][..], 65536.0, 640.0),
            (
                &["-q", "256", "-s", "65536", "-n", "5"][..],
                65536.0,
                1280.0,
            ),
            (
                &["-q", "16", "-s", "8388608", "-n", "5"][..],
                8388608.0,
                80.0,
            ),
        ] {
            bw_test(test, title, args, size, iters);
        }
    }
}

/// Without GSO batching (`--no-gso`; the other tests run with it, the default) the same
/// data arrives: 64 KiB WRITEs and READs as single datagrams, checked end to end by the
/// loopback data check.
#[test]
fn write_and_read_bw_without_gso() {
    for (test, title) in [
        ("write-bw", "RDMA_Write BW Test"),
        ("read-bw", "RDMA_Read BW Test"),
    ] {
        bw_test(
            test,
            title,
            &["-s", "65536", "-n", "200", "--no-gso"],
            65536.0,
            200.0,
        );
    }
}

#[test]
fn read_bw() {
    bw_test(
        "read-bw",
        "RDMA_Read BW Test",
        &["-s", "4096", "-n", "300"],
        4096.0,
        300.0,
    );
}

#[test]
fn send_bw() {
    bw_test(
        "send-bw",
        "Send BW Test",
        &["-s", "10000", "-n", "300"],
        10000.0,
        300.0,
    );
}

/// `--use-srq` as perftest's: every QP receives from one shared receive queue, so a message
/// of any QP may take any QP's receive; the data check still finds each QP's messages in
/// order (checked by the QP they arrived on), and the banner says SRQ is on.
#[test]
fn send_tests_on_a_shared_receive_queue() {
    for args in [
        &["send-bw", "--use-srq", "-q", "4", "-s", "4096", "-n", "300"][..],
        &["send-lat", "--use-srq", "-s", "64", "-n", "200"][..],
    ] {
        let (out, _) = loopback(args);
        assert!(out.contains("Using SRQ      : ON "), "{out}");
        let r = rows(&out);
        assert_eq!(r.len(), 1, "{out}");
        checks_ok(&out);
        if args[0] == "send-bw" {
            assert_eq!((r[0][0], r[0][1]), (4096.0, 1200.0), "{out}");
            assert!(
                out.contains("OK (all 1200 SENDs the client posted arrived)"),
                "{out}"
            );
        }
    }
    let (out, _) = loopback(&["send-bw", "-s", "64", "-n", "50"]);
    assert!(out.contains("Using SRQ      : OFF"), "{out}");
    usage_error(
        &["write-bw", "--use-srq", "--loopback"],
        "--use-srq applies to the SEND tests",
    );
}

#[test]
fn atomic_bw_both_kinds() {
    bw_test(
        "atomic-bw",
        "Atomic FETCH_AND_ADD BW Test",
        &["-n", "300"],
        8.0,
        300.0,
    );
    bw_test(
        "atomic-bw",
        "Atomic CMP_AND_SWAP BW Test",
        &["-n", "300", "-A", "CMP_AND_SWAP"],
        8.0,
        300.0,
    );
}

#[test]
fn write_bw_two_qps_inline_gbits() {
    let (out, _) = loopback(&[
        "write-bw",
        "-q",
        "2",
        "-s",
        "64",
        "-n",
        "200",
        "-I",
        "64",
        "--report_gbits",
    ]);
    assert!(out.contains(" Number of qps   : 2"), "{out}");
    assert!(out.contains(" Max inline data : 64[B]"), "{out}");
    assert!(out.contains("BW average[Gb/sec]"), "{out}");
    assert_eq!(out.matches(" local address:").count(), 2, "{out}");
    let r = rows(&out);
    // perftest counts the iterations of all QPs.
    assert_eq!((r[0][0], r[0][1]), (64.0, 400.0), "{out}");
    checks_ok(&out);
}

/// Issue 15, item 14: a timed run measures no bandwidth peak. perftest then warns before
/// anything else and prints 0.00 in the peak column (its `noPeak`); so does softrdma, and its
/// JSON says `null` rather than a number nobody measured.
#[test]
fn write_bw_duration() {
    let (out, _) = loopback(&["write-bw", "-s", "4096", "-D", "1"]);
    assert!(
        out.starts_with(" WARNING: BW peak won't be measured in this run.\n"),
        "{out}"
    );
    let r = rows(&out);
    assert_eq!(r.len(), 1, "{out}");
    assert!(r[0][1] >= 100.0 && r[0][3] > 0.0, "{out}");
    assert_eq!(r[0][2], 0.0, "BW peak of a timed run: {out}");
    let (json, _) = loopback(&["write-bw", "-s", "4096", "-D", "1", "--json"]);
    assert!(json.contains("\"bw_peak_mbps\":null"), "{json}");
    assert!(!json.contains("WARNING"), "{json}");
}

fn lat_test(test: &str, title: &str, args: &[&str], size: f64) {
    let mut a = vec![test];
    a.extend_from_slice(args);
    let (out, _) = loopback(&a);
    check_banner(&out, title);
    assert!(out.contains(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"));
    let r = rows(&out);
    assert_eq!(r.len(), 1, "{out}");
    let v = &r[0];
    assert_eq!((v[0], v[1]), (size, 200.0), "{out}");
    let (min, max, typ, avg, p99, p999) = (v[2], v[3], v[4], v[5], v[7], v[8]);
    assert!(min > 0.0 && min <= typ && typ <= max, "{out}");
    assert!(min <= avg && avg <= max, "{out}");
    // Every figure is a sample, as in perftest.
    assert!(typ <= p99 && p99 <= p999 && p999 <= max, "{out}");
    assert!(avg < 100_000.0, "implausible latency: {out}");
}

#[test]
fn send_lat() {
    lat_test(
        "send-lat",
        "Send Latency Test",
        &["-s", "8", "-n", "200"],
        8.0,
    );
}

#[test]
fn write_lat() {
    lat_test(
        "write-lat",
        "RDMA_Write Latency Test",
        &["-s", "64", "-n", "200"],
        64.0,
    );
}

/// Who sent each packet with `opcode` in a capture, in order: 'S' for `server`'s address,
/// 'C' for the other side; read with `softrdma decode` (ACKs and other opcodes skipped, and
/// a packet sent again — a retransmission or a tail-loss probe on a loaded machine — counted
/// once: by source and PSN).
fn senders(pcap: &Path, opcode: &str, server: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("decode")
        .arg(pcap)
        .output()
        .expect("run softrdma decode");
    assert!(out.status.success(), "decode {}", pcap.display());
    let mut seen = std::collections::BTreeSet::new();
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter(|l| l.split_whitespace().nth(5) == Some(opcode))
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            seen.insert((f[2].to_owned(), f[7].to_owned()))
        })
        .map(|l| {
            let src = l.split_whitespace().nth(2).expect("source field");
            if src.starts_with(&format!("{server}:")) {
                'S'
            } else {
                'C'
            }
        })
        .collect()
}

/// perftest's `ib_write_lat` lets the *server* write first and the client wait for it
/// (`run_iter_lat_write`, unchanged since 2010); when softrdma's client wrote first instead,
/// both sides wrote first against perftest on rxe, the second WRITE overwrote the polled
/// byte before the peer saw the first, and both waited forever. The order of the WRITEs on
/// the wire between two softrdma sides must be the one between two perftests on rxe.
#[test]
fn write_lat_server_writes_first_as_perftest_on_rxe() {
    let rxe =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance/write_lat.pcap");
    // ib_write_lat -x 1 -n 10 -s 32 between two rxe guests; the server is g1.
    let want: String = "SC".repeat(10);
    assert_eq!(
        senders(&rxe, "RC_RDMA_WRITE_ONLY", "10.88.0.11"),
        want,
        "the rxe capture"
    );

    let pcap = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perf-write-lat-order.pcap");
    let _ = std::fs::remove_file(&pcap);
    let pcap_arg = pcap.to_str().expect("utf-8 path");
    let (out, _) = loopback(&["write-lat", "-n", "10", "-s", "32", "--pcap", pcap_arg]);
    checks_ok(&out);
    // --loopback: the server is 127.0.0.1, the capture is the client's device.
    assert_eq!(
        senders(&pcap, "RC_RDMA_WRITE_ONLY", "127.0.0.1"),
        want,
        "softrdma <-> softrdma"
    );
}

/// `ib_send_lat` is the other way round: the client sends first, the server waits for it
/// (`run_iter_lat_send`), and softrdma must keep that while write-lat changed.
#[test]
fn send_lat_client_sends_first_as_perftest() {
    let pcap = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perf-send-lat-order.pcap");
    let _ = std::fs::remove_file(&pcap);
    let pcap_arg = pcap.to_str().expect("utf-8 path");
    let (out, _) = loopback(&["send-lat", "-n", "10", "-s", "32", "--pcap", pcap_arg]);
    checks_ok(&out);
    assert_eq!(senders(&pcap, "RC_SEND_ONLY", "127.0.0.1"), "CS".repeat(10));
}

#[test]
fn read_lat() {
    lat_test(
        "read-lat",
        "RDMA_Read Latency Test",
        &["-s", "4096", "-n", "200"],
        4096.0,
    );
}

#[test]
fn atomic_lat() {
    lat_test(
        "atomic-lat",
        "Atomic FETCH_AND_ADD Latency Test",
        &["-n", "200"],
        8.0,
    );
}

#[test]
fn all_sizes_reduced_range() {
    let sizes: Vec<f64> = (1..=12).map(|i| f64::from(1u32 << i)).collect();
    for test in ["write-bw", "send-bw", "read-bw", "send-lat", "write-lat"] {
        let (out, _) = loopback(&[test, "-a", "--max-size", "4096", "-n", "20"]);
        let r = rows(&out);
        let got: Vec<f64> = r.iter().map(|v| v[0]).collect();
        assert_eq!(got, sizes, "{test}:\n{out}");
        if test != "write-bw" {
            checks_ok(&out);
        }
    }
}

#[test]
fn json_output() {
    let (out, _) = loopback(&["send-bw", "-s", "1024", "-n", "100", "--json"]);
    let line = out.trim();
    assert!(line.starts_with('{') && line.ends_with('}'), "{out}");
    for want in [
        "\"test\":\"send-bw\"",
        "\"role\":\"client\"",
        "\"mtu\":4096",
        "\"bytes\":1024",
        "\"iterations\":100",
        "\"bw_avg_mbps\":",
        "\"check\":\"server: OK",
    ] {
        assert!(line.contains(want), "missing {want} in {line}");
    }
    // Both devices' counters, summed: 100 SENDs plus their ACKs went each way at least, and
    // every packet sent was received (loopback loses nothing but what is retransmitted).
    let counter =
        |name: &str| -> u64 { json_u64(line, name).unwrap_or_else(|| panic!("{name}: {line}")) };
    let (sent, received) = (counter("packets_sent"), counter("packets_received"));
    assert!(sent >= 100, "{line}");
    assert!(received >= 100 && received <= sent, "{line}");
    let _ = counter("packets_retransmitted");
    // The process's peak memory and its share per QP end (one QP on each side here): at
    // least the two registered 1 KiB-message buffers, and the share is the quotient.
    assert_eq!(counter("qp_ends"), 2, "{line}");
    let rss = counter("peak_rss_bytes");
    assert!(rss > 1 << 20, "{line}");
    assert_eq!(counter("per_qp_end_bytes"), rss / 2, "{line}");
}

/// perftest's `--output`: stdout holds one figure per size, printed as `%lf` (six decimals),
/// and nothing else — no banner, table or check line — so scripts can read it directly.
/// Warnings perftest prints whatever the level (the peak not measured) come before it.
#[test]
fn output_prints_one_figure_per_result() {
    let figures = |out: &str| -> Vec<f64> {
        out.lines()
            .map(|l| {
                let (_, decimals) = l.split_once('.').unwrap_or_else(|| panic!("{l}: {out}"));
                assert_eq!(decimals.len(), 6, "{l}");
                l.parse().unwrap_or_else(|_| panic!("{l}: {out}"))
            })
            .collect()
    };
    let (out, _) = loopback(&["write-bw", "-n", "200", "--output", "bandwidth"]);
    let bw = figures(&out);
    assert!(bw.len() == 1 && bw[0] > 0.0, "{out}");
    let (out, _) = loopback(&[
        "send-bw",
        "-a",
        "--max-size",
        "64",
        "-n",
        "50",
        "--output=message_rate",
    ]);
    let rates = figures(&out);
    assert!(rates.len() == 6 && rates.iter().all(|&r| r > 0.0), "{out}");
    let (out, _) = loopback(&["send-lat", "-n", "200", "--output", "latency"]);
    let lat = figures(&out);
    assert!(lat.len() == 1 && lat[0] > 0.0, "{out}");
    let (out, _) = loopback(&["read-lat", "-D", "1", "--output", "latency"]);
    assert!(figures(&out)[0] > 0.0, "{out}");
    // A -b run prints the sum of both directions, as its table row does.
    let (out, _) = loopback(&["write-bw", "-b", "-n", "200", "--output", "bandwidth"]);
    assert!(figures(&out)[0] > 0.0, "{out}");
    // More iterations than perftest times one by one: its warning, then the figure.
    let (out, _) = loopback(&[
        "write-bw",
        "-s",
        "64",
        "-n",
        "20001",
        "--output",
        "bandwidth",
    ]);
    let (warning, figure) = out.split_once('\n').unwrap();
    assert_eq!(warning, " WARNING: BW peak won't be measured in this run.");
    assert!(figures(figure)[0] > 0.0, "{out}");
}

/// `-N` (perftest's --noPeak): the peak column is 0.00 and, asked for, not warned about.
#[test]
fn no_peak_reports_a_zero_peak_without_a_warning() {
    let (out, _) = loopback(&["write-bw", "-n", "200", "-N"]);
    let r = rows(&out);
    assert_eq!(r.len(), 1, "{out}");
    assert_eq!(r[0][2], 0.0, "{out}");
    assert!(r[0][3] > 0.0, "{out}");
    assert!(!out.contains("WARNING"), "{out}");
}

/// perftest's `-d` and `-i` name the device and its port: softrdma perf's own, `softrdma0`
/// port 1, is accepted (a script written for perftest through softrdma's libibverbs runs
/// unchanged); any other is refused, as perftest refuses a device it cannot find.
#[test]
fn device_and_port_flags_name_softrdmas_own() {
    let (out, _) = loopback(&["write-bw", "-n", "50", "-d", "softrdma0", "-i", "1"]);
    // (With --loopback the two devices of the process are softrdma0 and softrdma1.)
    assert!(out.contains("Device         : softrdma"), "{out}");
    assert_eq!(rows(&out).len(), 1, "{out}");
    usage_error(
        &["write-bw", "-d", "mlx5_0", "--loopback"],
        "IB device mlx5_0 not found",
    );
    usage_error(&["write-bw", "-i", "2", "--loopback"], "one port, 1");
}

/// `-e` (perftest's --events): the waiting thread sleeps on the CQ's completion channel
/// instead of spinning, so completions arrive by signalled wake-ups, which a spinning run
/// never needs; the banner says so, as perftest's does. Without it the client of a bandwidth
/// test spins too (its device's counters are the ones printed).
#[test]
fn events_wait_asleep_on_the_cq() {
    let cq_signals = |out: &str| -> u64 {
        let line = out
            .lines()
            .find(|l| l.contains("io.cq_signals"))
            .unwrap_or_else(|| panic!("no io.cq_signals in:\n{out}"));
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    for test in ["send-lat", "read-lat", "atomic-lat"] {
        let (out, _) = loopback(&[test, "-n", "200", "-e", "--counters"]);
        assert!(out.contains("Test with events. Using softrdma"), "{out}");
        assert_eq!(rows(&out).len(), 1, "{out}");
        assert!(cq_signals(&out) > 0, "{test} -e slept on nothing:\n{out}");
        let (out, _) = loopback(&[test, "-n", "200", "--counters"]);
        assert_eq!(cq_signals(&out), 0, "{test} without -e slept:\n{out}");
    }
    for test in ["read-bw", "send-bw"] {
        let (out, _) = loopback(&[test, "-n", "2000", "-e", "--counters"]);
        assert!(out.contains("Test with events."), "{out}");
        assert_eq!(rows(&out).len(), 1, "{out}");
        assert!(cq_signals(&out) > 0, "{test} -e slept on nothing:\n{out}");
    }
    for test in ["read-bw", "send-bw", "write-bw"] {
        let (out, _) = loopback(&[test, "-n", "2000", "--counters"]);
        assert_eq!(rows(&out).len(), 1, "{out}");
        assert_eq!(cq_signals(&out), 0, "{test}'s client slept:\n{out}");
    }
    usage_error(
        &["write-lat", "-e", "--loopback"],
        "Events feature not available on WRITE verb",
    );
    usage_error(
        &["read-lat", "-e", "-D", "1", "--loopback"],
        "Duration mode doesn't work with events",
    );
}

#[test]
fn argument_errors_are_clean() {
    usage_error(&["atomic-bw", "-s", "16", "--loopback"], "-s must be 8");
    usage_error(&["atomic-bw", "-a", "--loopback"], "-a is not supported");
    usage_error(
        &["write-bw", "-A", "CMP_AND_SWAP", "--loopback"],
        "-A applies to atomic",
    );
    usage_error(
        &["write-bw", "-D", "2", "-n", "100", "--loopback"],
        "-D and -n",
    );
    usage_error(
        &["send-lat", "-D", "2", "--loopback"],
        "does not support -D",
    );
    usage_error(
        &["write-bw", "-n", "1", "--loopback"],
        "-n must be between 5",
    );
    usage_error(
        &["write-bw", "-s", "0", "--loopback"],
        "-s must be between 1",
    );
    usage_error(
        &["write-bw", "-s", "9000000", "--loopback"],
        "-s must be between 1",
    );
    usage_error(&["write-bw", "-q", "0", "--loopback"], "-q must be between");
    usage_error(&["send-lat", "-q", "2", "--loopback"], "one QP");
    usage_error(&["read-bw", "-I", "16", "--loopback"], "-I applies");
    usage_error(&["write-bw", "-o", "4", "--loopback"], "-o applies");
    usage_error(
        &["read-bw", "-o", "200", "--loopback"],
        "-o must be between",
    );
    usage_error(
        &["write-bw", "-m", "1000", "--loopback"],
        "-m must be one of",
    );
    usage_error(&["write-bw", "-x", "3", "--loopback"], "-x must be 0");
    usage_error(
        &["write-bw", "--output", "latency", "--loopback"],
        "bandwidth or message_rate",
    );
    usage_error(
        &["read-lat", "--output", "bandwidth", "--loopback"],
        "for latency tests is latency",
    );
    usage_error(
        &["write-bw", "--output", "bandwidth", "--json", "--loopback"],
        "exclude each other",
    );
    usage_error(
        &["write-bw", "--output", "gbps", "--loopback"],
        "invalid value",
    );
    usage_error(
        &["send-lat", "-N", "--loopback"],
        "only valid for bandwidth tests",
    );
    usage_error(
        &["write-bw", "-a", "--max-size", "1000", "--loopback"],
        "--max-size",
    );
    // clap's own errors: exit 2 as well.
    usage_error(
        &["write-bw", "--loopback", "10.0.0.1"],
        "cannot be used with",
    );
    usage_error(&["write-lots", "--loopback"], "invalid value");
    usage_error(&["atomic-bw", "-A", "SWAP", "--loopback"], "invalid value");
    usage_error(&["write-bw", "--max-size", "64", "--loopback"], "--all");
    // Issue 15, item 1: -D near u64::MAX panicked adding it to the clock.
    usage_error(
        &["write-bw", "-D", "18446744073709551615", "--loopback"],
        "-D must be between 1 and 2147483647",
    );
    usage_error(
        &["read-lat", "-D", "2147483648", "--loopback"],
        "-D must be between 1 and 2147483647",
    );
    for t in ["inf", "NaN", "1e30", "-5"] {
        usage_error(
            &["write-bw", &format!("--timeout={t}"), "--loopback"],
            "invalid value",
        );
    }
    // A device on an IPv6 link-local address has GID index 0 only.
    usage_error(
        &["write-bw", "-x", "1", "--bind", "fe80::1"],
        "has one GID, index 0",
    );
}

/// GID index 0 is the device's address, as index 1 is (issue 15, item 5 refused `-x 0`, which
/// was the link-local GID the device cannot send from; issue 34 made index 0 usable).
#[test]
fn write_bw_from_gid_index_0() {
    let (out, _) = loopback(&["write-bw", "-x", "0", "-s", "4096", "-n", "100"]);
    assert!(out.contains(" GID index       : 0"), "{out}");
    assert!(
        out.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01"),
        "{out}"
    );
    checks_ok(&out);
}

#[test]
fn unreachable_server_is_a_clean_failure() {
    // Nothing listens on this port of the loopback address.
    let out = perf(&["write-bw", "127.0.0.1", "-p", "9"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot connect to 127.0.0.1:9"), "{stderr}");
}

/// A write-lat whose WRITEs get no answer fails with the completion error as soon as the
/// retries run out, not 30 s later with "is the peer still running?": waiting for the peer's
/// WRITE, it also watches its own send queue (the QP is in the error state, nothing more can
/// come). The peer here is a perftest client that completes the out-of-band exchange but
/// whose GID (127.0.0.3) has no RoCE device behind it.
#[test]
fn write_lat_reports_a_failed_write_while_waiting() {
    use softrdma_cm::Gid;
    use softrdma_oob::perftest::{PerftestDest, PerftestSession, SysData};
    use std::net::{Ipv4Addr, TcpListener};
    use std::time::{Duration, Instant};

    let _guard = LOOPBACK.lock().unwrap_or_else(|e| e.into_inner());
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    // The server writes first in write-lat.
    let mut server = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(["perf", "write-lat", "--bind", "127.0.0.1", "-p", &port])
        .args(["-n", "5", "-s", "32"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run softrdma");
    let start = Instant::now();
    let mut sess = loop {
        match PerftestSession::connect(("127.0.0.1", port.parse::<u16>().unwrap())) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the softrdma server did not listen: {e}"),
        }
    };
    sess.exchange_versions().unwrap();
    sess.exchange_sys_data(SysData::default()).unwrap();
    sess.exchange_mtu(3).unwrap();
    let nobody = PerftestDest {
        out_reads: 1,
        qpn: 0x11,
        psn: 0x123,
        rkey: 0x202,
        vaddr: 0x10_0000,
        gid: Gid::from_ipv4_mapped(Ipv4Addr::new(127, 0, 0, 3)),
        ..PerftestDest::default()
    };
    for _ in 0..4 {
        sess.exchange_keys(&nobody).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = server.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = server.kill();
            panic!("softrdma still waits for the peer's WRITE after its own WRITE failed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = server.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("send failed: transport retry counter exceeded (RetryExcErr)"),
        "{stderr}"
    );
    drop(sess);
}

/// Runs `softrdma perf` with piped output.
fn spawn_perf(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("perf")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn softrdma")
}

/// Waits at most `limit` for `child` to exit (killing it if it does not) and returns its
/// status and stderr; `None` if it had to be killed.
fn wait_bounded(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<(std::process::ExitStatus, String)> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return Some((status, err));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Reads `child`'s stdout until a line satisfies `stop`; returns the lines read.
fn read_until(child: &mut std::process::Child, stop: impl Fn(&str) -> bool) -> Vec<String> {
    use std::io::BufRead;
    let out = child.stdout.as_mut().expect("piped stdout");
    let mut lines = Vec::new();
    for l in std::io::BufReader::new(out).lines() {
        let l = l.expect("utf-8");
        let done = stop(&l);
        lines.push(l);
        if done {
            break;
        }
    }
    lines
}

/// Issue 15, item 4: a perf server whose client froze (SIGSTOP) mid-run waits for it as
/// perftest does — but with `--timeout SECS` it gives up once the client showed no sign of
/// life (no out-of-band message, no RoCEv2 packet) for that long; and waiting for a client
/// that never comes is bounded the same way.
#[test]
fn perf_server_gives_up_on_a_frozen_client_with_timeout() {
    let mut server = spawn_perf(&[
        "write-bw",
        "--bind",
        "127.0.66.1",
        "-p",
        "19801",
        "-s",
        "4096",
        "-D",
        "30",
        "--timeout",
        "2",
    ]);
    read_until(&mut server, |l| l.contains("Waiting for client"));
    let mut client = spawn_perf(&[
        "write-bw",
        "127.0.66.1",
        "--bind",
        "127.0.66.2",
        "-p",
        "19801",
        "-s",
        "4096",
        "-D",
        "30",
    ]);
    read_until(&mut client, |l| l.starts_with(" #bytes"));
    let pid = client.id().to_string();
    let stop = Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    assert!(stop.success());
    let outcome = wait_bounded(&mut server, std::time::Duration::from_secs(20));
    let _ = Command::new("kill").args(["-CONT", &pid]).status();
    let _ = client.kill();
    let _ = client.wait();
    let (status, err) = outcome.expect("the server still waited for its frozen client");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("the peer showed no sign of life for 2 s"),
        "{err}"
    );

    let mut lonely = spawn_perf(&[
        "write-bw",
        "--bind",
        "127.0.66.3",
        "-p",
        "19802",
        "--timeout",
        "1",
    ]);
    let (status, err) = wait_bounded(&mut lonely, std::time::Duration::from_secs(20))
        .expect("a server without a client waited beyond --timeout");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("waiting for a client: no connection within 1 s"),
        "{err}"
    );
}

/// Issue 15, item 13: a forged packet that breaks a connection — here a WRITE with a bogus
/// rkey, spoofed from the server's address to the client's QP with exactly the PSN the
/// client's responder expects (the passive server never sends requests, so that is the PSN
/// the banner shows) — leaves the client only flushed requests. The error says so instead of
/// naming the flush, and the device's counters, printed on the failure, show the cause.
#[test]
fn perf_failure_names_the_cause_and_prints_counters() {
    use softrdma_wire::{
        emit_headers, packet_len, Bth, ExtHeaders, IcrcContext, Opcode, Psn, Reth,
    };
    let _guard = LOOPBACK.lock().unwrap_or_else(|e| e.into_inner());
    let mut perf = spawn_perf(&["write-bw", "--loopback", "-s", "65536", "-n", "100000"]);
    let lines = read_until(&mut perf, |l| l.starts_with(" GID: ") && l.ends_with(":01"));
    let field = |prefix: &str, name: &str| {
        let l = lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {lines:?}"));
        let v = l
            .split(name)
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap();
        u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
    };
    let qpn = field(" local address:", "QPN ");
    let psn = field(" remote address:", "PSN ");
    let spoofer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let src = spoofer.local_addr().unwrap();
    let dst: std::net::SocketAddr = "127.0.0.2:4791".parse().unwrap();
    let ext = ExtHeaders {
        reth: Some(Reth {
            va: 0x1000,
            rkey: 0x00be_ef01,
            dma_len: 8,
        }),
        ..ExtHeaders::default()
    };
    let mut bth = Bth::new(Opcode::RC_RDMA_WRITE_ONLY, qpn, Psn::new(psn));
    bth.ack_req = true;
    let mut pkt = vec![0u8; packet_len(bth.opcode, 8)];
    emit_headers(&bth, &ext, 8, &mut pkt);
    IcrcContext::new(src.ip(), dst.ip(), src.port(), dst.port())
        .fill(&mut pkt)
        .unwrap();
    spoofer.send_to(&pkt, dst).unwrap();
    let (status, err) =
        wait_bounded(&mut perf, std::time::Duration::from_secs(60)).expect("perf did not fail");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("RDMA WRITE failed: "), "{err}");
    assert!(err.contains("without a failed request of its own"), "{err}");
    assert!(
        err.contains("device counters at the failure (non-zero):"),
        "{err}"
    );
    let naks = err
        .lines()
        .find(|l| l.trim_start().starts_with("naks_sent.remote_access "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(naks.trim_end().ends_with(" 1"), "{naks}");
}
