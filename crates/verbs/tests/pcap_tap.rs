//! The pcap tap (`DeviceConfig::pcap`): every datagram the device sent and received is in the
//! file once, as an IPv4 packet whose synthesized header makes the ICRC verify — sent ones
//! with identification 0 and DF (what the kernel writes), received ones with the
//! identification recovered from the ICRC. Addresses 127.0.78.x.

mod common;

use common::*;
use softrdma::{wr, Device, DeviceConfig, QpInitAttr, WcStatus};
use softrdma_wire::{icrc::compute_raw, IpHeader, IpPacket, PacketRepr};

/// (timestamp ns, packet) of each record of a little-endian nanosecond pcap with link type 101.
fn records(file: &[u8]) -> Vec<(u64, Vec<u8>)> {
    assert_eq!(
        &file[0..4],
        &0xa1b2_3c4du32.to_le_bytes(),
        "nanosecond pcap"
    );
    assert_eq!(&file[20..24], &101u32.to_le_bytes(), "LINKTYPE_RAW");
    let mut at = 24;
    let mut out = Vec::new();
    while at < file.len() {
        let h = &file[at..at + 16];
        let secs = u64::from(u32::from_le_bytes(h[0..4].try_into().unwrap()));
        let nanos = u64::from(u32::from_le_bytes(h[4..8].try_into().unwrap()));
        let len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
        assert_eq!(&h[8..12], &h[12..16], "no truncated record");
        out.push((
            secs * 1_000_000_000 + nanos,
            file[at + 16..at + 16 + len].to_vec(),
        ));
        at += 16 + len;
    }
    assert_eq!(at, file.len());
    out
}

/// Runs SENDs both ways between a tapped device at `ip_a` and a plain one at `ip_b` (both with
/// GSO batching `gso`), then checks the tap file record by record. Returns the largest IPv4
/// identification a sent record carried (GSO segment numbers).
fn tap_run(ip_a: &str, ip_b: &str, gso: bool, len: u32) -> u16 {
    let path =
        std::env::temp_dir().join(format!("softrdma-tap-{}-{ip_a}.pcap", std::process::id()));
    let tapped = Device::open(DeviceConfig::new(ip(ip_a)).pcap(&path).gso(gso)).unwrap();
    let pd = tapped.alloc_pd();
    let cq = tapped.create_cq(64).unwrap();
    let a = Side {
        qp: pd.create_qp(&QpInitAttr::rc(&cq)).unwrap(),
        mr: pd.reg_mr(1 << 20, all_access()).unwrap(),
        dev: tapped,
        pd,
        cq,
    };
    let b_dev = Device::open(DeviceConfig::new(ip(ip_b)).gso(gso)).unwrap();
    let b_pd = b_dev.alloc_pd();
    let b_cq = b_dev.create_cq(64).unwrap();
    let b = Side {
        qp: b_pd.create_qp(&QpInitAttr::rc(&b_cq)).unwrap(),
        mr: b_pd.reg_mr(1 << 20, all_access()).unwrap(),
        dev: b_dev,
        pd: b_pd,
        cq: b_cq,
    };
    connect(&a.qp, &b.qp);
    let data = pattern(len as usize, 7);
    a.mr.write(0, &data).unwrap();

    // Several packets each way (MTU 4096 on loopback) plus ACKs.
    b.qp.post_recv([wr::recv(1, vec![b.mr.sge(0, len)])])
        .unwrap();
    a.qp.post_recv([wr::recv(2, vec![a.mr.sge(len as usize, len)])])
        .unwrap();
    a.qp.post_send([wr::send(3, vec![a.mr.sge(0, len)])])
        .unwrap();
    assert!(wait_wcs(&b.cq, 1)
        .iter()
        .all(|w| w.status == WcStatus::Success));
    assert_eq!(b.mr.read_vec(0, len as usize).unwrap(), data);
    b.qp.post_send([wr::send(4, vec![b.mr.sge(0, len)])])
        .unwrap();
    assert!(wait_wcs(&a.cq, 2)
        .iter()
        .all(|w| w.status == WcStatus::Success));
    assert_eq!(a.mr.read_vec(len as usize, len as usize).unwrap(), data);
    let _ = wait_wcs(&b.cq, 1);

    let io = a.dev.stats().io;
    let (sent, received) = (io.tx_datagrams, io.rx_datagrams);
    assert!(sent >= 3 && received >= 3, "{io:?}");
    // Each plain datagram is a send of its own; GSO joins packets into fewer sends.
    if gso {
        assert!(io.tx_sends < sent, "{io:?}");
    } else {
        assert_eq!(io.tx_sends, sent, "{io:?}");
    }
    assert_eq!(io.pcap_records, sent + received);
    assert_eq!(io.pcap_errors, 0);
    drop(a);
    drop(b);

    let file = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let recs = records(&file);
    assert_eq!(recs.len() as u64, sent + received);
    let (mut n_sent, mut n_received, mut max_id) = (0, 0, 0);
    let a_oct = ip(ip_a).to_string();
    for (i, (_, packet)) in recs.iter().enumerate() {
        let ip_pkt = IpPacket::parse(packet).unwrap();
        let IpHeader::V4(h) = ip_pkt.ip else {
            panic!("record {i} is not IPv4")
        };
        assert!(h.dont_fragment, "record {i}: {h:?}");
        let (udp, udp_bytes, transport) = ip_pkt.udp().unwrap();
        assert_eq!(udp.dst_port, 4791);
        PacketRepr::parse(transport).unwrap_or_else(|e| panic!("record {i}: {e}"));
        let n = transport.len() - 4;
        let icrc = compute_raw(ip_pkt.ip_header, udp_bytes, &transport[..n]).unwrap();
        assert_eq!(icrc.to_le_bytes(), transport[n..], "record {i}: ICRC");
        if h.src.to_string() == a_oct {
            n_sent += 1;
            max_id = max_id.max(h.id);
            if !gso {
                assert_eq!(h.id, 0, "record {i}: plain sends carry identification 0");
            }
        } else {
            n_received += 1;
        }
    }
    assert_eq!((n_sent, n_received), (sent, received));
    max_id
}

#[test]
fn tap_records_every_datagram_with_a_valid_icrc() {
    assert_eq!(tap_run("127.0.78.1", "127.0.78.2", false, 10_000), 0);
}

/// With GSO batching, a 200 KB SEND leaves as GSO datagrams of many segments: the data must
/// arrive exactly, and the tap must record every segment with the IPv4 identification the
/// kernel gave it (its number in the batch), so that each ICRC verifies.
#[test]
fn gso_batches_deliver_exact_data_and_tap_each_segment() {
    let max_id = tap_run("127.0.78.3", "127.0.78.4", true, 200_000);
    assert!(max_id > 0, "some datagrams were GSO batches");
}

#[test]
fn unwritable_pcap_path_fails_open() {
    let e = Device::open(
        DeviceConfig::new(ip("127.0.78.9")).pcap("/nonexistent-dir/softrdma/tap.pcap"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("pcap"), "{e}");
}
