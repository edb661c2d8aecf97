//! Packet sequence numbers: 24-bit, wrapping.
//!
//! IBTA ch. 9.7.1: PSNs are compared modulo 2^24. Whether a PSN is "before" or "after" another
//! is only meaningful within half the sequence space (2^23), which is why this type offers a
//! signed [`Psn::distance`] rather than `Ord`: a total order on a circle would be a lie that
//! breaks exactly at wrap-around.

use core::fmt;

/// The PSN space is 24 bits wide.
pub const PSN_MODULUS: u32 = 1 << 24;
const PSN_MASK: u32 = PSN_MODULUS - 1;

/// A 24-bit packet sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The zero PSN.
    pub const ZERO: Psn = Psn(0);

    /// Builds a PSN from the low 24 bits of `value` (higher bits are discarded, as on the wire).
    #[inline]
    pub const fn new(value: u32) -> Psn {
        Psn(value & PSN_MASK)
    }

    /// The numeric value, always below 2^24.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[inline]
    #[must_use]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & PSN_MASK)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    #[must_use]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & PSN_MASK)
    }

    /// The successor PSN.
    #[inline]
    #[must_use]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance from `other` to `self`, in `-2^23 ..= 2^23 - 1`: positive when `self`
    /// is after `other` in the window of half the sequence space.
    #[inline]
    pub const fn distance(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back: sign extension.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// `self` is strictly after `other` (within half the PSN space).
    #[inline]
    pub const fn is_after(self, other: Psn) -> bool {
        self.distance(other) > 0
    }

    /// `self` is strictly before `other` (within half the PSN space).
    #[inline]
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }

    /// `self` lies in the half-open window `[start, start + len)`, modulo 2^24.
    #[inline]
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        (self.0.wrapping_sub(start.0) & PSN_MASK) < len
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(psn: Psn) -> u32 {
        psn.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn test_wrap() {
        let top = Psn::new(PSN_MODULUS - 1);
        assert_eq!(top.next(), Psn::ZERO);
        assert_eq!(Psn::ZERO.sub(1), top);
        assert_eq!(Psn::new(0x1ff_ffff).value(), 0xff_ffff);
        assert_eq!(Psn::ZERO.distance(top), 1);
        assert_eq!(top.distance(Psn::ZERO), -1);
        assert!(Psn::new(3).is_after(top));
        assert!(top.is_before(Psn::new(3)));
        assert!(Psn::new(2).in_window(top, 4));
        assert!(!Psn::new(3).in_window(top, 4));
    }

    #[test]
    fn test_half_space_boundary() {
        let a = Psn::ZERO;
        assert_eq!(Psn::new(1 << 23).distance(a), -(1 << 23));
        assert_eq!(Psn::new((1 << 23) - 1).distance(a), (1 << 23) - 1);
    }

    proptest! {
        #[test]
        fn distance_is_antisymmetric(a in 0u32..PSN_MODULUS, d in -(1i32 << 23) + 1..(1i32 << 23)) {
            let a = Psn::new(a);
            let b = a.add(d as u32);
            prop_assert_eq!(b.distance(a), d);
            prop_assert_eq!(a.distance(b), -d);
            prop_assert_eq!(b.is_after(a), d > 0);
        }

        #[test]
        fn add_sub_roundtrip(a in any::<u32>(), n in any::<u32>()) {
            let a = Psn::new(a);
            prop_assert_eq!(a.add(n).sub(n), a);
        }
    }
}
