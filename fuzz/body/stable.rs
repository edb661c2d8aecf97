//! What the stable-toolchain harnesses of the fuzz bodies share (not used by cargo-fuzz):
//! deterministic pseudo-random inputs and the environment knobs `SOFTRDMA_FUZZ_ITERS` and
//! `SOFTRDMA_FUZZ_SEED`.
#![allow(dead_code)]

/// xorshift64*: deterministic, dependency-free randomness for reproducible inputs.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The number in environment variable `name`, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
