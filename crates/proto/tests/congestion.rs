//! Congestion control between two engines: CE-marked requests draw CNPs (one per QP per
//! interval, bytes as Annex A17 has them), a CNP cuts the sender's DCQCN rate, requests leave
//! ECT(0) and paced at the allowed rate, and an engine without congestion control ignores
//! CNPs as rxe does — the data arrives intact in every case.

mod common;

use common::*;
use softrdma_proto::cc::CcConfig;
use softrdma_proto::*;
use softrdma_wire::{
    emit_headers, packet_len, Bth, ExtHeaders, IcrcContext, Opcode, PacketRepr, Psn,
};

fn cnps(net: &Net) -> Vec<Vec<u8>> {
    net.log
        .iter()
        .filter(|p| PacketRepr::parse(p).unwrap().bth.opcode == Opcode::CNP)
        .cloned()
        .collect()
}

fn write(net: &mut Net, qpn: u32, len: u32, wr_id: u64) {
    net.post_rdma(qpn, wr_id, false, 0, 0x8000, len);
}

fn written_intact(net: &mut Net, len: usize) {
    let wcs = net.completions(0);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(net.read_mem(1, 0x8000, len), net.read_mem(0, 0, len));
}

#[test]
fn ce_marks_draw_one_cnp_per_interval_and_cut_the_rate() {
    let mut net = Net::with_config(2, |c| EngineConfig {
        cc: CcConfig::dcqcn(40_000_000_000),
        ..c
    });
    let [a, _] = net.rc_pair_on([None, None]);
    net.write_mem(0, 0, &pattern(3, 8192));
    // Mark every request: 8 packets, one µs apart on this wire, all within 50 µs.
    net.mark_ce = Box::new(|p| p.bth.opcode.info().is_some_and(|i| i.is_request()));
    write(&mut net, a, 8192, 1);
    net.run_for(Duration::from_millis(10));
    written_intact(&mut net, 8192);

    let c = cnps(&net);
    assert_eq!(c.len(), 1, "one CNP per QP per 50 µs");
    let cnp = PacketRepr::parse(&c[0]).unwrap();
    assert_eq!(c[0].len(), 12 + 16 + 4, "BTH, 16 reserved bytes, ICRC");
    assert_eq!(
        cnp.bth.dest_qpn, a,
        "to the QP that sent the marked packets"
    );
    assert!(cnp.bth.becn && !cnp.bth.fecn);
    assert_eq!(cnp.bth.psn.value(), 0);
    assert_eq!(&c[0][12..28], &[0u8; 16]);
    // Every request left ECN-capable; the CNP and the ACKs not.
    for (p, ecn) in net.log.iter().zip(&net.ecn_log) {
        let op = PacketRepr::parse(p).unwrap().bth.opcode;
        let request = op.info().unwrap().is_request();
        assert_eq!(*ecn, if request { 0b10 } else { 0 }, "{op:?}");
    }
    let (s0, s1) = (net.nodes[0].engine.stats(), net.nodes[1].engine.stats());
    assert_eq!(s1.ecn_ce_received, 8);
    assert_eq!(s1.cnps_sent, 1);
    assert_eq!(s0.cnps_received, 1);
    assert_eq!(s0.cc_rate_cuts, 1);
    // α starts at 1: the first cut halves the rate (then DCQCN recovers it over time).
    let rate = net.nodes[0].engine.qp(a).unwrap().cc_rate_bps().unwrap();
    assert!(rate > 20e9 && rate <= 40e9, "{rate}");
}

#[test]
fn a_second_cnp_after_the_interval() {
    let mut net = Net::with_config(2, |c| EngineConfig {
        cc: CcConfig::dcqcn(40_000_000_000),
        ..c
    });
    let [a, _] = net.rc_pair_on([None, None]);
    net.write_mem(0, 0, &pattern(4, 1024));
    net.mark_ce = Box::new(|p| p.bth.opcode.info().is_some_and(|i| i.is_request()));
    write(&mut net, a, 1024, 1);
    net.run_for(Duration::from_millis(1));
    // Well past the interval: the next marked packet draws another CNP.
    net.now = net.now + Duration::from_micros(60);
    write(&mut net, a, 1024, 2);
    net.run_for(Duration::from_millis(1));
    written_intact(&mut net, 1024);
    assert_eq!(cnps(&net).len(), 2);
    assert_eq!(net.nodes[0].engine.stats().cc_rate_cuts, 2);
}

#[test]
fn without_congestion_control_cnps_are_ignored_and_nothing_is_marked() {
    // Node 1 notifies; node 0 runs no congestion control (as rxe).
    let mut net = Net::with_config(2, |c| {
        if c.local_ip == ip(1) {
            EngineConfig {
                cc: CcConfig {
                    notify: true,
                    ..CcConfig::OFF
                },
                ..c
            }
        } else {
            c
        }
    });
    let [a, _] = net.rc_pair_on([None, None]);
    net.write_mem(0, 0, &pattern(5, 4096));
    // Not ECN-capable: a switch never marks them, so no CNP either.
    net.mark_ce = Box::new(|_| true);
    write(&mut net, a, 4096, 1);
    net.run_for(Duration::from_millis(1));
    written_intact(&mut net, 4096);
    assert!(net.ecn_log.iter().all(|&e| e == 0));
    assert!(cnps(&net).is_empty());
    assert_eq!(net.nodes[0].engine.qp(a).unwrap().cc_rate_bps(), None);
}

#[test]
fn a_cnp_to_a_qp_without_congestion_control_is_counted_and_ignored() {
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_on([None, None]);
    // A CNP from node 1's address to QP `a`, as a RoCE NIC would send it.
    let bth = Bth {
        becn: true,
        ..Bth::new(Opcode::CNP, a, Psn::new(0))
    };
    let mut cnp = vec![0u8; packet_len(Opcode::CNP, 0)];
    emit_headers(&bth, &ExtHeaders::default(), 0, &mut cnp);
    IcrcContext::new(ip(1), ip(0), 0xc000, 4791)
        .fill(&mut cnp)
        .unwrap();
    let meta = DatagramMeta::new(std::net::SocketAddr::new(ip(1), 0xc000), ip(0));
    let now = net.now;
    net.nodes[0].engine.handle_datagram(now, &meta, &cnp);
    let s0 = net.nodes[0].engine.stats();
    assert_eq!(
        (s0.cnps_received, s0.cc_rate_cuts, s0.total_drops()),
        (1, 0, 0)
    );
    net.write_mem(0, 0, &pattern(6, 2048));
    write(&mut net, a, 2048, 1);
    net.run_for(Duration::from_millis(1));
    written_intact(&mut net, 2048);
}

#[test]
fn requests_are_paced_at_the_allowed_rate() {
    // 100 Mb/s: a 1024-byte WRITE packet (1024 + 12 BTH + 16 RETH/… + 4 ICRC + 28 IP/UDP)
    // takes over 80 µs at that rate, far more than this wire's 1 µs per packet. The pacer
    // lets a burst of 16 KiB go at once (its bucket starts full), then one packet per gap.
    let mut net = Net::with_config(2, |c| EngineConfig {
        cc: CcConfig::dcqcn(100_000_000),
        ..c
    });
    let [a, _] = net.rc_pair_on([None, None]);
    net.write_mem(0, 0, &pattern(7, 32 * 1024));
    let start = net.now;
    write(&mut net, a, 32 * 1024, 1);
    net.run_for(Duration::from_millis(100));
    written_intact(&mut net, 32 * 1024);
    let took = net.now.saturating_duration_since(start);
    // 32 packets, 16 of them in the first burst (the bucket may go one packet into debt):
    // the other 16 wait for 15 packets' worth of refill at least.
    let gap_ns = (1024 + 28 + 16) * 8 * 10;
    assert!(
        took.as_nanos() >= 15 * gap_ns,
        "32 packets in {took:?}: not paced"
    );
    assert!(net.nodes[0].engine.stats().paced_waits >= 16);
}
