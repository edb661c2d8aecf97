//! Datagram extended transport header (IBTA 9.3.2, 8 bytes) on every UD packet: the Q_Key the
//! receiver checks and the sender's QP number (UD has no connection to name it).

use crate::bytes::{be24, be32, check_len, put24, put32};
use crate::Result;

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Deth {
    /// Queue key; must match the destination QP's Q_Key (high bit set: use the sender's own).
    pub qkey: u32,
    /// Source queue pair number (24 bits).
    pub src_qpn: u32,
}

impl Deth {
    /// Header length in bytes.
    pub const LEN: usize = 8;

    /// Parses the first 8 bytes of `b`; the reserved byte is ignored.
    pub fn parse(b: &[u8]) -> Result<Deth> {
        check_len(b, Self::LEN)?;
        Ok(Deth {
            qkey: be32(b, 0),
            src_qpn: be24(b, 5),
        })
    }

    /// Writes the header into the first 8 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`Deth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.qkey);
        b[4] = 0;
        put24(b, 5, self.src_qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // From ud_send.pcap (ibv_ud_pingpong): Q_Key 0x11111111, source QP 0x11.
    static DETH_BYTES: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x11];

    #[test]
    fn test_parse() {
        assert_eq!(
            Deth::parse(&DETH_BYTES).unwrap(),
            Deth {
                qkey: 0x1111_1111,
                src_qpn: 0x11
            }
        );
    }

    #[test]
    fn test_emit() {
        let mut out = [0xaau8; 8];
        Deth {
            qkey: 0x1111_1111,
            src_qpn: 0x11,
        }
        .emit(&mut out);
        assert_eq!(out, DETH_BYTES);
    }
}
