//! A small, careful reader for packet captures: classic pcap (both byte orders, micro- and
//! nanosecond timestamps) and pcapng (section header, interface description, enhanced, simple
//! and obsolete packet blocks; every other block is skipped).
//!
//! Why not the `pcap-file` crate: its 2.x reader rejects records whose original length exceeds
//! the snapshot length — exactly the truncated records (`tcpdump -s 96`) that `decode` must
//! count as malformed rather than abort on — and 3.x is a release candidate requiring a newer
//! Rust than the workspace's minimum. The formats are small enough to read here with every
//! length checked.
//!
//! Contract: the reader streams (one record in memory at a time), never panics on any input,
//! and never allocates more than [`MAX_RECORD_LEN`] bytes for a record however large a length
//! field claims to be. Structural damage (bad magic, a length that does not fit, a file cut off
//! mid-record) is a [`CaptureError`]; a record whose captured length is shorter than its
//! original length is *not* an error — it is handed out with [`Record::orig_len`] so the caller
//! can report it.

use std::fmt;
use std::io::{self, Read};

/// The largest record the reader accepts: libpcap's `MAXIMUM_SNAPLEN`. Anything larger is a
/// corrupt length field, and refusing it bounds the allocation an input can cause.
pub const MAX_RECORD_LEN: usize = 262_144;

/// Largest pcapng block we are willing to hold in memory (a packet block of
/// [`MAX_RECORD_LEN`] plus headers and options). Larger non-packet blocks are skipped unread.
const MAX_PACKET_BLOCK_LEN: usize = MAX_RECORD_LEN + 64 * 1024;

const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;
const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
const PCAPNG_IDB: u32 = 1;
const PCAPNG_OBSOLETE_PB: u32 = 2;
const PCAPNG_SPB: u32 = 3;
const PCAPNG_EPB: u32 = 6;
/// pcapng limits an interface table only by memory; we limit it to something sane.
const MAX_INTERFACES: usize = 1024;

/// Why a file could not be read as a capture.
#[derive(Debug)]
pub enum CaptureError {
    /// The operating system refused (missing file, permissions, I/O error).
    Io(io::Error),
    /// The file is empty.
    Empty,
    /// The first bytes are neither a pcap nor a pcapng magic number.
    NotACapture {
        /// The first four bytes (fewer if the file is shorter).
        magic: Vec<u8>,
    },
    /// A link-layer type this decoder cannot strip to reach the IP header.
    UnsupportedLinkType(u32),
    /// The file ends in the middle of a header or record.
    TruncatedFile {
        /// What was being read when the data ran out.
        what: &'static str,
        /// 1-based index of the record being read.
        record: u64,
    },
    /// A record or block claims a length that cannot be right.
    BadLength {
        /// What the length belongs to.
        what: &'static str,
        /// The claimed length.
        len: u64,
        /// 1-based index of the record being read.
        record: u64,
    },
    /// A pcapng structure is inconsistent.
    BadPcapng(&'static str),
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Io(e) => write!(f, "{e}"),
            CaptureError::Empty => f.write_str("empty file (not a pcap or pcapng capture)"),
            CaptureError::NotACapture { magic } => {
                write!(f, "not a pcap or pcapng capture (starts with ")?;
                for b in magic {
                    write!(f, "{b:02x}")?;
                }
                f.write_str(")")
            }
            CaptureError::UnsupportedLinkType(t) => write!(
                f,
                "unsupported link-layer type {t} (supported: Ethernet 1, raw IP 101/12/14/228/229, \
                 Linux cooked 113/276, BSD loopback 0/108)"
            ),
            CaptureError::TruncatedFile { what, record } => {
                write!(f, "file cut off in {what} of record {record}")
            }
            CaptureError::BadLength { what, len, record } => {
                write!(f, "corrupt capture: {what} {len} in record {record}")
            }
            CaptureError::BadPcapng(why) => write!(f, "corrupt pcapng file: {why}"),
        }
    }
}

impl std::error::Error for CaptureError {}

impl From<io::Error> for CaptureError {
    fn from(e: io::Error) -> Self {
        CaptureError::Io(e)
    }
}

/// How a record's bytes begin, i.e. what must be stripped to reach the IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// Ethernet II, possibly with 802.1Q tags (LINKTYPE_ETHERNET, 1).
    Ethernet,
    /// The record starts with the IP header, v4 or v6 (101 and the BSD DLT values 12, 14;
    /// 228 = IPv4 only, 229 = IPv6 only, still recognised by the version nibble).
    RawIp,
    /// Linux "cooked" capture, v1: 16-byte header, protocol in bytes 14..16 (113).
    LinuxSll,
    /// Linux "cooked" capture, v2: 20-byte header, protocol in bytes 0..2 (276).
    LinuxSll2,
    /// BSD loopback: a 4-byte address family, then the IP header (0 and 108).
    Loopback,
}

impl LinkType {
    /// Maps a LINKTYPE_ value (the low 16 bits; the upper bits may carry FCS information).
    pub fn from_code(code: u32) -> Result<LinkType, CaptureError> {
        match code & 0xffff {
            1 => Ok(LinkType::Ethernet),
            12 | 14 | 101 | 228 | 229 => Ok(LinkType::RawIp),
            113 => Ok(LinkType::LinuxSll),
            276 => Ok(LinkType::LinuxSll2),
            0 | 108 => Ok(LinkType::Loopback),
            _ => Err(CaptureError::UnsupportedLinkType(code)),
        }
    }

    /// The IP packet inside `frame`, or `None` if the frame carries something else (ARP, LLDP)
    /// or is too short to tell.
    pub fn network_layer(self, frame: &[u8]) -> Option<&[u8]> {
        const ETHERTYPE_IPV4: u16 = crate::ip::ETHERTYPE_IPV4;
        const ETHERTYPE_IPV6: u16 = crate::ip::ETHERTYPE_IPV6;
        let by_ethertype = |ethertype: u16, rest: &'_ [u8]| -> bool {
            matches!(ethertype, ETHERTYPE_IPV4 | ETHERTYPE_IPV6) && !rest.is_empty()
        };
        match self {
            LinkType::Ethernet => {
                let (ethertype, rest) = crate::ip::parse_ethernet(frame).ok()?;
                by_ethertype(ethertype, rest).then_some(rest)
            }
            LinkType::RawIp => Some(frame),
            LinkType::LinuxSll => {
                let rest = frame.get(16..)?;
                by_ethertype(u16::from_be_bytes([frame[14], frame[15]]), rest).then_some(rest)
            }
            LinkType::LinuxSll2 => {
                let rest = frame.get(20..)?;
                by_ethertype(u16::from_be_bytes([frame[0], frame[1]]), rest).then_some(rest)
            }
            LinkType::Loopback => frame.get(4..),
        }
    }
}

/// A capture timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timestamp {
    /// Seconds since the Unix epoch.
    pub secs: u64,
    /// Nanoseconds within the second.
    pub nanos: u32,
}

impl Timestamp {
    /// `ticks` units of `1 / units_per_sec` seconds.
    fn from_ticks(ticks: u64, units_per_sec: u64) -> Timestamp {
        let units = units_per_sec.max(1);
        let frac = u128::from(ticks % units) * 1_000_000_000 / u128::from(units);
        Timestamp {
            secs: ticks / units,
            nanos: u32::try_from(frac).unwrap_or(999_999_999),
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}", self.secs, self.nanos / 1000)
    }
}

/// One captured packet, borrowed from the reader's buffer.
#[derive(Debug)]
pub struct Record<'a> {
    /// When it was captured.
    pub ts: Timestamp,
    /// How its bytes begin.
    pub link: LinkType,
    /// The captured bytes (possibly fewer than [`Record::orig_len`]).
    pub data: &'a [u8],
    /// The packet's length on the wire.
    pub orig_len: u32,
}

impl Record<'_> {
    /// The capture holds fewer bytes than the packet had (a snapshot length cut it).
    pub fn is_truncated(&self) -> bool {
        (self.data.len() as u64) < u64::from(self.orig_len)
    }
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link: LinkType,
    snaplen: u32,
    units_per_sec: u64,
}

#[derive(Debug)]
enum Format {
    Pcap {
        big_endian: bool,
        units_per_sec: u64,
        link: LinkType,
    },
    Pcapng {
        big_endian: bool,
        interfaces: Vec<Interface>,
    },
}

/// Streams the records of a pcap or pcapng file.
#[derive(Debug)]
pub struct CaptureReader<R> {
    input: R,
    format: Format,
    buf: Vec<u8>,
    records: u64,
}

fn u16_at(b: &[u8], at: usize, big_endian: bool) -> u16 {
    let v = [b[at], b[at + 1]];
    if big_endian {
        u16::from_be_bytes(v)
    } else {
        u16::from_le_bytes(v)
    }
}

fn u32_at(b: &[u8], at: usize, big_endian: bool) -> u32 {
    let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big_endian {
        u32::from_be_bytes(v)
    } else {
        u32::from_le_bytes(v)
    }
}

/// Reads exactly `buf.len()` bytes. `Ok(false)` if the input was already at its end;
/// [`CaptureError::TruncatedFile`] if it ended part way.
fn read_full<R: Read>(
    input: &mut R,
    buf: &mut [u8],
    what: &'static str,
    record: u64,
) -> Result<bool, CaptureError> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(CaptureError::TruncatedFile { what, record }),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// Like [`read_full`], but the end of input is an error too.
fn read_required<R: Read>(
    input: &mut R,
    buf: &mut [u8],
    what: &'static str,
    record: u64,
) -> Result<(), CaptureError> {
    if read_full(input, buf, what, record)? || buf.is_empty() {
        Ok(())
    } else {
        Err(CaptureError::TruncatedFile { what, record })
    }
}

/// Discards `n` bytes without holding them in memory.
fn skip<R: Read>(
    input: &mut R,
    n: u64,
    what: &'static str,
    record: u64,
) -> Result<(), CaptureError> {
    let copied = io::copy(&mut input.by_ref().take(n), &mut io::sink())?;
    if copied == n {
        Ok(())
    } else {
        Err(CaptureError::TruncatedFile { what, record })
    }
}

/// Units per second from a pcapng `if_tsresol` value.
fn tsresol_units(v: u8) -> u64 {
    let exp = u32::from(v & 0x7f);
    let units = if v & 0x80 != 0 {
        1u64.checked_shl(exp)
    } else {
        10u64.checked_pow(exp)
    };
    // An absurd resolution (beyond u64) cannot be represented; treat it as nanoseconds.
    units.unwrap_or(1_000_000_000).max(1)
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header and detects the format.
    pub fn new(mut input: R) -> Result<CaptureReader<R>, CaptureError> {
        let mut magic = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match input.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        if got == 0 {
            return Err(CaptureError::Empty);
        }
        if got < 4 {
            return Err(CaptureError::NotACapture {
                magic: magic[..got].to_vec(),
            });
        }
        let le = u32::from_le_bytes(magic);
        let be = u32::from_be_bytes(magic);
        let format = match (le, be) {
            (PCAP_MAGIC_US | PCAP_MAGIC_NS, _) | (_, PCAP_MAGIC_US | PCAP_MAGIC_NS) => {
                let big_endian = !matches!(le, PCAP_MAGIC_US | PCAP_MAGIC_NS);
                let nanos = if big_endian {
                    be == PCAP_MAGIC_NS
                } else {
                    le == PCAP_MAGIC_NS
                };
                let mut rest = [0u8; 20];
                read_required(&mut input, &mut rest, "the pcap file header", 0)?;
                // version (4), thiszone (4), sigfigs (4), snaplen (4), network (4)
                let link = LinkType::from_code(u32_at(&rest, 16, big_endian))?;
                Format::Pcap {
                    big_endian,
                    units_per_sec: if nanos { 1_000_000_000 } else { 1_000_000 },
                    link,
                }
            }
            (PCAPNG_SHB, _) => {
                let mut reader = CaptureReader {
                    input,
                    format: Format::Pcapng {
                        big_endian: false,
                        interfaces: Vec::new(),
                    },
                    buf: Vec::new(),
                    records: 0,
                };
                reader.read_section_header()?;
                return Ok(reader);
            }
            _ => {
                return Err(CaptureError::NotACapture {
                    magic: magic.to_vec(),
                })
            }
        };
        Ok(CaptureReader {
            input,
            format,
            buf: Vec::new(),
            records: 0,
        })
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        match self.format {
            Format::Pcap { .. } => self.next_pcap(),
            Format::Pcapng { .. } => self.next_pcapng(),
        }
    }

    fn next_pcap(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        let Format::Pcap {
            big_endian,
            units_per_sec,
            link,
        } = self.format
        else {
            return Ok(None);
        };
        let record = self.records + 1;
        let mut header = [0u8; 16];
        if !read_full(&mut self.input, &mut header, "the record header", record)? {
            return Ok(None);
        }
        let secs = u32_at(&header, 0, big_endian);
        let frac = u32_at(&header, 4, big_endian);
        let caplen = u32_at(&header, 8, big_endian);
        let orig_len = u32_at(&header, 12, big_endian);
        let caplen = usize::try_from(caplen)
            .ok()
            .filter(|&n| n <= MAX_RECORD_LEN)
            .ok_or(CaptureError::BadLength {
                what: "captured length",
                len: u64::from(caplen),
                record,
            })?;
        self.buf.resize(caplen, 0);
        read_required(&mut self.input, &mut self.buf, "the packet data", record)?;
        self.records = record;
        let ticks = u64::from(secs) * units_per_sec + u64::from(frac).min(units_per_sec - 1);
        Ok(Some(Record {
            ts: Timestamp::from_ticks(ticks, units_per_sec),
            link,
            data: &self.buf,
            orig_len,
        }))
    }

    /// Reads the rest of a section header block whose type (4 bytes) was already consumed.
    fn read_section_header(&mut self) -> Result<(), CaptureError> {
        let record = self.records + 1;
        let mut head = [0u8; 8];
        read_required(
            &mut self.input,
            &mut head,
            "a pcapng section header",
            record,
        )?;
        let big_endian = match u32::from_le_bytes([head[4], head[5], head[6], head[7]]) {
            PCAPNG_BYTE_ORDER_MAGIC => false,
            m if m.swap_bytes() == PCAPNG_BYTE_ORDER_MAGIC => true,
            _ => return Err(CaptureError::BadPcapng("bad byte-order magic")),
        };
        let total = u64::from(u32_at(&head, 0, big_endian));
        if total < 28 || total % 4 != 0 {
            return Err(CaptureError::BadLength {
                what: "section header block length",
                len: total,
                record,
            });
        }
        // Version, section length and options are of no interest: skip to the next block.
        skip(
            &mut self.input,
            total - 12,
            "a pcapng section header",
            record,
        )?;
        self.format = Format::Pcapng {
            big_endian,
            interfaces: Vec::new(),
        };
        Ok(())
    }

    fn next_pcapng(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        loop {
            let record = self.records + 1;
            let Format::Pcapng { big_endian, .. } = self.format else {
                return Ok(None);
            };
            let mut head = [0u8; 4];
            if !read_full(&mut self.input, &mut head, "a pcapng block header", record)? {
                return Ok(None);
            }
            // The block type is palindromic for a section header, so read it before knowing
            // the new section's byte order.
            let block_type = u32_at(&head, 0, big_endian);
            if block_type == PCAPNG_SHB {
                self.read_section_header()?;
                continue;
            }
            let mut len_bytes = [0u8; 4];
            read_required(
                &mut self.input,
                &mut len_bytes,
                "a pcapng block header",
                record,
            )?;
            let total = u32_at(&len_bytes, 0, big_endian);
            if total < 12 || total % 4 != 0 {
                return Err(CaptureError::BadLength {
                    what: "pcapng block length",
                    len: u64::from(total),
                    record,
                });
            }
            let body_len = total as usize - 12;
            let wanted = matches!(
                block_type,
                PCAPNG_IDB | PCAPNG_EPB | PCAPNG_SPB | PCAPNG_OBSOLETE_PB
            );
            if !wanted {
                skip(
                    &mut self.input,
                    u64::from(total) - 8,
                    "a pcapng block",
                    record,
                )?;
                continue;
            }
            if body_len > MAX_PACKET_BLOCK_LEN {
                return Err(CaptureError::BadLength {
                    what: "pcapng block length",
                    len: u64::from(total),
                    record,
                });
            }
            // Body plus the trailing copy of the length.
            self.buf.resize(body_len + 4, 0);
            read_required(&mut self.input, &mut self.buf, "a pcapng block", record)?;
            if u32_at(&self.buf, body_len, big_endian) != total {
                return Err(CaptureError::BadPcapng("block lengths disagree"));
            }
            self.buf.truncate(body_len);
            if block_type == PCAPNG_IDB {
                self.read_interface()?;
                continue;
            }
            return self.packet_block(block_type, record).map(Some);
        }
    }

    fn read_interface(&mut self) -> Result<(), CaptureError> {
        let Format::Pcapng {
            big_endian,
            ref mut interfaces,
        } = self.format
        else {
            return Ok(());
        };
        let b = &self.buf;
        if b.len() < 8 {
            return Err(CaptureError::BadPcapng("interface block too short"));
        }
        if interfaces.len() >= MAX_INTERFACES {
            return Err(CaptureError::BadPcapng("too many interfaces"));
        }
        let link = LinkType::from_code(u32::from(u16_at(b, 0, big_endian)))?;
        let snaplen = u32_at(b, 4, big_endian);
        let mut units_per_sec = 1_000_000;
        // Options: code (2), length (2), value padded to 4; code 0 ends the list.
        let mut at = 8;
        while at + 4 <= b.len() {
            let code = u16_at(b, at, big_endian);
            let len = usize::from(u16_at(b, at + 2, big_endian));
            let value = b.get(at + 4..at + 4 + len);
            match (code, value) {
                (0, _) => break,
                (9, Some(&[v])) => units_per_sec = tsresol_units(v),
                (_, None) => {
                    return Err(CaptureError::BadPcapng("interface option overruns block"))
                }
                _ => {}
            }
            at += 4 + len.next_multiple_of(4);
        }
        interfaces.push(Interface {
            link,
            snaplen,
            units_per_sec,
        });
        Ok(())
    }

    fn packet_block(&mut self, block_type: u32, record: u64) -> Result<Record<'_>, CaptureError> {
        let Format::Pcapng {
            big_endian,
            ref interfaces,
        } = self.format
        else {
            return Err(CaptureError::BadPcapng("not in a section"));
        };
        let b = &self.buf;
        let too_short = CaptureError::BadPcapng("packet block too short");
        let (iface, ticks, caplen, orig_len, data_at) = match block_type {
            PCAPNG_EPB | PCAPNG_OBSOLETE_PB => {
                if b.len() < 20 {
                    return Err(too_short);
                }
                let iface = if block_type == PCAPNG_EPB {
                    u32_at(b, 0, big_endian)
                } else {
                    u32::from(u16_at(b, 0, big_endian))
                };
                let ticks = (u64::from(u32_at(b, 4, big_endian)) << 32)
                    | u64::from(u32_at(b, 8, big_endian));
                let caplen = u32_at(b, 12, big_endian) as usize;
                (iface, ticks, caplen, u32_at(b, 16, big_endian), 20)
            }
            _ => {
                // Simple packet block: interface 0, no timestamp, captured length implied.
                if b.len() < 4 {
                    return Err(too_short);
                }
                let orig_len = u32_at(b, 0, big_endian);
                let snaplen = interfaces.first().map_or(u32::MAX, |i| i.snaplen);
                let snaplen = if snaplen == 0 { u32::MAX } else { snaplen };
                let caplen = (orig_len.min(snaplen) as usize).min(b.len() - 4);
                (0, 0, caplen, orig_len, 4)
            }
        };
        let iface = interfaces
            .get(iface as usize)
            .ok_or(CaptureError::BadPcapng(
                "packet refers to an undeclared interface",
            ))?;
        if caplen > MAX_RECORD_LEN || data_at + caplen > b.len() {
            return Err(CaptureError::BadLength {
                what: "captured length",
                len: caplen as u64,
                record,
            });
        }
        self.records = record;
        Ok(Record {
            ts: Timestamp::from_ticks(ticks, iface.units_per_sec),
            link: iface.link,
            data: &b[data_at..data_at + caplen],
            orig_len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as owned values: timestamp, link type, data, original length.
    type Owned = (Timestamp, LinkType, Vec<u8>, u32);

    fn records(bytes: &[u8]) -> Result<Vec<Owned>, CaptureError> {
        let mut r = CaptureReader::new(bytes)?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push((rec.ts, rec.link, rec.data.to_vec(), rec.orig_len));
        }
        Ok(out)
    }

    fn pcap(big_endian: bool, nanos: bool, link: u32, recs: &[(u32, u32, &[u8], u32)]) -> Vec<u8> {
        let w32 = |v: u32| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let w16 = |v: u16| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut f = Vec::new();
        f.extend(w32(if nanos { PCAP_MAGIC_NS } else { PCAP_MAGIC_US }));
        f.extend(w16(2));
        f.extend(w16(4));
        f.extend(w32(0));
        f.extend(w32(0));
        f.extend(w32(65535));
        f.extend(w32(link));
        for &(secs, frac, data, orig) in recs {
            f.extend(w32(secs));
            f.extend(w32(frac));
            f.extend(w32(data.len() as u32));
            f.extend(w32(orig));
            f.extend(data);
        }
        f
    }

    #[test]
    fn test_pcap_both_byte_orders() {
        for big_endian in [false, true] {
            let f = pcap(
                big_endian,
                false,
                101,
                &[(10, 5, &[0x45, 0], 2), (11, 0, &[1; 3], 9)],
            );
            let recs = records(&f).unwrap();
            assert_eq!(recs.len(), 2);
            assert_eq!(
                recs[0].0,
                Timestamp {
                    secs: 10,
                    nanos: 5000
                }
            );
            assert_eq!(recs[0].1, LinkType::RawIp);
            assert_eq!(recs[1].2, vec![1; 3]);
            assert_eq!(recs[1].3, 9);
        }
        let f = pcap(false, true, 1, &[(1, 7, &[], 0)]);
        assert_eq!(records(&f).unwrap()[0].0, Timestamp { secs: 1, nanos: 7 });
    }

    #[test]
    fn test_pcap_errors() {
        assert!(matches!(records(&[]), Err(CaptureError::Empty)));
        assert!(matches!(
            records(b"GIF89a"),
            Err(CaptureError::NotACapture { .. })
        ));
        assert!(matches!(
            records(&PCAP_MAGIC_US.to_le_bytes()),
            Err(CaptureError::TruncatedFile { .. })
        ));
        let f = pcap(false, false, 147, &[]);
        assert!(matches!(
            records(&f),
            Err(CaptureError::UnsupportedLinkType(147))
        ));
        let mut f = pcap(false, false, 1, &[(1, 0, &[1, 2, 3, 4], 4)]);
        f.truncate(f.len() - 1);
        assert!(matches!(
            records(&f),
            Err(CaptureError::TruncatedFile { record: 1, .. })
        ));
        let mut f = pcap(false, false, 1, &[(1, 0, &[1, 2, 3, 4], 4)]);
        f[32..36].copy_from_slice(&u32::MAX.to_le_bytes()); // caplen
        assert!(matches!(records(&f), Err(CaptureError::BadLength { .. })));
    }

    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let total = (12 + body.len().next_multiple_of(4)) as u32;
        let mut b = Vec::new();
        b.extend(kind.to_le_bytes());
        b.extend(total.to_le_bytes());
        b.extend(body);
        b.resize(total as usize - 4, 0);
        b.extend(total.to_le_bytes());
        b
    }

    #[test]
    fn test_pcapng() {
        let mut f = block(
            PCAPNG_SHB,
            &[
                0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
        );
        // IDB: raw IP, snaplen 0, if_tsresol = 9 (ns).
        let mut idb = vec![101, 0, 0, 0, 0, 0, 0, 0];
        idb.extend([9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        f.extend(block(PCAPNG_IDB, &idb));
        f.extend(block(0x0bad, &[1, 2, 3, 4])); // unknown block: skipped
        let mut epb = Vec::new();
        epb.extend(0u32.to_le_bytes()); // interface
        let ts: u64 = 3_000_000_123;
        epb.extend(((ts >> 32) as u32).to_le_bytes());
        epb.extend((ts as u32).to_le_bytes());
        epb.extend(3u32.to_le_bytes());
        epb.extend(5u32.to_le_bytes());
        epb.extend([0x45, 1, 2]);
        f.extend(block(PCAPNG_EPB, &epb));
        let mut spb = 2u32.to_le_bytes().to_vec();
        spb.extend([0x60, 0]);
        f.extend(block(PCAPNG_SPB, &spb));
        let recs = records(&f).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(
            recs[0].0,
            Timestamp {
                secs: 3,
                nanos: 123
            }
        );
        assert_eq!(recs[0].2, vec![0x45, 1, 2]);
        assert_eq!(recs[0].3, 5);
        assert_eq!(recs[1].2, vec![0x60, 0]);
        // A packet before any interface is declared.
        let mut g = f[..28].to_vec();
        g.extend(block(PCAPNG_EPB, &epb));
        assert!(matches!(records(&g), Err(CaptureError::BadPcapng(_))));
    }

    #[test]
    fn test_link_types() {
        let mut eth = vec![0u8; 12];
        eth.extend([0x08, 0x00, 0x45]);
        assert_eq!(LinkType::Ethernet.network_layer(&eth), Some(&[0x45][..]));
        eth[12] = 0x08;
        eth[13] = 0x06; // ARP
        assert_eq!(LinkType::Ethernet.network_layer(&eth), None);
        let mut sll = vec![0u8; 14];
        sll.extend([0x86, 0xdd, 0x60]);
        assert_eq!(LinkType::LinuxSll.network_layer(&sll), Some(&[0x60][..]));
        assert_eq!(LinkType::LinuxSll.network_layer(&sll[..10]), None);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend([0u8; 18]);
        sll2.push(0x45);
        assert_eq!(LinkType::LinuxSll2.network_layer(&sll2), Some(&[0x45][..]));
        assert_eq!(
            LinkType::Loopback.network_layer(&[2, 0, 0, 0, 0x45]),
            Some(&[0x45][..])
        );
    }

    #[test]
    fn test_timestamp_resolution() {
        assert_eq!(tsresol_units(6), 1_000_000);
        assert_eq!(tsresol_units(0x80 | 10), 1024);
        assert_eq!(tsresol_units(0x7f), 1_000_000_000);
        let t = Timestamp::from_ticks(1536, 1024);
        assert_eq!(
            t,
            Timestamp {
                secs: 1,
                nanos: 500_000_000
            }
        );
        assert_eq!(t.to_string(), "1.500000");
    }
}
