//! XRC extended transport header (IBTA Vol. 1 Annex A14, 4 bytes) on every request packet of
//! the extended reliable connected transport: which XRC shared receive queue of the target's
//! XRC domain the message is for. One target QP serves every SRQ of its domain, so the SRQ
//! travels in each packet instead of being fixed by the connection.

use crate::bytes::{be24, check_len, put24};
use crate::Result;

/// A parsed XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Xrceth {
    /// The XRC SRQ number at the responder (24 bits).
    pub srqn: u32,
}

impl Xrceth {
    /// Header length in bytes.
    pub const LEN: usize = 4;

    /// Parses the first 4 bytes of `b`; the reserved byte is ignored.
    pub fn parse(b: &[u8]) -> Result<Xrceth> {
        check_len(b, Self::LEN)?;
        Ok(Xrceth { srqn: be24(b, 1) })
    }

    /// Writes the header into the first 4 bytes of `b` (the SRQ number's bits above 24 are
    /// not sent).
    ///
    /// # Panics
    /// If `b` is shorter than [`Xrceth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = 0;
        put24(b, 1, self.srqn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static XRCETH_BYTES: [u8; 4] = [0x00, 0x12, 0x34, 0x56];

    #[test]
    fn test_parse() {
        assert_eq!(
            Xrceth::parse(&XRCETH_BYTES).unwrap(),
            Xrceth { srqn: 0x12_3456 }
        );
        // The reserved byte is ignored.
        assert_eq!(Xrceth::parse(&[0xff, 0, 0, 7]).unwrap(), Xrceth { srqn: 7 });
        assert!(Xrceth::parse(&XRCETH_BYTES[..3]).is_err());
    }

    #[test]
    fn test_emit() {
        let mut out = [0xaau8; 4];
        Xrceth { srqn: 0x12_3456 }.emit(&mut out);
        assert_eq!(out, XRCETH_BYTES);
    }
}
