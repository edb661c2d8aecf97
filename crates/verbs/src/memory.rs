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
//! For caller memory, soundness also needs the caller: its own accesses that may race with
//! softrdma's must be atomics of the same sizes at the same places (8-byte words inside the
//! range, single bytes at its ends), and two overlapping registrations must agree on those
//! sizes where they overlap. Rust's memory model makes racing atomics of different sizes
//! undefined behaviour, and no access scheme avoids stating sizes: remote atomics need 8-byte
//! operations, the ends need 1-byte ones (the neighbouring bytes are not softrdma's to touch),
//! and an application atomic of any other size would mix with either. `reg_mr_raw`'s safety
//! contract says this; [`WordMemory::atomic_words`] tells where the word part is, and
//! [`WordMemory::atomic_u64`] hands the application the very atomics softrdma uses.
//!
//! Caller memory can also vanish under its registration (`munmap`, `mprotect`): softrdma
//! accesses it only through the fault-catching primitives of `fallible.rs` — the same access
//! sizes, as single instructions — so that every access may fail with
//! [`MemoryFault`] instead of crashing the process. Memory softrdma allocates cannot vanish and
//! keeps the plain atomics.
//!
//! A third writer besides the engine and the application is the kernel: with direct
//! placement (`progress/core/placed.rs`, `softrdma_proto::placement`) a `recvmsg` writes the
//! payload of an RDMA WRITE straight into the region, as a NIC's DMA would. Those writes are
//! not Rust accesses at all — the kernel writes user memory as another process sharing it
//! would — so they race with nothing the language forbids as long as every Rust access to
//! the bytes stays atomic, which the two rules above already make it; softrdma reads the
//! bytes back only after the system call returned. What the kernel may write is bounded by
//! the engine (only the rest of the WRITE in flight, whose bytes IBTA leaves undefined until
//! it completes); for caller memory that vanished the call fails with `EFAULT` instead of
//! faulting, and the datagram is received the ordinary way next time. The ICRC of a placed
//! payload is checked where it landed, word by word (`crate::crc`), and so is the CRC of a
//! payload gathered for sending, in the same pass as the copy.
//!
//! Copies move whole words in one tight loop of relaxed loads or stores (on x86 and ARM plain
//! moves, a few GB/s per core) and the partial words at either end on their own. Ordering
//! comes from the device's queues: a buffer handed to `post_send` was written before the post,
//! and a completion is seen after the data it reports. The one exception is an application
//! that polls memory instead of a CQ: the last word of every copy into a region is stored with
//! `Release`, so an acquiring read ([`crate::MemoryRegion::read_u64`]) of the last word an
//! incoming RDMA WRITE packet placed also observes the rest of that packet — the classic "poll
//! on the last byte" pattern. Across packets, ordering follows packet order.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use softrdma_proto::{MemoryFault, RegionMemory};
use softrdma_wire::crc32_update;

use crate::crc::crc_words;
use crate::fallible;

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

    /// The whole words `[lo, hi)` (both 8-aligned, inside `[word_lo, word_hi)`; or empty) as
    /// a slice.
    ///
    /// # Safety
    /// As for [`Words::word`], for every word of the range.
    unsafe fn word_slice(&self, lo: usize, hi: usize) -> &[AtomicU64] {
        if lo >= hi {
            return &[];
        }
        debug_assert!(lo % 8 == 0 && hi % 8 == 0);
        debug_assert!(lo >= self.word_lo && hi <= self.word_hi);
        // SAFETY: the caller guarantees the range is aligned, valid and atomic-only;
        // AtomicU64 has the size and alignment of u64.
        unsafe { std::slice::from_raw_parts(lo as *const AtomicU64, (hi - lo) / 8) }
    }

    /// Splits the region bytes `[p, end)` into a head before the first whole word, whole words
    /// `[lo, hi)`, and a tail after them. Whole words of the range are always inside
    /// `[word_lo, word_hi)`: they lie inside the region.
    fn split(p: usize, end: usize) -> (usize, usize) {
        let lo = ((p + 7) & !7).min(end);
        let hi = (end & !7).max(lo);
        (lo, hi)
    }

    /// Copies the bytes `[p, p + dst.len())` of a partial word (head or tail) into `dst`.
    fn read_partial(&self, p: usize, dst: &mut [u8]) {
        if dst.is_empty() {
            return;
        }
        let w = p & !7;
        if self.word_ok(w) {
            // SAFETY: `w` is aligned and word_ok checked the word range.
            let v = unsafe { self.word(w) }
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            let skip = p - w;
            dst.copy_from_slice(&v[skip..skip + dst.len()]);
        } else {
            for (i, b) in dst.iter_mut().enumerate() {
                // SAFETY: the bytes are inside the region (checked by the caller's assert).
                *b = unsafe { self.byte(p + i) }.load(Ordering::Relaxed);
            }
        }
    }

    /// Stores `src` at the bytes `[p, p + src.len())` of a partial word (head or tail).
    fn write_partial(&self, p: usize, src: &[u8], order: Ordering) {
        if src.is_empty() {
            return;
        }
        let w = p & !7;
        if self.word_ok(w) {
            // SAFETY: as above.
            let word = unsafe { self.word(w) };
            let skip = p - w;
            let _ = word.fetch_update(order, Ordering::Relaxed, |old| {
                let mut b = old.to_ne_bytes();
                b[skip..skip + src.len()].copy_from_slice(src);
                Some(u64::from_ne_bytes(b))
            });
        } else {
            for (i, &b) in src.iter().enumerate() {
                // SAFETY: the bytes are inside the region (checked by the caller's assert).
                unsafe { self.byte(p + i) }.store(b, order);
            }
        }
    }

    /// Copies `dst.len()` bytes at region offset `offset` into `dst`.
    ///
    /// Whole words are loaded in one tight loop (relaxed: whoever hands the engine a buffer to
    /// send, or the application a completion, synchronises through the device's queues, not
    /// through the bytes), the partial words at either end on their own.
    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset <= self.len && dst.len() <= self.len - offset);
        let p = self.base + offset;
        let end = p + dst.len();
        let (lo, hi) = Self::split(p, end);
        let (head, rest) = dst.split_at_mut(lo - p);
        let (body, tail) = rest.split_at_mut(hi - lo);
        self.read_partial(p, head);
        // SAFETY: [lo, hi) are whole words inside the region (see `split`).
        let words = unsafe { self.word_slice(lo, hi) };
        for (w, out) in words.iter().zip(body.chunks_exact_mut(8)) {
            out.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        self.read_partial(hi, tail);
    }

    /// Copies `src` into the region at offset `offset`.
    ///
    /// The last word stored is stored with `Release` ordering (its predecessors relaxed, in
    /// ascending order): an application that sees, with an acquiring load such as
    /// [`crate::MemoryRegion::read_u64`], the last word an RDMA WRITE packet placed also sees
    /// the rest of that packet's bytes — perftest's "poll on the last byte".
    fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset <= self.len && src.len() <= self.len - offset);
        let p = self.base + offset;
        let end = p + src.len();
        let (lo, hi) = Self::split(p, end);
        let (head, rest) = src.split_at(lo - p);
        let (body, tail) = rest.split_at(hi - lo);
        let last_is_tail = !tail.is_empty();
        let last_is_body = !last_is_tail && !body.is_empty();
        let head_order = if last_is_tail || last_is_body {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };
        self.write_partial(p, head, head_order);
        // SAFETY: [lo, hi) are whole words inside the region (see `split`).
        let words = unsafe { self.word_slice(lo, hi) };
        let word = |b: &[u8]| {
            let mut v = [0u8; 8];
            v.copy_from_slice(b);
            u64::from_ne_bytes(v)
        };
        // The orderings are constants in each loop: a variable ordering costs a branch per word.
        let (ahead, last) = match (words.split_last(), last_is_body) {
            (Some((w, ahead)), true) => (ahead, Some(w)),
            _ => (words, None),
        };
        for (w, b) in ahead.iter().zip(body.chunks_exact(8)) {
            w.store(word(b), Ordering::Relaxed);
        }
        if let Some(w) = last {
            w.store(word(&body[body.len() - 8..]), Ordering::Release);
        }
        self.write_partial(hi, tail, Ordering::Release);
    }

    /// [`Words::read`], continuing the CRC-32 `crc` over the bytes on the way: each whole
    /// word is loaded once, stored into `dst` and folded into the CRC (`crate::crc`).
    fn read_crc(&self, offset: usize, dst: &mut [u8], crc: u32) -> u32 {
        assert!(offset <= self.len && dst.len() <= self.len - offset);
        let p = self.base + offset;
        let (lo, hi) = Self::split(p, p + dst.len());
        let (head, rest) = dst.split_at_mut(lo - p);
        let (body, tail) = rest.split_at_mut(hi - lo);
        self.read_partial(p, head);
        // SAFETY: [lo, hi) are whole words inside the region (see `split`).
        let words = unsafe { self.word_slice(lo, hi) };
        let crc = crc_words(crc32_update(crc, head), words, body);
        self.read_partial(hi, tail);
        crc32_update(crc, tail)
    }

    /// Continues the CRC-32 `crc` over `len` bytes at offset `offset`, loading each whole
    /// word once and copying nothing (the check of a payload placed into the region).
    fn crc32(&self, offset: usize, len: usize, crc: u32) -> u32 {
        assert!(offset <= self.len && len <= self.len - offset);
        let p = self.base + offset;
        let (lo, hi) = Self::split(p, p + len);
        let mut head = [0u8; 8];
        let head = &mut head[..lo - p];
        self.read_partial(p, head);
        // SAFETY: [lo, hi) are whole words inside the region (see `split`).
        let words = unsafe { self.word_slice(lo, hi) };
        let crc = crc_words(crc32_update(crc, head), words, &mut []);
        let mut tail = [0u8; 8];
        let tail = &mut tail[..p + len - hi];
        self.read_partial(hi, tail);
        crc32_update(crc, tail)
    }

    /// The address of `[offset, offset + len)` for the kernel to receive into (see the
    /// module docs on direct placement), if the range is inside the region.
    fn placement_address(&self, offset: usize, len: usize) -> Option<NonNull<u8>> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| NonNull::new((self.base + offset) as *mut u8))?
    }

    /// [`Words::read`] through the fault-catching primitives (see `fallible.rs`): for memory
    /// the application may unmap or protect while it is registered.
    fn read_fallible(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        assert!(offset <= self.len && dst.len() <= self.len - offset);
        let p = self.base + offset;
        let (lo, hi) = Self::split(p, p + dst.len());
        let (head, rest) = dst.split_at_mut(lo - p);
        let (body, tail) = rest.split_at_mut(hi - lo);
        self.read_partial_fallible(p, head)?;
        // SAFETY: [lo, hi) are whole words inside the region (see `split`), `body` is ours and
        // as long; a fault in the region is caught.
        unsafe { fallible::copy_words(body.as_mut_ptr(), lo as *const u8, (hi - lo) / 8) }?;
        self.read_partial_fallible(hi, tail)
    }

    fn read_partial_fallible(&self, p: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        if dst.is_empty() {
            return Ok(());
        }
        let w = p & !7;
        if self.word_ok(w) {
            // SAFETY: `w` is aligned and word_ok checked the word range.
            let v = unsafe { fallible::load_u64(w as *const u64) }?.to_ne_bytes();
            let skip = p - w;
            dst.copy_from_slice(&v[skip..skip + dst.len()]);
        } else {
            for (i, b) in dst.iter_mut().enumerate() {
                // SAFETY: the bytes are inside the region (checked by the caller's assert).
                *b = unsafe { fallible::load_u8((p + i) as *const u8) }?;
            }
        }
        Ok(())
    }

    /// [`Words::write`] through the fault-catching primitives. x86-64 keeps stores in program
    /// order, so the last one releases the copy as `write`'s `Release` store does.
    fn write_fallible(&self, offset: usize, src: &[u8]) -> Result<(), MemoryFault> {
        assert!(offset <= self.len && src.len() <= self.len - offset);
        let p = self.base + offset;
        let (lo, hi) = Self::split(p, p + src.len());
        let (head, rest) = src.split_at(lo - p);
        let (body, tail) = rest.split_at(hi - lo);
        self.write_partial_fallible(p, head)?;
        // SAFETY: as in `read_fallible`, the other way.
        unsafe { fallible::copy_words(lo as *mut u8, body.as_ptr(), (hi - lo) / 8) }?;
        self.write_partial_fallible(hi, tail)
    }

    fn write_partial_fallible(&self, p: usize, src: &[u8]) -> Result<(), MemoryFault> {
        if src.is_empty() {
            return Ok(());
        }
        let w = p & !7;
        if self.word_ok(w) {
            let skip = p - w;
            loop {
                // SAFETY: `w` is aligned and word_ok checked the word range.
                let old = unsafe { fallible::load_u64(w as *const u64) }?;
                let mut b = old.to_ne_bytes();
                b[skip..skip + src.len()].copy_from_slice(src);
                // SAFETY: as above.
                let seen = unsafe { fallible::cas_u64(w as *mut u64, old, u64::from_ne_bytes(b)) }?;
                if seen == old {
                    return Ok(());
                }
            }
        }
        for (i, &b) in src.iter().enumerate() {
            // SAFETY: the bytes are inside the region (checked by the caller's assert).
            unsafe { fallible::store_u8((p + i) as *mut u8, b) }?;
        }
        Ok(())
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
        fallible::install();
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

impl RegionMemory for OwnedMemory {
    fn len(&self) -> usize {
        self.words.len
    }
    // softrdma's own allocation: nobody else can unmap it, so nothing can fail.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        self.words.read(offset, dst);
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemoryFault> {
        self.words.write(offset, src);
        Ok(())
    }
    fn read_crc(&self, offset: usize, dst: &mut [u8], crc: u32) -> Result<u32, MemoryFault> {
        Ok(self.words.read_crc(offset, dst, crc))
    }
    fn crc32(&self, offset: usize, len: usize, crc: u32) -> Result<u32, MemoryFault> {
        Ok(self.words.crc32(offset, len, crc))
    }
    fn placement_address(&self, offset: usize, len: usize) -> Option<NonNull<u8>> {
        self.words.placement_address(offset, len)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemoryFault> {
        let w = self.words.atomic_word(offset);
        Ok(
            match w.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
        )
    }
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemoryFault> {
        Ok(self
            .words
            .atomic_word(offset)
            .fetch_add(add, Ordering::AcqRel))
    }
    fn is_atomic_word(&self, offset: usize) -> bool {
        self.words.checked_word(offset).is_some()
    }
}

impl RegionMemory for RawMemory {
    fn len(&self) -> usize {
        self.words.len
    }
    // The application's memory: it may be unmapped or protected under the registration.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        self.words.read_fallible(offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemoryFault> {
        self.words.write_fallible(offset, src)
    }
    // The CRCs keep the defaults: they read through `read`, whose fault-catching copies take
    // a few words at a time into a buffer that stays in the cache.
    fn placement_address(&self, offset: usize, len: usize) -> Option<NonNull<u8>> {
        // The kernel's copy into memory that has vanished fails (EFAULT) instead of faulting.
        self.words.placement_address(offset, len)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemoryFault> {
        let w = self.words.atomic_word(offset).as_ptr();
        // SAFETY: `atomic_word` checked that `w` is an aligned word of the region.
        unsafe { fallible::cas_u64(w, compare, swap) }
    }
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemoryFault> {
        let w = self.words.atomic_word(offset).as_ptr();
        // SAFETY: as above.
        unsafe { fallible::xadd_u64(w, add) }
    }
    fn is_atomic_word(&self, offset: usize) -> bool {
        self.words.checked_word(offset).is_some()
    }
}

/// Region memory as the verbs layer sees it: the engine's [`RegionMemory`], plus where the
/// 8-byte-word part is (see the module docs).
pub(crate) trait WordMemory: RegionMemory {
    /// Offsets (from the region's start) of the part accessed as whole aligned 8-byte words.
    fn atomic_words(&self) -> std::ops::Range<usize>;
    /// The word at `offset`, if it is one of those words.
    fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64>;
}

impl Words {
    fn atomic_words(&self) -> std::ops::Range<usize> {
        let lo = self.word_lo.clamp(self.base, self.base + self.len) - self.base;
        let hi = self.word_hi.clamp(self.base, self.base + self.len) - self.base;
        lo..hi.max(lo)
    }

    fn checked_word(&self, offset: usize) -> Option<&AtomicU64> {
        let addr = self.base.checked_add(offset)?;
        if addr % 8 != 0 || !self.word_ok(addr) || offset.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: aligned, and word_ok checked the word range; the word lives as long as the
        // memory, which outlives the `&self` this borrows from.
        Some(unsafe { self.word(addr) })
    }
}

impl WordMemory for OwnedMemory {
    fn atomic_words(&self) -> std::ops::Range<usize> {
        // Allocated as whole words: every byte of the region is in one.
        0..self.words.len
    }
    fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        self.words.checked_word(offset)
    }
}

impl WordMemory for RawMemory {
    fn atomic_words(&self) -> std::ops::Range<usize> {
        self.words.atomic_words()
    }
    fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        self.words.checked_word(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_read_write_unaligned() {
        let m = OwnedMemory::new(37).unwrap();
        assert_eq!(m.addr() % OWNED_ALIGN as u64, 0);
        let data: Vec<u8> = (1..=30).collect();
        m.write(3, &data).unwrap();
        let mut out = vec![0u8; 37];
        m.read(0, &mut out).unwrap();
        assert_eq!(&out[..3], &[0, 0, 0]);
        assert_eq!(&out[3..33], &data[..]);
        assert_eq!(&out[33..], &[0, 0, 0, 0]);
        assert_eq!(
            m.fetch_add(8, 1),
            Ok(u64::from_ne_bytes(out[8..16].try_into().unwrap()))
        );
    }

    #[test]
    fn raw_edges_stay_inside() {
        let mut buf = vec![0xAAu8; 64];
        // SAFETY: buf outlives `m` and is not touched while `m` is used.
        let m = unsafe { RawMemory::new(buf.as_mut_ptr().add(3), 50) };
        m.write(0, &[1u8; 50]).unwrap();
        let mut out = [0u8; 50];
        m.read(0, &mut out).unwrap();
        assert_eq!(out, [1u8; 50]);
        let _ = m;
        assert_eq!(&buf[..3], &[0xAA; 3]);
        assert_eq!(&buf[53..], &[0xAA; 11]);
    }

    /// The access sizes `reg_mr_raw`'s contract names (issue 15, item 8): words wholly inside
    /// the range, aligned by address, are 8-byte atomics; the ends are bytes; the application
    /// gets exactly those words, and no other.
    #[test]
    fn raw_access_sizes_are_the_documented_ones() {
        let mut buf = vec![0u64; 8]; // 64 bytes, 8-aligned
        let base = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: buf outlives `m` and is only accessed through `m` meanwhile.
        let m = unsafe { RawMemory::new(base.add(3), 50) };
        assert_eq!(
            m.atomic_words(),
            5..45,
            "[base+8, base+48) relative to base+3"
        );
        assert!(m.atomic_u64(5).is_some() && m.atomic_u64(37).is_some());
        for off in [0, 4, 6, 41, 45, 49, usize::MAX - 2] {
            assert!(m.atomic_u64(off).is_none(), "{off}");
        }
        m.atomic_u64(5).unwrap().store(7, Ordering::Release);
        assert_eq!(m.fetch_add(5, 1), Ok(7));
        let mut w = [0u8; 8];
        m.read(5, &mut w).unwrap();
        assert_eq!(u64::from_ne_bytes(w), 8);
        // Shorter than a word inside one word: no word part at all.
        // SAFETY: as above.
        let tiny = unsafe { RawMemory::new(base.add(17), 5) };
        assert!(tiny.atomic_words().is_empty());
        assert!(tiny.atomic_u64(0).is_none());
        let _ = m;
        let _ = tiny;
        // Owned memory is words throughout.
        let o = OwnedMemory::new(37).unwrap();
        assert_eq!(o.atomic_words(), 0..37);
        // A word must lie inside the region to be handed out.
        assert!(o.atomic_u64(24).is_some() && o.atomic_u64(32).is_none());
    }

    #[test]
    fn every_alignment_and_length_copies_exactly_its_bytes() {
        // A raw region starting and ending mid-word, written and read at every offset and
        // length: the bytes land where they should, nothing outside the range changes.
        let mut buf = vec![0u8; 96];
        let (start, len) = (5, 77);
        // SAFETY: buf outlives `m` and is not touched while `m` is used.
        let m = unsafe { RawMemory::new(buf.as_mut_ptr().add(start), len) };
        let mut model = vec![0u8; len];
        let mut tag = 1u8;
        for offset in 0..24 {
            for n in 0..=(len - offset).min(40) {
                let data: Vec<u8> = (0..n).map(|i| tag.wrapping_add(i as u8)).collect();
                tag = tag.wrapping_add(7);
                m.write(offset, &data).unwrap();
                model[offset..offset + n].copy_from_slice(&data);
                let mut all = vec![0u8; len];
                m.read(0, &mut all).unwrap();
                assert_eq!(all, model, "write at {offset} len {n}");
                let mut part = vec![0u8; n];
                m.read(offset, &mut part).unwrap();
                assert_eq!(part, data);
            }
        }
        let _ = m;
        assert!(buf[..start].iter().all(|&b| b == 0));
        assert!(buf[start + len..].iter().all(|&b| b == 0));
    }

    /// The one-pass copies and checks: at every offset and length, `read_crc` copies exactly
    /// what `read` does and both give the CRC of those bytes, from any running CRC.
    #[test]
    fn crc_reads_copy_and_hash_every_alignment() {
        let len = 700;
        let m = OwnedMemory::new(len).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        m.write(0, &data).unwrap();
        for offset in 0..20 {
            for n in (0..=len - offset).step_by(23).chain([len - offset]) {
                let want = data[offset..offset + n].to_vec();
                let seed = (offset * 1000 + n) as u32;
                let crc = crc32_update(seed, &want);
                let mut out = vec![0u8; n];
                assert_eq!(m.read_crc(offset, &mut out, seed), Ok(crc));
                assert_eq!(out, want, "copy at {offset} len {n}");
                assert_eq!(
                    m.crc32(offset, n, seed),
                    Ok(crc),
                    "check at {offset} len {n}"
                );
            }
        }
        assert!(m.placement_address(len, 0).is_some());
        assert!(m.placement_address(len - 3, 4).is_none());
        assert_eq!(
            m.placement_address(5, 10).map(|p| p.as_ptr() as u64),
            Some(m.addr() + 5)
        );
    }

    #[test]
    fn atomics() {
        let m = OwnedMemory::new(16).unwrap();
        assert_eq!(m.fetch_add(8, 5), Ok(0));
        assert_eq!(m.compare_swap(8, 5, 9), Ok(5));
        assert_eq!(m.compare_swap(8, 5, 1), Ok(9));
    }
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod fault_tests {
    use super::*;

    /// Three anonymous pages, the middle one then unmapped or protected by the test.
    struct Pages(*mut u8);

    const PAGE: usize = 4096;

    impl Pages {
        fn new() -> Pages {
            // SAFETY: an anonymous private mapping; checked for failure.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    3 * PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            Pages(p.cast())
        }
        fn protect_middle(&self, prot: libc::c_int) {
            // SAFETY: the middle page of our own mapping.
            let rc = unsafe { libc::mprotect(self.0.add(PAGE).cast(), PAGE, prot) };
            assert_eq!(rc, 0);
        }
        fn unmap_middle(&self) {
            // SAFETY: as above; nothing but the region under test refers to it.
            assert_eq!(unsafe { libc::munmap(self.0.add(PAGE).cast(), PAGE) }, 0);
        }
    }

    impl Drop for Pages {
        fn drop(&mut self) {
            // SAFETY: our mapping (unmapping a hole again is harmless).
            unsafe { libc::munmap(self.0.cast(), 3 * PAGE) };
        }
    }

    /// A region over the three pages, starting 3 bytes in and ending 5 before the end, so
    /// that the ragged ends take the byte path.
    fn region(p: &Pages) -> RawMemory {
        // SAFETY: the mapping outlives the region in each test; softrdma's accesses to the
        // hole fail instead of faulting, which is what is tested.
        unsafe { RawMemory::new(p.0.add(3), 3 * PAGE - 8) }
    }

    #[test]
    fn unmapped_memory_fails_every_access_and_the_rest_still_works() {
        let p = Pages::new();
        let m = region(&p);
        m.write(0, &[7u8; 3 * PAGE - 8]).unwrap();
        p.unmap_middle();
        let in_hole = PAGE + 100;
        let mut buf = vec![0u8; 200];
        assert_eq!(m.read(in_hole, &mut buf), Err(MemoryFault));
        assert_eq!(m.write(in_hole, &buf), Err(MemoryFault));
        // A copy running into the hole from the page before it fails too.
        let mut long = vec![0u8; PAGE];
        assert_eq!(m.read(PAGE / 2, &mut long), Err(MemoryFault));
        assert_eq!(m.write(PAGE / 2, &long), Err(MemoryFault));
        let word = PAGE + 5; // aligned: the region starts 3 bytes into a page
        assert_eq!(m.compare_swap(word, 0, 1), Err(MemoryFault));
        assert_eq!(m.fetch_add(word, 1), Err(MemoryFault));
        // A partial word and a single byte in the hole.
        assert_eq!(m.write(PAGE + 6, &[1, 2]), Err(MemoryFault));
        assert_eq!(m.read(PAGE - 3 + 1, &mut [0u8; 1]), Err(MemoryFault));
        // Outside the hole everything works, ends included.
        let mut head = [0u8; 20];
        m.read(0, &mut head).unwrap();
        assert_eq!(head, [7u8; 20]);
        m.write(2 * PAGE, &[9u8; 100]).unwrap();
        let mut tail = vec![0u8; PAGE - 8 - 3];
        m.read(2 * PAGE - 3, &mut tail).unwrap();
        assert_eq!(&tail[..3], &[7, 7, 7]);
        assert_eq!(&tail[3..103], &[9u8; 100][..]);
        assert_eq!(m.fetch_add(2 * PAGE + 5, 1), Ok(0x0909_0909_0909_0909));
    }

    #[test]
    fn protected_memory_fails_as_its_protection_says() {
        let p = Pages::new();
        let m = region(&p);
        m.write(PAGE, &[5u8; 64]).unwrap();
        p.protect_middle(libc::PROT_READ);
        let mut buf = [0u8; 64];
        m.read(PAGE, &mut buf).unwrap();
        assert_eq!(buf, [5u8; 64]);
        assert_eq!(m.write(PAGE, &buf), Err(MemoryFault));
        assert_eq!(m.fetch_add(PAGE + 5, 1), Err(MemoryFault));
        p.protect_middle(libc::PROT_NONE);
        assert_eq!(m.read(PAGE, &mut buf), Err(MemoryFault));
        p.protect_middle(libc::PROT_READ | libc::PROT_WRITE);
        m.write(PAGE, &[6u8; 64]).unwrap();
        m.read(PAGE, &mut buf).unwrap();
        assert_eq!(buf, [6u8; 64]);
    }

    /// A fault outside softrdma's copies is not softrdma's: with the handler installed, it
    /// still goes to the handler before it (here Rust's own, then the default action) and
    /// kills the process with SIGSEGV, as it would without softrdma.
    #[test]
    fn a_fault_elsewhere_still_kills_the_process() {
        use std::os::unix::process::ExitStatusExt;
        const CHILD: &str = "SOFTRDMA_FAULT_ELSEWHERE_CHILD";
        if std::env::var_os(CHILD).is_some() {
            let p = Pages::new();
            let _m = region(&p);
            p.unmap_middle();
            // SAFETY: none: this child process exists to fault here.
            let v = unsafe { std::ptr::read_volatile(p.0.add(PAGE)) };
            println!("read {v} from an unmapped page");
            std::process::exit(0);
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "memory::fault_tests::a_fault_elsewhere_still_kills_the_process",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
    }
}
