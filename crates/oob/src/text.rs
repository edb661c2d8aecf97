//! Fixed-width hex text fields, the building block of both tools' messages.

use crate::error::{FormatError, ParseError};

/// Appends `value` as exactly `width` lowercase hex digits (`%0<width>x`), refusing values
/// that `printf` would print wider.
pub(crate) fn put_hex(
    out: &mut Vec<u8>,
    value: u64,
    width: u32,
    field: &'static str,
) -> Result<(), FormatError> {
    let max = if width >= 16 {
        u64::MAX
    } else {
        (1u64 << (4 * width)) - 1
    };
    if value > max {
        return Err(FormatError { field, value, max });
    }
    for i in (0..width).rev() {
        // Lowercase, as the tools' `%06x` prints.
        let digit = char::from_digit(((value >> (4 * i)) & 0xf) as u32, 16).unwrap_or('0');
        out.push(digit as u8);
    }
    Ok(())
}

/// Parses a hex field of any width (like `strtol(.., 16)`, minus its tolerance for signs,
/// spaces and `0x`), checking it fits `max`. Empty fields and stray characters are errors.
pub(crate) fn parse_hex(s: &[u8], max: u64, field: &'static str) -> Result<u64, ParseError> {
    if s.is_empty() {
        return Err(ParseError::BadHex { field });
    }
    let mut v: u64 = 0;
    for &c in s {
        let d = char::from(c)
            .to_digit(16)
            .ok_or(ParseError::BadHex { field })?;
        v = v
            .checked_mul(16)
            .and_then(|v| v.checked_add(u64::from(d)))
            .ok_or(ParseError::OutOfRange { field })?;
    }
    if v > max {
        return Err(ParseError::OutOfRange { field });
    }
    Ok(v)
}

/// The text before the first NUL of a fixed-size C-string message.
pub(crate) fn c_str(msg: &[u8]) -> Result<&[u8], ParseError> {
    let end = msg
        .iter()
        .position(|&b| b == 0)
        .ok_or(ParseError::MissingNul)?;
    let text = &msg[..end];
    if !text.is_ascii() {
        return Err(ParseError::NotAscii);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_fields() {
        let mut v = Vec::new();
        put_hex(&mut v, 0x11, 6, "qpn").unwrap();
        assert_eq!(v, b"000011");
        assert!(put_hex(&mut v, 0x100_0000, 6, "qpn").is_err());
        let mut w = Vec::new();
        put_hex(&mut w, u64::MAX, 16, "vaddr").unwrap();
        assert_eq!(w, b"ffffffffffffffff");
        assert_eq!(parse_hex(b"00C2dac6", 0xff_ffff, "psn"), Ok(0xc2dac6));
        assert!(parse_hex(b"", 1, "x").is_err());
        assert!(parse_hex(b"1000000", 0xff_ffff, "psn").is_err());
        assert!(parse_hex(b"ffffffffffffffffff", u64::MAX, "v").is_err());
        assert!(parse_hex(b"-1", u64::MAX, "v").is_err());
    }
}
