//! Atomic extended transport header (IBTA 9.3.3.4, 28 bytes) on COMPARE_SWAP and FETCH_ADD
//! requests, and the atomic acknowledge ETH (9.3.6, 8 bytes) that returns the original value.

use crate::bytes::{be32, be64, check_len, put32, put64};
use crate::Result;

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEth {
    /// Responder virtual address of the 8-byte target; must be 8-byte aligned.
    pub va: u64,
    /// Remote key of the target's memory region.
    pub rkey: u32,
    /// The value to swap in (compare and swap) or to add (fetch and add).
    pub swap_add: u64,
    /// The value to compare with (compare and swap only; ignored by fetch and add).
    pub compare: u64,
}

impl AtomicEth {
    /// Header length in bytes.
    pub const LEN: usize = 28;

    /// Parses the first 28 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<AtomicEth> {
        check_len(b, Self::LEN)?;
        Ok(AtomicEth {
            va: be64(b, 0),
            rkey: be32(b, 8),
            swap_add: be64(b, 12),
            compare: be64(b, 20),
        })
    }

    /// Writes the header into the first 28 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`AtomicEth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put64(b, 0, self.va);
        put32(b, 8, self.rkey);
        put64(b, 12, self.swap_add);
        put64(b, 20, self.compare);
    }
}

/// A parsed AtomicAckETH: the value the target held before the atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEth {
    /// Original remote data.
    pub orig: u64,
}

impl AtomicAckEth {
    /// Header length in bytes.
    pub const LEN: usize = 8;

    /// Parses the first 8 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<AtomicAckEth> {
        check_len(b, Self::LEN)?;
        Ok(AtomicAckEth { orig: be64(b, 0) })
    }

    /// Writes the header into the first 8 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`AtomicAckEth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put64(b, 0, self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // From atomic_fa.pcap (ib_atomic_bw -A FETCH_AND_ADD): add 1 at 0x561f9fe7d000.
    static ATOMIC_ETH_BYTES: [u8; 28] = [
        0x00, 0x00, 0x56, 0x1f, 0x9f, 0xe7, 0xd0, 0x00, 0x00, 0x00, 0x02, 0x80, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    // The matching ATOMIC_ACKNOWLEDGE's AtomicAckETH.
    static ATOMIC_ACK_ETH_BYTES: [u8; 8] = [0x06, 0x37, 0xfc, 0x70, 0x6b, 0x9f, 0xd7, 0x8a];

    #[test]
    fn test_parse() {
        let eth = AtomicEth::parse(&ATOMIC_ETH_BYTES).unwrap();
        assert_eq!(
            eth,
            AtomicEth {
                va: 0x561f_9fe7_d000,
                rkey: 0x280,
                swap_add: 1,
                compare: 0
            }
        );
        let ack = AtomicAckEth::parse(&ATOMIC_ACK_ETH_BYTES).unwrap();
        assert_eq!(ack.orig, 0x0637_fc70_6b9f_d78a);
    }

    #[test]
    fn test_emit() {
        let mut out = [0u8; 28];
        AtomicEth::parse(&ATOMIC_ETH_BYTES).unwrap().emit(&mut out);
        assert_eq!(out, ATOMIC_ETH_BYTES);
        let mut out = [0u8; 8];
        AtomicAckEth::parse(&ATOMIC_ACK_ETH_BYTES)
            .unwrap()
            .emit(&mut out);
        assert_eq!(out, ATOMIC_ACK_ETH_BYTES);
    }

    #[test]
    fn test_truncated() {
        assert!(AtomicEth::parse(&ATOMIC_ETH_BYTES[..27]).is_err());
        assert!(AtomicAckEth::parse(&ATOMIC_ACK_ETH_BYTES[..7]).is_err());
    }
}
