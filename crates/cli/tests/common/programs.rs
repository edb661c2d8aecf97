//! Running unmodified programs through `softrdma exec` in tests: the command, a child with
//! its output captured, a bounded wait, and whether a server listens yet.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

/// `softrdma exec --ip IP -- PROGRAM…`.
pub(crate) fn exec(ip: &str, program: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["exec", "--ip", ip, "--"]).args(program);
    cmd
}

/// Starts `cmd` with stdout and stderr captured.
pub(crate) fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn")
}

/// The program a `softrdma exec` child runs (exec stays as its parent), once it started.
pub(crate) fn program_of(exec: &Child) -> u32 {
    let children = format!("/proc/{0}/task/{0}/children", exec.id());
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(&children).unwrap_or_default();
        if let Some(pid) = text.split_whitespace().next().and_then(|p| p.parse().ok()) {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "softrdma exec ({}) started no program",
            exec.id()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for `child` at most `limit`; past it, kills it and fails, naming `what`.
pub(crate) fn finish(mut child: Child, what: &str, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("{what} did not finish:\n{}", show(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Exit status, stdout and stderr, for a failure message.
pub(crate) fn show(o: &Output) -> String {
    format!(
        "{}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// How many sockets are bound to `ip`:4791 (IPv4): softrdma devices open on the address,
/// which any number of processes may share.
pub(crate) fn devices_on(ip: &str) -> usize {
    let octets: Vec<u8> = ip.split('.').map(|o| o.parse().unwrap()).collect();
    let needle = format!(
        "{:02X}{:02X}{:02X}{:02X}:12B7",
        octets[3], octets[2], octets[1], octets[0]
    );
    std::fs::read_to_string("/proc/net/udp").map_or(0, |s| {
        s.lines()
            .skip(1)
            .filter(|l| l.split_whitespace().nth(1) == Some(needle.as_str()))
            .count()
    })
}

/// The address `softrdma exec` gives a program when told none (the host's outgoing one).
pub(crate) fn default_address() -> String {
    let o = Command::new(BIN)
        .args(["exec", "--", "sh", "-c", "echo $SOFTRDMA_IP"])
        .output()
        .expect("run sh");
    assert!(o.status.success(), "{}", show(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Asserts that `o` exited 0 and printed `marker` (on stdout or stderr).
pub(crate) fn assert_ok(o: &Output, what: &str, marker: &str) {
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && text.contains(marker),
        "{what}: expected exit 0 and {marker:?}:\n{}",
        show(o)
    );
}

/// Whether something listens on TCP `port`.
pub(crate) fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&needle) && cols[3] == "0A"
            })
        })
    })
}

/// Runs `server`, waits for it to listen on TCP `port`, runs `client`; both must exit 0
/// within 120 s. Returns their outputs.
pub(crate) fn pair(server: Command, client: Command, port: u16, what: &str) -> (Output, Output) {
    let limit = Duration::from_secs(120);
    let start = Instant::now();
    let s = spawn(server);
    while !listening(port) {
        assert!(start.elapsed() < limit, "{what}: server never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = finish(spawn(client), &format!("{what} client"), limit);
    let s = finish(s, &format!("{what} server"), limit);
    assert!(
        s.status.success() && c.status.success(),
        "{what}\n--- server:\n{}\n--- client:\n{}",
        show(&s),
        show(&c)
    );
    (s, c)
}

/// The value of counter `name` in a `--counters` report (0 when absent: only non-zero ones
/// are printed).
pub(crate) fn counter(stderr: &[u8], name: &str) -> u64 {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .filter_map(|l| l.strip_prefix("softrdma:\t"))
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}
