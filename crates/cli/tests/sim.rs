//! End-to-end tests of `softrdma sim`: the binary is run as a user runs it; the JSON line,
//! the capture it writes and the exit status are checked.

use std::path::PathBuf;
use std::process::{Command, Output};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("sim")
        .args(args)
        .output()
        .expect("run softrdma")
}

/// The value of `"key":<number>` in the last line (the JSON object).
fn json_number(out: &Output, key: &str) -> u64 {
    let text = String::from_utf8(out.stdout.clone()).expect("utf-8");
    let last = text.lines().last().expect("output");
    assert!(
        last.starts_with('{') && last.ends_with('}'),
        "last line is not JSON: {last}"
    );
    let pat = format!("\"{key}\":");
    let at = last
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {last}"))
        + pat.len();
    let digits: String = last[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {last}"))
}

/// The acceptance run of issue 3, exactly (about 1.5 s in a debug build, 0.1 s in release).
#[test]
fn sim_with_all_faults_passes_and_retransmits() {
    let ops = "20000";
    let out = sim(&[
        "--seed",
        "1",
        "--loss",
        "0.05",
        "--dup",
        "0.02",
        "--reorder",
        "0.05",
        "--corrupt",
        "0.01",
        "--ops",
        ops,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let n: u64 = ops.parse().unwrap();
    assert_eq!(json_number(&out, "seed"), 1);
    assert_eq!(json_number(&out, "ops_posted"), n);
    assert_eq!(json_number(&out, "ops_completed"), n);
    assert_eq!(json_number(&out, "ops_ok"), n);
    assert_eq!(json_number(&out, "mismatches"), 0);
    assert!(json_number(&out, "retransmissions") > 0);
    assert!(json_number(&out, "packets_dropped") > 0);
    assert!(json_number(&out, "packets_duplicated") > 0);
    let corrupted = json_number(&out, "packets_corrupted");
    assert!(corrupted > 0);
    // Every corrupted datagram is caught by the receiver's ICRC check (barring the known
    // one-in-2^15 IPv4-ID aliasing of verify_unknown_id, which this seed does not hit).
    assert_eq!(json_number(&out, "icrc_drops"), corrupted);
    assert!(json_number(&out, "virtual_time_us") > 0);
}

#[test]
fn sim_is_deterministic_and_writes_a_decodable_capture() {
    let dir = std::env::temp_dir().join(format!("softrdma-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap: PathBuf = dir.join("run.pcap");
    let args = [
        "--seed", "7", "--nodes", "3", "--qps", "1", "--ops", "200", "--mtu", "256", "--loss",
        "0.02", "--json", "--pcap",
    ];
    let mut a = args.to_vec();
    a.push(pcap.to_str().unwrap());
    let first = sim(&a);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stdout)
    );
    let second = sim(&a);
    let strip = |o: &Output| {
        // Wall-clock figures and the peak RSS differ between runs; everything else must not.
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.starts_with("time:") && !l.starts_with("memory: peak RSS"))
            .map(|l| l.split(",\"peak_rss_mib\"").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&first), strip(&second));
    // The capture is sender-side: every ICRC verifies, so `softrdma decode` exits 0.
    let decoded = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(["decode", "--quiet"])
        .arg(&pcap)
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&decoded.stdout);
    assert!(decoded.status.success(), "{summary}");
    let sent = json_number(&first, "packets_sent");
    assert!(
        summary.contains(&format!(
            "packets: {sent}, roce: {sent}, icrc_ok: {sent}, icrc_bad: 0"
        )),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sim_rejects_bad_arguments() {
    for bad in [
        &["--delay-us", "18446744073709551615"][..],
        &["--bandwidth-gbps", "18446744073709551615"],
        &["--ops", "18446744073709551615"],
        &["--max-memory", "0"],
    ] {
        let o = sim(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("invalid value"));
    }
    assert_eq!(sim(&["--loss", "1.5"]).status.code(), Some(2));
    assert_eq!(sim(&["--mtu", "1500"]).status.code(), Some(2));
    assert_eq!(
        sim(&["--pcap", "/nonexistent-dir/x.pcap", "--ops", "1"])
            .status
            .code(),
        Some(2)
    );
}

/// UD (unicast and multicast) and UC beside RC under loss, duplication, reordering and
/// corruption: messages are lost, never corrupted, half-delivered, or (UC) repeated.
#[test]
fn sim_ud_and_uc_lose_but_never_corrupt() {
    let out = sim(&[
        "--seed",
        "3",
        "--nodes",
        "3",
        "--loss",
        "0.05",
        "--dup",
        "0.02",
        "--reorder",
        "0.05",
        "--corrupt",
        "0.01",
        "--ops",
        "500",
        "--ud",
        "400",
        "--uc",
        "400",
        "--json",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(json_number(&out, "datagram_mismatches"), 0);
    let (ud_sent, ud_delivered) = (
        json_number(&out, "ud_sent"),
        json_number(&out, "ud_delivered"),
    );
    let (uc_sent, uc_delivered) = (
        json_number(&out, "uc_sent"),
        json_number(&out, "uc_delivered"),
    );
    let mcast_expected = json_number(&out, "mcast_expected");
    assert_eq!(
        ud_sent + json_number(&out, "mcast_sent"),
        400,
        "every UD SEND completes"
    );
    assert_eq!(uc_sent, 400, "every UC operation completes at its sender");
    assert!(mcast_expected > 0, "three nodes: multicast runs");
    assert!(ud_delivered < ud_sent && json_number(&out, "ud_lost") == ud_sent - ud_delivered);
    assert!(uc_delivered < uc_sent && json_number(&out, "uc_lost") == uc_sent - uc_delivered);
    assert!(
        ud_delivered > ud_sent / 2 && uc_delivered > uc_sent / 2,
        "{text}"
    );
    // The same seed replays the same run.
    let again = sim(&[
        "--seed",
        "3",
        "--nodes",
        "3",
        "--loss",
        "0.05",
        "--dup",
        "0.02",
        "--reorder",
        "0.05",
        "--corrupt",
        "0.01",
        "--ops",
        "500",
        "--ud",
        "400",
        "--uc",
        "400",
        "--json",
    ]);
    // Everything but what the host measures (wall-clock time, peak RSS).
    let strip = |o: &Output| {
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        let last = t.lines().last().unwrap_or_default().to_string();
        last.split(',')
            .filter(|f| !f.starts_with("\"peak_rss_mib\"") && !f.starts_with("\"wall_ms\""))
            .collect::<Vec<_>>()
            .join(",")
    };
    assert!(strip(&out).contains("\"uc_lost\""));
    assert_eq!(strip(&out), strip(&again));
}

/// Issue 15, item 10: 10,100 simulated QPs (101 nodes, every pair connected once, both ends
/// post) run in well under 2 GB — a QP end used to cost about 230 KB, so this run took about
/// 2.3 GB, and `--nodes 250 --qps 1` 14 GB. The estimate is printed first and the peak RSS at
/// the end.
#[test]
fn ten_thousand_qps_fit_in_two_gigabytes() {
    let o = sim(&["--nodes", "101", "--qps", "1", "--ops", "5000", "--json"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.starts_with("memory: estimated ")
            && out.lines().next().unwrap().contains(" for 10100 QP ends "),
        "{out}"
    );
    let rss = json_number(&o, "peak_rss_mib");
    let estimate = json_number(&o, "memory_estimate_mib");
    assert!(rss < 2048, "10,100 QPs took {rss} MiB");
    assert!(
        rss <= estimate,
        "the estimate ({estimate} MiB) is below the peak ({rss} MiB)"
    );
}

/// Runs that cannot fit are refused before anything is allocated, with the estimate and what
/// to change; exit status 2.
#[test]
fn runs_that_cannot_fit_are_refused() {
    let o = sim(&["--nodes", "100", "--qps", "64", "--max-memory", "2048"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("this run needs an estimated ")
            && err.contains(
                "more than the 2048 MiB --max-memory (633600 QP ends: 100 nodes, 64 QPs per pair"
            )
            && err.contains("use fewer --nodes, --qps or --ops"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// `--errors`: a share of failing operations, every one as the model predicts, tallied by
/// status in the JSON; the run passes (exit 0) with `"mismatches":0`, loss-free and lossy.
#[test]
fn sim_errors_are_predicted_and_tallied_by_status() {
    for extra in [
        &[][..],
        &["--loss", "0.02", "--dup", "0.01", "--reorder", "0.05"][..],
    ] {
        let mut args = vec!["--seed", "5", "--ops", "400", "--errors", "0.05", "--json"];
        args.extend_from_slice(extra);
        let out = sim(&args);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(json_number(&out, "mismatches"), 0);
        let text = String::from_utf8(out.stdout.clone()).unwrap();
        let last = text.lines().last().unwrap();
        let at = last
            .find("\"completions_by_status\":{")
            .expect("the status map")
            + 25;
        let map = &last[at..at + last[at..].find('}').unwrap()];
        // 20 failing operations (5 % of 400): each a remote access error, an RNR or a
        // transport retry exhaustion, with flushed work after it.
        let count = |k: &str| -> u64 {
            map.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("\"{k}\":")))
                .map_or(0, |v| v.parse().unwrap())
        };
        let failures = count("remote_access_error")
            + count("rnr_retry_exceeded_error")
            + count("retry_exceeded_error");
        assert!(failures >= 20, "{map}");
        assert!(count("wr_flush_error") >= 20, "{map}");
        assert!(count("success") >= 400, "{map}");
        assert!(text.contains("errors: 20 ("), "{text}");
    }
}

/// `softrdma sim incast`: one JSON line with every figure, the same bytes for the same seed;
/// a capture whose CNPs `softrdma decode` names and tshark reads without complaint; a plot.
#[test]
fn sim_incast_json_capture_and_plot() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (pcap, svg) = (dir.join("incast.pcap"), dir.join("incast.svg"));
    let args = ["incast", "--senders", "4", "--duration-ms", "2", "--json"];
    let a = sim(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(a.stdout, sim(&args).stdout, "one seed, one result");
    for key in [
        "utilization",
        "jain",
        "queue_p99_bytes",
        "queue_max_bytes",
        "drops",
        "pause_frames",
        "cnps",
        "retransmissions",
        "fct_p99_us",
        "mismatches",
    ] {
        let text = String::from_utf8_lossy(&a.stdout);
        assert!(text.contains(&format!("\"{key}\":")), "{key} in {text}");
    }
    assert_eq!(json_number(&a, "mismatches"), 0);
    let cnps = json_number(&a, "cnps");
    assert!(cnps > 0);

    let out = sim(&[
        "incast",
        "--senders",
        "4",
        "--duration-ms",
        "1",
        "--pcap",
        pcap.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    let decoded = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8(decoded.stdout).unwrap();
    let cnp_lines: Vec<&str> = text.lines().filter(|l| l.contains(" CNP ")).collect();
    assert!(!cnp_lines.is_empty(), "{text}");
    assert!(cnp_lines
        .iter()
        .all(|l| l.contains("psn=0x000000 becn payload=0 icrc=ok")));
    assert!(text.contains("ecn=CE"), "switches marked packets");
    assert!(text.ends_with("icrc_bad: 0, malformed: 0\n"), "{text}");
    let tshark = |filter: &str| {
        Command::new("tshark")
            // Wireshark's RPC-over-RDMA heuristic takes the workload's SENDs for RPC and
            // calls them malformed; it has nothing to do with RoCE.
            .args(["--disable-protocol", "rpcordma", "-r"])
            .arg(&pcap)
            .args(["-Y", filter])
            .output()
    };
    match tshark("_ws.malformed") {
        Ok(o) if o.status.success() => {
            assert!(
                o.stdout.is_empty(),
                "{}",
                String::from_utf8_lossy(&o.stdout)
            );
            let cnp = tshark("infiniband.bth.opcode == 0x81").unwrap();
            let n = String::from_utf8_lossy(&cnp.stdout).lines().count();
            assert_eq!(n, cnp_lines.len(), "tshark sees every CNP");
        }
        _ => eprintln!("tshark half skipped: tshark not installed"),
    }
}

#[test]
fn sim_incast_usage_errors() {
    let out = sim(&["incast", "--kmin-kb", "300", "--kmax-kb", "200"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kmin-kb must be below"));
    let out = sim(&["incast", "--pmax", "2"]);
    assert_eq!(out.status.code(), Some(2));
}
