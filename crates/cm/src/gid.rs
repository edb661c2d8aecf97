//! GIDs are `softrdma_wire::Gid`; this module keeps the hex digit helpers the text formats share.

pub use softrdma_wire::Gid;

pub(crate) fn hex_digit(v: u8) -> u8 {
    b"0123456789abcdef"[usize::from(v & 0xf)]
}

pub(crate) fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}
