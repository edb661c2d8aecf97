//! Writing RoCEv2 datagrams to a classic pcap file, so what a device or a simulated fabric sent
//! and received opens in Wireshark, tshark or `softrdma decode`; and reading captures back
//! ([`CaptureReader`]: pcap and pcapng, whatever wrote them).
//!
//! Software that moves RoCEv2 over an ordinary UDP socket (or over no network at all, as the
//! simulator) never sees the IP and UDP headers of its packets: the kernel writes them on the
//! way out and strips them on the way in. This module rebuilds them ([`UdpDatagram`]) the way
//! the ICRC needs them — the IPv4 identification and don't-fragment flag are covered by the
//! ICRC, so they must be the ones the packet was really sent with — and writes records in the
//! classic pcap format with nanosecond timestamps and link type `LINKTYPE_RAW` (101: each
//! record is a bare IPv4 or IPv6 packet).
//!
//! Pure formatting: the only I/O is through the caller's [`std::io::Write`], and nothing is
//! allocated per record (headers are built on the stack and written before the payload).
//!
//! ```
//! use softrdma_wire::pcap::{PcapWriter, UdpDatagram};
//! # fn main() -> std::io::Result<()> {
//! let mut w = PcapWriter::new(Vec::new())?;
//! let payload = [0u8; 16]; // a RoCEv2 packet: BTH .. ICRC
//! let d = UdpDatagram::new("10.0.0.1:49152".parse().unwrap(), "10.0.0.2:4791".parse().unwrap(), &payload);
//! w.write_udp(1_700_000_000_123_456_789, &d)?;
//! assert_eq!(w.into_inner()?.len(), 24 + 16 + 20 + 8 + 16);
//! # Ok(())
//! # }
//! ```

mod reader;

pub use reader::{CaptureError, CaptureReader, LinkType, Record, Timestamp, MAX_RECORD_LEN};

use std::io::{self, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::ip::{Ipv4Header, Ipv6Header, UdpHeader, IPPROTO_UDP};

/// Magic number of a classic pcap file with nanosecond timestamps (written little-endian).
pub const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// `LINKTYPE_RAW`: every record starts with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
/// Snapshot length written in the file header: larger than any datagram, so no record is cut.
pub const SNAPLEN: u32 = 262_144;
/// TTL / hop limit of synthesized headers unless the datagram says otherwise (Linux's and
/// rxe's default).
pub const DEFAULT_TTL: u8 = 64;
/// Length of a pcap file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Length of a pcap record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// Longest IP + UDP header [`UdpDatagram::emit_headers`] writes (IPv6).
pub const MAX_HEADERS_LEN: usize = Ipv6Header::LEN + UdpHeader::LEN;

/// The 24-byte file header: little-endian, version 2.4, nanosecond magic, [`SNAPLEN`],
/// `linktype`.
pub fn file_header(linktype: u32) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[0..4].copy_from_slice(&PCAP_MAGIC_NANOS.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // thiszone and sigfigs stay 0
    h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
    h[20..24].copy_from_slice(&linktype.to_le_bytes());
    h
}

/// The 16-byte record header for a record of `len` bytes (captured whole) at `ts_nanos`
/// nanoseconds since the epoch (seconds saturate at `u32::MAX`).
pub fn record_header(ts_nanos: u64, len: u32) -> [u8; RECORD_HEADER_LEN] {
    let secs = u32::try_from(ts_nanos / 1_000_000_000).unwrap_or(u32::MAX);
    // Always below 10^9, so it fits.
    let nanos = (ts_nanos % 1_000_000_000) as u32;
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[0..4].copy_from_slice(&secs.to_le_bytes());
    h[4..8].copy_from_slice(&nanos.to_le_bytes());
    h[8..12].copy_from_slice(&len.to_le_bytes());
    h[12..16].copy_from_slice(&len.to_le_bytes());
    h
}

/// The IPv4 header checksum (RFC 791) of `header` as stored: write it into a header whose
/// checksum field is zero; a header with a correct checksum sums to 0.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    !fold(sum16(0, header))
}

fn sum16(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(u16::from_be_bytes([*last, 0]));
    }
    // Fold early so that long payloads cannot overflow.
    (sum & 0xffff) + (sum >> 16)
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    // Folded to 16 bits just above.
    sum as u16
}

/// One UDP datagram with everything its synthesized IP and UDP headers need.
///
/// Both addresses IPv4 give an IPv4 header; otherwise an IPv6 header (an IPv4 address is then
/// written IPv4-mapped), the same rule as [`IcrcContext`](crate::IcrcContext).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// Source address and UDP port.
    pub src: SocketAddr,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// The TOS / traffic-class byte: DSCP in the six high bits, ECN in the two low ones.
    pub tos: u8,
    /// TTL / hop limit.
    pub ttl: u8,
    /// IPv4 identification (ignored for IPv6).
    pub ipv4_id: u16,
    /// IPv4 don't-fragment flag (ignored for IPv6).
    pub dont_fragment: bool,
    /// The UDP payload (for RoCEv2: BTH .. ICRC).
    pub payload: &'a [u8],
}

impl<'a> UdpDatagram<'a> {
    /// A datagram as softrdma (and Linux, for an unconnected DF socket) sends it: TOS 0,
    /// TTL 64, IPv4 identification 0, don't-fragment set.
    pub fn new(src: SocketAddr, dst: SocketAddr, payload: &'a [u8]) -> UdpDatagram<'a> {
        UdpDatagram {
            src,
            dst,
            tos: 0,
            ttl: DEFAULT_TTL,
            ipv4_id: 0,
            dont_fragment: true,
            payload,
        }
    }

    /// Whether the headers are IPv4.
    pub fn is_ipv4(&self) -> bool {
        self.src.is_ipv4() && self.dst.is_ipv4()
    }

    /// Length of the IP and UDP headers: 28 (IPv4) or 48 (IPv6).
    pub fn headers_len(&self) -> usize {
        UdpHeader::LEN
            + if self.is_ipv4() {
                Ipv4Header::LEN
            } else {
                Ipv6Header::LEN
            }
    }

    /// Length of the whole IP packet.
    pub fn packet_len(&self) -> usize {
        self.headers_len() + self.payload.len()
    }

    /// Writes the IP and UDP headers into the first [`headers_len`](Self::headers_len) bytes
    /// of `buf` and returns that length, or `None` if the datagram is too long for the length
    /// fields (or `buf` is too short).
    ///
    /// IPv4: version 4, IHL 5, a correct header checksum; UDP checksum 0 ("none", as rxe
    /// sends). IPv6: flow label 0, and a correct UDP checksum
    /// (mandatory over IPv6).
    pub fn emit_headers(&self, buf: &mut [u8]) -> Option<usize> {
        let hlen = self.headers_len();
        if buf.len() < hlen {
            return None;
        }
        let udp_len = u16::try_from(UdpHeader::LEN + self.payload.len()).ok()?;
        let mut udp = UdpHeader {
            src_port: self.src.port(),
            dst_port: self.dst.port(),
            len: udp_len,
            checksum: 0,
        };
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let total = udp_len.checked_add(Ipv4Header::LEN as u16)?;
                let ip = &mut buf[..Ipv4Header::LEN];
                ip.fill(0);
                ip[0] = 0x45;
                ip[1] = self.tos;
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                ip[4..6].copy_from_slice(&self.ipv4_id.to_be_bytes());
                ip[6] = if self.dont_fragment { 0x40 } else { 0 };
                ip[8] = self.ttl;
                ip[9] = IPPROTO_UDP;
                ip[12..16].copy_from_slice(&src.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                let sum = ipv4_checksum(ip);
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
                udp.emit(&mut buf[Ipv4Header::LEN..hlen]);
            }
            (src, dst) => {
                let (src, dst) = (to_v6(src), to_v6(dst));
                let ip = &mut buf[..Ipv6Header::LEN];
                ip.fill(0);
                // version 6, traffic class, flow label 0
                ip[0] = 0x60 | (self.tos >> 4);
                ip[1] = (self.tos & 0x0f) << 4;
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
                ip[6] = IPPROTO_UDP;
                ip[7] = self.ttl;
                ip[8..24].copy_from_slice(&src.octets());
                ip[24..40].copy_from_slice(&dst.octets());
                // RFC 8200 pseudo-header: addresses, upper-layer length, next header.
                let mut sum = sum16(0, &src.octets());
                sum = sum16(sum, &dst.octets());
                sum += u32::from(udp_len) + u32::from(IPPROTO_UDP);
                sum += u32::from(udp.src_port) + u32::from(udp.dst_port) + u32::from(udp_len);
                sum = sum16(sum, self.payload);
                let c = !fold(sum);
                udp.checksum = if c == 0 { 0xffff } else { c };
                udp.emit(&mut buf[Ipv6Header::LEN..hlen]);
            }
        }
        Some(hlen)
    }
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Writes a classic pcap file (`LINKTYPE_RAW`, nanosecond timestamps) to any byte sink.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    records: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W) -> io::Result<PcapWriter<W>> {
        out.write_all(&file_header(LINKTYPE_RAW))?;
        Ok(PcapWriter { out, records: 0 })
    }

    /// Writes one record holding `packet`, a whole IPv4 or IPv6 packet.
    pub fn write_ip(&mut self, ts_nanos: u64, packet: &[u8]) -> io::Result<()> {
        let len = u32::try_from(packet.len())
            .ok()
            .filter(|&l| l <= SNAPLEN)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "packet too long"))?;
        self.out.write_all(&record_header(ts_nanos, len))?;
        self.out.write_all(packet)?;
        self.records += 1;
        Ok(())
    }

    /// Writes one record holding `d` with synthesized IP and UDP headers.
    pub fn write_udp(&mut self, ts_nanos: u64, d: &UdpDatagram<'_>) -> io::Result<()> {
        let mut headers = [0u8; MAX_HEADERS_LEN];
        let hlen = d
            .emit_headers(&mut headers)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "datagram too long"))?;
        // `hlen + payload` fits in u16 + 40, far below SNAPLEN.
        let len = (hlen + d.payload.len()) as u32;
        self.out.write_all(&record_header(ts_nanos, len))?;
        self.out.write_all(&headers[..hlen])?;
        self.out.write_all(d.payload)?;
        self.records += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The sink.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Flushes the sink.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the sink.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IcrcContext, IpPacket};

    #[test]
    fn ipv4_checksum_of_a_captured_rxe_header() {
        // An rxe ACK from rc_send.pcap: checksum 0x066f.
        let mut h = [
            0x45, 0x00, 0x00, 0x30, 0x1f, 0x88, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x58,
            0x00, 0x0b, 0x0a, 0x58, 0x00, 0x0c,
        ];
        assert_eq!(ipv4_checksum(&h), 0x066f);
        h[10..12].copy_from_slice(&0x066fu16.to_be_bytes());
        assert_eq!(ipv4_checksum(&h), 0);
    }

    fn roce_payload(ctx: &IcrcContext) -> Vec<u8> {
        // RC SEND_ONLY, dest QP 0x11, PSN 5, AckReq, 8 bytes of payload, ICRC.
        let mut p = vec![
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0, 0, 5,
        ];
        p.extend_from_slice(b"payload!");
        p.extend_from_slice(&[0; 4]);
        ctx.fill(&mut p).unwrap();
        p
    }

    fn record_packet(file: &[u8]) -> &[u8] {
        let len = u32::from_le_bytes(file[32..36].try_into().unwrap()) as usize;
        &file[40..40 + len]
    }

    #[test]
    fn ipv4_record_keeps_the_icrc_valid() {
        let (src, dst): (SocketAddr, SocketAddr) = (
            "10.88.0.1:49441".parse().unwrap(),
            "10.88.0.11:4791".parse().unwrap(),
        );
        for (id, df) in [(0u16, true), (0x1234, true), (7, false)] {
            let ctx = IcrcContext {
                ipv4_id: id,
                ipv4_dont_fragment: df,
                ..IcrcContext::new(src.ip(), dst.ip(), src.port(), dst.port())
            };
            let payload = roce_payload(&ctx);
            let d = UdpDatagram {
                ipv4_id: id,
                dont_fragment: df,
                tos: 0b10,
                ..UdpDatagram::new(src, dst, &payload)
            };
            let mut w = PcapWriter::new(Vec::new()).unwrap();
            w.write_udp(1_500_000_123, &d).unwrap();
            assert_eq!(w.records(), 1);
            let file = w.into_inner().unwrap();
            assert_eq!(&file[0..4], &PCAP_MAGIC_NANOS.to_le_bytes());
            assert_eq!(&file[20..24], &LINKTYPE_RAW.to_le_bytes());
            assert_eq!(&file[24..28], &1u32.to_le_bytes());
            assert_eq!(&file[28..32], &500_000_123u32.to_le_bytes());
            let packet = record_packet(&file);
            assert_eq!(packet.len(), 28 + payload.len());
            assert_eq!(ipv4_checksum(&packet[..20]), 0);
            let ip = IpPacket::parse(packet).unwrap();
            let (udp, udp_bytes, transport) = ip.udp().unwrap();
            assert_eq!((udp.src_port, udp.dst_port), (49441, 4791));
            assert_eq!(ip.ip.ecn(), 0b10);
            let n = transport.len() - 4;
            let icrc = crate::icrc::compute_raw(&packet[..20], udp_bytes, &transport[..n]);
            assert_eq!(icrc.unwrap().to_le_bytes(), transport[n..]);
        }
    }

    #[test]
    fn ipv6_record_has_valid_udp_checksum_and_icrc() {
        let (src, dst): (SocketAddr, SocketAddr) = (
            "[fd00::1]:50000".parse().unwrap(),
            "[fd00::2]:4791".parse().unwrap(),
        );
        let ctx = IcrcContext::new(src.ip(), dst.ip(), src.port(), dst.port());
        let payload = roce_payload(&ctx);
        let d = UdpDatagram::new(src, dst, &payload);
        let mut buf = [0u8; MAX_HEADERS_LEN];
        assert_eq!(d.emit_headers(&mut buf), Some(48));
        let mut packet = buf.to_vec();
        packet.extend_from_slice(&payload);
        // The UDP checksum over pseudo-header + UDP verifies to 0xffff (sums to all ones).
        let mut sum = sum16(0, &packet[8..40]);
        sum += u32::from(u16::from_be_bytes([packet[44], packet[45]])) + 17;
        sum = sum16(sum, &packet[40..]);
        assert_eq!(fold(sum), 0xffff);
        let ip = IpPacket::parse(&packet).unwrap();
        let (_, udp_bytes, transport) = ip.udp().unwrap();
        let n = transport.len() - 4;
        let icrc = crate::icrc::compute_raw(&packet[..40], udp_bytes, &transport[..n]);
        assert_eq!(icrc.unwrap().to_le_bytes(), transport[n..]);
    }

    #[test]
    fn oversized_datagrams_are_refused() {
        let big = vec![0u8; 65_535];
        let d = UdpDatagram::new(
            "10.0.0.1:1".parse().unwrap(),
            "10.0.0.2:2".parse().unwrap(),
            &big,
        );
        assert_eq!(d.emit_headers(&mut [0u8; 64]), None);
        assert!(PcapWriter::new(Vec::new())
            .unwrap()
            .write_udp(0, &d)
            .is_err());
    }
}
