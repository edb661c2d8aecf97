//! End-to-end tests of `softrdma decode` on the bundled rxe captures and on damaged copies of
//! them: the binary is run as a user would run it, and the summary line and exit status are
//! checked exactly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// (file, records in the file, RoCEv2 packets) — RoCEv2 counts from testdata/conformance/INDEX.md.
const CAPTURES: [(&str, u64, u64); 11] = [
    ("rc_send.pcap", 111, 100),
    ("rc_send_retransmit.pcap", 119, 108),
    ("ud_send.pcap", 31, 20),
    ("rc_write.pcap", 141, 100),
    ("rc_read.pcap", 141, 100),
    ("atomic_fa.pcap", 141, 100),
    ("rdma_cm.pcap", 41, 41),
    ("ucmatose.pcap", 50, 50),
    ("write_bw_cm.pcap", 124, 124),
    ("send_bw_cm.pcap", 104, 104),
    ("write_lat.pcap", 65, 40),
];

fn conformance(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/conformance")
        .join(name)
}

fn decode(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("decode")
        .args(args)
        .arg(file)
        .output()
        .expect("run softrdma")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 output")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 output")
}

fn summary_line(packets: u64, roce: u64, ok: u64, bad: u64, malformed: u64) -> String {
    format!(
        "packets: {packets}, roce: {roce}, icrc_ok: {ok}, icrc_bad: {bad}, malformed: {malformed}"
    )
}

/// Writes `bytes` to a fresh file in the target's scratch directory.
fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("decode-{name}"));
    std::fs::write(&path, bytes).expect("write temp file");
    path
}

/// A pcap record: its 16-byte header and its data.
type PcapRecord = (Vec<u8>, Vec<u8>);

/// The file header and records of a little-endian, microsecond classic pcap.
fn pcap_records(file: &[u8]) -> (Vec<u8>, Vec<PcapRecord>) {
    assert_eq!(
        file[..4],
        [0xd4, 0xc3, 0xb2, 0xa1],
        "test helper reads LE pcap only"
    );
    let mut at = 24;
    let mut recs = Vec::new();
    while at < file.len() {
        let hdr = file[at..at + 16].to_vec();
        let caplen = u32::from_le_bytes(hdr[8..12].try_into().unwrap()) as usize;
        recs.push((hdr, file[at + 16..at + 16 + caplen].to_vec()));
        at += 16 + caplen;
    }
    (file[..24].to_vec(), recs)
}

fn pcap_bytes(file_header: &[u8], recs: &[PcapRecord]) -> Vec<u8> {
    let mut f = file_header.to_vec();
    for (hdr, data) in recs {
        f.extend(hdr);
        f.extend(data);
    }
    f
}

/// Index of the first Ethernet/IPv4/UDP-4791 record carrying at least `min_payload` bytes.
fn first_roce_with_payload(recs: &[PcapRecord], min_payload: usize) -> usize {
    recs.iter()
        .position(|(_, d)| {
            d.len() >= 14 + 20 + 8 + 12 + min_payload + 4 && d[36..38] == [0x12, 0xb7]
        })
        .expect("a RoCEv2 packet with payload")
}

#[test]
fn conformance_captures_decode_cleanly() {
    for (name, packets, roce) in CAPTURES {
        let out = decode(&[], &conformance(name));
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.last().copied(),
            Some(summary_line(packets, roce, roce, 0, 0).as_str()),
            "{name}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("packets: ")).count(),
            1,
            "{name}: exactly one summary line"
        );
        // One line per RoCEv2 packet, each with a valid ICRC.
        assert_eq!(lines.len() as u64, roce + 1, "{name}");
        assert!(
            lines[..lines.len() - 1]
                .iter()
                .all(|l| l.ends_with("icrc=ok")),
            "{name}"
        );
        assert!(!text.contains("MALFORMED"), "{name}");
    }
}

#[test]
fn quiet_prints_only_the_summary() {
    let out = decode(&["--quiet"], &conformance("rc_read.pcap"));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        format!("{}\n", summary_line(141, 100, 100, 0, 0))
    );
}

#[test]
fn line_shows_headers() {
    let text = stdout(&decode(&[], &conformance("rc_read.pcap")));
    assert!(text.contains(
        "10.88.0.12:49441 → 10.88.0.11:4791 RC_RDMA_READ_REQUEST qp=0x000011 psn=0x928761 ackreq \
         RETH[va=0x562910f9e000 rkey=0x223 len=4096] payload=0 icrc=ok"
    ));
    assert!(text.contains("RC_RDMA_READ_RESPONSE_FIRST"));
    let text = stdout(&decode(&[], &conformance("atomic_fa.pcap")));
    assert!(text.contains("RC_ATOMIC_ACKNOWLEDGE"));
    assert!(text.contains("AtomicAckETH[orig="));
}

#[test]
fn rdma_cm_exchange_is_named() {
    // rping's connection: REQ, REP, RTU, then (after the traffic) DREQ and DREP, each a MAD on
    // QP 1 with its CM fields and rdma_cm's IP header.
    let text = stdout(&decode(&[], &conformance("rdma_cm.pcap")));
    let lines: Vec<&str> = text.lines().collect();
    let mad = |i: usize| {
        lines[i]
            .split_once("payload=256 ")
            .map(|(_, m)| m)
            .unwrap_or("")
    };
    assert!(lines[0].contains(
        "10.88.0.12:55410 → 10.88.0.11:4791 UD_SEND_ONLY qp=0x000001 psn=0x000000 ackreq \
         DETH[qkey=0x80010000 srcqp=0x000001] payload=256 CM Send REQ"
    ));
    assert_eq!(
        mad(0),
        "CM Send REQ tid=0x2b19c3b82 lcid=0x823b9cb1 sid=0x1061c06(TCP:7174) qpn=0x000011 \
         psn=0x2b5620 Rc mtu=1024 rr=1 id=1 retry=7 rnr=7 timeout=20/20 cm_retries=15 \
         path[::ffff:10.88.0.12 → ::ffff:10.88.0.11 fl=0x06070 tc=0 hl=64 ack_to=19] \
         cma[10.88.0.12:34390 → 10.88.0.11] icrc=ok"
    );
    assert_eq!(
        mad(1),
        "CM Send REP tid=0x2b19c3b82 lcid=0x5ed99b66 rcid=0x823b9cb1 qpn=0x000011 \
         psn=0xf52293 rr=1 id=1 ack_delay=15 rnr=7 icrc=ok"
    );
    assert_eq!(
        mad(2),
        "CM Send RTU tid=0x2b19c3b82 lcid=0x823b9cb1 rcid=0x5ed99b66 icrc=ok"
    );
    assert_eq!(
        mad(39),
        "CM Send DREQ tid=0x2b19c3b82 lcid=0x823b9cb1 rcid=0x5ed99b66 qpn=0x000011 icrc=ok"
    );
    assert_eq!(
        mad(40),
        "CM Send DREP tid=0x2b19c3b82 lcid=0x5ed99b66 rcid=0x823b9cb1 icrc=ok"
    );
    assert_eq!(text.lines().filter(|l| l.contains(" CM Send ")).count(), 5);
    // RC traffic lines carry no MAD.
    assert!(!lines[3].contains("CM "), "{}", lines[3]);
}

#[test]
fn oob_shows_perftest_and_pingpong_exchanges() {
    let text = stdout(&decode(&["--oob"], &conformance("rc_write.pcap")));
    assert_eq!(
        text.lines().filter(|l| l.contains(" OOB ")).count(),
        30,
        "{text}"
    );
    assert!(text.contains("OOB 16B perftest-version \"6.06\""));
    assert!(text.contains("OOB 2B perftest-mtu 3 (1024)"));
    assert!(text.contains(
        "OOB 108B perftest-key lid=0x0 out_reads=1 qpn=0x11 psn=0x362122 rkey=0x254 \
         vaddr=0x561a59b3d000 gid=::ffff:10.88.0.12 srqn=0x0"
    ));
    assert!(text.contains("OOB 5B done (close)"));
    assert!(text.ends_with(&format!("{}\n", summary_line(141, 100, 100, 0, 0))));
    let text = stdout(&decode(&["--oob"], &conformance("rc_send.pcap")));
    assert!(
        text.contains("OOB 52B pingpong-dest lid=0x0 qpn=0x11 psn=0xd9d181 gid=::ffff:10.88.0.12")
    );
}

#[test]
fn flipped_payload_bit_is_icrc_bad() {
    let file = std::fs::read(conformance("rc_send.pcap")).unwrap();
    let (header, mut recs) = pcap_records(&file);
    let i = first_roce_with_payload(&recs, 64);
    recs[i].1[14 + 20 + 8 + 12 + 10] ^= 0x04;
    let path = temp_file("flipped.pcap", &pcap_bytes(&header, &recs));
    let out = decode(&[], &path);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.ends_with(&format!("{}\n", summary_line(111, 100, 99, 1, 0))),
        "{text}"
    );
    assert_eq!(text.lines().filter(|l| l.contains("icrc=BAD")).count(), 1);
}

#[test]
fn truncated_record_is_malformed() {
    let file = std::fs::read(conformance("rc_send.pcap")).unwrap();
    let (header, mut recs) = pcap_records(&file);
    let i = first_roce_with_payload(&recs, 64);
    recs[i].1.truncate(100);
    recs[i].0[8..12].copy_from_slice(&100u32.to_le_bytes()); // caplen; orig_len unchanged
    let path = temp_file("snapped.pcap", &pcap_bytes(&header, &recs));
    let out = decode(&[], &path);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("MALFORMED (capture truncated: 100 of"),
        "{text}"
    );
    assert!(
        text.ends_with(&format!("{}\n", summary_line(111, 100, 99, 0, 1))),
        "{text}"
    );
}

#[test]
fn unparsable_roce_packet_is_malformed() {
    let file = std::fs::read(conformance("rc_send.pcap")).unwrap();
    let (header, mut recs) = pcap_records(&file);
    let i = first_roce_with_payload(&recs, 0);
    recs[i].1[14 + 20 + 8] = 0x1e; // a reserved RC opcode
    let path = temp_file("reserved-opcode.pcap", &pcap_bytes(&header, &recs));
    let out = decode(&[], &path);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("MALFORMED (unknown opcode 0x1e)"), "{text}");
    assert!(
        text.ends_with(&format!("{}\n", summary_line(111, 100, 99, 0, 1))),
        "{text}"
    );
}

#[test]
fn unreadable_files_exit_2_with_a_message() {
    let file = std::fs::read(conformance("rc_send.pcap")).unwrap();
    let cases: [(&str, PathBuf, &str); 4] = [
        (
            "missing",
            PathBuf::from("/nonexistent/softrdma/x.pcap"),
            "No such file",
        ),
        ("empty", temp_file("empty.pcap", &[]), "empty file"),
        (
            "garbage",
            temp_file("garbage.pcap", b"\x7fELF\x02\x01\x01 garbage"),
            "not a pcap",
        ),
        ("header only", temp_file("hdr.pcap", &file[..10]), "cut off"),
    ];
    for (what, path, message) in cases {
        let out = decode(&[], &path);
        assert_eq!(out.status.code(), Some(2), "{what}");
        let err = stderr(&out);
        assert!(err.contains(message), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
}

/// Issue 15, item 11: a capture cut short (what a killed tcpdump leaves) used to end with an
/// error and no summary. The records before the cut are decoded, the cut record is marked,
/// the summary follows, and the exit status is 1 (a malformed record), not 2.
#[test]
fn capture_cut_mid_record_keeps_its_summary() {
    let file = std::fs::read(conformance("rc_send.pcap")).unwrap();
    let (header, recs) = pcap_records(&file);
    // Cut 20 bytes into record 31's data.
    let whole = pcap_bytes(&header, &recs[..30]);
    let cut = whole.len() + 16 + 20;
    let path = temp_file("cut-mid-record.pcap", &file[..cut]);
    let out = decode(&[], &path);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", stderr(&out));
    let roce = recs[..30]
        .iter()
        .filter(|(_, d)| d.len() > 37 && d[36..38] == [0x12, 0xb7])
        .count() as u64;
    assert!(roce > 10);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len() as u64, roce + 2, "{text}");
    assert!(lines[..roce as usize]
        .iter()
        .all(|l| l.ends_with("icrc=ok")));
    assert_eq!(
        lines[roce as usize],
        "    31 MALFORMED (file cut off in the packet data of record 31)"
    );
    assert_eq!(lines[roce as usize + 1], summary_line(31, roce, roce, 0, 1));
    assert!(stderr(&out).contains("file cut off"), "{}", stderr(&out));
    // --quiet: only the summary, same status.
    let out = decode(&["-q"], &path);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        format!("{}\n", summary_line(31, roce, roce, 0, 1))
    );
}

#[test]
fn every_prefix_of_a_capture_fails_cleanly() {
    // Cutting the file anywhere gives a clean decode (cut at a record boundary), exit 1 with
    // the summary (cut mid-record), or exit 2 (cut inside the file header) — never a panic.
    let file = std::fs::read(conformance("ud_send.pcap")).unwrap();
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("decode-prefix.pcap");
    for len in (0..file.len()).step_by(397) {
        std::fs::write(&path, &file[..len]).unwrap();
        let out = decode(&["-q"], &path);
        let code = out.status.code();
        match len {
            0..=23 => assert_eq!(code, Some(2), "prefix {len}: {out:?}"),
            _ => {
                assert!(matches!(code, Some(0 | 1)), "prefix {len}: {out:?}");
                assert!(stdout(&out).starts_with("packets: "), "prefix {len}");
            }
        }
        assert!(!stderr(&out).contains("panicked"), "prefix {len}");
    }
}

/// Rewrites a classic Ethernet pcap as pcapng (nanosecond timestamps) or as raw-IP pcap.
fn convert(file: &[u8], to_pcapng: bool) -> Vec<u8> {
    let (header, recs) = pcap_records(file);
    if !to_pcapng {
        let mut h = header.clone();
        h[20..24].copy_from_slice(&101u32.to_le_bytes());
        let raw: Vec<_> = recs
            .into_iter()
            .map(|(mut hdr, data)| {
                let ip = data[14..].to_vec();
                hdr[8..12].copy_from_slice(&(ip.len() as u32).to_le_bytes());
                hdr[12..16].copy_from_slice(&(ip.len() as u32).to_le_bytes());
                (hdr, ip)
            })
            .collect();
        return pcap_bytes(&h, &raw);
    }
    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let total = (12 + body.len().next_multiple_of(4)) as u32;
        out.extend(kind.to_le_bytes());
        out.extend(total.to_le_bytes());
        out.extend(body);
        out.resize(out.len() + body.len().next_multiple_of(4) - body.len(), 0);
        out.extend(total.to_le_bytes());
    }
    let mut out = Vec::new();
    let mut shb = vec![0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0];
    shb.extend([0xff; 8]);
    block(&mut out, 0x0a0d_0d0a, &shb);
    let mut idb = vec![1, 0, 0, 0, 0, 0, 4, 0]; // Ethernet, snaplen 0x40000
    idb.extend([9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]); // if_tsresol = 10^-9, end of options
    block(&mut out, 1, &idb);
    for (hdr, data) in recs {
        let secs = u64::from(u32::from_le_bytes(hdr[0..4].try_into().unwrap()));
        let usecs = u64::from(u32::from_le_bytes(hdr[4..8].try_into().unwrap()));
        let ts = secs * 1_000_000_000 + usecs * 1000;
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend(((ts >> 32) as u32).to_le_bytes());
        epb.extend((ts as u32).to_le_bytes());
        epb.extend(hdr[8..16].iter());
        epb.extend(&data);
        block(&mut out, 6, &epb);
    }
    out
}

#[test]
fn pcapng_and_raw_ip_give_the_same_result() {
    let file = std::fs::read(conformance("rc_read.pcap")).unwrap();
    let original = stdout(&decode(&[], &conformance("rc_read.pcap")));
    for (what, to_pcapng) in [("pcapng", true), ("raw-ip", false)] {
        let path = temp_file(&format!("rc_read.{what}"), &convert(&file, to_pcapng));
        let out = decode(&[], &path);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
        assert_eq!(stdout(&out), original, "{what}");
    }
}
