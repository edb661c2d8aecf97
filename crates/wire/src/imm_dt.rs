//! Immediate data (IBTA 9.3.4): 4 bytes carried by the last packet of a SEND or RDMA WRITE
//! "with immediate" and delivered in the receiver's work completion.

use crate::bytes::{be32, check_len, put32};
use crate::Result;

/// Immediate data, as the 4 bytes appear on the wire (network byte order, like ibverbs'
/// `__be32 imm_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDt {
    /// The immediate value, big-endian on the wire.
    pub imm: u32,
}

impl ImmDt {
    /// Header length in bytes.
    pub const LEN: usize = 4;

    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<ImmDt> {
        check_len(b, Self::LEN)?;
        Ok(ImmDt { imm: be32(b, 0) })
    }

    /// Writes the header into the first 4 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`ImmDt::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse() {
        assert_eq!(
            ImmDt::parse(&[0xde, 0xad, 0xbe, 0xef]).unwrap().imm,
            0xdead_beef
        );
        assert!(ImmDt::parse(&[0; 3]).is_err());
    }

    #[test]
    fn test_emit() {
        let mut out = [0u8; 4];
        ImmDt { imm: 0x0102_0304 }.emit(&mut out);
        assert_eq!(out, [1, 2, 3, 4]);
    }
}
