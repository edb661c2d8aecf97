//! A minimal pcap writer for what crossed the fabric, so a failing run opens in Wireshark,
//! tshark or `softrdma decode`.
//!
//! The fabric carries bare UDP payloads; the capture rebuilds the IPv4 and UDP headers exactly
//! as the sending engine assumed when it computed the ICRC (identification 0, DF, UDP checksum
//! 0 — see `softrdma_wire::IcrcContext::new`), with TTL 64 and a correct header checksum, so
//! every uncorrupted packet's ICRC verifies in the capture. Records use the raw-IP link type
//! (LINKTYPE_RAW, 101) and nanosecond timestamps taken from the virtual clock.

use std::io::{self, Write};
use std::net::Ipv4Addr;

use softrdma_proto::Instant;
use softrdma_wire::ROCEV2_UDP_PORT;

/// pcap magic for nanosecond-resolution timestamps.
pub const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_RAW: each record starts with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
/// Snapshot length written in the file header (no record is truncated).
pub const SNAPLEN: u32 = 65_535;
/// TTL written into every IPv4 header (Linux's default).
pub const TTL: u8 = 64;

/// Writes pcap records to any byte sink.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    records: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W) -> io::Result<PcapWriter<W>> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&PCAP_MAGIC_NANOS.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, records: 0 })
    }

    /// Writes one record holding `frame` (an IP packet) at virtual time `at`.
    pub fn write_record(&mut self, at: Instant, frame: &[u8]) -> io::Result<()> {
        let ns = at.as_nanos();
        let len = u32::try_from(frame.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too long"))?;
        let secs = u32::try_from(ns / 1_000_000_000).unwrap_or(u32::MAX);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&len.to_le_bytes());
        h[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(frame)?;
        self.records += 1;
        Ok(())
    }

    /// Writes a RoCEv2 datagram as IPv4 + UDP + `payload`.
    pub fn write_udp(&mut self, at: Instant, udp: &UdpDatagram<'_>) -> io::Result<()> {
        let mut frame = Vec::with_capacity(udp.payload.len() + 28);
        udp.emit_ipv4(&mut frame)?;
        self.write_record(at, &frame)
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
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

/// A UDP datagram as the fabric carries it, with the addressing the capture needs.
#[derive(Debug, Clone, Copy)]
pub struct UdpDatagram<'a> {
    /// Source IPv4 address.
    pub src: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst: Ipv4Addr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// ECN bits for the IP header's TOS.
    pub ecn: u8,
    /// UDP payload.
    pub payload: &'a [u8],
}

impl UdpDatagram<'_> {
    /// A RoCEv2 datagram (destination port 4791).
    pub fn rocev2(
        src: Ipv4Addr,
        dst: Ipv4Addr,
        src_port: u16,
        ecn: u8,
        payload: &[u8],
    ) -> UdpDatagram<'_> {
        UdpDatagram {
            src,
            dst,
            src_port,
            dst_port: ROCEV2_UDP_PORT,
            ecn,
            payload,
        }
    }

    /// Appends IPv4 header (ID 0, DF, TTL 64, checksummed), UDP header (checksum 0, as rxe
    /// sends over IPv4) and payload to `out`.
    pub fn emit_ipv4(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let udp_len = u16::try_from(8 + self.payload.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "datagram too long"))?;
        let total = udp_len
            .checked_add(20)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "datagram too long"))?;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[1] = self.ecn & 0x3;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        // identification 0, flags DF, fragment offset 0
        ip[6] = 0x40;
        ip[8] = TTL;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&self.src.octets());
        ip[16..20].copy_from_slice(&self.dst.octets());
        let sum = ipv4_checksum(&ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        out.extend_from_slice(&ip);
        out.extend_from_slice(&self.src_port.to_be_bytes());
        out.extend_from_slice(&self.dst_port.to_be_bytes());
        out.extend_from_slice(&udp_len.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(self.payload);
        Ok(())
    }
}

/// The IPv4 header checksum (RFC 791): ones' complement of the ones' complement sum of the
/// header's 16-bit words, computed with the checksum field as stored (zero when emitting).
/// A header with a correct checksum sums to 0 through this function.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for chunk in header.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_ipv4_checksum_known_header() {
        // rxe ACK from rc_send.pcap: checksum 0x066f.
        let mut h = [
            0x45, 0x00, 0x00, 0x30, 0x1f, 0x88, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x58,
            0x00, 0x0b, 0x0a, 0x58, 0x00, 0x0c,
        ];
        assert_eq!(ipv4_checksum(&h), 0x066f);
        h[10..12].copy_from_slice(&0x066fu16.to_be_bytes());
        assert_eq!(ipv4_checksum(&h), 0);
    }

    #[test]
    fn test_header_layout() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let d = UdpDatagram::rocev2(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            0xc123,
            0,
            &[1, 2, 3, 4],
        );
        w.write_udp(Instant::from_nanos(1_500_000_123), &d).unwrap();
        let bytes = w.into_inner().unwrap();
        assert_eq!(bytes.len(), 24 + 16 + 20 + 8 + 4);
        assert_eq!(&bytes[0..4], &PCAP_MAGIC_NANOS.to_le_bytes());
        assert_eq!(&bytes[24..28], &1u32.to_le_bytes());
        assert_eq!(&bytes[28..32], &500_000_123u32.to_le_bytes());
        let ip = &bytes[40..60];
        assert_eq!(ipv4_checksum(ip), 0);
        assert_eq!(&ip[4..8], &[0, 0, 0x40, 0]);
    }
}
