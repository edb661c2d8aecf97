//! Access to application memory that fails instead of crashing.
//!
//! softrdma pins nothing: memory the application registered (`reg_mr_raw`, and every
//! `ibv_reg_mr` of the C library) stays the application's, and it can `munmap` or `mprotect`
//! it while it is still registered. A NIC without on-demand paging then gets an access error
//! from the IOMMU or its own page tables; a CPU copy gets `SIGSEGV` (or `SIGBUS`, for a file
//! mapping cut short), which would kill the process on the progress thread. So every access
//! softrdma makes to application memory goes through the few primitives here, and a fault
//! inside one of them is turned into an error return, as the kernel's `copy_from_user` does
//! with its exception table:
//!
//! - the primitives are leaf functions written in assembly between two labels, none of which
//!   touches the stack, so that any instruction between the labels may fault and the function
//!   can still return from a common fix-up address;
//! - a `SIGSEGV`/`SIGBUS` handler, installed on first use, looks at the faulting instruction's
//!   address: inside the primitives, it moves the program counter to the fix-up, which
//!   returns 1 ("faulted") to the caller; anywhere else, the fault is not softrdma's, and it
//!   goes to the handler that was installed before (Rust's stack-overflow reporter, a
//!   language runtime's, or the default action, which then kills the process as it would
//!   have without softrdma). A program that later installs a handler of its own and passes
//!   no fault on (most runtimes do pass them on) takes this back: a vanished region then
//!   crashes it as it would have before.
//!
//! Each primitive moves aligned 8-byte words with single instructions (or bytes, at a
//! region's ragged ends), so the access sizes are those the memory model of `memory.rs`
//! promises, and `lock cmpxchg`/`lock xadd` are the atomics remote peers ask for. x86-64
//! orders every store after the ones before it, so a copy's last word is a releasing store as
//! the model requires. On other architectures the primitives are the plain atomics, which
//! cannot fail: an unmapped region crashes there as before.

use softrdma_proto::MemoryFault;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::sync::Once;

    use super::MemoryFault;

    // The primitives. System V calling convention; each returns 0, or 1 from the fix-up
    // after a fault. None touches the stack, so the fix-up's `ret` returns to the caller.
    std::arch::global_asm!(
        ".pushsection .text.softrdma_fallible,\"ax\",@progbits",
        ".p2align 4",
        ".globl softrdma_fallible_begin",
        ".hidden softrdma_fallible_begin",
        "softrdma_fallible_begin:",
        // copy_words(dst: rdi, src: rsi, words: rdx): one 8-byte load and store per word,
        // four words a round, stores in ascending order.
        ".globl softrdma_copy_words",
        ".hidden softrdma_copy_words",
        "softrdma_copy_words:",
        "    cmp rdx, 4",
        "    jb 4f",
        "2:  mov rax, qword ptr [rsi]",
        "    mov rcx, qword ptr [rsi + 8]",
        "    mov r8, qword ptr [rsi + 16]",
        "    mov r9, qword ptr [rsi + 24]",
        "    mov qword ptr [rdi], rax",
        "    mov qword ptr [rdi + 8], rcx",
        "    mov qword ptr [rdi + 16], r8",
        "    mov qword ptr [rdi + 24], r9",
        "    add rsi, 32",
        "    add rdi, 32",
        "    sub rdx, 4",
        "    cmp rdx, 4",
        "    jae 2b",
        "4:  test rdx, rdx",
        "    jz 3f",
        "5:  mov rax, qword ptr [rsi]",
        "    mov qword ptr [rdi], rax",
        "    add rsi, 8",
        "    add rdi, 8",
        "    dec rdx",
        "    jnz 5b",
        "3:  xor eax, eax",
        "    ret",
        // load_u64(p: rdi, out: rsi)
        ".globl softrdma_load_u64",
        ".hidden softrdma_load_u64",
        "softrdma_load_u64:",
        "    mov rax, qword ptr [rdi]",
        "    mov qword ptr [rsi], rax",
        "    xor eax, eax",
        "    ret",
        // cas_u64(p: rdi, expected: rsi, new: rdx, previous out: rcx)
        ".globl softrdma_cas_u64",
        ".hidden softrdma_cas_u64",
        "softrdma_cas_u64:",
        "    mov rax, rsi",
        "    lock cmpxchg qword ptr [rdi], rdx",
        "    mov qword ptr [rcx], rax",
        "    xor eax, eax",
        "    ret",
        // xadd_u64(p: rdi, add: rsi, previous out: rdx)
        ".globl softrdma_xadd_u64",
        ".hidden softrdma_xadd_u64",
        "softrdma_xadd_u64:",
        "    lock xadd qword ptr [rdi], rsi",
        "    mov qword ptr [rdx], rsi",
        "    xor eax, eax",
        "    ret",
        // load_u8(p: rdi, out: rsi)
        ".globl softrdma_load_u8",
        ".hidden softrdma_load_u8",
        "softrdma_load_u8:",
        "    movzx eax, byte ptr [rdi]",
        "    mov byte ptr [rsi], al",
        "    xor eax, eax",
        "    ret",
        // store_u8(p: rdi, value: sil)
        ".globl softrdma_store_u8",
        ".hidden softrdma_store_u8",
        "softrdma_store_u8:",
        "    mov byte ptr [rdi], sil",
        "    xor eax, eax",
        "    ret",
        ".globl softrdma_fallible_fixup",
        ".hidden softrdma_fallible_fixup",
        "softrdma_fallible_fixup:",
        "    mov eax, 1",
        "    ret",
        ".popsection",
    );

    extern "C" {
        static softrdma_fallible_begin: u8;
        static softrdma_fallible_fixup: u8;
        fn softrdma_copy_words(dst: *mut u8, src: *const u8, words: usize) -> u32;
        fn softrdma_load_u64(p: *const u64, out: *mut u64) -> u32;
        fn softrdma_cas_u64(p: *mut u64, expected: u64, new: u64, out: *mut u64) -> u32;
        fn softrdma_xadd_u64(p: *mut u64, add: u64, out: *mut u64) -> u32;
        fn softrdma_load_u8(p: *const u8, out: *mut u8) -> u32;
        fn softrdma_store_u8(p: *mut u8, value: u8) -> u32;
    }

    fn status(faulted: u32) -> Result<(), MemoryFault> {
        if faulted == 0 {
            Ok(())
        } else {
            Err(MemoryFault)
        }
    }

    /// The handlers that were installed before ours, for faults that are not ours.
    static mut PREVIOUS: [std::mem::MaybeUninit<libc::sigaction>; 2] = [
        std::mem::MaybeUninit::zeroed(),
        std::mem::MaybeUninit::zeroed(),
    ];
    static INSTALL: Once = Once::new();

    fn slot(sig: libc::c_int) -> usize {
        usize::from(sig == libc::SIGBUS)
    }

    /// Installs the fault handler (once per process).
    pub(crate) fn install() {
        INSTALL.call_once(|| {
            for sig in [libc::SIGSEGV, libc::SIGBUS] {
                // SAFETY: a zeroed sigaction is a valid value; the fields set are the ones the
                // kernel reads. `PREVIOUS` is written only here, inside `call_once`, before
                // the handler that reads it can run for this signal.
                unsafe {
                    let mut act: libc::sigaction = std::mem::zeroed();
                    act.sa_sigaction = on_fault as *const () as usize;
                    act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                    libc::sigemptyset(&mut act.sa_mask);
                    let prev = (*std::ptr::addr_of_mut!(PREVIOUS))[slot(sig)].as_mut_ptr();
                    libc::sigaction(sig, &act, prev);
                }
            }
        });
    }

    /// The handler: a fault at an instruction of the primitives returns through the fix-up;
    /// any other goes where it would have gone without softrdma.
    extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid ucontext for an SA_SIGINFO handler; the symbols
        // are labels of the assembly above.
        unsafe {
            let uc = ctx.cast::<libc::ucontext_t>();
            let pc = (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
            let begin = std::ptr::addr_of!(softrdma_fallible_begin) as usize;
            let fixup = std::ptr::addr_of!(softrdma_fallible_fixup) as usize;
            if (begin..fixup).contains(&pc) {
                (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] = fixup as i64;
                return;
            }
            let prev = (*std::ptr::addr_of!(PREVIOUS))[slot(sig)].assume_init_ref();
            match prev.sa_sigaction {
                libc::SIG_DFL | libc::SIG_IGN => {
                    // The default action: put it back and let the fault happen again on
                    // return (or, for a signal sent by kill, send it again).
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                    if (*info).si_code <= 0 {
                        libc::raise(sig);
                    }
                }
                h if prev.sa_flags & libc::SA_SIGINFO != 0 => {
                    let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(h);
                    h(sig, info, ctx);
                }
                h => {
                    let h: extern "C" fn(libc::c_int) = std::mem::transmute(h);
                    h(sig);
                }
            }
        }
    }

    /// # Safety
    /// `dst` and `src` valid for `words * 8` bytes, or mapped memory whose fault is caught.
    pub(crate) unsafe fn copy_words(
        dst: *mut u8,
        src: *const u8,
        words: usize,
    ) -> Result<(), MemoryFault> {
        // SAFETY: the caller's contract; a fault returns 1.
        status(unsafe { softrdma_copy_words(dst, src, words) })
    }

    /// # Safety
    /// `p` 8-aligned, inside a registration.
    pub(crate) unsafe fn load_u64(p: *const u64) -> Result<u64, MemoryFault> {
        let mut v = 0;
        // SAFETY: the caller's contract; `v` is ours.
        status(unsafe { softrdma_load_u64(p, &mut v) })?;
        Ok(v)
    }

    /// # Safety
    /// As for [`load_u64`].
    pub(crate) unsafe fn cas_u64(p: *mut u64, expected: u64, new: u64) -> Result<u64, MemoryFault> {
        let mut v = 0;
        // SAFETY: the caller's contract; `v` is ours.
        status(unsafe { softrdma_cas_u64(p, expected, new, &mut v) })?;
        Ok(v)
    }

    /// # Safety
    /// As for [`load_u64`].
    pub(crate) unsafe fn xadd_u64(p: *mut u64, add: u64) -> Result<u64, MemoryFault> {
        let mut v = 0;
        // SAFETY: the caller's contract; `v` is ours.
        status(unsafe { softrdma_xadd_u64(p, add, &mut v) })?;
        Ok(v)
    }

    /// # Safety
    /// `p` inside a registration.
    pub(crate) unsafe fn load_u8(p: *const u8) -> Result<u8, MemoryFault> {
        let mut v = 0;
        // SAFETY: the caller's contract; `v` is ours.
        status(unsafe { softrdma_load_u8(p, &mut v) })?;
        Ok(v)
    }

    /// # Safety
    /// As for [`load_u8`].
    pub(crate) unsafe fn store_u8(p: *mut u8, value: u8) -> Result<(), MemoryFault> {
        // SAFETY: the caller's contract.
        status(unsafe { softrdma_store_u8(p, value) })
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    //! The plain atomics: the same access sizes, and no way to fail.
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

    use super::MemoryFault;

    pub(crate) fn install() {}

    pub(crate) unsafe fn copy_words(
        dst: *mut u8,
        src: *const u8,
        words: usize,
    ) -> Result<(), MemoryFault> {
        for i in 0..words {
            // SAFETY: the caller's contract: both ranges valid; the region side aligned.
            unsafe {
                let (d, s) = (dst.add(8 * i), src.add(8 * i));
                let v = if s as usize % 8 == 0 {
                    AtomicU64::from_ptr(s as *mut u64).load(Ordering::Relaxed)
                } else {
                    s.cast::<u64>().read_unaligned()
                };
                if d as usize % 8 == 0 {
                    AtomicU64::from_ptr(d.cast()).store(v, Ordering::Release);
                } else {
                    d.cast::<u64>().write_unaligned(v);
                }
            }
        }
        Ok(())
    }
    pub(crate) unsafe fn load_u64(p: *const u64) -> Result<u64, MemoryFault> {
        // SAFETY: the caller's contract.
        Ok(unsafe { AtomicU64::from_ptr(p as *mut u64) }.load(Ordering::Relaxed))
    }
    pub(crate) unsafe fn cas_u64(p: *mut u64, expected: u64, new: u64) -> Result<u64, MemoryFault> {
        // SAFETY: the caller's contract.
        let w = unsafe { AtomicU64::from_ptr(p) };
        Ok(
            match w.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
        )
    }
    pub(crate) unsafe fn xadd_u64(p: *mut u64, add: u64) -> Result<u64, MemoryFault> {
        // SAFETY: the caller's contract.
        Ok(unsafe { AtomicU64::from_ptr(p) }.fetch_add(add, Ordering::AcqRel))
    }
    pub(crate) unsafe fn load_u8(p: *const u8) -> Result<u8, MemoryFault> {
        // SAFETY: the caller's contract.
        Ok(unsafe { AtomicU8::from_ptr(p as *mut u8) }.load(Ordering::Relaxed))
    }
    pub(crate) unsafe fn store_u8(p: *mut u8, value: u8) -> Result<(), MemoryFault> {
        // SAFETY: the caller's contract.
        unsafe { AtomicU8::from_ptr(p) }.store(value, Ordering::Release);
        Ok(())
    }
}

pub(crate) use imp::*;
