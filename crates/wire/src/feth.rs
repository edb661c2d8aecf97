//! Flush extended transport header (IBTA 1.5 memory placement extensions): says which memory
//! a FLUSH makes persistent or globally visible.

use crate::bytes::{be32, check_len, put32};
use crate::Result;

/// A parsed FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Feth {
    /// Selectivity level (2 bits): 0 = the range in the RETH, 1 = the whole memory region.
    pub selectivity: u8,
    /// Placement type (4 bits): bit 0 global visibility, bit 1 persistence.
    pub placement: u8,
}

impl Feth {
    /// Header length in bytes.
    pub const LEN: usize = 4;

    /// Parses the first 4 bytes of `b`; reserved bits are ignored.
    pub fn parse(b: &[u8]) -> Result<Feth> {
        check_len(b, Self::LEN)?;
        let v = be32(b, 0);
        Ok(Feth {
            selectivity: ((v >> 4) & 0x3) as u8,
            placement: (v & 0xf) as u8,
        })
    }

    /// Writes the header into the first 4 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`Feth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(
            b,
            0,
            (u32::from(self.selectivity & 0x3) << 4) | u32::from(self.placement & 0xf),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_roundtrip() {
        let feth = Feth {
            selectivity: 1,
            placement: 2,
        };
        let mut out = [0u8; 4];
        feth.emit(&mut out);
        assert_eq!(out, [0, 0, 0, 0x12]);
        assert_eq!(Feth::parse(&out).unwrap(), feth);
    }
}
