//! The vendor stand-ins (`providers/`, written by `providers/gen.py`): `libmlx5.so.1` and
//! `libefa.so.1` export every function and version node rdma-core 44's libraries export, so
//! that what links them with BIND_NOW — UCX's `libuct_ib.so`, pyverbs' vendor modules —
//! loads through softrdma and takes its generic verbs path. Compared with the system's
//! libraries where Debian's ibverbs-providers is installed (`objdump -T`).

mod common;

use std::path::Path;
use std::process::Command;

use common::{exports, lib_dir, run_with_softrdma};

#[test]
fn stand_ins_export_what_rdma_core_exports() {
    let mut compared = 0;
    for (lib, at_least) in [("libmlx5.so.1", 150), ("libefa.so.1", 9)] {
        let system = Path::new("/usr/lib/x86_64-linux-gnu").join(lib);
        let Some(ours) = exports(&lib_dir().join(lib)) else {
            eprintln!("objdump is not installed: skipping the comparison");
            return;
        };
        assert!(ours.len() >= at_least, "{lib}: only {} exports", ours.len());
        if !system.exists() {
            eprintln!(
                "{} is not installed (ibverbs-providers): skipping it",
                system.display()
            );
            continue;
        }
        let theirs = exports(&system).unwrap();
        let missing: Vec<_> = theirs.difference(&ours).collect();
        let extra: Vec<_> = ours.difference(&theirs).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{lib}: missing {missing:?}, not in rdma-core's {extra:?} (run providers/gen.py)"
        );
        compared += 1;
    }
    eprintln!("{compared} stand-ins compared with the system's libraries");
}

/// What links the vendor libraries loads through the stand-ins: pyverbs' mlx5 and EFA
/// modules, and UCX's InfiniBand transport module (with RTLD_NOW, as BIND_NOW programs load).
#[test]
fn vendor_modules_load_through_the_stand_ins() {
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("no python3: skipping");
        return;
    }
    let mut script = String::from("import ctypes, os, importlib\nloaded = []\n");
    for m in [
        "mlx5.mlx5dv",
        "mlx5.dr_domain",
        "mlx5.mlx5dv_flow",
        "efa.efadv",
    ] {
        let vendor = m.split('.').next().unwrap_or(m);
        let dir = format!("/usr/lib/python3/dist-packages/pyverbs/providers/{vendor}");
        if Path::new(&dir).exists() {
            script.push_str(&format!(
                "importlib.import_module('pyverbs.providers.{m}'); loaded.append('{m}')\n"
            ));
        }
    }
    let uct = "/usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0";
    if Path::new(uct).exists() {
        script.push_str(&format!(
            "ctypes.CDLL('{uct}', mode=os.RTLD_NOW); loaded.append('libuct_ib')\n"
        ));
    }
    script.push_str("print('loaded:', ' '.join(loaded))\n");
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.args(["-c", &script]);
    let out = run_with_softrdma(cmd, "127.0.12.4");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("loaded:"),
        "{}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", stdout.trim());
}
