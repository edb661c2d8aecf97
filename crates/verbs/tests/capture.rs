//! Captures the loopback traffic of a small run of every RC operation, and of XRC's, with
//! tcpdump, then
//! checks every packet: it parses as RoCEv2 and its ICRC, recomputed from the captured IP and
//! UDP headers (what a receiving rxe or RoCE NIC checks), is valid. If tshark exists, its
//! InfiniBand dissector must report no malformed packet and no expert warning or error.
//! Skips (and says why) without root, tcpdump or tshark. Addresses 127.0.7.x.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use softrdma::{wr, ConnectOptions, Device, DeviceConfig, Mtu, QpInitAttr, SrqAttr, WcStatus};
use softrdma_wire::pcap::CaptureReader;
use softrdma_wire::{icrc::compute_raw, packet::stored_icrc, IpPacket, PacketRepr};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a small workload of every operation between 127.0.7.1 and 127.0.7.2.
fn workload() {
    // Without GSO: tcpdump records a GSO send as one unsplit datagram.
    let side = |addr| {
        Side::on(
            Device::open(DeviceConfig::new(ip(addr)).gso(false)).unwrap(),
            1 << 16,
        )
    };
    let a = side("127.0.7.1");
    let b = side("127.0.7.2");
    let opts = ConnectOptions {
        path_mtu: Some(Mtu::Mtu1024),
        ..Default::default()
    };
    a.qp.connect(&b.qp.endpoint(), &opts).unwrap();
    b.qp.connect(&a.qp.endpoint(), &opts).unwrap();
    let data = pattern(5000, 9);
    a.mr.write(0, &data).unwrap();
    let r = b.mr.remote();
    b.qp.post_recv([
        wr::recv(1, vec![b.mr.sge(0, 8192)]),
        wr::recv(2, vec![b.mr.sge(0, 8192)]),
        wr::recv(3, vec![]),
    ])
    .unwrap();
    a.qp.post_send([
        wr::send(1, vec![a.mr.sge(0, 3000)]),
        wr::send_with_imm(2, vec![a.mr.sge(0, 17)], 7),
        wr::write(3, vec![a.mr.sge(0, 5000)], r.at(10000), r.rkey),
        wr::write_with_imm(
            4,
            vec![a.mr.sge(0, 1), a.mr.sge(1, 2)],
            r.at(20001),
            r.rkey,
            9,
        ),
        wr::read(5, vec![a.mr.sge(30000, 5000)], r.at(10000), r.rkey),
        wr::compare_swap(6, a.mr.sge(40000, 8), r.at(48000), r.rkey, 0, 1),
        wr::fetch_add(7, a.mr.sge(40008, 8), r.at(48000), r.rkey, 1),
    ])
    .unwrap();
    let wcs = wait_wcs(&a.cq, 7);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(wait_wcs(&b.cq, 3).len(), 3);
    assert_eq!(a.mr.read_vec(30000, 5000).unwrap(), data);

    // XRC: an initiator on A, a target of B's domain, the same operations through its SRQ.
    let ini = a.pd.create_qp(&QpInitAttr::xrc_ini(&a.cq)).unwrap();
    let xrcd = b.dev.open_xrcd();
    let attr = SrqAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = xrcd.create_srq(&b.pd, &b.cq, attr).unwrap();
    let tgt = xrcd.create_qp().unwrap();
    ini.connect(&tgt.endpoint(), &opts).unwrap();
    tgt.connect(&ini.endpoint(), &opts).unwrap();
    srq.post_recv([wr::recv(11, vec![b.mr.sge(0, 8192)])])
        .unwrap();
    let n = srq.id();
    ini.post_send([
        wr::send(11, vec![a.mr.sge(0, 3000)]).to_xrc_srq(n),
        wr::write(12, vec![a.mr.sge(0, 5000)], r.at(10000), r.rkey).to_xrc_srq(n),
        wr::read(13, vec![a.mr.sge(30000, 5000)], r.at(10000), r.rkey).to_xrc_srq(n),
        wr::fetch_add(14, a.mr.sge(40008, 8), r.at(48000), r.rkey, 1).to_xrc_srq(n),
    ])
    .unwrap();
    let wcs = wait_wcs(&a.cq, 4);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(wait_one(&b.cq).qp_num, tgt.qp_num());
}

/// The IP packets of a capture file (the wire crate's reader: pcap or pcapng, any link type
/// tcpdump writes).
fn pcap_packets(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut reader = CaptureReader::new(bytes).expect("a capture file");
    let mut out = Vec::new();
    while let Some(record) = reader.next_record().expect("a well-formed capture") {
        assert!(!record.is_truncated(), "tcpdump cut a packet");
        let ip = record
            .link
            .network_layer(record.data)
            .expect("an IP packet");
        out.push(ip.to_vec());
    }
    out
}

#[test]
fn capture_decodes_and_every_icrc_is_valid() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: capturing needs root");
        return;
    }
    if !have("tcpdump") {
        eprintln!("skipped: tcpdump not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("softrdma-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rc.pcap");
    let tcpdump = Command::new("tcpdump")
        .args([
            "-i",
            "lo",
            "--immediate-mode",
            "-U",
            "-n",
            "-s",
            "9000",
            "-B",
            "32768",
            "-w",
        ])
        .arg(&file)
        .arg("(udp port 4791 or udp port 9) and net 127.0.7.0/24")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcpdump");
    // tcpdump says "listening" before its filter is attached, and writes packets some time
    // after they pass: send probes to the discard port (skipped by the checks below) until
    // one shows up in the file (-U writes each packet as it comes).
    let probe = std::net::UdpSocket::bind("127.0.7.9:0").unwrap();
    let probes_in_file = |file: &std::path::Path| {
        std::fs::read(file).map_or(0, |b| {
            if b.len() < 24 {
                return 0;
            }
            pcap_packets(&b)
                .iter()
                .filter(|ip| ip.len() > 16 && ip[12..16] == [127, 0, 7, 9])
                .count()
        })
    };
    let wait_for_probe = || {
        let before = probes_in_file(&file);
        for _ in 0..200 {
            probe.send_to(b"probe", "127.0.7.9:9").unwrap();
            std::thread::sleep(Duration::from_millis(20));
            if probes_in_file(&file) > before {
                return;
            }
        }
        panic!("tcpdump captures nothing");
    };
    wait_for_probe();
    workload();
    // Once a probe sent after the workload is in the file, so is everything before it.
    wait_for_probe();
    // SAFETY: plain kill(2) of the child we spawned.
    unsafe { libc::kill(tcpdump.id() as i32, libc::SIGINT) };
    let out = tcpdump.wait_with_output().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr).trim());

    let bytes = std::fs::read(&file).unwrap();
    let packets = pcap_packets(&bytes);
    let mut opcodes = std::collections::BTreeSet::new();
    let mut roce = 0;
    for (i, ip) in packets.iter().enumerate() {
        let p = IpPacket::parse(ip).unwrap_or_else(|e| panic!("packet {i}: IP: {e:?}"));
        let (udp, udp_raw, payload) = p.udp().unwrap_or_else(|e| panic!("packet {i}: UDP: {e:?}"));
        if udp.dst_port == 9 {
            continue; // a probe
        }
        assert_eq!(udp.dst_port, 4791, "packet {i}");
        assert!(
            udp.src_port >= 0xc000,
            "packet {i}: source port {} not in rxe's range",
            udp.src_port
        );
        let pkt = PacketRepr::parse(payload).unwrap_or_else(|e| panic!("packet {i}: RoCE: {e:?}"));
        opcodes.insert(pkt.bth.opcode.0);
        roce += 1;
        let computed = compute_raw(p.ip_header, udp_raw, &payload[..payload.len() - 4]).unwrap();
        assert_eq!(Some(computed), stored_icrc(payload), "packet {i}: bad ICRC");
    }
    eprintln!(
        "{roce} RoCEv2 packets, opcodes {:02x?}, every ICRC valid",
        opcodes
    );
    // SEND first/middle/last/only-imm, WRITE first/middle/last/only-imm, READ req + responses,
    // CMP_SWAP, FETCH_ADD, ACK, ATOMIC ACK; XRC's SEND first/middle/last, WRITE first/middle/
    // last, READ request and responses, ACK, ATOMIC ACK, FETCH_ADD.
    for op in [
        0x00, 0x01, 0x02, 0x05, 0x06, 0x07, 0x08, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x11, 0x12, 0x13,
        0x14, 0xa0, 0xa1, 0xa2, 0xa6, 0xa7, 0xa8, 0xac, 0xad, 0xae, 0xaf, 0xb1, 0xb2, 0xb4,
    ] {
        assert!(
            opcodes.contains(&op),
            "opcode {op:#04x} missing from the capture"
        );
    }

    if !have("tshark") {
        eprintln!("tshark not installed: skipped its check");
        return;
    }
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(&file)
        .args(["-d", "udp.port==4791,infiniband", "-z", "expert,warn", "-q"])
        .output()
        .expect("run tshark");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("tshark expert info:\n{text}");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("Malformed"), "tshark: malformed packets");
    assert!(!text.contains("Errors ("), "tshark reports errors");
    assert!(!text.contains("Warnings ("), "tshark reports warnings");
    let listing = Command::new("tshark")
        .args(["-r"])
        .arg(&file)
        .args(["-d", "udp.port==4791,infiniband", "-Y", "udp.port==4791"])
        .output()
        .expect("run tshark");
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert_eq!(listing.lines().count(), roce);
    assert!(
        listing
            .lines()
            .all(|l| l.contains("InfiniBand") || l.contains("RoCE") || l.contains("RC ")),
        "{listing}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
