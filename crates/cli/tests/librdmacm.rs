//! Debian's unmodified librdmacm programs (rdmacm-utils: rping, ucmatose, udaddy, mckey,
//! cmtime, rdma_server/rdma_client, riostream), perftest's `-R` and libfabric's verbs
//! provider run through `softrdma exec` on softrdma's `librdmacm.so.1`, each against itself
//! on loopback, checked by its own exit status and success output; and what becomes of a
//! connection whose peer is killed (its farewell, sent by exec or a neighbour on the address).
//! Addresses 127.0.70.x (and the host's own address for libfabric, whose server and client
//! share it).
//!
//! Needs `libibverbs.so.1` and `librdmacm.so.1` in the binary's directory (`cargo build
//! --workspace`, which `cargo test --workspace` does), rdmacm-utils, perftest and
//! libfabric-bin; libfabric's fabtests (`fi_msg_pingpong`, `fi_rma_bw`) where
//! `../shared/peers/bin` has them.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

#[path = "common/programs.rs"]
mod programs;
use programs::{assert_ok, devices_on, finish, program_of, show, BIN};

fn check_setup(tool: &str) {
    let dir = Path::new(BIN).parent().expect("binary directory");
    assert!(
        dir.join("librdmacm.so.1").exists(),
        "{} has no librdmacm.so.1: build the workspace (cargo build --workspace)",
        dir.display()
    );
    let path = format!("/usr/bin/{tool}");
    assert!(
        Path::new(&path).exists(),
        "{path} missing: install Debian's rdmacm-utils and perftest"
    );
}

fn exec(ip: &str, program: &str, args: &[&str]) -> Command {
    check_setup(program);
    let mut cmd = Command::new(BIN);
    cmd.args(["exec", "--ip", ip, "--", program]).args(args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// Both sides exited 0.
fn assert_both_ok(s: &Output, c: &Output) {
    assert!(
        s.status.success() && c.status.success(),
        "{}\n{}",
        show(s),
        show(c)
    );
}

/// Whether a process has UDP port 4791 of `ip` (its softrdma device is open).
fn device_open(ip: &str) -> bool {
    devices_on(ip) > 0
}

/// Starts `server` and waits until its device on `ip` is open (and a moment more: it binds
/// and listens right after).
fn start_server(mut server: Command, ip: &str, what: &str) -> Child {
    let s = server.spawn().expect("spawn server");
    let start = Instant::now();
    while !device_open(ip) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: the server never opened its device"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    s
}

/// Whether a client failed only because its server was not listening yet (its REQ was
/// rejected with reason 8, invalid service ID): the server opens its device some time before
/// it listens (perftest queries the device first), and nothing outside the process shows
/// when it listens.
fn not_listening_yet(o: &Output) -> bool {
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    !o.status.success()
        && text.contains("RDMA_CM_EVENT_REJECTED")
        && (text.contains("error: 8") || text.contains("error 8") || text.contains("status 8"))
}

/// Starts `server` on `server_ip`, waits until its device is open, runs `client` (again, a
/// few times, while the server is not listening yet): returns both outputs. `server_exits`:
/// whether the server ends by itself (cmtime's never does; it is killed once the client is
/// done).
fn pair(
    server: Command,
    server_ip: &str,
    client: Command,
    what: &str,
    server_exits: bool,
) -> (Output, Output) {
    let mut client = client;
    let limit = Duration::from_secs(90);
    let mut s = start_server(server, server_ip, what);
    let mut tries = 0;
    let c = loop {
        let c = finish(client.spawn().expect("spawn client"), what, limit);
        tries += 1;
        if tries < 10 && not_listening_yet(&c) && s.try_wait().expect("wait").is_none() {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        break c;
    };
    let s = if server_exits {
        finish(s, what, limit)
    } else {
        let _ = s.kill();
        s.wait_with_output().expect("server output")
    };
    (s, c)
}

#[test]
fn rping_verbose_validated() {
    let (s, c) = pair(
        exec(
            "127.0.70.1",
            "rping",
            &["-s", "-a", "127.0.70.1", "-v", "-V", "-C", "10"],
        ),
        "127.0.70.1",
        exec(
            "127.0.70.2",
            "rping",
            &["-c", "-a", "127.0.70.1", "-v", "-V", "-C", "10"],
        ),
        "rping -v -V -C 10",
        true,
    );
    assert_ok(&c, "rping client", "ping data: rdma-ping-9: ");
    assert_ok(&s, "rping server", "server ping data: rdma-ping-9: ");
}

#[test]
fn rping_large_messages() {
    let (s, c) = pair(
        exec(
            "127.0.70.3",
            "rping",
            &["-s", "-a", "127.0.70.3", "-V", "-S", "65000", "-C", "5"],
        ),
        "127.0.70.3",
        exec(
            "127.0.70.4",
            "rping",
            &["-c", "-a", "127.0.70.3", "-V", "-S", "65000", "-C", "5"],
        ),
        "rping -S 65000",
        true,
    );
    assert_both_ok(&s, &c);
}

/// rping under loss: it blocks in `ibv_get_cq_event` between polls, so only the progress
/// thread runs its retransmit timers. Its server drops 5 % of its datagrams each way; every
/// lost request or ACK is repaired and both sides finish. (The timer of a send posted while
/// the poller's lease held was never run when the progress thread had gone to sleep before
/// the lease began: rping hung at the first lost ACK, 5 runs in 5.)
#[test]
fn rping_survives_loss() {
    let mut server = Command::new(BIN);
    server
        .args([
            "exec",
            "--ip",
            "127.0.70.27",
            "--loss",
            "0.05",
            "--seed",
            "1",
            "--",
        ])
        .args(["rping", "-s", "-a", "127.0.70.27", "-C", "300"]);
    server.stdout(Stdio::piped()).stderr(Stdio::piped());
    check_setup("rping");
    let (s, c) = pair(
        server,
        "127.0.70.27",
        exec(
            "127.0.70.28",
            "rping",
            &["-c", "-a", "127.0.70.27", "-C", "300"],
        ),
        "rping under 5 % loss",
        true,
    );
    assert_both_ok(&s, &c);
}

/// The lines a child prints on stdout and stderr, as they come (read on threads).
fn watch(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = channel();
    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    for stream in streams.into_iter().flatten() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// Waits at most `limit` for a line with `marker` among `lines` (keeping what it read in
/// `seen`, for the failure message).
fn wait_for(lines: &Receiver<String>, seen: &mut Vec<String>, marker: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(marker);
                seen.push(line);
                if found {
                    return;
                }
            }
            Err(_) => break,
        }
    }
    panic!(
        "no {marker:?} within {limit:?}; output:\n{}",
        seen.join("\n")
    );
}

/// A child that is killed if the test fails before it is done with it (a server left
/// behind would hold its address for the next run).
struct Guard(Option<Child>);

impl Guard {
    fn get(&mut self) -> &mut Child {
        self.0.as_mut().expect("held")
    }

    fn take(mut self) -> Child {
        self.0.take().expect("held")
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An rping server on `ip` that reports its connections' events (`-d`), `-P` if
/// `persistent`, listening.
fn rping_server(ip: &str, persistent: bool) -> Guard {
    let mut args = vec!["-s", "-a", ip, "-d"];
    if persistent {
        args.push("-P");
    }
    Guard(Some(start_server(exec(ip, "rping", &args), ip, "rping -s")))
}

/// An rping server (`-d`) ends by itself within 15 s, having reported the disconnect.
fn ends_disconnected(server: Guard, what: &str) {
    let s = finish(server.take(), what, Duration::from_secs(15));
    let text =
        String::from_utf8_lossy(&s.stdout).into_owned() + &String::from_utf8_lossy(&s.stderr);
    assert!(
        text.contains("server DISCONNECT EVENT"),
        "{what}:\n{}",
        show(&s)
    );
}

fn kill9(pid: u32) {
    let st = Command::new("kill").args(["-9", &pid.to_string()]).status();
    assert!(st.is_ok_and(|s| s.success()), "kill -9 {pid}");
}

/// An rping client that pings `server_ip` until it is killed, started once its pings flow.
fn endless_rping_client(ip: &str, server_ip: &str) -> (Child, Receiver<String>) {
    let mut c = exec(
        ip,
        "rping",
        &["-c", "-a", server_ip, "-v", "-C", "100000000"],
    )
    .spawn()
    .expect("spawn client");
    let lines = watch(&mut c);
    wait_for(
        &lines,
        &mut Vec::new(),
        "ping data",
        Duration::from_secs(30),
    );
    (c, lines)
}

/// A client killed with `kill -9` in mid-connection (its program, not `softrdma exec`): its
/// rping server gets `RDMA_CM_EVENT_DISCONNECTED` at once and ends, as with the kernel's CM,
/// which sends the dead process's DREQ. softrdma's CM lives in the process; exec, its
/// parent, sends the DREQ the CM left in its farewell file. (Before, the server waited for
/// the next ping forever.)
#[test]
fn a_killed_client_is_disconnected_from_its_rping_server() {
    let ip = "127.0.70.40";
    let server = rping_server(ip, false);
    let (client, _lines) = endless_rping_client("127.0.70.41", ip);
    kill9(program_of(&client));
    let c = finish(client, "the killed rping client", Duration::from_secs(10));
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            c.status.signal(),
            Some(9),
            "exec dies of its program's signal"
        );
    }
    ends_disconnected(server, "rping -s after its client was killed");
}

/// A persistent rping server (`-P`) whose client is killed gets the disconnect and serves the
/// next client, as with the kernel.
#[test]
fn a_persistent_rping_server_serves_on_after_its_client_is_killed() {
    let ip = "127.0.70.42";
    let mut server = rping_server(ip, true);
    let lines = watch(server.get());
    let (client, _) = endless_rping_client("127.0.70.43", ip);
    kill9(program_of(&client));
    let mut seen = Vec::new();
    wait_for(
        &lines,
        &mut seen,
        "server DISCONNECT EVENT",
        Duration::from_secs(10),
    );
    let _ = finish(client, "the killed rping client", Duration::from_secs(10));
    let next = finish(
        exec("127.0.70.43", "rping", &["-c", "-a", ip, "-v", "-C", "3"])
            .spawn()
            .expect("spawn"),
        "the next rping client",
        Duration::from_secs(30),
    );
    assert_ok(&next, "the next rping client", "ping data: rdma-ping-2: ");
    assert!(
        server.get().try_wait().expect("wait").is_none(),
        "the persistent server ended"
    );
}

/// Killing `softrdma exec` itself kills its program (as killing the program's own process
/// would, before exec stayed as a parent), and then nobody in exec speaks for it; a device
/// that shares its address does: the rping server on the same address finds the member
/// dead within 50 ms, sends its DREQ, and is disconnected.
#[test]
fn a_killed_exec_takes_its_program_along_and_its_neighbour_speaks_for_it() {
    let ip = "127.0.70.44";
    let server = rping_server(ip, false);
    let (client, _lines) = endless_rping_client(ip, ip);
    let program = program_of(&client);
    kill9(client.id());
    let _ = finish(client, "the killed exec", Duration::from_secs(10));
    ends_disconnected(server, "rping -s after its client's exec was killed");
    let status = std::fs::read_to_string(format!("/proc/{program}/status")).unwrap_or_default();
    assert!(
        status.is_empty() || status.contains("zombie"),
        "the program outlived its exec:\n{status}"
    );
}

#[test]
fn ucmatose_four_connections() {
    let (s, c) = pair(
        exec("127.0.70.5", "ucmatose", &["-b", "127.0.70.5", "-c", "4"]),
        "127.0.70.5",
        exec("127.0.70.6", "ucmatose", &["-s", "127.0.70.5", "-c", "4"]),
        "ucmatose -c 4",
        true,
    );
    assert_ok(&c, "ucmatose client", "return status 0");
    assert_ok(&s, "ucmatose server", "return status 0");
}

#[test]
fn udaddy_datagrams() {
    let (s, c) = pair(
        exec("127.0.70.7", "udaddy", &["-b", "127.0.70.7"]),
        "127.0.70.7",
        exec("127.0.70.8", "udaddy", &["-s", "127.0.70.7"]),
        "udaddy",
        true,
    );
    assert_ok(&c, "udaddy client", "return status 0");
    assert_ok(&s, "udaddy server", "return status 0");
}

#[test]
fn mckey_sender_and_receiver() {
    let (r, s) = pair(
        exec(
            "127.0.70.9",
            "mckey",
            &["-m", "239.70.0.9", "-b", "127.0.70.9", "-C", "20"],
        ),
        "127.0.70.9",
        exec(
            "127.0.70.10",
            "mckey",
            &["-m", "239.70.0.9", "-s", "-b", "127.0.70.10", "-C", "20"],
        ),
        "mckey",
        true,
    );
    assert_ok(&s, "mckey sender", "return status 0");
    assert_ok(&r, "mckey receiver", "joined dgid: ::ffff:239.70.0.9");
    assert_ok(&r, "mckey receiver", "return status 0");
}

#[test]
fn cmtime_hundred_connections() {
    let (_, c) = pair(
        exec("127.0.70.11", "cmtime", &["-b", "127.0.70.11", "-c", "100"]),
        "127.0.70.11",
        exec("127.0.70.12", "cmtime", &["-s", "127.0.70.11", "-c", "100"]),
        "cmtime -c 100",
        false,
    );
    assert_ok(&c, "cmtime client", "connect");
    let text = String::from_utf8_lossy(&c.stdout);
    assert!(!text.contains("error"), "cmtime reported an error:\n{text}");
}

#[test]
fn rdma_server_and_rdma_client() {
    let (s, c) = pair(
        exec("127.0.70.13", "rdma_server", &["-s", "127.0.70.13"]),
        "127.0.70.13",
        exec("127.0.70.14", "rdma_client", &["-s", "127.0.70.13"]),
        "rdma_server/rdma_client",
        true,
    );
    assert_ok(&c, "rdma_client", "rdma_client: end 0");
    assert_ok(&s, "rdma_server", "rdma_server: end 0");
}

/// perftest's `-R` (connection through librdmacm): both sides exit 0 and print a result.
///
/// perftest 0.17 (Debian's) connects twice: a connection for its parameter exchange, then
/// the test's, whose REQ the client sends the moment the exchange ends, while the server may
/// still be waiting for its last send to complete before it listens again. A REQ that comes
/// first is rejected (no listener, reason 8) as by any IB CM, and 0.17's retry then reuses the
/// ids it has just destroyed (later perftest recreates them). So a run whose client ends that
/// way is run again, both sides, up to [`RACE_ATTEMPTS`] times in all: on a loaded machine
/// (a CI runner building the workspace beside the tests) the server loses the race often, and
/// three attempts all lost it in one CI run.
fn perftest_r(tool: &str, server_ip: &str, client_ip: &str, extra: &[&str]) {
    let mut args = vec!["-R", "-d", "softrdma0"];
    args.extend_from_slice(extra);
    let mut client_args = args.clone();
    client_args.push(server_ip);
    let mut attempt = 0;
    let (s, c) = loop {
        attempt += 1;
        let mut sp = start_server(exec(server_ip, tool, &args), server_ip, tool);
        let c = finish(
            exec(client_ip, tool, &client_args)
                .spawn()
                .expect("spawn client"),
            tool,
            Duration::from_secs(90),
        );
        let text =
            String::from_utf8_lossy(&c.stdout).into_owned() + &String::from_utf8_lossy(&c.stderr);
        let raced = !c.status.success() && text.contains("RDMA_CM_EVENT_REJECTED; error: 8");
        if raced && attempt < RACE_ATTEMPTS {
            eprintln!(
                "{tool} -R: the test connection's REQ came before the listener (attempt {attempt})"
            );
            let _ = sp.kill();
            let _ = sp.wait();
            continue;
        }
        break (finish(sp, tool, Duration::from_secs(90)), c);
    };
    // Latency tests report on the client only.
    let server_reports = tool.contains("_bw");
    for (o, side, reports) in [(&s, "server", server_reports), (&c, "client", true)] {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && (!reports || out.contains("#bytes")),
            "{tool} -R {side}:\n{}",
            show(o)
        );
    }
}

/// How many times [`perftest_r`] runs a pair that perftest 0.17's race ends.
const RACE_ATTEMPTS: u32 = 8;

#[test]
fn perftest_write_bw_over_rdma_cm() {
    perftest_r("ib_write_bw", "127.0.70.15", "127.0.70.16", &["-n", "500"]);
}

#[test]
fn perftest_read_lat_over_rdma_cm() {
    perftest_r("ib_read_lat", "127.0.70.17", "127.0.70.18", &["-n", "200"]);
}

#[test]
fn perftest_send_bw_over_rdma_cm() {
    perftest_r("ib_send_bw", "127.0.70.19", "127.0.70.20", &["-n", "500"]);
}

#[test]
fn perftest_atomic_bw_over_rdma_cm() {
    perftest_r("ib_atomic_bw", "127.0.70.21", "127.0.70.22", &["-n", "500"]);
}

/// rsockets are not there: riostream says so at once and fails, instead of hanging.
#[test]
fn riostream_fails_at_once_with_a_clear_message() {
    let out = finish(
        exec("127.0.70.23", "riostream", &["-s", "127.0.70.24"])
            .spawn()
            .expect("spawn"),
        "riostream",
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "riostream succeeded:\n{}",
        show(&out)
    );
    assert!(
        err.contains("is not supported by softrdma's librdmacm"),
        "no clear message:\n{}",
        show(&out)
    );
}

/// The host's own address (what it sends from towards the outside), if it has one that is
/// not loopback: libfabric's verbs provider drops the port of a loopback source address (its
/// servers then listen on an ephemeral port the client cannot know), so its servers need a
/// real one.
fn host_address() -> Option<String> {
    let s = std::net::UdpSocket::bind(("0.0.0.0", 0)).ok()?;
    // TEST-NET-1 (RFC 5737): nothing is sent, the kernel only picks a source address.
    s.connect(("192.0.2.1", 9)).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback()).then(|| ip.to_string())
}

#[test]
fn libfabric_verbs_provider_lists_the_device() {
    check_setup("fi_info");
    let out = finish(
        exec("127.0.70.25", "fi_info", &["-p", "verbs"])
            .spawn()
            .expect("spawn"),
        "fi_info",
        Duration::from_secs(30),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "provider: verbs\n",
        "domain: softrdma0\n",
        "protocol: FI_PROTO_RDMA_CM_IB_RC",
        "domain: softrdma0-dgram\n",
        "protocol: FI_PROTO_IB_UD",
    ] {
        assert!(
            out.status.success() && text.contains(want),
            "fi_info -p verbs lacks {want:?}:\n{}",
            show(&out)
        );
    }
}

/// fabtests' message ping-pong over the verbs provider's MSG endpoints and RMA bandwidth over
/// `verbs;ofi_rxm` RDM endpoints, between two processes, with their data checks (`-v`).
#[test]
fn libfabric_fabtests_over_the_verbs_provider() {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peers/bin");
    if !bin.join("fi_msg_pingpong").exists() {
        eprintln!("{} has no fabtests: skipping", bin.display());
        return;
    }
    let Some(host) = host_address() else {
        eprintln!("the host has no address but loopback: skipping");
        return;
    };
    let fabtest = |ip: &str, name: &str, args: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["exec", "--ip", ip, "--"])
            .arg(bin.join(name))
            .args(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    };
    let cases: [(&str, &[&str]); 2] = [
        (
            "fi_msg_pingpong",
            &["-p", "verbs", "-v", "-I", "200", "-S", "4096"],
        ),
        (
            "fi_rma_bw",
            &[
                "-p",
                "verbs;ofi_rxm",
                "-e",
                "rdm",
                "-v",
                "-I",
                "100",
                "-S",
                "65536",
            ],
        ),
    ];
    for (name, args) in cases {
        let mut server_args = vec!["-s", host.as_str()];
        server_args.extend_from_slice(args);
        // Both on the host's one address, as two ranks of a job on one host would be.
        let mut client_args = vec!["-s", host.as_str()];
        client_args.extend_from_slice(args);
        client_args.push(host.as_str());
        // Another test may be using the host's address for a moment.
        let start = Instant::now();
        while device_open(&host) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let (s, c) = pair(
            fabtest(&host, name, &server_args),
            &host,
            fabtest(&host, name, &client_args),
            name,
            true,
        );
        for (o, side) in [(&s, "server"), (&c, "client")] {
            assert_ok(o, &format!("{name} {side}"), "Mxfers/sec");
        }
    }
}
