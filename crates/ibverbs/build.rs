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
//! 4. `librdmacm.so.1` is made from `librdmacm/librdmacm.map` (rdma-core 44's functions and
//!    version nodes): each function is a jump to the function of the same name with the
//!    prefix `softrdma_` in `libibverbs.so.1`, where rdma_cm lives beside the verbs (one
//!    device per process). It is linked against a stand-in `libibverbs.so.1` that only
//!    defines those names, for its `DT_NEEDED`; the real library is the one found at run time.
//! 5. `libsoftrdma-devnode.so` (`preload/devnode.c`), which `softrdma exec` preloads: the
//!    device node `/dev/infiniband/softrdma0` that UCX checks for before it uses a device.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rerun-if-changed=providers");
    println!("cargo:rerun-if-changed=librdmacm");
    println!("cargo:rerun-if-changed=preload");
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
    build_librdmacm(&cc, &manifest, &out, &profile_dir);
    build_devnode(&cc, &manifest, &out, &profile_dir);
}

fn build_devnode(cc: &str, manifest: &Path, out: &Path, profile_dir: &Path) {
    let lib = "libsoftrdma-devnode.so";
    let built = out.join(lib);
    let src = manifest.join("preload").join("devnode.c");
    let soname = format!("-Wl,-soname,{lib}");
    let args: Vec<&std::ffi::OsStr> = vec![
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-O2".as_ref(),
        "-Wall".as_ref(),
        "-Werror".as_ref(),
        soname.as_ref(),
        "-o".as_ref(),
        built.as_os_str(),
        src.as_os_str(),
        "-ldl".as_ref(),
    ];
    compile(cc, &args, lib);
    if let Err(e) = std::fs::copy(&built, profile_dir.join(lib)) {
        println!("cargo:warning=cannot install {lib}: {e}");
    }
}

/// The global names of a version script.
fn script_functions(script: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut global = false;
    let text: String = script
        .split("*/")
        .map(|part| part.split("/*").next().unwrap_or(""))
        .collect();
    for token in text.split(|c: char| c.is_whitespace() || c == ';' || c == '{' || c == '}') {
        match token {
            "" => {}
            "global:" => global = true,
            "local:" => global = false,
            t if global && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                names.push(t.to_string())
            }
            _ => {}
        }
    }
    names
}

fn compile(cc: &str, args: &[&std::ffi::OsStr], what: &str) {
    match Command::new(cc).args(args).status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("building {what} failed ({s}); `{cc}` must be a C compiler"),
        Err(e) => panic!("building {what} needs a C compiler (`{cc}`): {e}"),
    }
}

fn build_librdmacm(cc: &str, manifest: &Path, out: &Path, profile_dir: &Path) {
    let script = manifest.join("librdmacm").join("librdmacm.map");
    let text = std::fs::read_to_string(&script).expect("librdmacm/librdmacm.map");
    let names = script_functions(&text);
    let mut forward = String::from(
        "/* Written by build.rs from librdmacm.map: each function jumps to softrdma_<name>. */\n",
    );
    let mut stub = String::from("/* The names librdmacm.so.1 needs from libibverbs.so.1. */\n");
    for n in &names {
        forward.push_str(&format!(
            "__asm__(\".text\\n.globl {n}\\n.type {n},@function\\n{n}:\\n\\tJUMP softrdma_{n}\\n.size {n},.-{n}\");\n"
        ));
        stub.push_str(&format!("void softrdma_{n}(void) {{}}\n"));
    }
    let forward = format!(
        "#if defined(__x86_64__)\n__asm__(\".macro JUMP to\\n\\tjmp \\\\to@PLT\\n.endm\");\n\
         #elif defined(__aarch64__)\n__asm__(\".macro JUMP to\\n\\tb \\\\to\\n.endm\");\n\
         #else\n#error \"librdmacm.so.1's forwarders are written for x86-64 and AArch64\"\n#endif\n{forward}"
    );
    let stub_dir = out.join("stub");
    std::fs::create_dir_all(&stub_dir).expect("OUT_DIR is writable");
    let stub_c = stub_dir.join("stub.c");
    let forward_c = out.join("librdmacm.c");
    std::fs::write(&stub_c, stub).expect("OUT_DIR is writable");
    std::fs::write(&forward_c, forward).expect("OUT_DIR is writable");
    let stub_so = stub_dir.join("libibverbs.so.1");
    compile(
        cc,
        &[
            "-shared".as_ref(),
            "-fPIC".as_ref(),
            "-Wl,-soname,libibverbs.so.1".as_ref(),
            "-o".as_ref(),
            stub_so.as_os_str(),
            stub_c.as_os_str(),
        ],
        "the libibverbs.so.1 stand-in for librdmacm.so.1",
    );
    let built = out.join("librdmacm.so.1");
    let version_script = format!("-Wl,--version-script={}", script.display());
    let link_dir = format!("-L{}", stub_dir.display());
    compile(
        cc,
        &[
            "-shared".as_ref(),
            "-fPIC".as_ref(),
            "-Wall".as_ref(),
            "-Werror".as_ref(),
            "-Wl,-soname,librdmacm.so.1".as_ref(),
            version_script.as_ref(),
            "-o".as_ref(),
            built.as_os_str(),
            forward_c.as_os_str(),
            link_dir.as_ref(),
            "-l:libibverbs.so.1".as_ref(),
        ],
        "librdmacm.so.1",
    );
    if let Err(e) = std::fs::copy(&built, profile_dir.join("librdmacm.so.1")) {
        println!("cargo:warning=cannot install librdmacm.so.1: {e}");
    }
}
