//! The C ABI, checked from C: programs compiled against the system `<infiniband/verbs.h>` and
//! linked against the system libibverbs, run on softrdma's `libibverbs.so.1` through
//! `LD_LIBRARY_PATH`, exactly as an unmodified program would be.
//!
//! - `layout`: every struct size and field offset the library exports (`softrdma_abi_layout`)
//!   equals the header's (`tests/c/layout.c`, with the expressions generated from the table).
//! - `verbs_from_c`: `tests/c/verbs.c` — inline verbs, `ibv_wr_*`, a completion channel woken
//!   through `poll()`, an asynchronous event, threads, misuse. Address 127.0.12.1.
//! - `create_destroy_races_from_c`: `tests/c/races.c` — an MR registered (a QP created) on a
//!   PD (a CQ) that another thread deallocates (destroys) at the same time: one of the two
//!   calls fails, never both succeed. Address 127.0.12.2.
//! - `unmapped_and_protected_memory_from_c`: `tests/c/vanishing.c` — registered memory
//!   unmapped or protected while registered: WRITE, READ and atomics on it end in
//!   `IBV_WC_REM_ACCESS_ERR`, a gather from it in `IBV_WC_LOC_PROT_ERR`, and the process
//!   lives. Address 127.0.12.3.
//! - `what_middleware_reads_from_c`: `tests/c/middleware.c` — what UCX, libfabric and Open
//!   MPI read: the GID table (index 0 and 1 the IPv4-mapped address, RoCE v2), atomic_cap,
//!   max_qp_rd_atom, max_srq, a completion vector per CPU, a UD receive through an extended
//!   CQ (`ibv_start_poll`, the `read_*` functions) and through `ibv_poll_cq` (GRH flag,
//!   source QP, sl 2 for an IPv4 header), `ibv_query_rt_values_ex`, a non-blocking
//!   `async_fd`. Address 127.0.12.8.
//! - `librdmacm_from_c`: `tests/c/rdmacm.c` — librdmacm's API on softrdma's `librdmacm.so.1`:
//!   one device, event channel descriptors (poll, epoll, `O_NONBLOCK`), synchronous ids, a
//!   connection through `<rdma/rdma_verbs.h>`'s inline helpers with private data both ways,
//!   a REJECTED with status 8, and misuse (EINVAL, EBUSY, ENOSYS). Address 127.0.12.6.
//! - `librdmacm_exports_what_rdma_core_exports`: the forwarder's exports against the
//!   system's librdmacm, and every one bound at load. Address 127.0.12.7.
//! - `thread_and_parent_domains_from_c`: `tests/c/domains.c` — a parent domain (with a
//!   thread domain and allocators) as the PD of QPs, MRs and an extended CQ, RDMA WRITEs on
//!   it and across to its protection domain, and misuse (EINVAL, EBUSY). Address
//!   127.0.12.10.
//! - `device_memory_from_c`: `tests/c/dm.c` — device memory: `max_dm_size`, allocations to
//!   the limit, copies (`EINVAL`, `EFAULT`), a zero-based region on it that an RDMA WRITE
//!   and READ use, `ibv_free_dm` `EBUSY` while it exists. Address 127.0.12.11.

mod common;

use std::ffi::{c_char, CStr};
use std::process::Command;

use common::{compile_c, exports, lib_dir, run_with_softrdma};

#[repr(C)]
struct LayoutEntry {
    name: *const c_char,
    value: usize,
}

/// The names of the library's layout table, read by loading the library into this process.
fn layout_names() -> Vec<String> {
    let path = std::ffi::CString::new(lib_dir().join("libibverbs.so.1").to_str().unwrap()).unwrap();
    // SAFETY: loads a library whose constructors are Rust's (none with side effects); the
    // handle is never closed, so symbols from it stay valid.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "cannot load {}", path.to_string_lossy());
    // SAFETY: a valid handle and a NUL-terminated name.
    let sym = unsafe { libc::dlsym(handle, c"softrdma_abi_layout".as_ptr()) };
    assert!(!sym.is_null(), "softrdma_abi_layout not exported");
    // SAFETY: the symbol is `extern "C" fn() -> *const LayoutEntry`.
    let f: extern "C" fn() -> *const LayoutEntry = unsafe { std::mem::transmute(sym) };
    let mut names = Vec::new();
    let mut e = f();
    // SAFETY: the table ends with a NULL name; every name is a static C string.
    unsafe {
        while !(*e).name.is_null() {
            names.push(CStr::from_ptr((*e).name).to_string_lossy().into_owned());
            e = e.add(1);
        }
    }
    names
}

#[test]
fn layout() {
    let names = layout_names();
    assert!(names.len() > 300, "only {} entries", names.len());
    let dir = std::env::temp_dir().join(format!("softrdma-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header: String = names.iter().map(|n| format!("\tCHECK({n});\n")).collect();
    std::fs::write(dir.join("layout_entries.h"), header).unwrap();
    let exe = compile_c("layout.c", &dir, &[]);
    let out = run_with_softrdma(Command::new(&exe), "127.0.12.9");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "layout check failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "{0} of {0} layout entries checked, 0 failed",
            names.len()
        )),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn verbs_from_c() {
    run_c_program("verbs", "127.0.12.1", &[]);
}

#[test]
fn what_middleware_reads_from_c() {
    run_c_program("middleware", "127.0.12.8", &[]);
}

#[test]
fn librdmacm_from_c() {
    run_c_program("rdmacm", "127.0.12.6", &["-lrdmacm"]);
}

/// `librdmacm.so.1` exports rdma-core 44's functions under their versions (compared with the
/// system's library, Debian's librdmacm1), and each forwards to a function the verbs library
/// has: loading it with every symbol bound at once (`RTLD_NOW`, as a BIND_NOW program does)
/// succeeds.
#[test]
fn librdmacm_exports_what_rdma_core_exports() {
    let ours_path = lib_dir().join("librdmacm.so.1");
    let Some(ours) = exports(&ours_path) else {
        eprintln!("objdump is not installed: skipping the comparison");
        return;
    };
    // 68 functions and the 4 version nodes.
    assert_eq!(ours.len(), 72, "{ours:?}");
    let system = std::path::Path::new("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    if system.exists() {
        let theirs = exports(system).unwrap();
        let missing: Vec<_> = theirs.difference(&ours).collect();
        let extra: Vec<_> = ours.difference(&theirs).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "librdmacm.so.1: missing {missing:?}, not in rdma-core's {extra:?}"
        );
    } else {
        eprintln!(
            "{} is not installed: skipping the comparison",
            system.display()
        );
    }
    let dir = std::env::temp_dir().join(format!("softrdma-rdmacm-now-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("now.c");
    std::fs::write(
        &src,
        "#include <dlfcn.h>\n#include <stdio.h>\nint main(void) {\n\
         \tvoid *h = dlopen(\"librdmacm.so.1\", RTLD_NOW);\n\
         \tif (!h) { printf(\"%s\\n\", dlerror()); return 1; }\n\
         \tprintf(\"loaded\\n\");\n\treturn 0;\n}\n",
    )
    .unwrap();
    let exe = dir.join("now");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(built.success(), "compiling the loader");
    let out = run_with_softrdma(Command::new(&exe), "127.0.12.7");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("loaded"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn create_destroy_races_from_c() {
    run_c_program("races", "127.0.12.2", &[]);
}

#[test]
fn thread_and_parent_domains_from_c() {
    run_c_program("domains", "127.0.12.10", &[]);
}

#[test]
fn device_memory_from_c() {
    run_c_program("dm", "127.0.12.11", &[]);
}

#[test]
fn xrc_from_c() {
    run_c_program("xrc", "127.0.12.12", &[]);
}

#[test]
fn unmapped_and_protected_memory_from_c() {
    run_c_program("vanishing", "127.0.12.3", &[]);
}

/// Compiles `tests/c/<name>.c`, runs it on softrdma's library with the device on `ip`, and
/// asserts that it exits 0 after printing "<name>: all checks passed".
fn run_c_program(name: &str, ip: &str, libs: &[&str]) {
    let dir = std::env::temp_dir().join(format!("softrdma-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut flags = vec!["-lpthread"];
    flags.extend_from_slice(libs);
    let exe = compile_c(&format!("{name}.c"), &dir, &flags);
    let out = run_with_softrdma(Command::new(&exe), ip);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("{name}: all checks passed")),
        "{name}.c failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
