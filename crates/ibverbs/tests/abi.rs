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

mod common;

use std::ffi::{c_char, CStr};
use std::process::Command;

use common::{compile_c, lib_dir, run_with_softrdma};

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
    run_c_program("verbs", "127.0.12.1");
}

#[test]
fn create_destroy_races_from_c() {
    run_c_program("races", "127.0.12.2");
}

#[test]
fn unmapped_and_protected_memory_from_c() {
    run_c_program("vanishing", "127.0.12.3");
}

/// Compiles `tests/c/<name>.c`, runs it on softrdma's library with the device on `ip`, and
/// asserts that it exits 0 after printing "<name>: all checks passed".
fn run_c_program(name: &str, ip: &str) {
    let dir = std::env::temp_dir().join(format!("softrdma-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = compile_c(&format!("{name}.c"), &dir, &["-lpthread"]);
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
