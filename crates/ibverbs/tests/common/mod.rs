//! Shared helpers: where the built library is, compiling C test programs against the system
//! headers, and running programs on softrdma's library.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `target/<profile>`, where cargo put `libibverbs.so.1` and the provider stubs.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary in target/<profile>/deps")
        .to_path_buf();
    assert!(
        dir.join("libibverbs.so.1").exists(),
        "{} has no libibverbs.so.1 (cargo builds it with this crate)",
        dir.display()
    );
    dir
}

/// Compiles `tests/c/<source>` into `out_dir` with the system C compiler, against the system
/// `<infiniband/verbs.h>` and libibverbs, with `out_dir` on the include path.
pub fn compile_c(source: &str, out_dir: &Path, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(source);
    let exe = out_dir.join(source.trim_end_matches(".c"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O1", "-g", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(out_dir)
        .arg(&src)
        .arg("-libverbs")
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "compiling {} failed (libibverbs-dev installed?):\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Sets up `cmd` to run on softrdma's library with the device on `ip`.
pub fn on_softrdma(cmd: &mut Command, ip: &str) {
    cmd.env("LD_LIBRARY_PATH", lib_dir()).env("SOFTRDMA_IP", ip);
}

/// Runs `cmd` on softrdma's library with the device on `ip`, killing it after 60 s.
pub fn run_with_softrdma(mut cmd: Command, ip: &str) -> Output {
    on_softrdma(&mut cmd, ip);
    run_bounded(cmd, Duration::from_secs(60))
}

/// Runs `cmd` to completion, killing it after `limit`.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{cmd:?} did not finish within {limit:?}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The defined functions and version nodes of `lib`, as `objdump -T` names them ("MLX5_1.2
/// mlx5dv_init_obj", "(MLX5_1.0) mlx5dv_init_obj" for a non-default version).
pub fn exports(lib: &Path) -> Option<BTreeSet<String>> {
    let out = Command::new("objdump").arg("-T").arg(lib).output().ok()?;
    assert!(out.status.success(), "objdump -T {}", lib.display());
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter(|l| !l.contains("*UND*") && (l.contains(" DF ") || l.contains(" DO ")))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 7).then(|| format!("{} {}", f[f.len() - 2], f[f.len() - 1]))
            })
            .collect(),
    )
}
