//! rdma-core's own test suite (Debian's python3-pyverbs ships it, rdma-core 44) through
//! `softrdma exec`, as a user runs it (`crates/ibverbs/tests/py/rdma_core_suite.py`, docs/exec.md):
//! on the host's own address, the default, where `softrdma exec`'s sysfs directory gives the
//! device the netdev the suite's rdma_cm tests look for, and those tests' two forked
//! processes share the address.
//!
//! Alone in its test binary: the rdma_cm tests listen on port 7471 of that address, which no
//! other test of this crate's binaries holds while this one runs (`cargo test` runs one
//! binary at a time).

use std::process::Command;
use std::time::Duration;

#[path = "common/programs.rs"]
mod programs;
use programs::{finish, show, spawn, BIN};

/// Every test the suite runs passes, the rdma_cm tests among them. It skips what softrdma does
/// not offer (raw packet QPs, tag matching) and what the host lacks (a GPU for dma-buf, CUDA,
/// and huge pages where nobody allocated them). The floor of 142 passing tests is what this
/// version runs without huge pages (90, the 14 on-demand paging tests, the 10 of
/// `test_rdmacm`, 5 of parent domains, the empty GID's, 13 of device memory, the 7 of XRC and
/// the 2 that import objects): fewer means tests that ran before now skip. With 2 MiB pages
/// allocated (CI does, as root) 3 more run.
#[test]
fn rdma_core_test_suite() {
    let python = "/usr/bin/python3";
    assert!(
        std::path::Path::new("/usr/share/doc/rdma-core/tests").exists(),
        "Debian's python3-pyverbs is not installed"
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ibverbs/tests/py/rdma_core_suite.py"
    );
    let mut cmd = Command::new(BIN);
    cmd.args(["exec", "--", python, script]);
    let out = finish(spawn(cmd), "the rdma-core suite", Duration::from_secs(600));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("rdma-core suite: "))
        .unwrap_or_else(|| panic!("no summary line:\n{}", show(&out)));
    let count = |what: &str| -> usize {
        summary
            .split(", ")
            .find_map(|f| f.strip_prefix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {what} in {summary:?}"))
    };
    assert!(
        out.status.success() && count("failed ") == 0,
        "{}",
        show(&out)
    );
    // unittest names each test on stderr, a skip on the same line: all ten of test_rdmacm's
    // ran (and, with nothing failed, passed).
    let rdmacm: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("(tests.test_rdmacm."))
        .collect();
    assert!(
        rdmacm.len() == 10 && !rdmacm.iter().any(|l| l.contains("skipped")),
        "test_rdmacm: {rdmacm:#?}\n{}",
        show(&out)
    );
    assert!(
        !stderr.contains("Create XRCD is not supported"),
        "XRC tests skipped:\n{}",
        show(&out)
    );
    assert!(count("ok ") >= 142, "{summary}\n{}", show(&out));
}
