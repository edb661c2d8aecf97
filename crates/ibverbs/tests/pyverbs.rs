//! Language bindings built on libibverbs work on softrdma: Debian's `python3-pyverbs` (run by
//! Debian's `/usr/bin/python3`, whose modules it is built for) opens the device, connects two
//! RC QPs, and moves bytes with an RDMA WRITE and a SEND (`tests/py/rc.py`). Address
//! 127.0.15.1. Needs `apt-get install python3-pyverbs` (CI does).

mod common;

use std::path::Path;
use std::process::Command;

use common::run_with_softrdma;

#[test]
fn pyverbs_rc_write_and_send() {
    let python = "/usr/bin/python3";
    assert!(
        Path::new("/usr/lib/python3/dist-packages/pyverbs").exists() && Path::new(python).exists(),
        "Debian's python3-pyverbs is not installed"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/rc.py");
    let mut cmd = Command::new(python);
    cmd.arg(&script);
    let out = run_with_softrdma(cmd, "127.0.15.1");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("pyverbs: all checks passed"),
        "{}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
