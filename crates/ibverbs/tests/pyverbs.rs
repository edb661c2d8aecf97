//! Language bindings built on libibverbs work on softrdma: Debian's `python3-pyverbs` (run by
//! Debian's `/usr/bin/python3`, whose modules it is built for) opens the device, connects two
//! RC QPs, and moves bytes with an RDMA WRITE and a SEND (`tests/py/rc.py`); and rdma-core's
//! own test suite, which that package ships, passes on softrdma (`tests/py/rdma_core_suite.py`).
//! Addresses 127.0.15.1 and 127.0.15.2. Needs `apt-get install python3-pyverbs` (CI does).

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

/// rdma-core's test suite (Debian's, rdma-core 44) against softrdma's library: every test it
/// runs passes. It skips what softrdma does not offer (device memory, XRC, raw packet QPs,
/// parent domains, dmabuf, importing a device), what the host lacks (huge pages, CUDA) and the
/// rdma_cm tests, which look for the device's netdev in sysfs. The floor of 104 passing tests
/// is what this version runs (90, and the 14 on-demand paging tests): fewer means tests that
/// ran before now skip.
#[test]
fn rdma_core_test_suite() {
    let out = run_python(
        "/usr/share/doc/rdma-core/tests",
        "rdma_core_suite.py",
        "127.0.15.2",
    );
    let summary = out
        .stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("rdma-core suite: "))
        .unwrap_or_else(|| panic!("no summary line:\n{}", out.report));
    let count = |what: &str| -> usize {
        summary
            .split(", ")
            .find_map(|f| f.strip_prefix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {what} in {summary:?}"))
    };
    assert!(
        out.status.success() && count("failed ") == 0,
        "{}",
        out.report
    );
    assert!(count("ok ") >= 104, "{summary}\n{}", out.report);
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
