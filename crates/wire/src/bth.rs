//! Base transport header (IBTA 9.2): present in every packet, 12 bytes.
//!
//! ```text
//!  0       opcode
//!  1       SE(1) M(1) PadCnt(2) TVer(4)
//!  2..4    P_Key
//!  4       FECN(1) BECN(1) reserved(6)     <- masked to ones in the ICRC
//!  5..8    destination QP
//!  8       AckReq(1) reserved(7)
//!  9..12   PSN
//! ```

use crate::bytes::{be16, be24, check_len, put16, put24};
use crate::{Opcode, ParseError, Psn, Result};

/// Queue pair numbers are 24 bits.
pub const QPN_MASK: u32 = 0x00ff_ffff;

/// The default partition key every RoCE port has (full membership).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// A parsed base transport header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bth {
    /// Operation and transport.
    pub opcode: Opcode,
    /// Solicited event: the responder should raise a completion event.
    pub solicited: bool,
    /// Migration state (APM); rxe always sends 0.
    pub migreq: bool,
    /// Bytes of padding after the payload to reach a 4-byte boundary (0..=3).
    pub pad_count: u8,
    /// Transport header version; 0 is the only one defined.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward explicit congestion notification (set by the network).
    pub fecn: bool,
    /// Backward explicit congestion notification (set in CNPs).
    pub becn: bool,
    /// Destination queue pair number (24 bits).
    pub dest_qpn: u32,
    /// Acknowledge request: the responder must answer this packet with an ACK.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl Bth {
    /// Header length in bytes.
    pub const LEN: usize = 12;
    /// Offset of the byte that holds FECN/BECN and the reserved bits (masked in the ICRC).
    pub const FECN_BECN_OFFSET: usize = 4;

    /// A BTH with the fields that softrdma and rxe send by default (P_Key 0xffff, TVer 0).
    pub fn new(opcode: Opcode, dest_qpn: u32, psn: Psn) -> Bth {
        Bth {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qpn: dest_qpn & QPN_MASK,
            ack_req: false,
            psn,
        }
    }

    /// Parses the first 12 bytes of `b`. Reserved bits are ignored, as IBTA requires of
    /// receivers; a transport version other than 0 is rejected.
    pub fn parse(b: &[u8]) -> Result<Bth> {
        check_len(b, Self::LEN)?;
        let tver = b[1] & 0x0f;
        if tver != 0 {
            return Err(ParseError::BadTver(tver));
        }
        Ok(Bth {
            opcode: Opcode(b[0]),
            solicited: b[1] & 0x80 != 0,
            migreq: b[1] & 0x40 != 0,
            pad_count: (b[1] >> 4) & 0x3,
            tver,
            pkey: be16(b, 2),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qpn: be24(b, 5),
            ack_req: b[8] & 0x80 != 0,
            psn: Psn::new(be24(b, 9)),
        })
    }

    /// Writes the header into the first 12 bytes of `b`; reserved bits are written as zero.
    ///
    /// # Panics
    /// If `b` is shorter than [`Bth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.opcode.0;
        b[1] = (u8::from(self.solicited) << 7)
            | (u8::from(self.migreq) << 6)
            | ((self.pad_count & 0x3) << 4)
            | (self.tver & 0x0f);
        put16(b, 2, self.pkey);
        b[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put24(b, 5, self.dest_qpn);
        b[8] = u8::from(self.ack_req) << 7;
        put24(b, 9, self.psn.value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC_SEND_FIRST from rc_send.pcap (Linux rxe): dest QP 0x11, PSN 0xd9d181.
    static BTH_BYTES: [u8; 12] = [
        0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0xd9, 0xd1, 0x81,
    ];

    #[test]
    fn test_parse() {
        let bth = Bth::parse(&BTH_BYTES).unwrap();
        assert_eq!(bth.opcode, Opcode::RC_SEND_FIRST);
        assert_eq!(bth.pkey, 0xffff);
        assert_eq!(bth.dest_qpn, 0x11);
        assert_eq!(bth.psn, Psn::new(0xd9d181));
        assert!(!bth.ack_req && !bth.solicited && !bth.fecn && !bth.becn);
    }

    #[test]
    fn test_emit() {
        let bth = Bth::parse(&BTH_BYTES).unwrap();
        let mut out = [0u8; 12];
        bth.emit(&mut out);
        assert_eq!(out, BTH_BYTES);
    }

    #[test]
    fn test_flags() {
        let mut bth = Bth::new(
            Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
            0x123456,
            Psn::new(0xfffffe),
        );
        bth.solicited = true;
        bth.pad_count = 3;
        bth.ack_req = true;
        bth.becn = true;
        let mut out = [0u8; 12];
        bth.emit(&mut out);
        assert_eq!(
            out,
            [0x03, 0xb0, 0xff, 0xff, 0x40, 0x12, 0x34, 0x56, 0x80, 0xff, 0xff, 0xfe]
        );
        assert_eq!(Bth::parse(&out).unwrap(), bth);
    }

    #[test]
    fn test_parse_bad_version() {
        let mut b = BTH_BYTES;
        b[1] = 0x01;
        assert_eq!(Bth::parse(&b), Err(ParseError::BadTver(1)));
        assert_eq!(Bth::parse(&b[..11]), Err(ParseError::Truncated));
    }
}
