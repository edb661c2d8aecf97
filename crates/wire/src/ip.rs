//! Minimal Ethernet, IPv4, IPv6 and UDP headers: what the ICRC pseudo-header covers, and what
//! decoding a capture needs. Not a general IP stack: no options processing, no fragments.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::{be16, check_len, put16};
use crate::{ParseError, Result};

/// The IANA-assigned RoCEv2 UDP destination port.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;

/// Strips an Ethernet II header (and up to two 802.1Q tags), returning the ethertype and the
/// frame's payload.
pub fn parse_ethernet(frame: &[u8]) -> Result<(u16, &[u8])> {
    check_len(frame, 14)?;
    let mut at = 12;
    let mut ethertype = be16(frame, at);
    let mut tags = 0;
    while ethertype == ETHERTYPE_VLAN && tags < 2 {
        check_len(frame, at + 6)?;
        at += 4;
        ethertype = be16(frame, at);
        tags += 1;
    }
    Ok((ethertype, &frame[at + 2..]))
}

/// A parsed IPv4 header (fields the transport cares about).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Header {
    /// Header length in bytes (IHL × 4).
    pub header_len: usize,
    /// DSCP and ECN.
    pub tos: u8,
    /// Total length of the datagram.
    pub total_len: u16,
    /// Identification; covered by the ICRC.
    pub id: u16,
    /// Don't-fragment flag.
    pub dont_fragment: bool,
    /// Time to live.
    pub ttl: u8,
    /// Payload protocol.
    pub protocol: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

impl Ipv4Header {
    /// Length of a header without options.
    pub const LEN: usize = 20;

    /// Parses an IPv4 header and checks its lengths against the buffer.
    pub fn parse(b: &[u8]) -> Result<Ipv4Header> {
        check_len(b, Self::LEN)?;
        if b[0] >> 4 != 4 {
            return Err(ParseError::BadIpHeader);
        }
        let header_len = usize::from(b[0] & 0xf) * 4;
        let total_len = be16(b, 2);
        if header_len < Self::LEN || usize::from(total_len) < header_len {
            return Err(ParseError::BadIpHeader);
        }
        check_len(b, usize::from(total_len))?;
        Ok(Ipv4Header {
            header_len,
            tos: b[1],
            total_len,
            id: be16(b, 4),
            dont_fragment: b[6] & 0x40 != 0,
            ttl: b[8],
            protocol: b[9],
            src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
            dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
        })
    }
}

/// A parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Header {
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Payload length.
    pub payload_len: u16,
    /// Next header.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
}

impl Ipv6Header {
    /// Length of the fixed header.
    pub const LEN: usize = 40;

    /// Parses an IPv6 fixed header and checks the payload length against the buffer.
    pub fn parse(b: &[u8]) -> Result<Ipv6Header> {
        check_len(b, Self::LEN)?;
        if b[0] >> 4 != 6 {
            return Err(ParseError::BadIpHeader);
        }
        let payload_len = be16(b, 4);
        check_len(b, Self::LEN + usize::from(payload_len))?;
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&b[8..24]);
        dst.copy_from_slice(&b[24..40]);
        Ok(Ipv6Header {
            traffic_class: (b[0] << 4) | (b[1] >> 4),
            flow_label: u32::from_be_bytes([0, b[1] & 0xf, b[2], b[3]]),
            payload_len,
            next_header: b[6],
            hop_limit: b[7],
            src: Ipv6Addr::from(src),
            dst: Ipv6Addr::from(dst),
        })
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Length of header plus payload.
    pub len: u16,
    /// Checksum (0 = none, as rxe sends over IPv4).
    pub checksum: u16,
}

impl UdpHeader {
    /// Header length in bytes.
    pub const LEN: usize = 8;

    /// Parses a UDP header and checks its length against the buffer.
    pub fn parse(b: &[u8]) -> Result<UdpHeader> {
        check_len(b, Self::LEN)?;
        let h = UdpHeader {
            src_port: be16(b, 0),
            dst_port: be16(b, 2),
            len: be16(b, 4),
            checksum: be16(b, 6),
        };
        if usize::from(h.len) < Self::LEN || usize::from(h.len) > b.len() {
            return Err(ParseError::BadIpHeader);
        }
        Ok(h)
    }

    /// Writes the header into the first 8 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`UdpHeader::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, 0, self.src_port);
        put16(b, 2, self.dst_port);
        put16(b, 4, self.len);
        put16(b, 6, self.checksum);
    }
}

/// The network-layer header of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpHeader {
    /// IPv4.
    V4(Ipv4Header),
    /// IPv6.
    V6(Ipv6Header),
}

impl IpHeader {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => h.src.into(),
            IpHeader::V6(h) => h.src.into(),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => h.dst.into(),
            IpHeader::V6(h) => h.dst.into(),
        }
    }
    /// ECN bits (the low two bits of TOS / traffic class).
    pub fn ecn(&self) -> u8 {
        match self {
            IpHeader::V4(h) => h.tos & 0x3,
            IpHeader::V6(h) => h.traffic_class & 0x3,
        }
    }
}

/// An IP packet split into its layers: what the ICRC needs from a captured RoCEv2 datagram.
#[derive(Debug, Clone, Copy)]
pub struct IpPacket<'a> {
    /// The parsed network header.
    pub ip: IpHeader,
    /// The raw network header bytes (IPv4 with options, or the IPv6 fixed header).
    pub ip_header: &'a [u8],
    /// Transport protocol number.
    pub protocol: u8,
    /// The transport segment (UDP header and payload, or TCP), trimmed to the IP length.
    pub transport: &'a [u8],
}

impl<'a> IpPacket<'a> {
    /// Parses an IPv4 or IPv6 packet; trailing bytes beyond the IP length (Ethernet padding)
    /// are dropped.
    pub fn parse(b: &'a [u8]) -> Result<IpPacket<'a>> {
        check_len(b, 1)?;
        match b[0] >> 4 {
            4 => {
                let h = Ipv4Header::parse(b)?;
                Ok(IpPacket {
                    ip: IpHeader::V4(h),
                    ip_header: &b[..h.header_len],
                    protocol: h.protocol,
                    transport: &b[h.header_len..usize::from(h.total_len)],
                })
            }
            6 => {
                let h = Ipv6Header::parse(b)?;
                Ok(IpPacket {
                    ip: IpHeader::V6(h),
                    ip_header: &b[..Ipv6Header::LEN],
                    protocol: h.next_header,
                    transport: &b[Ipv6Header::LEN..Ipv6Header::LEN + usize::from(h.payload_len)],
                })
            }
            _ => Err(ParseError::BadIpHeader),
        }
    }

    /// If this is a UDP datagram: its header, raw header bytes and payload.
    pub fn udp(&self) -> Result<(UdpHeader, &'a [u8], &'a [u8])> {
        if self.protocol != IPPROTO_UDP {
            return Err(ParseError::BadIpHeader);
        }
        let h = UdpHeader::parse(self.transport)?;
        Ok((
            h,
            &self.transport[..UdpHeader::LEN],
            &self.transport[UdpHeader::LEN..usize::from(h.len)],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // IPv4 + UDP header of rxe's ACK in rc_send.pcap (10.88.0.11 -> 10.88.0.12, DF, TTL 64).
    static ACK_IP: [u8; 48] = [
        0x45, 0x00, 0x00, 0x30, 0x1f, 0x88, 0x40, 0x00, 0x40, 0x11, 0x06, 0x6f, 0x0a, 0x58, 0x00,
        0x0b, 0x0a, 0x58, 0x00, 0x0c, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00,
        0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0xd9, 0xd1, 0x84, 0x1f, 0x00, 0x00, 0x01, 0xf5,
        0xe5, 0x0b, 0x27,
    ];

    #[test]
    fn test_parse() {
        let p = IpPacket::parse(&ACK_IP).unwrap();
        let IpHeader::V4(h) = p.ip else {
            panic!("not v4")
        };
        assert_eq!(h.src, Ipv4Addr::new(10, 88, 0, 11));
        assert_eq!(h.dst, Ipv4Addr::new(10, 88, 0, 12));
        assert!(h.dont_fragment);
        assert_eq!((h.id, h.ttl, h.total_len), (0x1f88, 64, 48));
        let (udp, _, payload) = p.udp().unwrap();
        assert_eq!(udp.dst_port, ROCEV2_UDP_PORT);
        assert_eq!(udp.checksum, 0);
        assert_eq!(payload.len(), 20);
    }

    #[test]
    fn test_parse_bad() {
        assert!(IpPacket::parse(&ACK_IP[..30]).is_err());
        let mut b = ACK_IP;
        b[0] = 0x55;
        assert!(IpPacket::parse(&b).is_err());
        assert!(IpPacket::parse(&[]).is_err());
    }
}
