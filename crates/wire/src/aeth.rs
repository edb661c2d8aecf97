//! ACK extended transport header (IBTA 9.3.5): syndrome plus message sequence number.
//!
//! The syndrome byte says whether the packet is an ACK (with an end-to-end credit count), an
//! RNR NAK (with the time the requester must wait), or a NAK with an error code. It appears on
//! ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE and the first/last/only READ responses.

use core::fmt;

use crate::bytes::{be24, check_len, put24};
use crate::Result;

/// The credit count value meaning "no end-to-end credit information" (rxe always sends it).
pub const CREDITS_INVALID: u8 = 0x1f;

/// NAK codes (IBTA Table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// A request arrived with a PSN after the expected one: resend from the expected PSN.
    PsnSequenceError,
    /// The request was malformed or not supported (class B error at the requester).
    InvalidRequest,
    /// R_Key, bounds or access rights did not allow the access.
    RemoteAccessError,
    /// The responder failed for a reason of its own.
    RemoteOperationalError,
    /// Reliable-datagram specific.
    InvalidRdRequest,
    /// A reserved code, kept so that it re-emits unchanged.
    Reserved(u8),
}

impl NakCode {
    const fn from_bits(v: u8) -> NakCode {
        match v {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            other => NakCode::Reserved(other),
        }
    }

    const fn bits(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(v) => v & 0x1f,
        }
    }
}

/// The decoded syndrome byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement; `credits` is the encoded end-to-end credit count
    /// ([`CREDITS_INVALID`] when the responder does not use credits).
    Ack {
        /// Encoded credit count (5 bits).
        credits: u8,
    },
    /// Receiver not ready: no receive WQE was available. `timer` is the 5-bit code of the
    /// minimum wait before retrying (see [`rnr_timer_us`]).
    RnrNak {
        /// Encoded RNR timer (5 bits).
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A syndrome with the reserved type bits (or bit 7) set, kept raw.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes the syndrome byte. Every byte value decodes; [`Syndrome::to_byte`] inverts it.
    pub const fn from_byte(b: u8) -> Syndrome {
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        let value = b & 0x1f;
        match (b >> 5) & 0x3 {
            0 => Syndrome::Ack { credits: value },
            1 => Syndrome::RnrNak { timer: value },
            3 => Syndrome::Nak(NakCode::from_bits(value)),
            _ => Syndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => 0x60 | code.bits(),
            Syndrome::Reserved(b) => b,
        }
    }

    /// An ACK without credit information, as rxe sends it.
    pub const ACK: Syndrome = Syndrome::Ack {
        credits: CREDITS_INVALID,
    };
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syndrome::Ack {
                credits: CREDITS_INVALID,
            } => f.write_str("ACK"),
            Syndrome::Ack { credits } => write!(f, "ACK credits={credits}"),
            Syndrome::RnrNak { timer } => {
                write!(f, "RNR_NAK timer={timer} ({} us)", rnr_timer_us(*timer))
            }
            Syndrome::Nak(code) => write!(f, "NAK {code:?}"),
            Syndrome::Reserved(b) => write!(f, "reserved syndrome 0x{b:02x}"),
        }
    }
}

/// Minimum RNR NAK wait, in microseconds, for a 5-bit timer code (IBTA Table 45).
pub const fn rnr_timer_us(code: u8) -> u32 {
    const TABLE_US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    TABLE_US[(code & 0x1f) as usize]
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// What kind of acknowledgement this is.
    pub syndrome: Syndrome,
    /// Message sequence number: count of messages the responder has completed (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Header length in bytes.
    pub const LEN: usize = 4;

    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Aeth> {
        check_len(b, Self::LEN)?;
        Ok(Aeth {
            syndrome: Syndrome::from_byte(b[0]),
            msn: be24(b, 1),
        })
    }

    /// Writes the header into the first 4 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`Aeth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.syndrome.to_byte();
        put24(b, 1, self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // From rc_send.pcap: rxe's ACK, syndrome 0x1f (no credits), MSN 1.
    static AETH_BYTES: [u8; 4] = [0x1f, 0x00, 0x00, 0x01];

    #[test]
    fn test_parse() {
        let aeth = Aeth::parse(&AETH_BYTES).unwrap();
        assert_eq!(
            aeth,
            Aeth {
                syndrome: Syndrome::ACK,
                msn: 1
            }
        );
    }

    #[test]
    fn test_emit() {
        let mut out = [0u8; 4];
        Aeth {
            syndrome: Syndrome::ACK,
            msn: 1,
        }
        .emit(&mut out);
        assert_eq!(out, AETH_BYTES);
    }

    #[test]
    fn test_syndromes() {
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_byte(0x61),
            Syndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            Syndrome::from_byte(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            Syndrome::from_byte(0x64),
            Syndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: 14 });
        assert_eq!(rnr_timer_us(14), 1_280);
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(Syndrome::from_byte(0x40), Syndrome::Reserved(0x40));
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b, "syndrome 0x{b:02x}");
        }
    }
}
