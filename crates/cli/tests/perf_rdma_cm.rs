//! `softrdma perf -R` (perftest's rdma_cm mode) end to end on loopback: the control QP and
//! every test QP connected through rdma_cm — REQ/REP/RTU on QP 1, as the capture shows — the
//! out-of-band exchange over the control QP, the traffic and the data checks; a connection
//! to a port nobody listens on is rejected, not left hanging.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/perf_run.rs"]
mod perf_run;
use perf_run::{loopback, perf, usage_error, LOOPBACK};

fn softrdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
}

/// `softrdma decode FILE`'s lines.
fn decode(pcap: &Path) -> String {
    let out = softrdma().arg("decode").arg(pcap).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn rdma_cm_banner_and_checks(out: &str) {
    for want in [" rdma_cm QPs\t : ON", " Data ex. method : rdma_cm"] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let checks: Vec<&str> = out.lines().filter(|l| l.contains("Data check")).collect();
    assert!(!checks.is_empty(), "{out}");
    assert!(checks.iter().all(|l| l.contains(": OK")), "{out}");
}

#[test]
fn write_bw_connects_every_qp_through_rdma_cm() {
    let pcap = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perf-rdma-cm-write-bw.pcap");
    let _ = std::fs::remove_file(&pcap);
    let (out, _) = loopback(&[
        "write-bw",
        "-R",
        "-q",
        "2",
        "-s",
        "4096",
        "-n",
        "100",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    rdma_cm_banner_and_checks(&out);
    let d = decode(&pcap);
    let count = |what: &str| d.lines().filter(|l| l.contains(what)).count();
    // The control QP and the two test QPs: three connections, each established by an RTU
    // and ended by a DREQ (the client's, answered; or both sides' at once).
    assert_eq!(count("CM Send RTU"), 3, "{d}");
    assert!(count("CM Send DREQ") >= 3, "{d}");
    assert!(count("CM Send DREP") >= 2, "{d}");
    assert!(count("sid=0x1064853(TCP:18515)") >= 3, "{d}");
    // The key exchanges over the control QP: perftest's 56-byte pingpong_dest SENDs.
    assert!(count("RC_SEND_ONLY qp=0x000011") >= 2 * 5, "{d}");
    assert!(d.contains("payload=56"), "{d}");
    assert!(d.contains("RDMA_WRITE"), "{d}");
    assert!(d.ends_with("malformed: 0\n"), "{d}");
}

#[test]
fn read_lat_asks_for_read_resources_in_its_req() {
    let pcap = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perf-rdma-cm-read-lat.pcap");
    let _ = std::fs::remove_file(&pcap);
    let (out, _) = loopback(&[
        "read-lat",
        "-R",
        "-n",
        "50",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    rdma_cm_banner_and_checks(&out);
    let d = decode(&pcap);
    let reqs: Vec<&str> = d.lines().filter(|l| l.contains("CM Send REQ")).collect();
    // The control QP's REQ asks for no READ resources, the test QP's for -o's (default 16
    // here: softrdma's max_qp_rd_atom).
    assert!(reqs.iter().any(|l| l.contains("rr=0 id=0")), "{d}");
    assert!(
        reqs.iter()
            .any(|l| !l.contains("rr=0 ") && l.contains(" id=")),
        "{d}"
    );
    assert!(d.contains("RDMA_READ_REQUEST"), "{d}");
}

#[test]
fn send_bw_and_send_lat() {
    let (out, _) = loopback(&["send-bw", "-R", "-s", "1024", "-n", "200"]);
    rdma_cm_banner_and_checks(&out);
    let (out, _) = loopback(&["send-lat", "-R", "-s", "8", "-n", "200"]);
    rdma_cm_banner_and_checks(&out);
}

#[test]
fn a_port_nobody_listens_on_is_rejected() {
    let _guard = LOOPBACK.lock().unwrap_or_else(|e| e.into_inner());
    // A -R server on 127.0.0.1 port 18700; the client asks for port 18701.
    let mut server = softrdma()
        .args([
            "perf",
            "write-bw",
            "-R",
            "--bind",
            "127.0.0.1",
            "-p",
            "18700",
        ])
        .args(["--timeout", "20"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let out = perf(&[
        "write-bw",
        "-R",
        "--bind",
        "127.0.0.2",
        "-p",
        "18701",
        "127.0.0.1",
    ]);
    let took = t.elapsed();
    let _ = server.kill();
    let _ = server.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("rejected"), "{stderr}");
    assert!(stderr.contains("InvalidServiceId"), "{stderr}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn rdma_cm_usage_errors() {
    for (args, want) in [
        (
            &["write-bw", "-R", "-c", "UC", "--loopback"][..],
            "UC is not supported in librdmacm",
        ),
        (
            &["send-bw", "-R", "-c", "UD", "--loopback"][..],
            "-R with -c UD is not supported",
        ),
        (&["write-bw", "-R"][..], "with -R a server needs --bind"),
    ] {
        usage_error(args, want);
    }
}
