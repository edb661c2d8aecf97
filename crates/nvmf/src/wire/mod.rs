//! NVMe and NVMe-oF RDMA bytes, as pure types: each structure parses from and emits to its
//! exact wire layout (little-endian, as the NVMe base and NVMe-oF 1.1 specifications lay
//! them out and Linux's `include/linux/nvme.h` and `nvme-rdma.h` declare them). No I/O, no
//! allocation beyond the structures themselves, and no panics on hostile input: every
//! parser checks lengths first and reports a [`DecodeError`].

pub mod cqe;
pub mod fabrics;
pub mod identify;
pub mod log;
pub mod rdma_cm;
pub mod sgl;
pub mod sqe;

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the structure needs.
    #[error("{what}: {got} bytes, at least {need} needed")]
    Truncated {
        /// The structure.
        what: &'static str,
        /// Bytes given.
        got: usize,
        /// Bytes needed.
        need: usize,
    },
    /// A text field (an NQN, an address) without its terminating NUL or not ASCII.
    #[error("{what}: not a NUL-terminated ASCII string")]
    BadString {
        /// The field.
        what: &'static str,
    },
}

/// `bytes` is at least `need` long, or the error names `what`.
pub(crate) fn need(what: &'static str, bytes: &[u8], need: usize) -> Result<(), DecodeError> {
    if bytes.len() < need {
        return Err(DecodeError::Truncated {
            what,
            got: bytes.len(),
            need,
        });
    }
    Ok(())
}

/// Little-endian readers for slices whose length the caller checked (`need`); an index past
/// the end reads as zero rather than panicking, so a missed check cannot crash the target.
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([byte(b, at), byte(b, at + 1)])
}

pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([
        byte(b, at),
        byte(b, at + 1),
        byte(b, at + 2),
        byte(b, at + 3),
    ])
}

pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    u64::from(le32(b, at)) | u64::from(le32(b, at + 4)) << 32
}

pub(crate) fn le128(b: &[u8], at: usize) -> u128 {
    u128::from(le64(b, at)) | u128::from(le64(b, at + 8)) << 64
}

pub(crate) fn byte(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

/// Copies `N` bytes from `at` (zeros past the end).
pub(crate) fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = byte(b, at + i);
    }
    out
}

/// Writes `v` little-endian at `at` of `out` (which the caller sized).
pub(crate) fn put(out: &mut [u8], at: usize, v: &[u8]) {
    if let Some(dst) = out.get_mut(at..at + v.len()) {
        dst.copy_from_slice(v);
    }
}

/// A NUL-terminated ASCII field of `len` bytes at `at` (an NQN, a transport address): the
/// text before the first NUL, which must exist within the field.
pub(crate) fn cstr(
    what: &'static str,
    b: &[u8],
    at: usize,
    len: usize,
) -> Result<String, DecodeError> {
    let field = b.get(at..at + len).ok_or(DecodeError::Truncated {
        what,
        got: b.len(),
        need: at + len,
    })?;
    let end = field
        .iter()
        .position(|&c| c == 0)
        .ok_or(DecodeError::BadString { what })?;
    let text = &field[..end];
    if !text.is_ascii() {
        return Err(DecodeError::BadString { what });
    }
    Ok(String::from_utf8_lossy(text).into_owned())
}

/// A space-padded ASCII field (serial and model numbers, firmware revision), trimmed.
pub(crate) fn padded_str(b: &[u8], at: usize, len: usize) -> String {
    let field = b.get(at..at + len).unwrap_or(&[]);
    String::from_utf8_lossy(field)
        .trim_end_matches([' ', '\0'])
        .to_string()
}

/// Writes `s` into a `len`-byte field at `at`, padded with `pad` (truncated to fit; a
/// NUL-padded field keeps its last byte NUL).
pub(crate) fn put_str(out: &mut [u8], at: usize, len: usize, s: &str, pad: u8) {
    let room = if pad == 0 { len.saturating_sub(1) } else { len };
    let bytes = s.as_bytes();
    let n = bytes.len().min(room);
    put(out, at, &bytes[..n]);
    for i in n..len {
        put(out, at + i, &[pad]);
    }
}
