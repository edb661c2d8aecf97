//! A whole RoCEv2 transport packet: BTH, the extension headers its opcode calls for, payload,
//! pad and ICRC — the UDP payload of a RoCEv2 datagram.
//!
//! [`PacketRepr::parse`] checks every length against the opcode table before touching a field,
//! so no byte sequence makes it panic. It does not check the ICRC, which needs the IP and UDP
//! headers: see [`crate::icrc`].

use crate::opcode::{Headers, Payload};
use crate::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Feth, Ieth, ImmDt, Opcode, ParseError, Result, Reth,
    Xrceth,
};

/// Length of the invariant CRC trailer.
pub const ICRC_LEN: usize = 4;
/// Length of the reserved field that follows the BTH of a CNP.
pub const CNP_RESERVED_LEN: usize = 16;

/// The extension headers of one packet; exactly those its opcode requires are `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// XRCETH (every XRC request).
    pub xrceth: Option<Xrceth>,
    /// FETH (FLUSH).
    pub feth: Option<Feth>,
    /// RETH (first WRITE packet, READ request, FLUSH, ATOMIC_WRITE).
    pub reth: Option<Reth>,
    /// AtomicETH (compare and swap, fetch and add).
    pub atomic_eth: Option<AtomicEth>,
    /// AETH (acknowledgements, first/last/only READ response).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH (atomic acknowledge).
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// Immediate data.
    pub imm_dt: Option<ImmDt>,
    /// Invalidate rkey.
    pub ieth: Option<Ieth>,
}

impl ExtHeaders {
    /// Which headers are present.
    pub fn present(&self) -> Headers {
        let mut h = Headers::NONE;
        let flags = [
            (self.deth.is_some(), Headers::DETH),
            (self.xrceth.is_some(), Headers::XRCETH),
            (self.feth.is_some(), Headers::FETH),
            (self.reth.is_some(), Headers::RETH),
            (self.atomic_eth.is_some(), Headers::ATOMIC_ETH),
            (self.aeth.is_some(), Headers::AETH),
            (self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH),
            (self.imm_dt.is_some(), Headers::IMM_DT),
            (self.ieth.is_some(), Headers::IETH),
        ];
        for (present, which) in flags {
            if present {
                h = h | which;
            }
        }
        h
    }
}

/// A validated RoCEv2 transport packet borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr<'a> {
    /// Base transport header.
    pub bth: Bth,
    /// Extension headers.
    pub ext: ExtHeaders,
    /// Payload without pad bytes.
    pub payload: &'a [u8],
}

/// Pad bytes needed to bring a payload to a multiple of 4 bytes.
#[inline]
pub const fn pad_for(payload_len: usize) -> u8 {
    (payload_len.wrapping_neg() & 3) as u8
}

impl<'a> PacketRepr<'a> {
    /// Parses a RoCEv2 UDP payload (BTH through ICRC). The ICRC is not verified.
    pub fn parse(packet: &'a [u8]) -> Result<PacketRepr<'a>> {
        let bth = Bth::parse(packet)?;
        let info = bth
            .opcode
            .info()
            .ok_or(ParseError::UnknownOpcode(bth.opcode.0))?;
        let header_len = info.header_len();
        if packet.len() < header_len + ICRC_LEN {
            return Err(ParseError::Truncated);
        }
        let body = packet.len() - header_len - ICRC_LEN;
        let pad = usize::from(bth.pad_count);
        // IBTA 9.2: payload plus pad fills whole 4-byte words (headers are whole words too).
        if pad > body || body % 4 != 0 {
            return Err(ParseError::BadPad);
        }
        let payload = &packet[header_len..header_len + body - pad];
        match info.payload {
            Payload::None if body != 0 => return Err(ParseError::BadPayloadLength),
            Payload::Fixed(n) if payload.len() != n => return Err(ParseError::BadPayloadLength),
            _ => {}
        }
        let headers = info.headers;
        let at = |which: Headers| headers.offset_of(which).map(|off| &packet[off..]);
        let ext = ExtHeaders {
            deth: at(Headers::DETH).map(Deth::parse).transpose()?,
            xrceth: at(Headers::XRCETH).map(Xrceth::parse).transpose()?,
            feth: at(Headers::FETH).map(Feth::parse).transpose()?,
            reth: at(Headers::RETH).map(Reth::parse).transpose()?,
            atomic_eth: at(Headers::ATOMIC_ETH).map(AtomicEth::parse).transpose()?,
            aeth: at(Headers::AETH).map(Aeth::parse).transpose()?,
            atomic_ack_eth: at(Headers::ATOMIC_ACK_ETH)
                .map(AtomicAckEth::parse)
                .transpose()?,
            imm_dt: at(Headers::IMM_DT).map(ImmDt::parse).transpose()?,
            ieth: at(Headers::IETH).map(Ieth::parse).transpose()?,
        };
        Ok(PacketRepr { bth, ext, payload })
    }

    /// Length of BTH plus extension headers for this packet's opcode (just the BTH for an
    /// opcode outside the table).
    pub fn header_len(&self) -> usize {
        self.bth.opcode.info().map_or(Bth::LEN, |i| i.header_len())
    }

    /// Bytes [`PacketRepr::emit`] writes: headers, payload, pad and the ICRC slot.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len() + usize::from(pad_for(self.payload.len())) + ICRC_LEN
    }

    /// Writes the packet into `buf[..self.buffer_len()]`. The BTH pad count is derived from the
    /// payload length (whatever `self.bth.pad_count` says), pad bytes are zero, and the ICRC slot
    /// is zeroed: fill it with [`crate::icrc`] once the IP and UDP headers are known.
    /// Returns the number of bytes written.
    ///
    /// # Panics
    /// If `buf` is shorter than [`PacketRepr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let len = self.buffer_len();
        let hlen = emit_headers(&self.bth, &self.ext, self.payload.len(), buf);
        buf[hlen..hlen + self.payload.len()].copy_from_slice(self.payload);
        buf[hlen + self.payload.len()..len].fill(0);
        len
    }
}

/// Total bytes of a packet with this opcode and payload length: headers, payload, pad, ICRC.
pub fn packet_len(opcode: Opcode, payload_len: usize) -> usize {
    opcode.info().map_or(Bth::LEN, |i| i.header_len())
        + payload_len
        + usize::from(pad_for(payload_len))
        + ICRC_LEN
}

/// Writes the BTH (with the pad count for `payload_len`) and the extension headers the opcode
/// requires, and returns the header length; the caller places the payload after it and zeroes
/// pad and ICRC (see [`PacketRepr::emit`]). This lets an engine copy payload straight from
/// registered memory into the transmit buffer. Extension headers the opcode requires but `ext`
/// lacks are written as zeros (a bug in the caller, caught by a debug assertion).
///
/// # Panics
/// If `buf` is shorter than the header length.
pub fn emit_headers(bth: &Bth, ext: &ExtHeaders, payload_len: usize, buf: &mut [u8]) -> usize {
    let mut bth = *bth;
    bth.pad_count = pad_for(payload_len);
    bth.emit(buf);
    let headers = bth.opcode.info().map_or(Headers::NONE, |i| i.headers);
    debug_assert_eq!(
        headers.union(Headers::CNP_RESERVED),
        ext.present().union(Headers::CNP_RESERVED),
        "extension headers do not match opcode {:?}",
        bth.opcode
    );
    // One pass in wire order, each present header right after the one before (asking
    // `offset_of` per header walked the order again for each).
    let mut off = Bth::LEN;
    for (which, hlen) in Headers::ORDER {
        if !headers.contains(which) {
            continue;
        }
        let slot = &mut buf[off..off + hlen];
        off += hlen;
        slot.fill(0);
        match which {
            Headers::DETH => ext.deth.unwrap_or_default().emit(slot),
            Headers::XRCETH => ext.xrceth.unwrap_or_default().emit(slot),
            Headers::FETH => ext.feth.unwrap_or_default().emit(slot),
            Headers::RETH => ext.reth.unwrap_or_default().emit(slot),
            Headers::ATOMIC_ETH => ext.atomic_eth.unwrap_or_default().emit(slot),
            Headers::AETH => {
                if let Some(aeth) = ext.aeth {
                    aeth.emit(slot)
                }
            }
            Headers::ATOMIC_ACK_ETH => ext.atomic_ack_eth.unwrap_or_default().emit(slot),
            Headers::IMM_DT => ext.imm_dt.unwrap_or_default().emit(slot),
            Headers::IETH => ext.ieth.unwrap_or_default().emit(slot),
            _ => {} // CNP reserved bytes: zero
        }
    }
    off
}

/// The opcode of a packet without parsing the rest, if there is a byte to read.
pub fn peek_opcode(packet: &[u8]) -> Option<Opcode> {
    packet.first().map(|&b| Opcode(b))
}

/// The ICRC trailer of a packet as stored (little-endian), if the packet is long enough.
pub fn stored_icrc(packet: &[u8]) -> Option<u32> {
    let n = packet.len();
    if n < Bth::LEN + ICRC_LEN {
        return None;
    }
    let mut b = [0u8; 4];
    b.copy_from_slice(&packet[n - ICRC_LEN..]);
    Some(u32::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Psn, Syndrome};

    // rxe's READ request from rc_read.pcap: BTH + RETH + ICRC.
    static READ_REQUEST: [u8; 32] = [
        0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x92, 0x87, 0x61, 0x00, 0x00, 0x56,
        0x29, 0x10, 0xf9, 0xe0, 0x00, 0x00, 0x00, 0x02, 0x23, 0x00, 0x00, 0x10, 0x00, 0x05, 0xb9,
        0xac, 0x85,
    ];

    #[test]
    fn test_parse() {
        let p = PacketRepr::parse(&READ_REQUEST).unwrap();
        assert_eq!(p.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
        assert!(p.bth.ack_req);
        assert_eq!(p.bth.psn, Psn::new(0x928761));
        assert_eq!(
            p.ext.reth,
            Some(Reth {
                va: 0x5629_10f9_e000,
                rkey: 0x223,
                dma_len: 4096
            })
        );
        assert!(p.payload.is_empty());
        assert_eq!(stored_icrc(&READ_REQUEST), Some(0x85ac_b905));
    }

    #[test]
    fn test_emit() {
        let p = PacketRepr::parse(&READ_REQUEST).unwrap();
        let mut out = [0xeeu8; 32];
        assert_eq!(p.emit(&mut out), 32);
        assert_eq!(out[..28], READ_REQUEST[..28]);
        assert_eq!(out[28..], [0; 4]);
    }

    #[test]
    fn test_pad() {
        let payload = [1u8, 2, 3, 4, 5];
        let mut bth = Bth::new(Opcode::RC_SEND_ONLY, 7, Psn::new(1));
        bth.pad_count = 3;
        let p = PacketRepr {
            bth,
            ext: ExtHeaders::default(),
            payload: &payload,
        };
        let mut out = [0u8; 64];
        let n = p.emit(&mut out);
        assert_eq!(n, 12 + 5 + 3 + 4);
        let q = PacketRepr::parse(&out[..n]).unwrap();
        assert_eq!(q.payload, &payload);
        assert_eq!(q.bth.pad_count, 3);
    }

    #[test]
    fn test_parse_bad() {
        // Payload on an opcode that allows none.
        let mut ack = [0u8; 24];
        let p = PacketRepr {
            bth: Bth::new(Opcode::RC_ACKNOWLEDGE, 1, Psn::ZERO),
            ext: ExtHeaders {
                aeth: Some(Aeth {
                    syndrome: Syndrome::ACK,
                    msn: 0,
                }),
                ..Default::default()
            },
            payload: &[],
        };
        assert_eq!(p.emit(&mut ack), 20);
        assert!(PacketRepr::parse(&ack[..20]).is_ok());
        assert_eq!(PacketRepr::parse(&ack), Err(ParseError::BadPayloadLength));
        // Truncated extension header.
        assert_eq!(
            PacketRepr::parse(&READ_REQUEST[..20]),
            Err(ParseError::Truncated)
        );
        // Pad longer than the payload.
        let mut send = [0u8; 16];
        send[1] = 0x30;
        send[0] = Opcode::RC_SEND_ONLY.0;
        assert_eq!(PacketRepr::parse(&send), Err(ParseError::BadPad));
        // Unknown opcode.
        send[0] = 0x15;
        send[1] = 0;
        assert_eq!(
            PacketRepr::parse(&send),
            Err(ParseError::UnknownOpcode(0x15))
        );
    }
}
