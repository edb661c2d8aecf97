//! On-demand paging's prefetch: faulting the pages of a region in ahead of use.
//!
//! softrdma pins nothing, so every region of the program's memory is on demand: its pages may
//! come only when an operation reaches them, and one that cannot be had then is an access
//! error (see `fallible.rs`), as on a NIC with on-demand paging. Prefetching does what such a
//! NIC's page-fault handling would do ahead of time, and what pinning does at registration:
//! `madvise(MADV_POPULATE_READ/WRITE)` (Linux 5.14) faults the pages in, without changing a
//! byte, and fails for a page that cannot be accessed so (unmapped, protected, past a file's
//! end, a device mapping).

use std::sync::OnceLock;

use crate::MemoryRegion;

/// Why pages could not be faulted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrefetchError {
    /// The range is empty of meaning: it wraps around the address space or leaves the region.
    #[error("the range is not inside the region")]
    OutOfRange,
    /// A page of the range cannot be accessed as asked (ibverbs: EFAULT).
    #[error("a page of the range cannot be accessed")]
    Inaccessible,
}

/// Faults in the pages of `[addr, addr + len)` for reading, or for writing with `write`:
/// `Some(Ok)` if every page can be accessed so, `Some(Err)` if one cannot, `None` if the kernel
/// has no `MADV_POPULATE_*` (before 5.14), when the pages can only come as they are touched.
pub fn populate(addr: usize, len: usize, write: bool) -> Option<Result<(), PrefetchError>> {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    let Some(end) = addr.checked_add(len) else {
        return Some(Err(PrefetchError::OutOfRange));
    };
    let page = page_size();
    let advise = |start: usize, len: usize, advice: libc::c_int| {
        // SAFETY: MADV_POPULATE_* only faults pages in, as touching them would: it changes no
        // byte, maps and frees nothing; an address range that is not mapped is an error
        // (ENOMEM), not undefined behaviour.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
    };
    // EINVAL means an unknown advice on kernels before 5.14, but also a device mapping: ask
    // once, about a page that is surely mapped (this function's own stack).
    let supported = *SUPPORTED.get_or_init(|| {
        let here = std::ptr::addr_of!(page) as usize & !(page - 1);
        advise(here, page, libc::MADV_POPULATE_READ) != Err(libc::EINVAL)
    });
    if !supported {
        return None;
    }
    let start = addr & !(page - 1);
    let advice = if write {
        libc::MADV_POPULATE_WRITE
    } else {
        libc::MADV_POPULATE_READ
    };
    let mut result = advise(start, end - start, advice);
    // Interrupted by a signal, or out of memory for a moment: try again, a few times.
    for _ in 0..3 {
        match result {
            Err(libc::EINTR | libc::EAGAIN) => result = advise(start, end - start, advice),
            _ => break,
        }
    }
    Some(result.map_err(|_| PrefetchError::Inaccessible))
}

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

impl MemoryRegion {
    /// Faults in the pages behind bytes `[offset, offset + len)` of the region, for reading,
    /// or for writing with `write` (ibverbs `ibv_advise_mr` with `IBV_ADVISE_MR_ADVICE_PREFETCH`
    /// or `_PREFETCH_WRITE`), so that operations reaching them do not wait for the pages.
    /// Memory softrdma allocated is always there. Without `MADV_POPULATE_*` (Linux before
    /// 5.14) nothing can be done ahead, and this succeeds.
    pub fn prefetch(&self, offset: usize, len: usize, write: bool) -> Result<(), PrefetchError> {
        if !offset.checked_add(len).is_some_and(|end| end <= self.len()) {
            return Err(PrefetchError::OutOfRange);
        }
        if len == 0 {
            return Ok(());
        }
        populate(self.as_ptr() as usize + offset, len, write).unwrap_or(Ok(()))
    }
}
