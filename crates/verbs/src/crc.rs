//! CRC-32 (the ICRC's polynomial, zlib's convention) over 8-byte words that the caller loads
//! one at a time — the only way region memory may be read (see `memory.rs`: every byte of a
//! region is accessed as an aligned 8-byte atomic) — folded with carry-less multiplication
//! as the words come, so that the CRC costs no pass of its own over the bytes: a copy out of
//! a region computes it on the way ([`crc_words`] with a `store`), and a payload the kernel
//! placed straight into a region is checked by reading it once, without copying it anywhere.
//!
//! The folding: the CRC of a message is its polynomial times x^32 modulo P. A 128-bit block
//! followed by `d` more bits contributes block · x^d, which is congruent modulo P to
//! hi · (x^(d+64) mod P) + lo · (x^d mod P) — two 64 × 33-bit carry-less products, at most 96
//! bits, that can be added (XOR) into the block `d` bits later without changing the CRC of
//! the whole. Four blocks are folded 512 bits ahead at a time, then into one, and the last
//! 16 bytes plus what is left are hashed as they are. In the reflected bit order of this CRC
//! the constants are bit-reversed and the products come out one bit low, which the constants
//! make up for; `fold_constants_are_the_powers_of_x` checks them against the polynomial.

use std::sync::atomic::{AtomicU64, Ordering};

use softrdma_wire::crc32_update;

/// Continues `crc` over the 8-byte words of `src` (each loaded once, relaxed, in ascending
/// order; its bytes taken in memory order) and, unless `dst` is empty, copies them into
/// `dst` (`8 * src.len()` bytes) on the way.
///
/// # Panics
/// If `dst` is neither empty nor as long as `src`'s bytes.
#[inline]
pub(crate) fn crc_words(crc: u32, src: &[AtomicU64], dst: &mut [u8]) -> u32 {
    assert!(dst.is_empty() || dst.len() == 8 * src.len());
    #[cfg(target_arch = "x86_64")]
    {
        if src.len() >= WIDE_MIN_WORDS && wide::available() {
            // SAFETY: the CPU has AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.1 (checked just
            // above); the lengths were checked above.
            return unsafe {
                if dst.is_empty() {
                    wide::crc_words::<false>(crc, src, dst)
                } else {
                    wide::crc_words::<true>(crc, src, dst)
                }
            };
        }
        if src.len() >= FOLD_MIN_WORDS && clmul::available() {
            // SAFETY: the CPU has PCLMULQDQ and SSE4.1 (checked just above); the lengths
            // were checked above.
            return unsafe {
                if dst.is_empty() {
                    clmul::crc_words::<false>(crc, src, dst)
                } else {
                    clmul::crc_words::<true>(crc, src, dst)
                }
            };
        }
    }
    crc_words_portable(crc, src, dst)
}

/// A word of region memory as its bytes in memory order (the CRC's order).
#[inline(always)]
fn le(w: &AtomicU64) -> u64 {
    u64::from_le(w.load(Ordering::Relaxed))
}

/// Fewer words than this are hashed as bytes: the folding needs 8 words to start, and its
/// set-up and finish cost more than a few words of table lookups.
const FOLD_MIN_WORDS: usize = 16;

/// Fewer words than this are folded 128 bits at a time: the 256-bit folding takes 16 words
/// a round and needs 32 to start.
const WIDE_MIN_WORDS: usize = 32;

/// x^e modulo P (the CRC-32 polynomial), bit-reversed as the reflected CRC keeps it and
/// shifted up one bit, as a carry-less product of reflected operands comes out one bit low:
/// the factor that moves a 64-bit half of a block `e - 32` or `e + 32` bits on (see the
/// module docs). Evaluated at compile time.
pub(crate) const fn fold_constant(e: u32) -> u64 {
    const P: u64 = 0x1_04c1_1db7;
    let mut r: u64 = 1;
    let mut i = 0;
    while i < e {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= P;
        }
        i += 1;
    }
    ((r as u32).reverse_bits() as u64) << 1
}

/// The CRC value of everything so far, given the 16 folded bytes `(a, b)` that stand for it
/// and the word left over (if any): those bytes hashed from a zero register (CRC value !0).
fn finish(a: u64, b: u64, odd: Option<u64>) -> u32 {
    let mut tail = [0u8; 24];
    tail[..8].copy_from_slice(&a.to_le_bytes());
    tail[8..16].copy_from_slice(&b.to_le_bytes());
    let n = match odd {
        Some(w) => {
            tail[16..].copy_from_slice(&w.to_le_bytes());
            24
        }
        None => 16,
    };
    crc32_update(!0, &tail[..n])
}

/// [`crc_words`] without carry-less multiplication: the words gathered into a small buffer
/// (or `dst`) and hashed from there.
fn crc_words_portable(mut crc: u32, src: &[AtomicU64], dst: &mut [u8]) -> u32 {
    if !dst.is_empty() {
        for (w, out) in src.iter().zip(dst.chunks_exact_mut(8)) {
            out.copy_from_slice(&le(w).to_le_bytes());
        }
        return crc32_update(crc, dst);
    }
    let mut buf = [0u8; 512];
    for chunk in src.chunks(buf.len() / 8) {
        for (w, out) in chunk.iter().zip(buf.chunks_exact_mut(8)) {
            out.copy_from_slice(&le(w).to_le_bytes());
        }
        crc = crc32_update(crc, &buf[..chunk.len() * 8]);
    }
    crc
}

/// The x86-64 folding, written with inline assembly rather than intrinsics: the loads must
/// be single 8-byte accesses (see `clmul::load2`), which no intrinsic promises, and the
/// 256-bit carry-less multiply has no intrinsic in the Rust versions this crate supports.
/// Every helper is an `unsafe fn` whose contract is the CPU feature it uses.
#[cfg(target_arch = "x86_64")]
mod clmul {
    use std::arch::asm;
    use std::arch::x86_64::__m128i;
    use std::sync::atomic::AtomicU64;

    use super::le;

    /// Folds a 128-bit block 4 blocks on (see [`super::fold_constant`]).
    pub(super) const FOLD_4: (u64, u64) = (
        super::fold_constant(512 + 32),
        super::fold_constant(512 - 32),
    );
    /// Folds a 128-bit block 1 block on.
    pub(super) const FOLD_1: (u64, u64) = (
        super::fold_constant(128 + 32),
        super::fold_constant(128 - 32),
    );

    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.1")
    }

    /// Two 64-bit values (low first) as a block.
    pub(super) fn block(lo: u64, hi: u64) -> __m128i {
        // SAFETY: 16 bytes of plain data either way.
        unsafe { std::mem::transmute::<[u64; 2], __m128i>([lo, hi]) }
    }

    /// A block's two halves, low first.
    pub(super) fn halves(v: __m128i) -> (u64, u64) {
        // SAFETY: 16 bytes of plain data either way.
        let [lo, hi] = unsafe { std::mem::transmute::<__m128i, [u64; 2]>(v) };
        (lo, hi)
    }

    /// Two words as a block: two aligned 8-byte loads straight into the vector register,
    /// each one instruction, as `AtomicU64::load(Relaxed)` is on x86-64 (`mov`): the access
    /// sizes of the region memory model (`crate::memory`), without the trip through general
    /// registers that the atomics' Rust form costs (two loads, two moves and an unpack per
    /// block). x86-64 is little-endian: memory order is the CRC's.
    ///
    /// # Safety
    /// The CPU has SSE4.1 (`pinsrq`).
    #[inline(always)]
    pub(super) unsafe fn load2(w: &[AtomicU64]) -> __m128i {
        assert!(w.len() >= 2);
        let v: __m128i;
        // SAFETY: `w` holds two live, aligned words, which the block only reads; the caller
        // vouches for the instruction set.
        unsafe {
            asm!(
                "movq {v}, qword ptr [{p}]",
                "pinsrq {v}, qword ptr [{p} + 8], 1",
                p = in(reg) w.as_ptr(),
                v = out(xmm_reg) v,
                options(nostack, readonly, preserves_flags, pure),
            );
        }
        v
    }

    /// `x` folded the distance `k` stands for: x.lo · k.lo ⊕ x.hi · k.hi (carry-less). The
    /// caller adds the block it lands on.
    ///
    /// # Safety
    /// The CPU has PCLMULQDQ.
    #[inline(always)]
    pub(super) unsafe fn fold(x: __m128i, k: __m128i) -> __m128i {
        let r: __m128i;
        // SAFETY: register-only arithmetic; the caller vouches for the instruction set.
        unsafe {
            asm!(
                "movdqa {t}, {x}",
                "pclmulqdq {x}, {k}, 0x00",
                "pclmulqdq {t}, {k}, 0x11",
                "pxor {x}, {t}",
                x = inout(xmm_reg) x => r,
                k = in(xmm_reg) k,
                t = out(xmm_reg) _,
                options(nostack, nomem, preserves_flags, pure),
            );
        }
        r
    }

    /// `a ⊕ b`.
    #[inline(always)]
    pub(super) fn xor(a: __m128i, b: __m128i) -> __m128i {
        let r: __m128i;
        // SAFETY: register-only SSE2 (part of x86-64).
        unsafe {
            asm!(
                "pxor {a}, {b}",
                a = inout(xmm_reg) a => r,
                b = in(xmm_reg) b,
                options(nostack, nomem, preserves_flags, pure),
            );
        }
        r
    }

    /// Stores `v` into the first 16 bytes of `out`.
    #[inline(always)]
    pub(super) fn put(v: __m128i, out: &mut [u8]) {
        assert!(out.len() >= 16);
        // SAFETY: `out` has 16 writable bytes (checked); SSE2 is part of x86-64.
        unsafe {
            asm!(
                "movdqu xmmword ptr [{p}], {v}",
                p = in(reg) out.as_mut_ptr(),
                v = in(xmm_reg) v,
                options(nostack, preserves_flags),
            );
        }
    }

    /// Folds `acc` over the pairs of `src` (copying them into `dst` if `COPY`), then the odd
    /// word: the CRC of everything.
    ///
    /// # Safety
    /// The CPU has PCLMULQDQ and SSE4.1; with `COPY`, `dst` is `8 * src.len()` bytes.
    #[inline(always)]
    pub(super) unsafe fn finish_from<const COPY: bool>(
        mut acc: __m128i,
        src: &[AtomicU64],
        dst: &mut [u8],
    ) -> u32 {
        let k1 = block(FOLD_1.0, FOLD_1.1);
        let pairs = src.chunks_exact(2);
        let odd = pairs.remainder().first().map(le);
        for (i, pair) in pairs.enumerate() {
            // SAFETY: the caller's contract.
            let v = unsafe { load2(pair) };
            if COPY {
                put(v, &mut dst[16 * i..]);
            }
            // SAFETY: the caller's contract.
            acc = xor(unsafe { fold(acc, k1) }, v);
        }
        if let (true, Some(w)) = (COPY, odd) {
            let at = dst.len() - 8;
            dst[at..].copy_from_slice(&w.to_le_bytes());
        }
        // The 16 folded bytes stand for everything so far.
        let (a, b) = halves(acc);
        super::finish(a, b, odd)
    }

    /// # Safety
    /// The CPU must have PCLMULQDQ and SSE4.1; `src.len() >= 16`; with `COPY`, `dst` is
    /// `8 * src.len()` bytes.
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    pub(super) unsafe fn crc_words<const COPY: bool>(
        crc: u32,
        src: &[AtomicU64],
        dst: &mut [u8],
    ) -> u32 {
        debug_assert!(src.len() >= super::FOLD_MIN_WORDS);
        let (k4, k1) = (block(FOLD_4.0, FOLD_4.1), block(FOLD_1.0, FOLD_1.1));
        let rounds = src.chunks_exact(8);
        let after = rounds.remainder();
        let n = src.len() / 8;
        let mut x = [block(0, 0); 4];
        for (r, round) in rounds.enumerate() {
            for (j, lane) in x.iter_mut().enumerate() {
                // SAFETY: the caller's contract.
                let v = unsafe { load2(&round[2 * j..]) };
                if COPY {
                    put(v, &mut dst[64 * r + 16 * j..]);
                }
                *lane = if r == 0 {
                    v
                } else {
                    // SAFETY: the caller's contract.
                    xor(unsafe { fold(*lane, k4) }, v)
                };
            }
            if r == 0 {
                // The running CRC enters as the raw register XORed into the first four bytes
                // (after they were copied as they are).
                x[0] = xor(x[0], block(u64::from(!crc), 0));
            }
        }
        let mut acc = x[0];
        for lane in &x[1..] {
            // SAFETY: the caller's contract.
            acc = xor(unsafe { fold(acc, k1) }, *lane);
        }
        let tail = if COPY { &mut dst[64 * n..] } else { dst };
        // SAFETY: the caller's contract, for the words left.
        unsafe { finish_from::<COPY>(acc, after, tail) }
    }
}

/// [`clmul`]'s folding with 256-bit registers (VPCLMULQDQ): two blocks per multiplication,
/// which is what it takes to keep up with `crc32fast` on CPUs that have it, since the
/// multiplier, not the loads, limits the 128-bit folding.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::asm;
    use std::arch::x86_64::{__m128i, __m256i};
    use std::sync::atomic::AtomicU64;

    use super::clmul::{block, finish_from, fold, xor, FOLD_1};
    use super::fold_constant;

    /// Folds each 128-bit half of a register 8 blocks on (4 registers a round).
    const FOLD_8: (u64, u64) = (fold_constant(1024 + 32), fold_constant(1024 - 32));
    /// Folds each half 2 blocks on (one register onto the next).
    const FOLD_2: (u64, u64) = (fold_constant(256 + 32), fold_constant(256 - 32));

    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
            && super::clmul::available()
    }

    /// `k` in both halves of a 256-bit register.
    fn both(k: (u64, u64)) -> __m256i {
        // SAFETY: 32 bytes of plain data either way.
        unsafe { std::mem::transmute::<[u64; 4], __m256i>([k.0, k.1, k.0, k.1]) }
    }

    /// A register's two blocks, low (earlier) first.
    fn split(v: __m256i) -> (__m128i, __m128i) {
        // SAFETY: 32 bytes of plain data either way.
        let [lo, hi] = unsafe { std::mem::transmute::<__m256i, [__m128i; 2]>(v) };
        (lo, hi)
    }

    /// Four words as two blocks, each word one aligned 8-byte load (see `clmul::load2`).
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load4(w: &[AtomicU64]) -> __m256i {
        assert!(w.len() >= 4);
        let y: __m256i;
        // SAFETY: `w` holds four live, aligned words, which the block only reads.
        unsafe {
            asm!(
                "vmovq {a:x}, qword ptr [{p}]",
                "vpinsrq {a:x}, {a:x}, qword ptr [{p} + 8], 1",
                "vmovq {b}, qword ptr [{p} + 16]",
                "vpinsrq {b}, {b}, qword ptr [{p} + 24], 1",
                "vinserti128 {a:y}, {a:y}, {b}, 1",
                p = in(reg) w.as_ptr(),
                a = out(ymm_reg) y,
                b = out(xmm_reg) _,
                options(nostack, readonly, preserves_flags, pure),
            );
        }
        y
    }

    /// Each half of `x` folded the distance `k` stands for, and `v` added.
    ///
    /// # Safety
    /// The CPU has AVX2 and VPCLMULQDQ.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn fold_add(x: __m256i, k: __m256i, v: __m256i) -> __m256i {
        let r: __m256i;
        // SAFETY: register-only arithmetic; the caller vouches for the instruction set.
        unsafe {
            asm!(
                "vpclmulqdq {t}, {x}, {k}, 0x00",
                "vpclmulqdq {x}, {x}, {k}, 0x11",
                "vpxor {x}, {x}, {t}",
                "vpxor {x}, {x}, {v}",
                x = inout(ymm_reg) x => r,
                k = in(ymm_reg) k,
                v = in(ymm_reg) v,
                t = out(ymm_reg) _,
                options(nostack, nomem, preserves_flags, pure),
            );
        }
        r
    }

    /// Stores `v` into the first 32 bytes of `out`.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn put(v: __m256i, out: &mut [u8]) {
        assert!(out.len() >= 32);
        // SAFETY: `out` has 32 writable bytes (checked).
        unsafe {
            asm!(
                "vmovdqu ymmword ptr [{p}], {v}",
                p = in(reg) out.as_mut_ptr(),
                v = in(ymm_reg) v,
                options(nostack, preserves_flags),
            );
        }
    }

    /// # Safety
    /// The CPU must have AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.1; `src.len() >= 32`; with
    /// `COPY`, `dst` is `8 * src.len()` bytes.
    #[target_feature(enable = "avx2,pclmulqdq,sse4.1")]
    pub(super) unsafe fn crc_words<const COPY: bool>(
        crc: u32,
        src: &[AtomicU64],
        dst: &mut [u8],
    ) -> u32 {
        debug_assert!(src.len() >= super::WIDE_MIN_WORDS);
        let (k8, k2) = (both(FOLD_8), both(FOLD_2));
        let rounds = src.chunks_exact(16);
        let after = rounds.remainder();
        let n = src.len() / 16;
        let zero = both((0, 0));
        let mut x = [zero; 4];
        for (r, round) in rounds.enumerate() {
            for (j, lane) in x.iter_mut().enumerate() {
                // SAFETY: the caller's contract.
                let v = unsafe { load4(&round[4 * j..]) };
                if COPY {
                    // SAFETY: the caller's contract.
                    unsafe { put(v, &mut dst[128 * r + 32 * j..]) };
                }
                *lane = if r == 0 {
                    v
                } else {
                    // SAFETY: the caller's contract.
                    unsafe { fold_add(*lane, k8, v) }
                };
            }
            if r == 0 {
                // The running CRC enters as the raw register XORed into the first four bytes
                // (after they were copied as they are).
                // SAFETY: 32 bytes of plain data either way.
                let mut w = unsafe { std::mem::transmute::<__m256i, [u64; 4]>(x[0]) };
                w[0] ^= u64::from(!crc);
                // SAFETY: as above.
                x[0] = unsafe { std::mem::transmute::<[u64; 4], __m256i>(w) };
            }
        }
        let mut acc = x[0];
        for lane in &x[1..] {
            // SAFETY: the caller's contract.
            acc = unsafe { fold_add(acc, k2, *lane) };
        }
        // The earlier block onto the later one: one 128-bit block.
        let (lo, hi) = split(acc);
        // SAFETY: the caller's contract.
        let acc = xor(unsafe { fold(lo, block(FOLD_1.0, FOLD_1.1)) }, hi);
        let tail = if COPY { &mut dst[128 * n..] } else { dst };
        // SAFETY: the caller's contract, for the words left.
        unsafe { finish_from::<COPY>(acc, after, tail) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_of(bytes: &[u8]) -> Vec<AtomicU64> {
        bytes
            .chunks_exact(8)
            .map(|c| AtomicU64::new(u64::from_le_bytes(c.try_into().unwrap()).to_le()))
            .collect()
    }

    /// A deterministic byte stream (a multiplicative hash of the index), the same on every
    /// run.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let hash = |i: usize| (seed ^ i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 29;
        (0..n).map(|i| hash(i) as u8).collect()
    }

    /// Every length from 0 to 300 words and some long ones, random bytes and random running
    /// CRCs: the same CRC as the byte-wise one (crc32fast), and the copy gets every byte.
    #[test]
    fn matches_the_bytewise_crc_at_every_length() {
        let data = noise(8 * 2110, 7);
        let lengths = (0..=300).chain([511, 512, 513, 1024, 2048, 2099]);
        for (n, start) in lengths.map(|n| (n, (n * 13) % 8)) {
            let bytes = &data[start * 8..start * 8 + n * 8];
            let words = words_of(bytes);
            for crc in [0u32, 0xffff_ffff, 0x1234_5678 ^ n as u32] {
                let want = crc32_update(crc, bytes);
                let mut copy = vec![0u8; 8 * n];
                assert_eq!(
                    crc_words(crc, &words, &mut copy),
                    want,
                    "{n} words, crc {crc:#x}"
                );
                assert_eq!(copy, bytes);
                assert_eq!(crc_words(crc, &words, &mut []), want);
                assert_eq!(crc_words_portable(crc, &words, &mut []), want);
                let mut copy = vec![0u8; 8 * n];
                assert_eq!(crc_words_portable(crc, &words, &mut copy), want);
                assert_eq!(copy, bytes);
                // Each kernel at every length it takes, whichever the dispatch prefers.
                #[cfg(target_arch = "x86_64")]
                for (min, ok) in [
                    (FOLD_MIN_WORDS, clmul::available()),
                    (WIDE_MIN_WORDS, wide::available()),
                ] {
                    if n < min || !ok {
                        continue;
                    }
                    let mut copy = vec![0u8; 8 * n];
                    // SAFETY: the CPU has the features (checked) and the lengths fit.
                    let (c, p) = unsafe {
                        if min == FOLD_MIN_WORDS {
                            (
                                clmul::crc_words::<true>(crc, &words, &mut copy),
                                clmul::crc_words::<false>(crc, &words, &mut []),
                            )
                        } else {
                            (
                                wide::crc_words::<true>(crc, &words, &mut copy),
                                wide::crc_words::<false>(crc, &words, &mut []),
                            )
                        }
                    };
                    assert_eq!((c, p), (want, want), "kernel from {min} words, {n} words");
                    assert_eq!(copy, bytes);
                }
            }
        }
    }

    /// The folding constants computed from the polynomial are the ones every pclmul CRC-32
    /// folds with (x^(512±32) and x^(128±32), Intel's white paper on CRC folding).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fold_constants_are_the_powers_of_x() {
        assert_eq!(clmul::FOLD_4, (0x1_5444_2bd4, 0x1_c6e4_1596));
        assert_eq!(clmul::FOLD_1, (0x1_7519_97d0, 0x0_ccaa_009e));
    }
}
