//! Many unmodified programs on one address through `softrdma exec`, as `mpirun` and
//! containers run them: perftest pairs side by side, rdma_cm programs whose MADs must reach
//! the right process, and a process killed mid-transfer that disturbs no other. Addresses
//! 127.0.15.x, and the default address of `softrdma exec`.
//!
//! Needs `libibverbs.so.1` and `librdmacm.so.1` in the binary's directory (`cargo build
//! --workspace`) and Debian's perftest and rdmacm-utils.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "common/programs.rs"]
mod programs;
use programs::{assert_ok, default_address, devices_on, finish, show, BIN};

fn check_setup(tools: &[&str]) {
    let dir = Path::new(BIN).parent().expect("binary directory");
    assert!(
        dir.join("libibverbs.so.1").exists() && dir.join("librdmacm.so.1").exists(),
        "{} lacks libibverbs.so.1 or librdmacm.so.1: build the workspace",
        dir.display()
    );
    for tool in tools {
        assert!(
            Path::new("/usr/bin").join(tool).exists(),
            "/usr/bin/{tool} missing: install Debian's perftest and rdmacm-utils"
        );
    }
}

/// `softrdma exec [--ip IP] -- PROGRAM ARGS`, output captured.
fn exec(ip: Option<&str>, program: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("exec");
    if let Some(ip) = ip {
        cmd.args(["--ip", ip]);
    }
    cmd.arg("--").args(program);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// Waits until `n` devices are open on `ip`, and a moment more (servers listen right after).
fn wait_devices(ip: &str, n: usize, what: &str) {
    let start = Instant::now();
    while devices_on(ip) < n {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: {} of {n} devices opened on {ip}",
            devices_on(ip)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
}

/// perftest's result line: "#bytes #iterations ..." followed by the figures.
const PERFTEST_TABLE: &str = "#bytes";

#[test]
fn perftest_server_and_client_on_the_default_address() {
    check_setup(&["ib_write_bw"]);
    let ip = default_address();
    let before = devices_on(&ip);
    let args = [
        "ib_write_bw",
        "-d",
        "softrdma0",
        "-p",
        "18711",
        "-n",
        "2000",
    ];
    let server = exec(None, &args).spawn().expect("spawn server");
    wait_devices(&ip, before + 1, "ib_write_bw server");
    let mut client_args = args.to_vec();
    client_args.push(&ip);
    let client = exec(None, &client_args).spawn().expect("spawn client");
    let c = finish(client, "ib_write_bw client", Duration::from_secs(60));
    let s = finish(server, "ib_write_bw server", Duration::from_secs(60));
    assert_ok(&s, "ib_write_bw server", PERFTEST_TABLE);
    assert_ok(&c, "ib_write_bw client", PERFTEST_TABLE);
}

#[test]
fn eight_send_lat_pairs_at_once_on_one_address() {
    check_setup(&["ib_send_lat"]);
    let ip = "127.0.15.1";
    let ports: Vec<String> = (0..8).map(|i| (18720 + i).to_string()).collect();
    let servers: Vec<Child> = ports
        .iter()
        .map(|p| {
            exec(
                Some(ip),
                &["ib_send_lat", "-d", "softrdma0", "-p", p, "-n", "2000"],
            )
            .spawn()
            .expect("spawn server")
        })
        .collect();
    wait_devices(ip, 8, "ib_send_lat servers");
    let clients: Vec<Child> = ports
        .iter()
        .map(|p| {
            exec(
                Some(ip),
                &["ib_send_lat", "-d", "softrdma0", "-p", p, "-n", "2000", ip],
            )
            .spawn()
            .expect("spawn client")
        })
        .collect();
    let limit = Duration::from_secs(90);
    for (i, (s, c)) in servers.into_iter().zip(clients).enumerate() {
        let c = finish(c, "ib_send_lat client", limit);
        let s = finish(s, "ib_send_lat server", limit);
        assert_ok(&c, &format!("ib_send_lat client {i}"), PERFTEST_TABLE);
        assert_ok(&s, &format!("ib_send_lat server {i}"), PERFTEST_TABLE);
    }
}

#[test]
fn a_process_killed_mid_transfer_disturbs_no_other_on_the_address() {
    check_setup(&["ib_write_bw", "ib_read_bw", "ib_send_lat"]);
    let ip = "127.0.15.2";
    // perftest on the address, `-d softrdma0 -p PORT`, a server or (with `ip`) a client.
    let perftest = |prog: &str, port: &str, run: &[&str], client: bool, what: &str| {
        let mut args = vec![prog, "-d", "softrdma0", "-p", port];
        args.extend_from_slice(run);
        if client {
            args.push(ip);
        }
        exec(Some(ip), &args)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"))
    };
    // The victim: a long READ run. The survivor: a WRITE run of a fixed size.
    let (victim_run, survivor_run) = (["-D", "20"], ["-n", "20000"]);
    let victim = perftest("ib_read_bw", "18740", &victim_run, false, "victim server");
    let survivor = perftest(
        "ib_write_bw",
        "18741",
        &survivor_run,
        false,
        "survivor server",
    );
    wait_devices(ip, 2, "servers");
    let victim_client = perftest("ib_read_bw", "18740", &victim_run, true, "victim client");
    wait_devices(ip, 3, "victim client");
    let survivor_client = perftest(
        "ib_write_bw",
        "18741",
        &survivor_run,
        true,
        "survivor client",
    );
    std::thread::sleep(Duration::from_millis(700));
    let killed = Command::new("kill")
        .args(["-9", &victim.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let limit = Duration::from_secs(90);
    let c = finish(survivor_client, "survivor client", limit);
    let s = finish(survivor, "survivor server", limit);
    assert_ok(&c, "survivor client", PERFTEST_TABLE);
    assert_ok(&s, "survivor server", PERFTEST_TABLE);
    let v = finish(victim, "victim", limit);
    assert_eq!(v.status.code(), None, "killed by a signal: {}", show(&v));
    let mut vc = victim_client;
    let _ = vc.kill();
    let _ = vc.wait();

    // A new pair on the address later works.
    let args = [
        "ib_send_lat",
        "-d",
        "softrdma0",
        "-p",
        "18742",
        "-n",
        "1000",
    ];
    let server = exec(Some(ip), &args).spawn().expect("spawn server");
    wait_devices(ip, 1, "new server");
    let mut client_args = args.to_vec();
    client_args.push(ip);
    let c = finish(
        exec(Some(ip), &client_args).spawn().expect("spawn"),
        "new client",
        limit,
    );
    let s = finish(server, "new server", limit);
    assert_ok(&c, "new client", PERFTEST_TABLE);
    assert_ok(&s, "new server", PERFTEST_TABLE);
}

/// A server, then its client (rerun while the server does not listen yet), on one address.
fn cm_pair(ip: &str, server: &[&str], client: &[&str], what: &str) -> (Output, Output) {
    let before = devices_on(ip);
    let s = exec(Some(ip), server).spawn().expect("spawn server");
    wait_devices(ip, before + 1, what);
    let limit = Duration::from_secs(60);
    let c = finish(
        exec(Some(ip), client).spawn().expect("spawn client"),
        what,
        limit,
    );
    (finish(s, what, limit), c)
}

#[test]
fn rdma_cm_programs_find_each_other_on_one_address() {
    check_setup(&["rping", "ucmatose", "udaddy", "mckey"]);
    let ip = "127.0.15.3";
    let (s, c) = cm_pair(
        ip,
        &["rping", "-s", "-a", ip, "-p", "18750", "-C", "10", "-V"],
        &["rping", "-c", "-a", ip, "-p", "18750", "-C", "10", "-V"],
        "rping",
    );
    assert_ok(&s, "rping server", "");
    assert_ok(&c, "rping client", "");
    // Four RC connections: REQ by Service ID to the server, the rest by communication ID.
    let (s, c) = cm_pair(
        ip,
        &["ucmatose", "-b", ip, "-p", "18751", "-c", "4"],
        &["ucmatose", "-s", ip, "-p", "18751", "-c", "4"],
        "ucmatose",
    );
    assert_ok(&s, "ucmatose server", "test complete");
    assert_ok(&c, "ucmatose client", "test complete");
    // UD: SIDR_REQ by Service ID, SIDR_REP by request ID (udaddy's port is fixed: 7174).
    let (s, c) = cm_pair(ip, &["udaddy", "-b", ip], &["udaddy", "-s", ip], "udaddy");
    assert_ok(&s, "udaddy server", "test complete");
    assert_ok(&c, "udaddy client", "test complete");
    // Multicast: the receiver's joined group gets the sender's datagrams, the sender being
    // another process on the same address.
    let (s, c) = cm_pair(
        ip,
        &["mckey", "-m", "239.1.15.3", "-b", ip],
        &["mckey", "-m", "239.1.15.3", "-s", "-b", ip],
        "mckey",
    );
    assert_ok(&s, "mckey receiver", "test complete");
    assert_ok(&c, "mckey sender", "test complete");
}

#[test]
fn a_second_listener_on_a_port_of_the_address_is_refused() {
    check_setup(&["rping"]);
    let ip = "127.0.15.4";
    let first = exec(Some(ip), &["rping", "-s", "-a", ip, "-p", "18760"])
        .spawn()
        .expect("spawn first server");
    wait_devices(ip, 1, "first rping server");
    let second = finish(
        exec(Some(ip), &["rping", "-s", "-a", ip, "-p", "18760"])
            .spawn()
            .expect("spawn second server"),
        "second rping server",
        Duration::from_secs(30),
    );
    let mut first = first;
    let _ = first.kill();
    let _ = first.wait();
    let text = show(&second);
    assert!(
        !second.status.success() && text.contains("rdma_listen"),
        "the second listener should fail in rdma_listen (EADDRINUSE):\n{text}"
    );
}

/// A connection request that the kernel steers to the wrong program on the address (its copy
/// of the table had two members' places swapped, as two deaths at once in the wrong order
/// can leave it) is dropped there, not rejected: that program asks everyone to check their
/// places, and the requester's retransmission reaches the listener.
#[test]
fn a_connect_request_steered_to_the_wrong_program_still_connects() {
    use std::os::unix::fs::PermissionsExt;
    check_setup(&["rping"]);
    let ip = "127.0.15.5";
    // A table of this test's own, to corrupt.
    let run_dir = std::env::temp_dir().join(format!("softrdma-misdirected-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let on = |ip: &str, program: &[&str]| {
        let mut cmd = exec(Some(ip), program);
        cmd.env("SOFTRDMA_RUN_DIR", &run_dir);
        cmd.spawn().expect("spawn")
    };
    struct Kill(Vec<Child>);
    impl Drop for Kill {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let listener = on(
        ip,
        &["rping", "-s", "-a", ip, "-p", "18770", "-C", "3", "-V"],
    );
    wait_devices(ip, 1, "the listener");
    let mut others = Kill(vec![on(ip, &["rping", "-s", "-a", ip, "-p", "18771"])]);
    wait_devices(ip, 2, "another server");

    // Swap the two members' places in the table; the next program to join attaches the
    // steering program that follows from it, and the listener's requests go to the other.
    let table = std::fs::read_dir(&run_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{ip}_4791_")))
        })
        .expect("the address's table");
    let text = std::fs::read_to_string(&table).unwrap();
    let swapped: String = text
        .lines()
        .map(
            |l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                ["member", slot, "0", pid] => format!("member {slot} 1 {pid}\n"),
                ["member", slot, "1", pid] => format!("member {slot} 0 {pid}\n"),
                _ => format!("{l}\n"),
            },
        )
        .collect();
    assert_ne!(swapped, text, "two members expected:\n{text}");
    std::fs::write(&table, swapped).unwrap();
    others
        .0
        .push(on(ip, &["rping", "-s", "-a", ip, "-p", "18772"]));
    wait_devices(ip, 3, "a third server");

    let started = Instant::now();
    let client = finish(
        on(
            "127.0.15.6",
            &["rping", "-c", "-a", ip, "-p", "18770", "-C", "3", "-V"],
        ),
        "rping client",
        Duration::from_secs(60),
    );
    let server = finish(listener, "rping server", Duration::from_secs(30));
    drop(others);
    let _ = std::fs::remove_dir_all(&run_dir);
    assert_ok(&client, "rping client", "");
    assert_ok(&server, "rping server", "");
    eprintln!("connected after {:?}", started.elapsed());
}
