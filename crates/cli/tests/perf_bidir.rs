//! End-to-end tests of `softrdma perf -b` (perftest's `--bidirectional`) and
//! `--perform_warm_up`, each run a `--loopback` pair over real UDP and TCP on 127.0.0.1 and
//! 127.0.0.2, as a user runs it. Verified: both sides' figures (the JSON's `bidirectional`
//! part) and that each printed row is their sum, as perftest prints it; that messages really
//! went both ways (the client's device counters: what it sent and what the server sent it);
//! that warm-up messages go on the wire but not into the figures; the data checks on both
//! sides; and the refusals (exit 2, naming the flag).

#[path = "common/perf_run.rs"]
mod perf_run;
use perf_run::{json_u64, loopback, usage_error};

/// The objects of the JSON array that follows `"key":[` (flat objects, as `--json` prints).
fn objects(json: &str, key: &str) -> Vec<String> {
    let at = json
        .find(&format!("\"{key}\":["))
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    let rest = &json[at + key.len() + 4..];
    let body = &rest[..rest.find(']').unwrap_or_else(|| panic!("{key}: {json}"))];
    if body.is_empty() {
        return Vec::new();
    }
    body.trim_matches(|c| c == '{' || c == '}')
        .split("},{")
        .map(str::to_owned)
        .collect()
}

/// The number after `"key":` in `obj` (`null` is NaN).
fn num(obj: &str, key: &str) -> f64 {
    let at = obj
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {obj}"));
    let rest = &obj[at + key.len() + 3..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    match &rest[..end] {
        "null" => f64::NAN,
        v => v.parse().unwrap_or_else(|e| panic!("{key}={v}: {e}")),
    }
}

/// A device counter of `--counters` (0 when absent: opcode counters are listed if non-zero).
fn counter(json: &str, name: &str) -> u64 {
    json_u64(json, name).unwrap_or(0)
}

/// `perf ARGS --json --counters --loopback`: the JSON line.
fn json_run(args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.extend(["--json", "--counters"]);
    let (out, _) = loopback(&a);
    let line = out.trim().to_owned();
    assert!(line.starts_with('{') && line.ends_with('}'), "{out}");
    line
}

/// Each result row of a `-b` run is this side's figures plus the peer's, exactly (perftest's
/// `print_full_bw_report`: peaks, averages and message rates added; size and iterations this
/// side's); both sides ran `iters` messages per QP of every size in `sizes`.
fn sums_both_directions(json: &str, sizes: &[f64], iters: f64) {
    let (results, local, remote) = (
        objects(json, "results"),
        objects(json, "local"),
        objects(json, "remote"),
    );
    assert_eq!(results.len(), sizes.len(), "{json}");
    assert_eq!(
        (local.len(), remote.len()),
        (sizes.len(), sizes.len()),
        "{json}"
    );
    for (((r, l), m), &size) in results.iter().zip(&local).zip(&remote).zip(sizes) {
        for o in [r, l, m] {
            assert_eq!(
                (num(o, "bytes"), num(o, "iterations")),
                (size, iters),
                "{json}"
            );
        }
        for key in ["bw_peak_mbps", "bw_avg_mbps", "msg_rate_mpps"] {
            let (sum, a, b) = (num(r, key), num(l, key), num(m, key));
            assert_eq!(sum, a + b, "{key}: {json}");
        }
        // Both directions moved data: each side measured a rate of its own.
        assert!(
            num(l, "bw_avg_mbps") > 0.0 && num(m, "bw_avg_mbps") > 0.0,
            "{json}"
        );
    }
    // Both sides' data checks ran and passed.
    assert!(json.contains("\"check\":\"client: OK"), "{json}");
    assert!(json.contains("; server: OK"), "{json}");
    assert!(!json.contains("failed"), "{json}");
}

/// WRITE, READ, SEND and atomic bandwidth with `-b`: the rows are the sums, and the client's
/// device both sent its requests and received (or served) as many of the server's — where a
/// unidirectional run's client receives none.
#[test]
fn bidirectional_runs_move_data_both_ways_and_report_the_sum() {
    let n = 200u64;
    for (test, size, sent_op, served) in [
        ("write-bw", "4096", "RC_RDMA_WRITE_ONLY", None),
        (
            "read-bw",
            "4096",
            "RC_RDMA_READ_REQUEST",
            Some("reads_served"),
        ),
        ("send-bw", "4096", "RC_SEND_ONLY", None),
        ("atomic-bw", "8", "RC_FETCH_ADD", Some("atomics_executed")),
    ] {
        let json = json_run(&[test, "-b", "-s", size, "-n", "200"]);
        sums_both_directions(&json, &[size.parse().unwrap()], n as f64);
        // Requests this side sent (retransmissions aside) and the server's it received.
        let retx = counter(&json, "retransmitted_packets");
        let sent = counter(&json, &format!("tx_opcode.{sent_op}"));
        assert!(sent >= n && sent - n <= retx, "{test}: {json}");
        assert!(
            counter(&json, &format!("rx_opcode.{sent_op}")) >= n,
            "{test}: {json}"
        );
        if let Some(c) = served {
            // Each of the server's requests served once, and a READ it sent again (a response
            // late on a loaded machine, taken for a loss) once more, as IBTA asks; a repeated
            // atomic is answered from the responder's cache, not executed again.
            let served = counter(&json, c);
            let again = counter(&json, "duplicate_requests");
            assert!(served >= n && served - n <= again, "{test}: {json}");
        }
        // Unidirectional, the client receives no requests at all.
        let uni = json_run(&[test, "-s", size, "-n", "200"]);
        assert_eq!(counter(&uni, &format!("rx_opcode.{sent_op}")), 0, "{uni}");
        assert!(!uni.contains("\"bidirectional\""), "{uni}");
    }
}

/// The text is perftest's: the banner says Bidirectional and shows the TX depth (and for
/// SEND the RX depth) on both sides, and the one row is the sum both sides print.
#[test]
fn bidirectional_text_output() {
    let (out, _) = loopback(&["send-bw", "-b", "-s", "1024", "-n", "300", "-q", "2"]);
    for want in [
        "                    Send Bidirectional BW Test",
        " TX depth        : 128",
        " RX depth        : 300",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
        " Data check      : OK (",
        "OK (all 600 SENDs the peer posted arrived)",
        " Data check (server side): OK (",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let rows: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with(" #bytes"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .collect();
    assert_eq!(rows.len(), 1, "{out}");
    let f: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!((f[0], f[1]), ("1024", "600"), "{out}");
}

/// `-b` with every size (`-a`), several QPs, UC and UD SENDs (which need receives on both
/// sides), a shared receive queue and rdma_cm (`-R`): every size's row is the sum, both
/// sides' checks pass.
#[test]
fn bidirectional_combinations() {
    let sizes: Vec<f64> = (1..=10).map(|i| f64::from(1u32 << i)).collect();
    let json = json_run(&["write-bw", "-b", "-a", "--max-size", "1024", "-n", "20"]);
    sums_both_directions(&json, &sizes, 20.0);
    let json = json_run(&[
        "send-bw",
        "-b",
        "-a",
        "--max-size",
        "1024",
        "-n",
        "20",
        "-q",
        "2",
    ]);
    sums_both_directions(&json, &sizes, 40.0);
    for (conn, op) in [("UC", "UC_SEND_ONLY"), ("UD", "UD_SEND_ONLY")] {
        let json = json_run(&["send-bw", "-b", "-c", conn, "-s", "1024", "-n", "300"]);
        sums_both_directions(&json, &[1024.0], 300.0);
        assert!(counter(&json, &format!("rx_opcode.{op}")) > 0, "{json}");
        assert!(counter(&json, &format!("tx_opcode.{op}")) >= 300, "{json}");
    }
    let json = json_run(&[
        "send-bw",
        "-b",
        "--use-srq",
        "-q",
        "4",
        "-s",
        "512",
        "-n",
        "100",
    ]);
    sums_both_directions(&json, &[512.0], 400.0);
    for test in ["write-bw", "send-bw", "read-bw"] {
        let json = json_run(&[test, "-b", "-R", "-q", "2", "-s", "4096", "-n", "100"]);
        sums_both_directions(&json, &[4096.0], 200.0);
    }
    // Timed: each side counts what it sent in its own second.
    let json = json_run(&["write-bw", "-b", "-D", "1", "-s", "4096"]);
    let (l, m) = (&objects(&json, "local")[0], &objects(&json, "remote")[0]);
    assert!(
        num(l, "iterations") > 0.0 && num(m, "iterations") > 0.0,
        "{json}"
    );
    let r = &objects(&json, "results")[0];
    assert_eq!(
        num(r, "bw_avg_mbps"),
        num(l, "bw_avg_mbps") + num(m, "bw_avg_mbps")
    );
}

/// `--perform_warm_up`: each QP first sends a send queue's worth (-t) of messages that the
/// figures leave out; atomics among them are counted by the data check (the targets add up
/// to the measured and the warm-up atomics), with and without `-b`.
#[test]
fn warm_up_goes_on_the_wire_but_not_into_the_figures() {
    let (n, t, q) = (50u64, 16u64, 2u64);
    for (test, size, op) in [
        ("write-bw", "4096", "RC_RDMA_WRITE_ONLY"),
        ("read-bw", "4096", "RC_RDMA_READ_REQUEST"),
        ("atomic-bw", "8", "RC_FETCH_ADD"),
    ] {
        let json = json_run(&[
            test,
            "--perform_warm_up",
            "-t",
            "16",
            "-q",
            "2",
            "-s",
            size,
            "-n",
            "50",
        ]);
        let r = &objects(&json, "results")[0];
        assert_eq!(num(r, "iterations"), (n * q) as f64, "{json}");
        let retx = counter(&json, "retransmitted_packets");
        let sent = counter(&json, &format!("tx_opcode.{op}"));
        assert!(
            sent >= (n + t) * q && sent - (n + t) * q <= retx,
            "{test}: {json}"
        );
        assert!(json.contains("\"check\":\"client: OK") || json.contains("server: OK"));
        assert!(!json.contains("failed"), "{json}");
    }
    let (out, _) = loopback(&[
        "atomic-bw",
        "--perform_warm_up",
        "-t",
        "16",
        "-q",
        "2",
        "-n",
        "50",
    ]);
    assert!(
        out.contains(
            "OK (the atomic targets add up to 132 for the 132 FETCH_AND_ADD the client posted)"
        ),
        "{out}"
    );
    // A counted run warms up with at most its iterations per QP, as perftest (which lowers
    // its send queue depth to them).
    let (out, _) = loopback(&["atomic-bw", "--perform_warm_up", "-n", "10", "-q", "2"]);
    assert!(
        out.contains("add up to 40 for the 40 FETCH_AND_ADD the client posted"),
        "{out}"
    );
    let json = json_run(&[
        "atomic-bw",
        "-b",
        "--perform_warm_up",
        "-t",
        "16",
        "-n",
        "50",
    ]);
    sums_both_directions(&json, &[8.0], 50.0);
    assert!(
        json.contains("add up to 66 for the 66 FETCH_AND_ADD the peer posted"),
        "{json}"
    );
    assert_eq!(counter(&json, "atomics_executed"), 66, "{json}");
}

#[test]
fn refused_combinations_are_usage_errors() {
    for t in ["write-lat", "read-lat", "send-lat", "atomic-lat"] {
        usage_error(
            &[t, "-b", "--loopback"],
            "-b (--bidirectional) applies to the bandwidth",
        );
    }
    usage_error(
        &["send-bw", "--bidirectional", "-D", "2", "--loopback"],
        "send-bw -b with -D",
    );
    for t in ["send-bw", "write-lat", "send-lat", "read-lat", "atomic-lat"] {
        usage_error(
            &[t, "--perform_warm_up", "--loopback"],
            "--perform_warm_up applies",
        );
    }
}
