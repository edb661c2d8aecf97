//! End-to-end tests of `softrdma pingpong` and `softrdma devinfo`: the binary is run as a user
//! runs it, a server and a client process on loopback addresses (127.0.77.x), with `-c`
//! validation, several message sizes (one packet, exactly one MTU, several packets), and the
//! `--pcap` tap whose files must decode cleanly with `softrdma decode`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

/// Kills the child if the test fails before waiting for it.
struct Guard(Option<Child>);

impl Guard {
    fn wait(mut self, limit: Duration) -> Output {
        let mut child = self.0.take().expect("child");
        let deadline = Instant::now() + limit;
        loop {
            if child.try_wait().expect("try_wait").is_some() {
                return child.wait_with_output().expect("output");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "server did not finish in {limit:?}:\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Runs a server with `server` args and then a client with `client` args (retrying while the
/// server is not listening yet); returns (server, client) outputs.
fn pair(server: &[&str], client: &[&str]) -> (Output, Output) {
    let srv = Command::new(BIN)
        .arg("pingpong")
        .args(server)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let srv = Guard(Some(srv));
    let deadline = Instant::now() + Duration::from_secs(20);
    let cli = loop {
        let out = Command::new(BIN)
            .arg("pingpong")
            .args(client)
            .output()
            .expect("run client");
        if !out.status.success()
            && text(&out.stderr).contains("Couldn't connect")
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        break out;
    };
    let srv = srv.wait(Duration::from_secs(30));
    (srv, cli)
}

fn assert_report(o: &Output, who: &str, size: u64, iters: u64) {
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "{who} failed: {:?}\n{out}\n{}",
        o.status,
        text(&o.stderr)
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("  local address:  LID 0x0000, QPN 0x"),
        "{out}"
    );
    assert!(lines[0].contains(", GID ::ffff:127.0.77."), "{out}");
    assert!(
        lines[1].starts_with("  remote address: LID 0x0000, QPN 0x"),
        "{out}"
    );
    let bytes = size * iters * 2;
    assert!(
        lines[2].starts_with(&format!("{bytes} bytes in ")) && lines[2].ends_with(" Mbit/sec"),
        "{out}"
    );
    assert!(
        lines[3].starts_with(&format!("{iters} iters in ")) && lines[3].ends_with(" usec/iter"),
        "{out}"
    );
    assert!(!out.contains("invalid data"), "{out}");
}

fn decode_clean(file: &Path) -> String {
    let o = Command::new(BIN)
        .args(["decode", "-q"])
        .arg(file)
        .output()
        .expect("run decode");
    let summary = text(&o.stdout);
    assert!(o.status.success(), "decode of {file:?}: {summary}");
    assert!(summary.contains("icrc_bad: 0, malformed: 0"), "{summary}");
    summary
}

/// Client and server with -c, for message sizes of one packet, exactly one MTU and several
/// packets (the default path MTU is 1024), each with its own pcap tap.
#[test]
fn loopback_pingpong_validates_every_size_and_pcap_decodes() {
    for (i, size) in [64u64, 1024, 4096, 10_000].into_iter().enumerate() {
        let port = (19_771 + i).to_string();
        let s = size.to_string();
        let (sp, cp) = (
            tmp(&format!("pp-srv-{size}.pcap")),
            tmp(&format!("pp-cli-{size}.pcap")),
        );
        let common = ["-c", "-s", &s, "-n", "25", "-p", &port, "--timeout", "20"];
        let mut server: Vec<&str> = vec!["--bind", "127.0.77.2", "--pcap", sp.to_str().unwrap()];
        server.extend(common);
        let mut client: Vec<&str> = vec!["--bind", "127.0.77.1", "--pcap", cp.to_str().unwrap()];
        client.extend(common);
        client.push("127.0.77.2");
        let (so, co) = pair(&server, &client);
        assert_report(&so, "server", size, 25);
        assert_report(&co, "client", size, 25);
        // Both taps saw every packet: 25 messages each way of ceil(size/1024) packets, and
        // at least one ACK per 25 messages each way; none malformed, every ICRC valid.
        let per_msg = size.div_ceil(1024);
        for f in [&sp, &cp] {
            let summary = decode_clean(f);
            let roce: u64 = summary
                .split("roce: ")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(|n| n.parse().ok())
                .expect("roce count");
            assert!(roce >= 2 * 25 * per_msg + 2, "{f:?}: {summary}");
        }
    }
}

/// Completion events (-e), a small receive queue that must be re-posted (-r 3), another path
/// MTU (-m 512), and a server that takes its address from the client's TCP connection.
#[test]
fn loopback_pingpong_events_small_rx_depth_default_server_address() {
    let args = [
        "-e",
        "-c",
        "-r",
        "3",
        "-m",
        "512",
        "-s",
        "3000",
        "-n",
        "40",
        "-p",
        "19781",
        "--timeout",
        "20",
    ];
    let mut client: Vec<&str> = vec!["--bind", "127.0.77.11"];
    client.extend(args);
    client.push("127.0.77.12");
    let (so, co) = pair(&args, &client);
    assert_report(&so, "server", 3000, 40);
    assert_report(&co, "client", 3000, 40);
    assert!(text(&so.stdout).contains("GID ::ffff:127.0.77.12\n"));
}

/// A mismatch in the -c pattern is reported in rc_pingpong's words, with status 1: the
/// client sends rc_pingpong's plain buffer (no -c), the server checks.
#[test]
fn validation_failure_is_reported() {
    let (so, co) = pair(
        &[
            "--bind",
            "127.0.77.22",
            "-c",
            "-s",
            "5000",
            "-n",
            "3",
            "-p",
            "19782",
            "--timeout",
            "20",
        ],
        &[
            "--bind",
            "127.0.77.21",
            "-s",
            "5000",
            "-n",
            "3",
            "-p",
            "19782",
            "--timeout",
            "20",
            "127.0.77.22",
        ],
    );
    assert!(co.status.success(), "{}", text(&co.stderr));
    assert_eq!(so.status.code(), Some(1));
    let out = text(&so.stdout);
    assert!(
        out.contains("invalid data in page 0\ninvalid data in page 1\n"),
        "{out}"
    );
}

/// Every packet line of `softrdma decode FILE` (which must be clean).
fn decoded_lines(file: &Path) -> Vec<String> {
    decode_clean(file);
    let o = Command::new(BIN).arg("decode").arg(file).output().unwrap();
    text(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with("packets:"))
        .map(str::to_owned)
        .collect()
}

/// Runs a loopback pair with `--transport T` and `args` on both sides, the client's traffic
/// captured to `pcap`; returns both outputs.
fn transport_pair(t: &str, args: &[&str], ips: (&str, &str), pcap: &Path) -> (Output, Output) {
    let mut server = vec!["--transport", t, "--bind", ips.1];
    server.extend(args);
    let mut client = vec!["--transport", t, "--bind", ips.0];
    client.extend(args);
    client.extend(["--pcap", pcap.to_str().unwrap(), ips.1]);
    pair(&server, &client)
}

/// `--transport UD` as ibv_ud_pingpong: the payload sizes below and at the port MTU (4096 on
/// loopback), -c checked on both sides, one UD SEND ONLY per message carrying the program's
/// Q_Key in its DETH, ud_pingpong's local line (`PSN 0x...: GID`).
#[test]
fn loopback_ud_pingpong_like_ibv_ud_pingpong() {
    for (i, size) in [64u64, 4096].into_iter().enumerate() {
        let port = (19_791 + i).to_string();
        let s = size.to_string();
        let pcap = tmp(&format!("pp-ud-{size}.pcap"));
        let args = ["-c", "-s", &s, "-n", "20", "-p", &port, "--timeout", "20"];
        let (so, co) = transport_pair("UD", &args, ("127.0.77.41", "127.0.77.42"), &pcap);
        for (o, who) in [(&so, "server"), (&co, "client")] {
            let out = text(&o.stdout);
            assert!(o.status.success(), "{who}: {out}{}", text(&o.stderr));
            assert!(
                out.lines()
                    .next()
                    .unwrap()
                    .contains(": GID ::ffff:127.0.77.4"),
                "{out}"
            );
            assert!(out.contains(&format!("{} bytes in ", size * 40)), "{out}");
            assert!(!out.contains("invalid data"), "{out}");
        }
        let lines = decoded_lines(&pcap);
        assert_eq!(lines.len(), 40, "{lines:#?}");
        for l in &lines {
            assert!(l.contains(" UD_SEND_ONLY "), "{l}");
            assert!(l.contains("DETH[qkey=0x11111111 "), "{l}");
            assert!(l.contains(&format!("payload={size} ")), "{l}");
        }
    }
}

/// `--transport UC` as ibv_uc_pingpong: sizes of one packet, several, and not a multiple of
/// the MTU; -c on both sides; UC packets only, no acknowledgements.
#[test]
fn loopback_uc_pingpong_like_ibv_uc_pingpong() {
    for (i, size) in [64u64, 4096, 10_000].into_iter().enumerate() {
        let port = (19_795 + i).to_string();
        let s = size.to_string();
        let pcap = tmp(&format!("pp-uc-{size}.pcap"));
        let args = ["-c", "-s", &s, "-n", "20", "-p", &port, "--timeout", "20"];
        let (so, co) = transport_pair("UC", &args, ("127.0.77.43", "127.0.77.44"), &pcap);
        assert_report(&so, "server", size, 20);
        assert_report(&co, "client", size, 20);
        let lines = decoded_lines(&pcap);
        assert_eq!(
            lines.len() as u64,
            2 * 20 * size.div_ceil(1024),
            "{lines:#?}"
        );
        assert!(lines.iter().all(|l| l.contains(" UC_SEND_")), "{lines:#?}");
    }
}

/// `--srq` as ibv_srq_pingpong: four RC QPs per side, all receiving from one SRQ of 8
/// receives (refilled when no more than 4 are left); an address line per QP each way; `-n`
/// counts the exchanges of all QPs; `-c` finds no invalid page; every message on the wire is
/// an RC SEND to one of the four QPs; and the tool's argument rules.
#[test]
fn loopback_srq_pingpong_like_ibv_srq_pingpong() {
    let pcap = tmp("pp-srq.pcap");
    let args = [
        "--srq", "-q", "4", "-r", "8", "-s", "2000", "-n", "60", "-p", "19801", "-c",
    ];
    let mut server = vec!["--bind", "127.0.77.47", "--timeout", "20"];
    server.extend(&args);
    let mut client = vec!["--bind", "127.0.77.48", "--timeout", "20"];
    client.extend(&args);
    client.extend(["--pcap", pcap.to_str().unwrap(), "127.0.77.47"]);
    let (so, co) = pair(&server, &client);
    for (o, who) in [(&so, "server"), (&co, "client")] {
        let out = text(&o.stdout);
        assert!(o.status.success(), "{who}: {out}\n{}", text(&o.stderr));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 10, "{out}");
        assert!(
            lines[..4]
                .iter()
                .all(|l| l.starts_with("  local address:  LID 0x0000, QPN 0x")
                    && l.contains(", GID ::ffff:127.0.77.4")),
            "{out}"
        );
        assert!(
            lines[4..8]
                .iter()
                .all(|l| l.starts_with("  remote address: LID 0x0000, QPN 0x")),
            "{out}"
        );
        assert!(
            lines[8].starts_with("240000 bytes in ") && lines[9].starts_with("60 iters in "),
            "{out}"
        );
    }
    // Every SEND the client's device saw: at least 60 each way, 2 packets of 2000 bytes at
    // MTU 1024, to the four QPs of the other side.
    let lines = decoded_lines(&pcap);
    // Packets, not transmissions: a SEND sent twice (a tail-loss probe when the peer, short of
    // CPU, took over a millisecond to answer) counts once — by sender, QP and PSN.
    let mut seen = std::collections::BTreeSet::new();
    let sends: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(" RC_SEND_"))
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            seen.insert((f[2].to_owned(), f[6].to_owned(), f[7].to_owned()))
        })
        .collect();
    // As in the tool, a QP posts its next SEND while the count of completed ones is below
    // -n, so each side may send up to -q - 1 messages beyond it.
    assert!(
        (2 * 60 * 2..=2 * (60 + 3) * 2).contains(&sends.len()),
        "{} SEND packets: {lines:#?}",
        sends.len()
    );
    let qps: std::collections::BTreeSet<&str> = sends
        .iter()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("qp=")))
        .collect();
    // (Both devices number their QPs from 0x11: the same four numbers each way.)
    let want: std::collections::BTreeSet<&str> =
        ["qp=0x000011", "qp=0x000012", "qp=0x000013", "qp=0x000014"].into();
    assert_eq!(qps, want, "four QPs");
    // The tool's rules: RC only, -q needs --srq and is 1..=256, one receive per QP.
    for (bad, code) in [
        (&["--srq", "--transport", "UD"][..], 2),
        (&["-q", "4"][..], 2),
        (&["--srq", "-q", "257"][..], 2),
    ] {
        let o = Command::new(BIN)
            .arg("pingpong")
            .args(bad)
            .arg("127.0.77.1")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{bad:?}: {}", text(&o.stderr));
    }
    let o = Command::new(BIN)
        .args(["pingpong", "--srq", "-q", "16", "-r", "8", "127.0.77.1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        "rx_depth 8 is too small for 16 QPs -- must have at least one receive per QP.\n"
    );
}

/// ud_pingpong's limits: a payload above the port MTU fails as the program fails, and there is
/// no -m (a usage error).
#[test]
fn ud_pingpong_refuses_a_size_above_the_mtu_and_m() {
    let o = Command::new(BIN)
        .args([
            "pingpong",
            "--transport",
            "UD",
            "-s",
            "4097",
            "--bind",
            "127.0.77.45",
        ])
        .args(["-p", "19799", "127.0.77.46"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        "Requested size larger than port MTU (4096)\n"
    );
    assert!(o.stdout.is_empty());
    let o = Command::new(BIN)
        .args(["pingpong", "--transport", "UD", "-m", "1024", "127.0.77.46"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("-m does not apply to UD"));
}

#[test]
fn bad_arguments_and_unreachable_server_fail_like_rc_pingpong() {
    let o = Command::new(BIN)
        .args(["pingpong", "-m", "1000"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("invalid MTU 1000"));
    let o = Command::new(BIN)
        .args([
            "pingpong",
            "--bind",
            "127.0.77.31",
            "-p",
            "19783",
            "127.0.77.32",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("Couldn't connect to 127.0.77.32:19783"),
        "{}",
        text(&o.stderr)
    );
    assert!(text(&o.stdout).starts_with("  local address:  LID 0x0000"));
}

#[test]
fn devinfo_prints_ibv_devinfo_layout() {
    let o = Command::new(BIN)
        .args(["devinfo", "--bind", "127.0.77.41"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let short = text(&o.stdout);
    let lines: Vec<&str> = short.lines().collect();
    assert!(lines[0].starts_with("hca_id:\tsoftrdma"), "{short}");
    assert_eq!(lines[1], "\ttransport:\t\t\tInfiniBand (0)");
    assert_eq!(lines[3], "\tnode_guid:\t\t\t0000:7fff:fe00:4d29");
    assert!(short.contains("\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"));
    assert!(short.contains("\t\t\tmax_mtu:\t\t4096 (5)\n"));
    assert!(short.contains("\t\t\tlink_layer:\t\tEthernet\n"));
    assert!(!short.contains("GID["), "GIDs only with -v");
    assert!(
        short.contains(
            "\tsoftrdma_transports:\t\tRC, UC (SEND, RDMA WRITE), UD (SEND, address handles, multicast: 8192 groups)\n"
        ),
        "{short}"
    );

    let o = Command::new(BIN)
        .args(["devinfo", "--bind", "127.0.77.41", "-v", "--counters"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let long = text(&o.stdout);
    for want in [
        "\tmax_qp_wr:\t\t\t1048576\n",
        "\tdevice_cap_flags:\t\t0x",
        "\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
        "\t\t\tmax_msg_sz:\t\t0x800000\n",
        "\t\t\tphys_state:\t\tLINK_UP (5)\n",
        "\t\t\tGID[  0]:\t\t::ffff:127.0.77.41, RoCE v2\n",
        "\t\t\tGID[  1]:\t\t::ffff:127.0.77.41, RoCE v2\n",
        "\t\t\tGID[  2]:\t\tfe80::7fff:fe00:4d29, RoCE v2\n",
        "counters:\n",
        "\tdrops.bad_icrc",
        "\tnaks_sent.rnr",
        "\tretransmitted_packets",
        "\tio.pcap_records",
    ] {
        assert!(long.contains(want), "missing {want:?} in\n{long}");
    }
}

/// Issue 15, items 2 and 14: durations and counts out of range are usage errors (exit 2, one
/// message, no panic): `--timeout inf` and `1e30` used to panic in `Duration::from_secs_f64`,
/// `--timeout NaN` meant "never", `-n 0` printed `inf usec/iter`.
#[test]
fn out_of_range_arguments_are_usage_errors() {
    for args in [
        &["--timeout", "inf"][..],
        &["--timeout", "1e30"],
        &["--timeout", "NaN"],
        &["--timeout=-1"],
        &["-n", "0"],
        &["-s", "8388609"],
        &["-r", "0"],
        &["-r", "4194303"],
        &["-r", "4294967295"],
    ] {
        let o = Command::new(BIN)
            .arg("pingpong")
            .args(args)
            .args(["--bind", "127.0.77.61", "-p", "19791", "127.0.77.62"])
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("invalid value"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

/// Runs `cmd` and waits at most `limit` for it to exit; kills it and fails otherwise.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    Guard(Some(child)).wait(limit)
}

/// Issue 15, item 3: `--timeout` bounds every wait, also a server's wait for a client: the
/// server gives up, exit status 1, with the reason.
#[test]
fn server_without_client_gives_up_after_timeout() {
    let o = run_bounded(
        Command::new(BIN).args([
            "pingpong",
            "--bind",
            "127.0.77.63",
            "-p",
            "19792",
            "--timeout",
            "1",
        ]),
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("accept() failed: no connection within 1 s (--timeout)"),
        "{}",
        text(&o.stderr)
    );
}

/// The server side made of the softrdma library, for the tests that need a peer doing what
/// ibv_rc_pingpong never does: it takes part in the address exchange and connects its QP,
/// then acts as told.
struct LibServer {
    _dev: softrdma::Device,
    cq: softrdma::CompletionQueue,
    qp: softrdma::QueuePair,
    mr: softrdma::MemoryRegion,
    /// Killed when the server goes away (a failing test must not leave it running).
    client: Option<Child>,
}

impl Drop for LibServer {
    fn drop(&mut self) {
        if let Some(c) = self.client.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl LibServer {
    /// Starts a client process (`client_args` plus the server address) and serves it: an
    /// address exchange, RTR/RTS, receives posted.
    fn start(ip: &str, port: u16, client_ip: &str, client_args: &[&str]) -> LibServer {
        use softrdma::{
            AccessFlags, ConnectOptions, Device, DeviceConfig, Mtu, QpEndpoint, QpInitAttr,
        };
        use softrdma_oob::pingpong::{
            server_read_remote, server_reply, server_wait_done, PingpongDest,
        };
        let listener = std::net::TcpListener::bind((ip, port)).expect("listen");
        let client = Command::new(BIN)
            .arg("pingpong")
            .args(client_args)
            .args(["--bind", client_ip, "-p", &port.to_string(), ip])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn client");
        let mut client = Guard(Some(client));
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut stream, _) = loop {
            match listener.accept() {
                Ok(c) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Some(c) = client.0.as_mut() {
                        if c.try_wait().unwrap().is_some() {
                            let out = client.0.take().unwrap().wait_with_output().unwrap();
                            panic!("the client exited: {}", text(&out.stderr));
                        }
                    }
                    assert!(Instant::now() < deadline, "the client never connected");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        stream.set_nonblocking(false).unwrap();
        let client = client.0.take().expect("client");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let remote = server_read_remote(&mut stream).expect("client address");
        let dev = Device::open(DeviceConfig::new(ip.parse().unwrap())).expect("device");
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(64).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq)).unwrap();
        let mr = pd.reg_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
        let opts = ConnectOptions {
            path_mtu: Some(Mtu::Mtu1024),
            ..ConnectOptions::default()
        };
        let ep = QpEndpoint {
            gid: remote.gid,
            qpn: remote.qpn,
            psn: remote.psn,
        };
        qp.connect(&ep, &opts).expect("connect");
        for _ in 0..8 {
            qp.post_recv([softrdma::wr::recv(1, vec![mr.sge(0, 8192)])])
                .unwrap();
        }
        let local = PingpongDest {
            lid: 0,
            qpn: qp.qp_num(),
            psn: qp.local_psn(),
            gid: dev.gid(),
        };
        server_reply(&mut stream, &local).expect("reply");
        server_wait_done(&mut stream).expect("done");
        LibServer {
            _dev: dev,
            cq,
            qp,
            mr,
            client: Some(client),
        }
    }

    /// Hands the client process over (to a `Guard`), so that this server no longer kills it.
    fn take_client(&mut self) -> Child {
        self.client.take().expect("client")
    }

    /// Waits for the client's first SEND to arrive.
    fn first_message(&self) {
        let mut wcs = Vec::new();
        self.cq
            .poll_blocking(1, &mut wcs, Some(Duration::from_secs(20)));
        assert_eq!(wcs.len(), 1, "the client's first SEND never came");
        assert_eq!(wcs[0].status, softrdma::WcStatus::Success);
    }
}

/// Clock ticks (user + system) a process has used, from /proc.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Issue 15, item 4: a client waiting only for a RECV whose peer went silent (here: a server
/// that received the first SEND and never answers) waits as ibv_rc_pingpong does — without
/// end unless --timeout says otherwise — but sleeps on the completion queue instead of
/// spinning a core: over two seconds of waiting it uses (almost) no CPU. With --timeout it
/// gives up, exit status 1.
#[test]
fn client_waiting_for_a_silent_server_sleeps_and_times_out() {
    let mut srv = LibServer::start("127.0.77.66", 19793, "127.0.77.65", &["-n", "5"]);
    srv.first_message();
    let pid = srv.client.as_ref().expect("client").id();
    // Let the client pass its millisecond of polling, then measure.
    std::thread::sleep(Duration::from_millis(100));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    assert!(
        srv.client.as_mut().unwrap().try_wait().unwrap().is_none(),
        "the client gave up without --timeout"
    );
    // Spinning uses ~200 ticks in 2 s; sleeping a handful at most.
    assert!(
        used < 40,
        "the waiting client used {used} clock ticks in 2 s"
    );
    drop(srv);

    let mut srv = LibServer::start(
        "127.0.77.68",
        19794,
        "127.0.77.67",
        &["-n", "5", "--timeout", "1"],
    );
    srv.first_message();
    let o = Guard(Some(srv.take_client())).wait(Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("no completion for 1."),
        "{}",
        text(&o.stderr)
    );
}

/// Issue 15, item 13: when a packet the client's QP receives ends the connection (here the
/// server WRITEs into the client, whose QP takes no WRITEs — ibv_rc_pingpong grants no remote
/// access — so its responder NAKs it Invalid Request, as rxe's `check_op_valid` does, and its
/// QP enters the error state), every outstanding request is merely flushed. The client says
/// so instead of only naming the flush, and --counters prints the counters on the failure
/// too, which show the cause (one invalid request NAK sent).
#[test]
fn a_connection_broken_by_a_received_packet_reports_its_cause() {
    let mut srv = LibServer::start(
        "127.0.77.70",
        19795,
        "127.0.77.69",
        &["-n", "5", "--counters", "--timeout", "20"],
    );
    srv.first_message();
    srv.mr.write(0, b"not yours").unwrap();
    srv.qp
        .post_send([softrdma::wr::write(
            9,
            vec![srv.mr.sge(0, 9)],
            0x1000,
            0x00de_ad01,
        )])
        .unwrap();
    let o = Guard(Some(srv.take_client())).wait(Duration::from_secs(20));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(
        err.contains("Failed status Work Request Flushed Error (5)"),
        "{err}"
    );
    assert!(err.contains("without a failed request of its own"), "{err}");
    let naks = out
        .lines()
        .find(|l| l.trim_start().starts_with("naks_sent.invalid_request "))
        .unwrap_or_else(|| panic!("no counters on failure:\n{out}"));
    assert!(naks.trim_end().ends_with(" 1"), "{naks}");
}

/// Issue 15, item 12: `devinfo --json` prints the counters as one JSON object, the remote
/// access NAK counter that shows rkey probing among them.
#[test]
fn devinfo_json_counters() {
    let o = Command::new(BIN)
        .args(["devinfo", "--bind", "127.0.77.71", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let line = out.trim();
    assert!(
        line.starts_with("{\"device\":\"softrdma") && line.ends_with("}}"),
        "{out}"
    );
    for want in [
        "\"naks_sent.remote_access\":0",
        "\"drops.wrong_source\":0",
        "\"io.rx_denied\":0",
    ] {
        assert!(line.contains(want), "{want} in {line}");
    }
}
