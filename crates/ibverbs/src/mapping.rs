//! Whether a program's buffer is really there before it is registered.
//!
//! rxe registers a region by pinning its pages (the kernel's `ib_umem_get`): a range that is
//! not mapped, that cannot be read (or written, when the access flags let something write it)
//! without a SIGSEGV or SIGBUS — a file mapping past its file's end, a device mapping — fails
//! there with `EFAULT`, and an empty one with `EINVAL`. softrdma pins nothing, and its progress
//! thread later reads and writes the buffer with plain memory accesses: a registration the
//! kernel would have refused would turn the first RDMA WRITE or SEND into it into a crash of
//! the whole program. So registration faults the pages in the way pinning does
//! (`madvise(MADV_POPULATE_READ/WRITE)`, Linux 5.14; cost per page, like pinning), and on older
//! kernels reads the process's mappings (`/proc/self/maps`) instead, which catches unmapped and
//! read-only ranges only. A buffer unmapped or protected *after* registration (ibverbs'
//! contract forbids it; on rxe pinning makes it harmless) is caught later, access by access:
//! softrdma's copies of application memory fail instead of faulting (`softrdma`'s
//! `fallible.rs`), and the operation ends in an access error.

use std::ffi::c_int;

use crate::abi::IBV_ACCESS_MW_BIND;

/// Access flags that need the pages writable (the kernel's `ib_access_writable`): local and
/// remote writes, remote atomics, and binding windows, which can grant those.
const WRITABLE: u32 = 0x1 | 0x2 | 0x8 | IBV_ACCESS_MW_BIND;

/// The most pages a region may span (`ib_umem_get`: `npages > UINT_MAX` is `EINVAL`).
const MAX_PAGES: u64 = u32::MAX as u64;

/// Checks `[addr, addr + len)` as rxe's registration would: `EINVAL` if empty or past the
/// page count a region may span, `EFAULT` if any byte is unmapped, unreadable, or read-only
/// while `access` lets something write it. Where `/proc` is unavailable nothing can be
/// checked, and the range is taken on trust as before.
pub(crate) fn check_buffer(addr: usize, len: usize, access: u32) -> Result<(), c_int> {
    let page = softrdma::page_size();
    let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
    let pages = end.div_ceil(page) - addr / page;
    if len == 0 || pages as u64 > MAX_PAGES {
        return Err(libc::EINVAL);
    }
    let write = access & WRITABLE != 0;
    if let Some(result) = populate(addr, end, write) {
        return result;
    }
    let Ok(maps) = std::fs::File::open("/proc/self/maps") else {
        return Ok(());
    };
    // Read only as far as the range: the kernel renders the file as it is read, and a large
    // program has thousands of mappings.
    let lines = std::io::BufRead::lines(std::io::BufReader::new(maps)).map_while(Result::ok);
    covered(lines, addr, end, write)
}

/// `softrdma::populate` with the kernel's errno: `EFAULT` for a page that cannot be had.
fn populate(addr: usize, end: usize, write: bool) -> Option<Result<(), c_int>> {
    softrdma::populate(addr, end - addr, write).map(|r| r.map_err(|_| libc::EFAULT))
}

/// Whether the mappings listed in `maps` (lines of `/proc/PID/maps`, in address order) cover
/// `[start, end)` without a gap, readable and, with `write`, writable.
fn covered(
    maps: impl IntoIterator<Item = impl AsRef<str>>,
    start: usize,
    end: usize,
    write: bool,
) -> Result<(), c_int> {
    let mut at = start;
    for line in maps {
        let line = line.as_ref();
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if hi <= at {
            continue;
        }
        let perms = perms.as_bytes();
        let usable =
            lo <= at && perms.first() == Some(&b'r') && (!write || perms.get(1) == Some(&b'w'));
        if !usable {
            return Err(libc::EFAULT);
        }
        at = hi;
        if at >= end {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00401000 r-xp 00000000 08:01 1 /bin/x
00600000-00602000 rw-p 00000000 00:00 0
00602000-00603000 r--p 00000000 00:00 0
00603000-00604000 rw-p 00000000 00:00 0 [heap]
7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn ranges_are_checked_against_the_mappings() {
        // Inside one writable mapping, and across two adjacent ones.
        assert_eq!(covered(MAPS.lines(), 0x600010, 0x600100, true), Ok(()));
        assert_eq!(covered(MAPS.lines(), 0x601000, 0x602800, false), Ok(()));
        // Read-only: fine to read, not to write.
        assert_eq!(covered(MAPS.lines(), 0x602000, 0x602100, false), Ok(()));
        assert_eq!(
            covered(MAPS.lines(), 0x601f00, 0x602100, true),
            Err(libc::EFAULT)
        );
        // A gap, a range past the last mapping, one starting in no mapping.
        assert_eq!(
            covered(MAPS.lines(), 0x603f00, 0x7ffd00000100, false),
            Err(libc::EFAULT)
        );
        assert_eq!(
            covered(MAPS.lines(), 0x7ffd00000f00, 0x7ffd00001100, false),
            Err(libc::EFAULT)
        );
        assert_eq!(
            covered(MAPS.lines(), 0x500000, 0x500100, false),
            Err(libc::EFAULT)
        );
        // Executable but readable code may be read.
        assert_eq!(covered(MAPS.lines(), 0x400000, 0x401000, false), Ok(()));
    }

    #[test]
    fn empty_and_endless_ranges_are_invalid() {
        let buf = [0u8; 64];
        let at = buf.as_ptr() as usize;
        assert_eq!(check_buffer(at, 0, 0), Err(libc::EINVAL));
        assert_eq!(check_buffer(at, usize::MAX, 0), Err(libc::EINVAL));
        assert_eq!(check_buffer(at, 1 << 62, 0), Err(libc::EINVAL));
        assert_eq!(check_buffer(at, buf.len(), 0x1), Ok(()));
    }
}
