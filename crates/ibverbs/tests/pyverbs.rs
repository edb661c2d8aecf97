//! Language bindings built on libibverbs work on softrdma: Debian's `python3-pyverbs` (run by
//! Debian's `/usr/bin/python3`, whose modules it is built for) opens the device, connects two
//! RC QPs, and moves bytes with an RDMA WRITE and a SEND (`tests/py/rc.py`), also in a child
//! forked with the device open (`tests/py/fork.py`). Addresses 127.0.15.1 and 127.0.15.3. Needs `apt-get install python3-pyverbs` (CI does). rdma-core's own test suite,
//! which that package ships (`tests/py/rdma_core_suite.py`), runs through `softrdma exec`, as
//! users run it: `crates/cli/tests/rdma_core_suite.rs`.

mod common;

use std::path::Path;
use std::process::Command;

use common::run_with_softrdma;

#[test]
fn pyverbs_rc_write_and_send() {
    let out = run_python(
        "/usr/lib/python3/dist-packages/pyverbs",
        "rc.py",
        "127.0.15.1",
    );
    assert!(
        out.status.success() && out.stdout.contains("pyverbs: all checks passed"),
        "{}",
        out.report
    );
}

/// A process that forks with the device open: the child opens its own and moves bytes on
/// it, and the parent's device still works after (`tests/py/fork.py`). Before the library
/// told an inherited device from its own, the child's verbs waited forever on the parent's
/// progress thread, which fork does not copy.
#[test]
fn pyverbs_after_fork() {
    let out = run_python(
        "/usr/lib/python3/dist-packages/pyverbs",
        "fork.py",
        "127.0.15.3",
    );
    assert!(
        out.status.success() && out.stdout.contains("pyverbs: fork checks passed"),
        "{}",
        out.report
    );
    assert_eq!(
        out.stdout.matches("pyverbs: all checks passed").count(),
        2,
        "{}",
        out.report
    );
}

/// What a script printed, and all of it for a failure message.
struct PythonRun {
    status: std::process::ExitStatus,
    stdout: String,
    report: String,
}

/// Runs `tests/py/<script>` with Debian's `/usr/bin/python3` on softrdma's library with the
/// device on `ip`; `needs` is the path python3-pyverbs installs that the script relies on.
fn run_python(needs: &str, script: &str, ip: &str) -> PythonRun {
    let python = "/usr/bin/python3";
    assert!(
        Path::new(needs).exists() && Path::new(python).exists(),
        "Debian's python3-pyverbs is not installed ({needs} is missing)"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(script);
    let mut cmd = Command::new(python);
    cmd.arg(&script);
    let out = run_with_softrdma(cmd, ip);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let report = format!(
        "{}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    PythonRun {
        status: out.status,
        stdout,
        report,
    }
}
