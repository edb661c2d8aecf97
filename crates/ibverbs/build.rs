//! Links `libibverbs.so` as rdma-core's `libibverbs.so.1` and builds the provider stubs.
//!
//! 1. The cdylib gets the soname `libibverbs.so.1` and the version script `libibverbs.map`,
//!    which defines rdma-core's version nodes (`IBVERBS_1.0` … `IBVERBS_1.14`,
//!    `IBVERBS_PRIVATE_34`); `src/symbols.rs` binds each exported function to its node with
//!    `.symver` (rustc's own export list is an anonymous version script, which cannot name
//!    versions).
//! 2. `target/<profile>/libibverbs.so.1`, the name the dynamic linker looks for, is made a
//!    symlink to `deps/libibverbs.so`: cargo writes the library there whenever it builds it,
//!    for `cargo build` (which also copies it to `target/<profile>/libibverbs.so`) and for
//!    `cargo test` (which does not).
//! 3. The provider stubs in `providers/` (`libmlx5.so.1`, `libefa.so.1`: vendor extension
//!    libraries that perftest links) are compiled with the system C compiler straight into
//!    `target/<profile>/`, each with its own version script.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rerun-if-changed=providers");
    if target_os != "linux" {
        return;
    }
    let map = manifest.join("libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );

    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out.
    let Some(profile_dir) = out.ancestors().nth(3).map(Path::to_path_buf) else {
        return;
    };
    let link = profile_dir.join("libibverbs.so.1");
    let target = Path::new("deps/libibverbs.so");
    if std::fs::read_link(&link).ok().as_deref() != Some(target) {
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink(target, &link) {
            println!("cargo:warning=cannot link {}: {e}", link.display());
        }
    }

    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    for (lib, source) in [("libmlx5.so.1", "mlx5"), ("libefa.so.1", "efa")] {
        let src = manifest.join("providers").join(format!("{source}.c"));
        let script = manifest.join("providers").join(format!("{source}.map"));
        let built = out.join(lib);
        let status = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror"])
            .arg(format!("-Wl,-soname,{lib}"))
            .arg(format!("-Wl,--version-script={}", script.display()))
            .arg("-o")
            .arg(&built)
            .arg(&src)
            .status();
        match status {
            Ok(s) if s.success() => {
                if let Err(e) = std::fs::copy(&built, profile_dir.join(lib)) {
                    println!("cargo:warning=cannot install {lib}: {e}");
                }
            }
            Ok(s) => panic!("building the {lib} stub failed ({s}); `{cc}` must be a C compiler"),
            Err(e) => panic!("building the {lib} stub needs a C compiler (`{cc}`): {e}"),
        }
    }
}
