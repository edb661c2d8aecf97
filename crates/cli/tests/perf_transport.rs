//! End-to-end tests of `softrdma perf -c UC|UD` (perftest's `--connection`): each run is a
//! `--loopback` pair over real UDP on 127.0.0.1/127.0.0.2, as a user runs it; the banner,
//! the table, the data check (every message intact, UC/UD losses counted, never a corrupt
//! one) and, for UD, the packets on the wire are verified. perftest's refusals are usage
//! errors (exit 2).

use std::path::Path;
use std::process::Command;

#[path = "common/perf_run.rs"]
mod perf_run;
use perf_run::{loopback, perf, usage_error, LOOPBACK};

/// The (bytes, iterations) of each row of the result table.
fn rows(stdout: &str) -> Vec<(u64, u64)> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with(" #bytes"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap())
        })
        .collect()
}

/// The banner names the connection type, and every data check line says OK.
fn banner_and_checks(stdout: &str, connection: &str) {
    let want = format!(" Connection type : {connection}\t\tUsing SRQ      : OFF");
    assert!(stdout.contains(&want), "no {want:?} in:\n{stdout}");
    let checks: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("Data check"))
        .collect();
    assert!(!checks.is_empty(), "no data check in:\n{stdout}");
    for l in checks {
        assert!(l.contains(": OK"), "{l}");
        assert!(!l.contains("not done"), "{l}");
    }
}

/// How many SENDs the server's check says arrived, and of how many posted.
fn sends_arrived(stdout: &str) -> (u64, u64) {
    let l = stdout
        .lines()
        .find(|l| l.contains("Data check (server side)"))
        .unwrap_or_else(|| panic!("no server check in:\n{stdout}"));
    if let Some(rest) = l.split("OK (all ").nth(1) {
        let n = rest.split(' ').next().unwrap().parse().unwrap();
        return (n, n);
    }
    let rest = l.split("; OK (").nth(1).expect("counts");
    let got = rest.split(' ').next().unwrap().parse().unwrap();
    let posted = rest.split("of the ").nth(1).unwrap().split(' ').next();
    (got, posted.unwrap().parse().unwrap())
}

/// UD SEND bandwidth: the default size (65536) becomes the path MTU (4096 on loopback), as
/// perftest's `check_mtu` does; every message is one UD SEND ONLY carrying perftest's Q_Key; the server's
/// check sees every sampled message intact and counts what arrived.
#[test]
fn ud_send_bw_loopback() {
    let pcap = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perf-ud-send-bw.pcap");
    let (out, err) = loopback(&[
        "send-bw",
        "-c",
        "UD",
        "-n",
        "400",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    banner_and_checks(&out, "UD");
    assert!(out.contains(" Mtu             : 4096[B]"), "{out}");
    assert_eq!(rows(&out), vec![(4096, 400)], "{out}");
    // No size was asked for: perftest shrinks its default, and says so.
    assert!(
        err.contains(" Max msg size in UD is MTU 4096\n Changing to this MTU"),
        "{err}"
    );
    let (got, posted) = sends_arrived(&out);
    assert_eq!(posted, 400, "{out}");
    assert!(got > 0 && got <= posted, "{out}");
    let d = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(d.status.success());
    let text = String::from_utf8_lossy(&d.stdout);
    let sends: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" UD_SEND_ONLY "))
        .collect();
    // The client's tap sees every SEND it sent.
    assert_eq!(sends.len(), 400, "{text}");
    for l in sends {
        assert!(l.contains("DETH[qkey=0x11111111 "), "{l}");
        assert!(l.contains("payload=4096 "), "{l}");
    }
    assert!(text.contains("icrc_bad: 0, malformed: 0"), "{text}");
}

/// UD SEND latency with an explicit size below the MTU; every message checked.
#[test]
fn ud_send_lat_loopback() {
    let (out, _) = loopback(&["send-lat", "-c", "UD", "-s", "64", "-n", "200"]);
    banner_and_checks(&out, "UD");
    assert_eq!(rows(&out), vec![(64, 200)], "{out}");
    assert!(out.contains("every message verified"), "{out}");
}

/// `-a` with UD stops at the path MTU, with perftest's note.
#[test]
fn ud_all_sizes_stop_at_the_mtu() {
    let (out, err) = loopback(&["send-lat", "-c", "UD", "-a", "-n", "5"]);
    banner_and_checks(&out, "UD");
    let sizes: Vec<u64> = rows(&out).iter().map(|r| r.0).collect();
    assert_eq!(
        sizes,
        (1..=12).map(|i| 1u64 << i).collect::<Vec<_>>(),
        "{out}"
    );
    assert!(
        err.contains(" Max msg size in UD is MTU 4096\n Changing to this MTU"),
        "{err}"
    );
}

/// UC RDMA WRITE bandwidth: the passive server finds an intact stamped WRITE at every
/// target position.
#[test]
fn uc_write_bw_loopback() {
    let (out, _) = loopback(&["write-bw", "-c", "UC", "-s", "4096", "-n", "500"]);
    banner_and_checks(&out, "UC");
    assert_eq!(rows(&out), vec![(4096, 500)], "{out}");
    assert!(out.contains("WRITEs stamped"), "{out}");
}

/// UC SEND bandwidth, WRITE and SEND latency.
#[test]
fn uc_send_bw_and_latencies_loopback() {
    let (out, _) = loopback(&["send-bw", "-c", "UC", "-s", "3000", "-n", "300"]);
    banner_and_checks(&out, "UC");
    assert_eq!(rows(&out), vec![(3000, 300)], "{out}");
    let (got, posted) = sends_arrived(&out);
    assert!(posted == 300 && got > 0 && got <= posted, "{out}");
    let (out, _) = loopback(&["write-lat", "-c", "UC", "-s", "5000", "-n", "100"]);
    banner_and_checks(&out, "UC");
    assert_eq!(rows(&out), vec![(5000, 100)], "{out}");
    let (out, _) = loopback(&["send-lat", "-c", "UC", "-s", "5000", "-n", "100"]);
    banner_and_checks(&out, "UC");
    assert_eq!(rows(&out), vec![(5000, 100)], "{out}");
}

/// What perftest refuses while parsing `-c`, and a UD size no path MTU can carry.
#[test]
fn connection_types_perftest_refuses() {
    for t in [
        "write-bw",
        "read-bw",
        "atomic-bw",
        "write-lat",
        "read-lat",
        "atomic-lat",
    ] {
        usage_error(
            &[t, "-c", "UD", "--loopback"],
            "UD connection only possible in SEND verb",
        );
    }
    for t in ["read-bw", "atomic-bw", "read-lat", "atomic-lat"] {
        usage_error(
            &[t, "-c", "UC", "--loopback"],
            "UC connection not possible in READ/ATOMIC verbs",
        );
    }
    usage_error(
        &["send-bw", "-c", "UD", "-s", "8192", "--loopback"],
        "a UD message is one packet: -s must be at most the path MTU",
    );
    usage_error(&["send-bw", "-c", "XRC", "--loopback"], "XRC");
}

/// An `-s` above the path MTU both sides agreed on (here 1024, from `-m`) fails after the
/// MTU exchange, as perftest's `check_mtu` fails it.
#[test]
fn ud_size_above_the_negotiated_mtu_fails_like_perftest() {
    let _guard = LOOPBACK.lock().unwrap_or_else(|e| e.into_inner());
    let out = perf(&[
        "send-bw",
        "-c",
        "UD",
        "-m",
        "1024",
        "-s",
        "2048",
        "--loopback",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("softrdma perf: Max message size in UD cannot be greater than MTU"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains(" #bytes"));
}
