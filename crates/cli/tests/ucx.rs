//! UCX on softrdma: Debian's unmodified `ucx_info` and `ucx_perftest` (ucx-utils 1.13), and
//! Open MPI over UCX, run through `softrdma exec`, see softrdma0 and move their data over it.
//! Addresses 127.0.16.x and exec's default address, TCP ports 18760–18763 (ucx_perftest's own
//! rendezvous).
//!
//! Needs `libibverbs.so.1` in the binary's directory (`cargo build --workspace`). Without
//! ucx-utils (or, for the MPI test, Open MPI) installed the tests say so and pass: there is
//! nothing to run.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

#[path = "common/programs.rs"]
mod programs;
use programs::{counter, default_address, exec, finish, pair, show, spawn, BIN};

/// Whether `tools` are all installed; if not, says which are missing and what to install.
fn installed(tools: &[&str], packages: &str) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| !Path::new(t).exists())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "skipped: {} not installed (apt-get install {packages})",
            missing.join(", ")
        );
    }
    missing.is_empty()
}

/// Whether UCX's tools are installed (else the reason is printed); panics without
/// softrdma's library, which a workspace build makes.
fn ucx_present() -> bool {
    let dir = Path::new(BIN).parent().expect("binary directory");
    assert!(
        dir.join("libibverbs.so.1").exists(),
        "{} has no libibverbs.so.1: build the workspace (cargo build --workspace)",
        dir.display()
    );
    installed(&["/usr/bin/ucx_info", "/usr/bin/ucx_perftest"], "ucx-utils")
}

/// `ucx_info -d` lists softrdma0 as a memory domain with the `rc_verbs` and `ud_verbs`
/// transports on its port, `softrdma0:1`.
#[test]
fn ucx_info_lists_softrdma0_with_rc_and_ud_verbs() {
    if !ucx_present() {
        return;
    }
    let out = exec("127.0.16.1", &["ucx_info", "-d"]).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let domain = text
        .split("# Memory domain: ")
        .find(|d| d.starts_with("softrdma0\n"))
        .unwrap_or_else(|| panic!("no softrdma0 memory domain:\n{}", show(&out)));
    for tl in ["rc_verbs", "ud_verbs"] {
        let at = domain
            .find(&format!("#      Transport: {tl}\n"))
            .unwrap_or_else(|| panic!("no {tl} on softrdma0:\n{domain}"));
        assert!(
            domain[at..]
                .lines()
                .nth(1)
                .is_some_and(|l| l.trim_end() == "#         Device: softrdma0:1"),
            "{tl} is not on softrdma0:1:\n{domain}"
        );
    }
}

/// One `ucx_perftest` run between two processes started as plain `softrdma exec -- ...`, so
/// both on exec's default address (which they share), restricted to softrdma's device and
/// `tls` (UCX's own names: `rc_v` is rc_verbs with ud_verbs for its wire-up,
/// `ud_v` ud_verbs). Returns the client's output; the client's `--counters` report is on
/// its stderr.
fn perftest(tls: &str, port: u16, args: &[&str]) -> Output {
    let ucx = |mut cmd: Command| {
        cmd.env("UCX_NET_DEVICES", "softrdma0:1")
            .env("UCX_TLS", tls)
            .env("UCX_WARN_UNUSED_ENV_VARS", "n");
        cmd
    };
    let port_s = port.to_string();
    let mut server = Command::new(BIN);
    server.args(["exec", "--", "ucx_perftest", "-p", &port_s]);
    let server = ucx(server);
    let mut client = Command::new(BIN);
    client
        .args(["exec", "--counters", "--"])
        .args(["ucx_perftest", "-p", &port_s])
        .args(args)
        .arg(default_address());
    let client = ucx(client);
    let what = format!("ucx_perftest {args:?} over {tls}");
    let (s, c) = pair(server, client, port, &what);
    for o in [&s, &c] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("UCX  ERROR") && !err.contains("not available"),
            "{what}:\n{}",
            show(o)
        );
    }
    c
}

/// The fields of ucx_perftest's `Final:` line: iterations, then latency 50th percentile,
/// average and overall (µs), bandwidth average and overall (MB/s), message rate average and
/// overall.
fn final_line(out: &Output) -> Vec<f64> {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Final:"))
        .unwrap_or_else(|| panic!("no Final: line:\n{}", show(out)));
    line.split_whitespace()
        .map(|f| f.parse().unwrap_or_else(|_| panic!("bad field {f:?}")))
        .collect()
}

/// ucx_perftest's UCP tests between two processes on one address: put bandwidth
/// and get at 64 KiB and tag-matched latency at 8 B over rc_verbs, tag-matched bandwidth at
/// 4 KiB over ud_verbs. Each run completes every iteration it was asked for, and the
/// client's softrdma device carried at least the bytes the test moved.
#[test]
fn ucx_perftest_between_two_processes_on_one_address() {
    if !ucx_present() {
        return;
    }
    // The last column: the fewest packets the client's device can have sent and received
    // for the run, at most 4096 payload bytes a packet (the port MTU on loopback), and in
    // the latency test at least one packet each way per iteration.
    let runs: [(&str, u16, &str, u64, u64, u64); 4] = [
        ("rc_v,self", 18760, "ucp_put_bw", 65536, 1000, 16000),
        ("rc_v,self", 18761, "ucp_get", 65536, 1000, 16000),
        ("rc_v,self", 18762, "tag_lat", 8, 1000, 2000),
        ("ud_v,self", 18763, "tag_bw", 4096, 1000, 1000),
    ];
    for (tls, port, test, size, iters, least) in runs {
        let (size_s, iters_s) = (size.to_string(), iters.to_string());
        let c = perftest(tls, port, &["-t", test, "-s", &size_s, "-n", &iters_s]);
        let f = final_line(&c);
        assert_eq!(f.len(), 8, "{}", show(&c));
        assert_eq!(f[0], iters as f64, "{test}: iterations\n{}", show(&c));
        assert!(
            f[2] > 0.0 && f[5] > 0.0 && f[7] > 0.0,
            "{test}: figures\n{}",
            show(&c)
        );
        // The data crossed softrdma's device.
        let packets = counter(&c.stderr, "tx_packets") + counter(&c.stderr, "rx_packets");
        assert!(
            packets >= least,
            "{test}: {packets} packets, fewer than {least}\n{}",
            show(&c)
        );
        eprintln!(
            "{test} {size} B over {tls}: {:.2} MB/s, {:.3} us typical latency, {packets} packets",
            f[5], f[1]
        );
    }
}

/// Open MPI over UCX over softrdma, as a user runs it: `softrdma exec -- mpirun -np 4 --mca pml
/// ucx` runs `tests/mpi/pingpong_allreduce.c` (a checked ping-pong between ranks 0 and 1, a
/// checked `MPI_Allreduce` of 64 MiB), once with `rc_v` and once with `ud_v`. The four ranks
/// share one address (127.0.16.10), and every UCX endpoint between two ranks is on
/// softrdma0:1 (UCX's debug log names each lane's transport and device). Skipped when Open
/// MPI is not installed.
#[test]
fn open_mpi_allreduce_over_ucx() {
    if !ucx_present() {
        return;
    }
    if !installed(
        &["/usr/bin/mpicc", "/usr/bin/mpirun"],
        "openmpi-bin libopenmpi-dev",
    ) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("softrdma-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("pingpong_allreduce");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/pingpong_allreduce.c");
    let out = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "mpicc: {}", show(&out));
    for (tl, tls) in [("rc_verbs", "rc_v,self"), ("ud_verbs", "ud_v,self")] {
        let mut mpirun = exec("127.0.16.10", &["mpirun"]);
        mpirun
            // Open MPI refuses root unless told (CI runs as root).
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .args(["--oversubscribe", "-np", "4", "--mca", "pml", "ucx"])
            // Open MPI's UCX component takes only mlx* devices unless told otherwise.
            .args([
                "--mca",
                "pml_ucx_devices",
                "any",
                "--mca",
                "btl",
                "^openib,uct",
            ])
            .args([
                "-x",
                "UCX_NET_DEVICES=softrdma0:1",
                "-x",
                &format!("UCX_TLS={tls}"),
            ])
            // The debug log names each lane; to files, as it is too much for a pipe.
            .args([
                "-x",
                "UCX_LOG_LEVEL=debug",
                "-x",
                "UCX_WARN_UNUSED_ENV_VARS=n",
                "-x",
                &format!("UCX_LOG_FILE={}/{tl}.%p.log", dir.display()),
            ])
            .arg(&exe);
        let out = finish(
            spawn(mpirun),
            &format!("mpirun over {tls}"),
            Duration::from_secs(300),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("pingpong_allreduce: OK"),
            "mpirun over {tls}: {}\n{stdout}",
            out.status
        );
        // The lanes of every endpoint between two ranks (each rank has 3 peers).
        let mut log = String::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with(&format!("{tl}.")) && name.ends_with(".log") {
                log.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
        let lanes: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(": lane[") && !l.contains(":self/"))
            .collect();
        for l in &lanes {
            assert!(l.contains("_verbs/softrdma0:1"), "{tls}: {l}");
        }
        let on_tl = lanes
            .iter()
            .filter(|l| l.contains(&format!("{tl}/softrdma0:1")))
            .count();
        assert!(on_tl >= 12, "{tls}: {on_tl} lanes on {tl}\n{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
