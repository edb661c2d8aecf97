//! The bytes behind memory regions, and how they are shared soundly between the application
//! and the progress engine.
//!
//! A remote peer may write a region (RDMA WRITE, SEND into a receive buffer, atomics) at any
//! moment, on the device's progress thread, while the application reads or writes the same
//! region on its own threads. Plain loads and stores racing like that would be a data race —
//! undefined behaviour in Rust. So every byte of a region is only ever accessed through atomic
//! operations:
//!
//! - memory softrdma allocates ([`OwnedMemory`]) is a page-aligned array of 8-byte words, and
//!   *every* access, by the engine or by the application's copying methods, is an
//!   [`AtomicU64`] operation on whole aligned words (a partial-word write is a compare-exchange
//!   loop on the containing word). All accesses have the same size, so not even mixed-size
//!   atomics occur;
//! - caller memory ([`RawMemory`], from the `unsafe` `reg_mr_raw`) is accessed the same way,
//!   except for words that stick out of the registered range, which are accessed byte by byte
//!   ([`AtomicU8`]), so that softrdma never touches a byte outside the registration.
//!
//! Stores use `Release` and loads `Acquire` ordering, and a copy proceeds in ascending address
//! order, so an application that observes (with an acquiring read such as
//! [`crate::MemoryRegion::read_u64`]) the last word of an incoming RDMA WRITE also observes the
//! words before it that the same WRITE packet stored — the classic "poll on the last byte"
//! pattern. Across packets, ordering follows packet order.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use softrdma_proto::RegionMemory;

/// Alignment of memory softrdma allocates for regions: a page, as applications usually
/// allocate RDMA buffers.
pub(crate) const OWNED_ALIGN: usize = 4096;

/// A region's bytes as atomically accessed words: `[base, base + len)` is the region,
/// `[word_lo, word_hi)` the range that may be accessed with whole-word operations (aligned to 8).
#[derive(Debug, Clone, Copy)]
struct Words {
    base: usize,
    len: usize,
    word_lo: usize,
    word_hi: usize,
}

impl Words {
    /// The atomic word at aligned address `addr`.
    ///
    /// # Safety
    /// `addr` must be 8-aligned and `[addr, addr + 8)` inside `[word_lo, word_hi)`, which the
    /// constructor of the owning memory guarantees to be valid, live, and only ever accessed
    /// atomically.
    unsafe fn word(&self, addr: usize) -> &AtomicU64 {
        debug_assert!(addr % 8 == 0 && addr >= self.word_lo && addr + 8 <= self.word_hi);
        // SAFETY: the caller guarantees alignment, validity and atomic-only access for the
        // lifetime of `self` (the owning memory outlives every `Words` copy it hands out).
        unsafe { AtomicU64::from_ptr(addr as *mut u64) }
    }

    /// The atomic byte at `addr`.
    ///
    /// # Safety
    /// `addr` must be inside `[base, base + len)`.
    unsafe fn byte(&self, addr: usize) -> &AtomicU8 {
        debug_assert!(addr >= self.base && addr < self.base + self.len);
        // SAFETY: the caller guarantees `addr` is in the region, which is valid and only
        // accessed atomically; AtomicU8 has alignment 1.
        unsafe { AtomicU8::from_ptr(addr as *mut u8) }
    }

    /// Whether the whole aligned word at `w` may be accessed as a word.
    fn word_ok(&self, w: usize) -> bool {
        w >= self.word_lo && w + 8 <= self.word_hi
    }

    /// Copies `dst.len()` bytes at region offset `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset <= self.len && dst.len() <= self.len - offset);
        let mut p = self.base + offset;
        let end = p + dst.len();
        let mut at = 0;
        while p < end {
            let w = p & !7;
            let skip = p - w;
            let n = (8 - skip).min(end - p);
            if self.word_ok(w) {
                // SAFETY: `w` is aligned and word_ok checked the word range.
                let v = unsafe { self.word(w) }
                    .load(Ordering::Acquire)
                    .to_ne_bytes();
                dst[at..at + n].copy_from_slice(&v[skip..skip + n]);
            } else {
                for i in 0..n {
                    // SAFETY: p + i < end <= base + len, and p >= base.
                    dst[at + i] = unsafe { self.byte(p + i) }.load(Ordering::Acquire);
                }
            }
            p += n;
            at += n;
        }
    }

    /// Copies `src` into the region at offset `offset`.
    fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset <= self.len && src.len() <= self.len - offset);
        let mut p = self.base + offset;
        let end = p + src.len();
        let mut at = 0;
        while p < end {
            let w = p & !7;
            let skip = p - w;
            let n = (8 - skip).min(end - p);
            if n == 8 && self.word_ok(w) {
                let mut b = [0u8; 8];
                b.copy_from_slice(&src[at..at + 8]);
                // SAFETY: `w` is aligned and word_ok checked the word range.
                unsafe { self.word(w) }.store(u64::from_ne_bytes(b), Ordering::Release);
            } else if self.word_ok(w) {
                // SAFETY: as above.
                let word = unsafe { self.word(w) };
                let piece = &src[at..at + n];
                let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                    let mut b = old.to_ne_bytes();
                    b[skip..skip + n].copy_from_slice(piece);
                    Some(u64::from_ne_bytes(b))
                });
            } else {
                for i in 0..n {
                    // SAFETY: p + i < end <= base + len, and p >= base.
                    unsafe { self.byte(p + i) }.store(src[at + i], Ordering::Release);
                }
            }
            p += n;
            at += n;
        }
    }

    /// The aligned word at region offset `offset` (the engine guarantees alignment of the
    /// absolute address and bounds; checked again here because a wrong word would be unsound).
    fn atomic_word(&self, offset: usize) -> &AtomicU64 {
        let addr = self.base + offset;
        assert!(
            addr % 8 == 0 && offset + 8 <= self.len && self.word_ok(addr),
            "atomic target not an aligned word of the region"
        );
        // SAFETY: checked just above.
        unsafe { self.word(addr) }
    }
}

/// Region memory that softrdma allocates and owns: zeroed, page-aligned, a whole number of
/// 8-byte words, freed when the last reference (the application's `MemoryRegion` or the
/// engine's table entry) goes away.
#[derive(Debug)]
pub(crate) struct OwnedMemory {
    ptr: NonNull<u8>,
    layout: Layout,
    words: Words,
}

// SAFETY: the memory is only ever accessed through atomic operations (see the module docs),
// so sharing it between threads is sound; the pointer is owned exclusively by this value.
unsafe impl Send for OwnedMemory {}
// SAFETY: as above: all access through `&self` is atomic.
unsafe impl Sync for OwnedMemory {}

impl OwnedMemory {
    /// Allocates `len` zeroed bytes (at least one word is allocated, so the address is real).
    pub(crate) fn new(len: usize) -> Option<OwnedMemory> {
        let size = len.checked_add(7)? & !7;
        let layout = Layout::from_size_align(size.max(8), OWNED_ALIGN).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        let base = ptr.as_ptr() as usize;
        Some(OwnedMemory {
            ptr,
            layout,
            words: Words {
                base,
                len,
                word_lo: base,
                word_hi: base + layout.size(),
            },
        })
    }

    /// Address of the first byte.
    pub(crate) fn addr(&self) -> u64 {
        self.words.base as u64
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for OwnedMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout, and freed only here.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Region memory that the application owns (registered with the `unsafe` `reg_mr_raw`).
#[derive(Debug)]
pub(crate) struct RawMemory {
    words: Words,
}

// SAFETY: accessed only atomically by softrdma; the caller of `reg_mr_raw` promised validity
// for the registration's lifetime and accepted responsibility for its own accesses.
unsafe impl Send for RawMemory {}
// SAFETY: as above.
unsafe impl Sync for RawMemory {}

impl RawMemory {
    /// # Safety
    /// `[ptr, ptr + len)` must be valid for reads and writes, not deallocated, for as long as
    /// this value (and any `Arc` of it) lives, and not accessed by anyone else with non-atomic
    /// accesses while softrdma may access it.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> RawMemory {
        let base = ptr as usize;
        let end = base.saturating_add(len);
        let word_lo = (base + 7) & !7;
        let word_hi = (end & !7).max(word_lo);
        RawMemory {
            words: Words {
                base,
                len,
                word_lo,
                word_hi,
            },
        }
    }
}

macro_rules! region_memory_impl {
    ($t:ty) => {
        impl RegionMemory for $t {
            fn len(&self) -> usize {
                self.words.len
            }
            fn read(&self, offset: usize, dst: &mut [u8]) {
                self.words.read(offset, dst)
            }
            fn write(&self, offset: usize, src: &[u8]) {
                self.words.write(offset, src)
            }
            fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
                match self.words.atomic_word(offset).compare_exchange(
                    compare,
                    swap,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(v) | Err(v) => v,
                }
            }
            fn fetch_add(&self, offset: usize, add: u64) -> u64 {
                self.words
                    .atomic_word(offset)
                    .fetch_add(add, Ordering::AcqRel)
            }
        }
    };
}

region_memory_impl!(OwnedMemory);
region_memory_impl!(RawMemory);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_read_write_unaligned() {
        let m = OwnedMemory::new(37).unwrap();
        assert_eq!(m.addr() % OWNED_ALIGN as u64, 0);
        let data: Vec<u8> = (1..=30).collect();
        m.write(3, &data);
        let mut out = vec![0u8; 37];
        m.read(0, &mut out);
        assert_eq!(&out[..3], &[0, 0, 0]);
        assert_eq!(&out[3..33], &data[..]);
        assert_eq!(&out[33..], &[0, 0, 0, 0]);
        assert_eq!(
            m.fetch_add(8, 1),
            u64::from_ne_bytes(out[8..16].try_into().unwrap())
        );
    }

    #[test]
    fn raw_edges_stay_inside() {
        let mut buf = vec![0xAAu8; 64];
        // SAFETY: buf outlives `m` and is not touched while `m` is used.
        let m = unsafe { RawMemory::new(buf.as_mut_ptr().add(3), 50) };
        m.write(0, &[1u8; 50]);
        let mut out = [0u8; 50];
        m.read(0, &mut out);
        assert_eq!(out, [1u8; 50]);
        let _ = m;
        assert_eq!(&buf[..3], &[0xAA; 3]);
        assert_eq!(&buf[53..], &[0xAA; 11]);
    }

    #[test]
    fn atomics() {
        let m = OwnedMemory::new(16).unwrap();
        assert_eq!(m.fetch_add(8, 5), 0);
        assert_eq!(m.compare_swap(8, 5, 9), 5);
        assert_eq!(m.compare_swap(8, 5, 1), 9);
    }
}
