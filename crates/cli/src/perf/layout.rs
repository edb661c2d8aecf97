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

/// `len` bytes of the data pattern from `offset` of a region (what a softrdma peer writes,
/// sends, or serves to READs; `--check` compares against it): the byte at offset `o` is
/// `(o % 251) ^ (o / 251)`, truncated to 8 bits. Built a run of 251 at a time rather than a
/// division per byte: the data check builds whole messages of it on the polling thread, and
/// with a division per byte checking one 64 KiB READ in 16 was that thread's largest cost.
pub(crate) fn pattern(offset: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let (mut block, mut at) = (offset / 251, offset % 251);
    while v.len() < len {
        let run = (251 - at).min(len - v.len());
        v.extend((at..at + run).map(|x| x as u8 ^ block as u8));
        (block, at) = (block + 1, 0);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern_byte(offset: usize) -> u8 {
        ((offset % 251) as u8) ^ ((offset / 251) as u8)
    }

    #[test]
    fn pattern_runs_match_the_bytes() {
        for (offset, len) in [
            (0, 0),
            (0, 1),
            (0, 251),
            (250, 2),
            (251, 251),
            (1000, 70_000),
        ] {
            let want: Vec<u8> = (offset..offset + len).map(pattern_byte).collect();
            assert_eq!(pattern(offset, len), want, "offset {offset} len {len}");
        }
    }
}
