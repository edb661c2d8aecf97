//! Running `softrdma perf` as a user does, shared by the perf test files (each test binary
//! includes it with `#[path]`, so each has its own lock).

use std::process::{Command, Output};
use std::sync::Mutex;

/// The loopback devices bind UDP 4791 on 127.0.0.1 and 127.0.0.2: one run at a time.
pub(crate) static LOOPBACK: Mutex<()> = Mutex::new(());

/// `softrdma perf ARGS`.
pub(crate) fn perf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("perf")
        .args(args)
        .output()
        .expect("run softrdma")
}

/// `softrdma perf ARGS --loopback`, which must succeed; returns (stdout, stderr).
pub(crate) fn loopback(args: &[&str]) -> (String, String) {
    let _guard = LOOPBACK.lock().unwrap_or_else(|e| e.into_inner());
    let mut a = args.to_vec();
    a.push("--loopback");
    let out = perf(&a);
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert!(
        out.status.success(),
        "softrdma perf {args:?} failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// A usage error: exit status 2, nothing on stdout, one message containing `want` on stderr,
/// and no panic.
pub(crate) fn usage_error(args: &[&str], want: &str) {
    let out = perf(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    assert!(stderr.contains(want), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The unsigned number after `"name":` in a `--json` line, if the key is there.
#[allow(dead_code)] // not every test binary that includes this module reads JSON
pub(crate) fn json_u64(json: &str, name: &str) -> Option<u64> {
    let at = json.find(&format!("\"{name}\":"))?;
    let rest = &json[at + name.len() + 3..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    Some(
        rest[..end]
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {e}: {json}")),
    )
}
