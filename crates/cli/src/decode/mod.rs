//! `softrdma decode`: print the RoCEv2 packets of a capture, one line each, and check every ICRC.
//!
//! A packet is RoCEv2 when it is UDP to port 4791. Each such packet is parsed with
//! [`PacketRepr::parse`] and its ICRC recomputed with [`icrc::compute_raw`] over the IP and UDP
//! headers exactly as captured (so the sender's real IPv4 identification is used). Output ends
//! with one summary line; the exit status says whether the capture was clean, which is what
//! scripts and CI check:
//!
//! - 0: every RoCEv2 packet parsed and had a valid ICRC, and no record was truncated;
//! - 1: at least one `icrc=BAD` or `MALFORMED` packet — including a file that ends in the
//!   middle of a record, as a capture does when tcpdump is killed: the records before it are
//!   decoded, the cut one is shown as `MALFORMED (file cut off ...)`, and the summary follows;
//! - 2: the file could not be read as a capture (not one at all, cut off in its file header,
//!   or an I/O error).
//!
//! Counting rules: `packets` is every record in the file; `roce` every record recognisably UDP
//! to port 4791; `malformed` every RoCEv2 packet that does not parse plus every record the
//! capture truncated (its snapshot length cut it, so it cannot be checked) — a truncated
//! record that is not recognisably RoCEv2 counts as malformed but not as `roce`.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;
use softrdma_wire::ip::{IPPROTO_TCP, IPPROTO_UDP};
use softrdma_wire::packet::stored_icrc;
use softrdma_wire::{icrc, IpHeader, IpPacket, PacketRepr, ICRC_LEN, ROCEV2_UDP_PORT};

mod oob;

use softrdma_wire::pcap::{CaptureError, CaptureReader, Record};

/// Arguments of `softrdma decode`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// Capture file to decode (pcap or pcapng; Ethernet, raw IP or Linux cooked link types).
    file: PathBuf,
    /// Also print the TCP out-of-band exchanges on port 18515 (ibv_rc_pingpong, perftest).
    #[arg(long)]
    oob: bool,
    /// Print only the summary line.
    #[arg(long, short)]
    quiet: bool,
}

/// Totals for the summary line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Records in the file.
    pub(crate) packets: u64,
    /// UDP/4791 packets.
    pub(crate) roce: u64,
    /// RoCEv2 packets whose ICRC matched.
    pub(crate) icrc_ok: u64,
    /// RoCEv2 packets whose ICRC did not match.
    pub(crate) icrc_bad: u64,
    /// RoCEv2 packets that did not parse, and truncated records.
    pub(crate) malformed: u64,
}

impl Summary {
    /// The capture is clean: nothing bad, nothing unreadable.
    pub(crate) fn is_clean(&self) -> bool {
        self.icrc_bad == 0 && self.malformed == 0
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "packets: {}, roce: {}, icrc_ok: {}, icrc_bad: {}, malformed: {}",
            self.packets, self.roce, self.icrc_ok, self.icrc_bad, self.malformed
        )
    }
}

/// Why decoding stopped early.
#[derive(Debug)]
pub(crate) enum Error {
    /// The input is not a readable capture.
    Capture(CaptureError),
    /// Writing the output failed.
    Output(io::Error),
}

impl From<CaptureError> for Error {
    fn from(e: CaptureError) -> Self {
        Error::Capture(e)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Output(e)
    }
}

/// What decoding a file found: the totals, and the damage that ended it early, if any.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub(crate) summary: Summary,
    /// Why the last record could not be read (counted as a malformed packet).
    pub(crate) damage: Option<CaptureError>,
}

/// Runs the subcommand and maps the outcome to the documented exit status.
pub(crate) fn run(args: &Args) -> ExitCode {
    let stdout = io::stdout().lock();
    let mut out = BufWriter::new(stdout);
    let result = File::open(&args.file)
        .map_err(|e| Error::Capture(CaptureError::Io(e)))
        .and_then(|f| decode(BufReader::new(f), args.oob, args.quiet, &mut out));
    let result = result.and_then(|d| out.flush().map(|()| d).map_err(Error::Output));
    match result {
        Ok(d) => {
            if let Some(e) = d.damage {
                eprintln!(
                    "softrdma decode: {}: {e} (the records before it are decoded above)",
                    args.file.display()
                );
            }
            if d.summary.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        // `softrdma decode x.pcap | head` closes the pipe: not a failure of the decoder.
        Err(Error::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Error::Output(e)) => {
            eprintln!("softrdma decode: writing output: {e}");
            ExitCode::from(2)
        }
        Err(Error::Capture(e)) => {
            // Flush what was decoded before the damage, then explain.
            let _ = out.flush();
            eprintln!("softrdma decode: {}: {e}", args.file.display());
            ExitCode::from(2)
        }
    }
}

/// Decodes every record of `input`, writing lines (unless `quiet`) and the summary to `out`.
/// A file that is not a capture is an error; damage after the file header (a file cut off
/// mid-record, a corrupt length) ends the decoding with the damaged record counted as a
/// malformed packet, and the summary is written all the same.
pub(crate) fn decode(
    input: impl io::Read,
    oob: bool,
    quiet: bool,
    out: &mut impl Write,
) -> Result<Decoded, Error> {
    let mut reader = CaptureReader::new(input)?;
    let mut summary = Summary::default();
    let mut damage = None;
    loop {
        let record = match reader.next_record() {
            Ok(Some(record)) => record,
            Ok(None) => break,
            Err(CaptureError::Io(e)) => return Err(Error::Capture(CaptureError::Io(e))),
            Err(e) => {
                summary.packets += 1;
                summary.malformed += 1;
                if !quiet {
                    writeln!(out, "{:>6} MALFORMED ({e})", summary.packets)?;
                }
                damage = Some(e);
                break;
            }
        };
        summary.packets += 1;
        let index = summary.packets;
        let line = classify(&record, &mut summary, oob);
        if let (Some(line), false) = (line, quiet) {
            writeln!(out, "{index:>6} {} {line}", record.ts)?;
        }
    }
    writeln!(out, "{summary}")?;
    Ok(Decoded { summary, damage })
}

/// What a glance at the headers tells, even when the packet is cut off or inconsistent.
#[derive(Debug, Clone, Copy)]
struct Peek {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    ports: Option<(u16, u16)>,
}

impl Peek {
    fn is_roce(&self) -> bool {
        self.protocol == IPPROTO_UDP && matches!(self.ports, Some((_, ROCEV2_UDP_PORT)))
    }

    fn endpoints(&self) -> String {
        match self.ports {
            Some((sp, dp)) => format!(
                "{} → {}",
                SocketAddr::new(self.src, sp),
                SocketAddr::new(self.dst, dp)
            ),
            None => format!("{} → {}", self.src, self.dst),
        }
    }
}

/// Reads addresses, protocol and ports without trusting any length field, for packets
/// [`IpPacket::parse`] rejects. Only the first fragment of a fragmented datagram has ports.
fn peek(ip: &[u8]) -> Option<Peek> {
    let (src, dst, protocol, transport): (IpAddr, IpAddr, u8, &[u8]) = match ip.first()? >> 4 {
        4 => {
            let h = ip.get(..20)?;
            let ihl = usize::from(h[0] & 0xf) * 4;
            let first_fragment = u16::from_be_bytes([h[6], h[7]]) & 0x1fff == 0;
            let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            let transport = if first_fragment && ihl >= 20 {
                ip.get(ihl..).unwrap_or(&[])
            } else {
                &[]
            };
            (src.into(), dst.into(), h[9], transport)
        }
        6 => {
            let h = ip.get(..40)?;
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&h[8..24]);
            dst.copy_from_slice(&h[24..40]);
            let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            (src.into(), dst.into(), h[6], &ip[40..])
        }
        _ => return None,
    };
    let ports = match (protocol, transport) {
        (IPPROTO_UDP | IPPROTO_TCP, [a, b, c, d, ..]) => {
            Some((u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d])))
        }
        _ => None,
    };
    Some(Peek {
        src,
        dst,
        protocol,
        ports,
    })
}

/// Counts one record and returns the line to print for it, if any.
fn classify(record: &Record<'_>, summary: &mut Summary, oob: bool) -> Option<String> {
    let ip_bytes = record.link.network_layer(record.data);
    let glance = ip_bytes.and_then(peek);
    if record.is_truncated() {
        summary.malformed += 1;
        let reason = format!(
            "capture truncated: {} of {} bytes",
            record.data.len(),
            record.orig_len
        );
        return Some(match glance {
            Some(g) if g.is_roce() => {
                summary.roce += 1;
                format!("{} MALFORMED ({reason})", g.endpoints())
            }
            Some(g) => format!("{} MALFORMED ({reason}, not RoCEv2)", g.endpoints()),
            None => format!("MALFORMED ({reason})"),
        });
    }
    let (ip_bytes, glance) = (ip_bytes?, glance?);
    if glance.is_roce() {
        summary.roce += 1;
        let line = match roce(ip_bytes, summary) {
            Ok(line) => line,
            Err(reason) => {
                summary.malformed += 1;
                format!("MALFORMED ({reason})")
            }
        };
        return Some(format!("{} {line}", glance.endpoints()));
    }
    if oob && glance.protocol == IPPROTO_TCP {
        let (sp, dp) = glance.ports?;
        if sp == oob::OOB_TCP_PORT || dp == oob::OOB_TCP_PORT {
            let payload = tcp_payload(ip_bytes)?;
            return Some(format!(
                "{} OOB {}B {}",
                glance.endpoints(),
                payload.len(),
                oob::describe(payload)
            ));
        }
    }
    None
}

/// Decodes a UDP/4791 datagram: the line after the endpoints, or why it is malformed.
fn roce(ip_bytes: &[u8], summary: &mut Summary) -> Result<String, String> {
    let ip = IpPacket::parse(ip_bytes).map_err(|e| format!("IP header: {e}"))?;
    if let IpHeader::V4(_) = ip.ip {
        let frag = u16::from_be_bytes([ip.ip_header[6], ip.ip_header[7]]);
        if frag & 0x3fff != 0 {
            return Err("IP fragment: RoCEv2 datagrams must not be fragmented".to_owned());
        }
    }
    let (_, udp_header, payload) = ip.udp().map_err(|e| format!("UDP header: {e}"))?;
    let packet = PacketRepr::parse(payload).map_err(|e| format!("{e}"))?;
    // parse() guarantees at least a BTH and the ICRC slot.
    let transport = &payload[..payload.len() - ICRC_LEN];
    let computed =
        icrc::compute_raw(ip.ip_header, udp_header, transport).map_err(|e| format!("ICRC: {e}"))?;
    let stored = stored_icrc(payload).ok_or_else(|| "ICRC: truncated packet".to_owned())?;
    let ecn = match ip.ip.ecn() {
        0 => "",
        1 => " ecn=ECT1",
        2 => " ecn=ECT0",
        _ => " ecn=CE",
    };
    if computed == stored {
        summary.icrc_ok += 1;
        Ok(format!("{packet}{ecn} icrc=ok"))
    } else {
        summary.icrc_bad += 1;
        Ok(format!(
            "{packet}{ecn} icrc=BAD (stored {stored:#010x}, computed {computed:#010x})"
        ))
    }
}

/// The payload of a TCP segment, if the headers are consistent.
fn tcp_payload(ip_bytes: &[u8]) -> Option<&[u8]> {
    let ip = IpPacket::parse(ip_bytes).ok()?;
    let data_offset = usize::from(ip.transport.get(12)? >> 4) * 4;
    if data_offset < 20 {
        return None;
    }
    ip.transport
        .get(data_offset..)
        .filter(|payload| !payload.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    // rxe's ACK from rc_send.pcap as a raw-IP pcap record.
    const ACK_IP: [u8; 48] = [
        0x45, 0x00, 0x00, 0x30, 0x1f, 0x88, 0x40, 0x00, 0x40, 0x11, 0x06, 0x6f, 0x0a, 0x58, 0x00,
        0x0b, 0x0a, 0x58, 0x00, 0x0c, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00,
        0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0xd9, 0xd1, 0x84, 0x1f, 0x00, 0x00, 0x01, 0xf5,
        0xe5, 0x0b, 0x27,
    ];

    fn raw_pcap(records: &[(&[u8], u32)]) -> Vec<u8> {
        let mut f = Vec::new();
        for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 101] {
            f.extend(v.to_le_bytes());
        }
        for (data, orig) in records {
            for v in [1u32, 0, data.len() as u32, *orig] {
                f.extend(v.to_le_bytes());
            }
            f.extend(*data);
        }
        f
    }

    fn run_on(file: &[u8], oob: bool) -> (Summary, String) {
        let mut out = Vec::new();
        let d = decode(file, oob, false, &mut out).unwrap();
        (d.summary, String::from_utf8(out).unwrap())
    }

    #[test]
    fn test_ack_line() {
        let (s, out) = run_on(&raw_pcap(&[(&ACK_IP, 48)]), false);
        assert_eq!(
            out,
            "     1 1.000000 10.88.0.11:49441 → 10.88.0.12:4791 RC_ACKNOWLEDGE qp=0x000011 \
             psn=0xd9d184 AETH[ACK msn=1] payload=0 icrc=ok\n\
             packets: 1, roce: 1, icrc_ok: 1, icrc_bad: 0, malformed: 0\n"
        );
        assert!(s.is_clean());
    }

    #[test]
    fn test_bad_and_malformed() {
        let mut bad = ACK_IP;
        bad[45] ^= 1; // inside the AETH's MSN
        let mut unknown = ACK_IP;
        unknown[28] = 0x15; // reserved opcode
        let (s, out) = run_on(
            &raw_pcap(&[
                (&bad, 48),
                (&unknown, 48),
                (&ACK_IP[..40], 48),
                (&[0x45], 1),
            ]),
            false,
        );
        assert_eq!(
            s,
            Summary {
                packets: 4,
                roce: 3,
                icrc_ok: 0,
                icrc_bad: 1,
                malformed: 2
            }
        );
        assert!(out.contains("icrc=BAD"), "{out}");
        assert!(out.contains("MALFORMED (unknown opcode 0x15)"), "{out}");
        assert!(
            out.contains("MALFORMED (capture truncated: 40 of 48 bytes)"),
            "{out}"
        );
        assert!(!s.is_clean());
    }

    #[test]
    fn test_oob_segment() {
        // IPv4 + TCP (data offset 5) from port 18515 carrying "done\0".
        let mut pkt = vec![
            0x45, 0, 0, 45, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        pkt.extend(18515u16.to_be_bytes());
        pkt.extend(40000u16.to_be_bytes());
        pkt.extend([0u8; 8]);
        pkt.extend([0x50, 0x18, 0, 0, 0, 0, 0, 0]);
        pkt.extend(b"done\0");
        let len = pkt.len() as u32;
        let (s, out) = run_on(&raw_pcap(&[(&pkt, len)]), true);
        assert_eq!(s.roce, 0);
        assert!(
            out.contains("10.0.0.1:18515 → 10.0.0.2:40000 OOB 5B done (close)"),
            "{out}"
        );
        let (_, quiet) = run_on(&raw_pcap(&[(&pkt, len)]), false);
        assert!(!quiet.contains("OOB"));
    }

    #[test]
    fn test_fragment_is_malformed() {
        let mut frag = ACK_IP;
        frag[6] |= 0x20; // more fragments
        let (s, out) = run_on(&raw_pcap(&[(&frag, 48)]), false);
        assert_eq!((s.roce, s.malformed), (1, 1));
        assert!(out.contains("IP fragment"), "{out}");
    }
}
