//! Where things are: the QP index and sequence number packed in a work request ID, the
//! stride between messages in a buffer (perftest's), and the data pattern softrdma peers move.

/// Bits of a work request ID that hold the sequence number; the QP index sits above.
const SEQ_BITS: u32 = 40;

pub(crate) fn wr_id(qp: usize, seq: u64) -> u64 {
    ((qp as u64) << SEQ_BITS) | seq
}

pub(crate) fn split_id(id: u64) -> (usize, u64) {
    ((id >> SEQ_BITS) as usize, id & ((1 << SEQ_BITS) - 1))
}

/// perftest's `INC(size, cache_line)`: the stride between consecutive messages' addresses.
pub(crate) fn stride(size: u64, cache_line: u64) -> u64 {
    size.div_ceil(cache_line) * cache_line
}

/// The byte the data pattern has at `offset` of a region (what a softrdma peer writes, sends,
/// or serves to READs; `--check` compares against it).
pub(crate) fn pattern_byte(offset: usize) -> u8 {
    ((offset % 251) as u8) ^ ((offset / 251) as u8)
}

/// `len` pattern bytes from `offset`.
pub(crate) fn pattern(offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len).map(pattern_byte).collect()
}
