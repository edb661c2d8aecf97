//! RDMA extended transport header (IBTA 9.3.3.3): 16 bytes on the first packet of an RDMA
//! WRITE, on a READ request, and on ATOMIC_WRITE and FLUSH.

use crate::bytes::{be32, be64, check_len, put32, put64};
use crate::Result;

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reth {
    /// Virtual address at the responder where the transfer starts.
    pub va: u64,
    /// Remote key of the memory region being accessed.
    pub rkey: u32,
    /// Total length of the transfer in bytes (the whole message, not this packet).
    pub dma_len: u32,
}

impl Reth {
    /// Header length in bytes.
    pub const LEN: usize = 16;

    /// Parses the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Reth> {
        check_len(b, Self::LEN)?;
        Ok(Reth {
            va: be64(b, 0),
            rkey: be32(b, 8),
            dma_len: be32(b, 12),
        })
    }

    /// Writes the header into the first 16 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`Reth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put64(b, 0, self.va);
        put32(b, 8, self.rkey);
        put32(b, 12, self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // From rc_write.pcap (ib_write_bw -s 4096): RC_RDMA_WRITE_FIRST's RETH.
    static RETH_BYTES: [u8; 16] = [
        0x00, 0x00, 0x56, 0x31, 0x30, 0x4b, 0x20, 0x00, 0x00, 0x00, 0x02, 0xb6, 0x00, 0x00, 0x10,
        0x00,
    ];

    #[test]
    fn test_parse() {
        let reth = Reth::parse(&RETH_BYTES).unwrap();
        assert_eq!(
            reth,
            Reth {
                va: 0x5631_304b_2000,
                rkey: 0x2b6,
                dma_len: 4096
            }
        );
    }

    #[test]
    fn test_emit() {
        let mut out = [0u8; 16];
        Reth::parse(&RETH_BYTES).unwrap().emit(&mut out);
        assert_eq!(out, RETH_BYTES);
    }

    #[test]
    fn test_truncated() {
        assert!(Reth::parse(&RETH_BYTES[..15]).is_err());
    }
}
