//! Why a packet was rejected.
//!
//! Every rejection has a reason so that the layers above can count drops by cause (rxe keeps a
//! counter per anomaly; so do we). The type is `Copy` and allocation-free: it is produced on the
//! per-packet path.

use core::fmt;

/// A reason a byte sequence is not a well-formed RoCEv2 packet or header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// Fewer bytes than the header (or the headers the opcode requires) occupy.
    Truncated,
    /// The opcode is not one this crate knows (reserved, RD or XRC, or vendor specific).
    UnknownOpcode(u8),
    /// BTH transport header version other than 0 (IBTA: a receiver drops such packets).
    BadTver(u8),
    /// The pad count exceeds the bytes available for payload, or is non-zero where the opcode
    /// carries no payload.
    BadPad,
    /// Payload present where the opcode allows none (ACK, READ request, atomics), or the
    /// fixed-size payload of an opcode (CNP, ATOMIC_WRITE) has the wrong length.
    BadPayloadLength,
    /// Not IPv4 / IPv6 / UDP as expected, or inconsistent lengths in those headers.
    BadIpHeader,
    /// The ICRC trailer does not match the packet contents.
    BadIcrc,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Truncated => f.write_str("truncated packet"),
            ParseError::UnknownOpcode(op) => write!(f, "unknown opcode 0x{op:02x}"),
            ParseError::BadTver(v) => write!(f, "unsupported BTH transport version {v}"),
            ParseError::BadPad => f.write_str("invalid pad count"),
            ParseError::BadPayloadLength => f.write_str("payload length not allowed for opcode"),
            ParseError::BadIpHeader => f.write_str("malformed IP/UDP header"),
            ParseError::BadIcrc => f.write_str("ICRC mismatch"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Shorthand used throughout the crate.
pub type Result<T> = core::result::Result<T, ParseError>;
