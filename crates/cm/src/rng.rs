//! The CM's randomness (communication IDs, starting PSNs, ephemeral ports): SplitMix64 from a
//! configured seed, so that the same calls give the same bytes — what lets tests and the
//! simulator replay a run.

/// SplitMix64: small, fast, and reproducible from the seed.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A random 24-bit PSN (rdma_cm: `get_random_u32() & 0xffffff`).
    pub(crate) fn psn(&mut self) -> softrdma_wire::Psn {
        softrdma_wire::Psn::new(self.next_u64() as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], xs[1]);
        assert!(Rng::new(1).psn().value() < 1 << 24);
    }
}
