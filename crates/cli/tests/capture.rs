//! Issue 4's capture check, literally: `tcpdump -i lo` records a real `softrdma pingpong` run
//! (server and client processes on 127.0.88.1/2, messages above the MTU so SEND FIRST/MIDDLE/
//! LAST and ACKs all occur), then `softrdma decode` must report every RoCEv2 packet parsed
//! with a valid ICRC, and tshark's InfiniBand dissector must flag no packet as malformed.
//! Skips (and says why) without root or tcpdump; the tshark half skips without tshark.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// UDP datagrams to the discard port of 127.0.88.9 in the capture file so far.
fn probes_in(file: &Path) -> usize {
    let Ok(b) = std::fs::read(file) else { return 0 };
    let mut at = 24;
    let mut n = 0;
    while at + 16 <= b.len() {
        let len = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &b[(at + 16).min(b.len())..(at + 16 + len).min(b.len())];
        // Linux cooked or Ethernet framing on lo: look for the probe's address bytes.
        if frame.windows(4).any(|w| w == [127, 0, 88, 9]) {
            n += 1;
        }
        at += 16 + len;
    }
    n
}

#[test]
fn loopback_capture_decodes_with_softrdma_decode_and_tshark() {
    if !is_root() || !have("tcpdump") {
        eprintln!("skipped: needs root and tcpdump");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join(format!("lo-capture-{}.pcap", std::process::id()));
    let mut tcpdump = Command::new("tcpdump")
        .args([
            "-i",
            "lo",
            "--immediate-mode",
            "-U",
            "-n",
            "-s",
            "9000",
            "-B",
            "32768",
            "-w",
        ])
        .arg(&file)
        .arg("udp and net 127.0.88.0/24")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tcpdump");
    // tcpdump attaches its filter some time after it starts: probe until one shows up.
    let probe = std::net::UdpSocket::bind("127.0.88.9:0").unwrap();
    let sync = |what: &str| {
        let before = probes_in(&file);
        let deadline = Instant::now() + Duration::from_secs(10);
        while probes_in(&file) <= before {
            assert!(
                Instant::now() < deadline,
                "tcpdump captured no probe ({what})"
            );
            probe.send_to(b"probe", "127.0.88.9:9").unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    sync("before");

    let common = ["-c", "-s", "5000", "-n", "20", "-m", "1024", "-p", "18688"];
    let mut server = Command::new(BIN)
        .args(["pingpong", "--bind", "127.0.88.1", "--no-gso"])
        .args(common)
        .stdout(Stdio::null())
        .spawn()
        .expect("server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let client = loop {
        let out = Command::new(BIN)
            .args(["pingpong", "--bind", "127.0.88.2", "--no-gso"])
            .args(common)
            .arg("127.0.88.1")
            .output()
            .expect("client");
        if !out.status.success() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        break out;
    };
    let server_status = server.wait().expect("server");
    sync("after");
    let _ = Command::new("kill")
        .args(["-INT", &tcpdump.id().to_string()])
        .status();
    let _ = tcpdump.wait();
    assert!(
        client.status.success(),
        "{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(server_status.success());

    let decoded = Command::new(BIN)
        .args(["decode", "--quiet"])
        .arg(&file)
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&decoded.stdout).trim().to_string();
    eprintln!("softrdma decode: {summary}");
    assert!(decoded.status.success(), "{summary}");
    assert!(summary.ends_with("icrc_bad: 0, malformed: 0"), "{summary}");
    let roce: u64 = summary
        .split(", ")
        .find_map(|f| f.strip_prefix("roce: "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    // 20 iterations each way of a 5-packet SEND plus ACKs.
    assert!(roce >= 200, "{summary}");
    assert!(summary.contains(&format!("icrc_ok: {roce},")), "{summary}");

    if !have("tshark") {
        eprintln!("tshark half skipped: tshark not installed");
        return;
    }
    let tshark = |filter: &str| {
        let o = Command::new("tshark")
            .args(["-n", "-r"])
            .arg(&file)
            .args(["-d", "udp.port==4791,infiniband", "-Y", filter])
            .output()
            .expect("tshark");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).lines().count() as u64
    };
    assert_eq!(
        tshark("infiniband"),
        roce,
        "tshark dissects every RoCEv2 packet"
    );
    assert_eq!(tshark("_ws.malformed or _ws.expert.severity == error"), 0);
    let _ = std::fs::remove_file(&file);
}
