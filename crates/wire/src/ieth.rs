//! Invalidate extended transport header (IBTA 9.3.7): the R_Key that a SEND WITH INVALIDATE
//! asks the responder to invalidate once the message is received.

use crate::bytes::{be32, check_len, put32};
use crate::Result;

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ieth {
    /// The remote key to invalidate.
    pub rkey: u32,
}

impl Ieth {
    /// Header length in bytes.
    pub const LEN: usize = 4;

    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Ieth> {
        check_len(b, Self::LEN)?;
        Ok(Ieth { rkey: be32(b, 0) })
    }

    /// Writes the header into the first 4 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`Ieth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.rkey);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse() {
        assert_eq!(Ieth::parse(&[0, 0, 0x02, 0x80]).unwrap().rkey, 0x280);
        assert!(Ieth::parse(&[0; 2]).is_err());
    }

    #[test]
    fn test_emit() {
        let mut out = [0u8; 4];
        Ieth { rkey: 0x1234_5678 }.emit(&mut out);
        assert_eq!(out, [0x12, 0x34, 0x56, 0x78]);
    }
}
