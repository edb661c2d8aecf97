//! Direct placement (`softrdma_proto::placement`): RDMA WRITE payloads received straight into
//! their target, and what a datagram that lands where it does not belong may and may not do.
//! Each test receives datagrams as a device does — scattered over the engine's plan by
//! `PlacementPlan::scatter`, the kernel's part — and checks memory byte for byte.

mod common;

use common::*;
use softrdma_proto::placement::MAX_DATAGRAM;
use softrdma_proto::*;
use softrdma_wire::{Opcode, PacketRepr};

/// One receive on node `to` the way a device makes it: into `plan` if there is one
/// (`None`: the engine's own), then whatever did not fit handed over as usual. Returns how
/// many segments ran in place.
fn receive(net: &mut Net, to: usize, p: &Pkt, stride: usize, plan: Option<PlacementPlan>) -> usize {
    let (sport, data) = (p.0, &p.1[..]);
    let meta = DatagramMeta::new(std::net::SocketAddr::new(ip(1 - to), sport), ip(to));
    let now = net.now;
    let engine = &mut net.nodes[to].engine;
    let Some(plan) = plan.or_else(|| engine.plan_placement()) else {
        for seg in data.chunks(if stride == 0 { data.len() } else { stride }) {
            engine.handle_datagram(now, &meta, seg);
        }
        return 0;
    };
    let mut scratch = vec![0u8; MAX_DATAGRAM];
    let n = plan.scatter(data, &mut scratch).unwrap();
    let r = engine.handle_placed(now, &meta, &plan, &mut scratch, n, stride);
    assert!(!r.rest_lost);
    let stride = if stride == 0 { n } else { stride };
    for (k, seg) in scratch[r.rest_from..n].chunks(stride).enumerate() {
        let m = DatagramMeta {
            segment: (r.placed + k) as u16,
            ..meta
        };
        engine.handle_datagram(now, &m, seg);
    }
    r.placed
}

/// A datagram and the UDP source port it was sent from (the ICRC covers it).
type Pkt = (u16, Vec<u8>);

/// The packets node `from` has to send now.
fn transmit(net: &mut Net, from: usize) -> Vec<Pkt> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = net.nodes[from].engine.poll_transmit(net.now, &mut buf) {
        out.push((t.src_port, buf[..t.len].to_vec()));
    }
    out
}

fn opcode(p: &Pkt) -> Opcode {
    PacketRepr::parse(&p.1).unwrap().bth.opcode
}

/// Packets sent back to back from one port, as one GRO batch.
fn batch(pkts: &[Pkt]) -> Pkt {
    (
        pkts[0].0,
        pkts.iter().flat_map(|p| p.1.iter().copied()).collect(),
    )
}

/// Posts a WRITE of `len` bytes from node 0's `src` to node 1's `dst` on `qpn`.
fn post_write(net: &mut Net, qpn: u32, wr_id: u64, src: u64, dst: u64, len: u32) {
    net.post_rdma(qpn, wr_id, false, src, dst, len);
}

fn mtu4096() -> Net {
    Net::with_config(2, |c| EngineConfig {
        port_mtu: Mtu::Mtu4096,
        place_read_responses: true,
        ..c
    })
}

fn rc_pair_4096(net: &mut Net) -> [u32; 2] {
    net.rc_connect_mtu(
        Mtu::Mtu4096,
        [0, 1],
        [None, None],
        [4, 4],
        [4, 4],
        AccessFlags::all(),
    )
}

/// A 60 KiB WRITE: its FIRST goes the ordinary way (its RETH says where the rest goes), the
/// other 14 packets come as one GRO batch and every one of them runs where it landed; the
/// target holds the bytes, the requester completes, and no ICRC failed.
#[test]
fn a_gro_batch_of_a_write_lands_in_place() {
    let mut net = mtu4096();
    let [a, _b] = rc_pair_4096(&mut net);
    let data = pattern(3, 15 * 4096 - 100);
    net.write_mem(0, 0, &data);
    post_write(&mut net, a, 7, 0, 1000, data.len() as u32);
    let pkts = transmit(&mut net, 0);
    assert_eq!(pkts.len(), 15);
    assert_eq!(opcode(&pkts[0]), Opcode::RC_RDMA_WRITE_FIRST);
    assert!(
        net.nodes[1].engine.plan_placement().is_none(),
        "nothing before the FIRST"
    );
    assert_eq!(receive(&mut net, 1, &pkts[0], 0, None), 0);
    let plan = net.nodes[1]
        .engine
        .plan_placement()
        .expect("the rest of the WRITE");
    assert_eq!(plan.pieces().len(), 14);
    assert_eq!(plan.stride(), 12 + 4096 + 4);
    let rest = batch(&pkts[1..]);
    assert_eq!(receive(&mut net, 1, &rest, plan.stride(), Some(plan)), 14);
    assert_eq!(net.read_mem(1, 1000, data.len()), data);
    assert!(
        net.nodes[1].engine.plan_placement().is_none(),
        "the WRITE is over"
    );
    net.run();
    net.completed_ok(0, 7);
    assert_eq!(net.drops(1, DropReason::BadIcrc), 0);
}

/// One bit flipped in a placed payload: the ICRC, checked over the bytes where they landed,
/// fails; the segment is handed over the ordinary way and dropped there, nothing after it
/// runs in place, nothing completes; the resent packets put the right bytes there.
#[test]
fn a_corrupted_placed_payload_completes_nothing() {
    let mut net = mtu4096();
    let [a, _b] = rc_pair_4096(&mut net);
    let data = pattern(9, 4 * 4096);
    net.write_mem(0, 0, &data);
    post_write(&mut net, a, 1, 0, 0, data.len() as u32);
    let pkts = transmit(&mut net, 0);
    receive(&mut net, 1, &pkts[0], 0, None);
    let mut bad = batch(&pkts[1..]);
    bad.1[12 + 4096 + 4 + 12 + 100] ^= 0x10; // the second MIDDLE's payload
    let stride = 12 + 4096 + 4;
    assert_eq!(
        receive(&mut net, 1, &bad, stride, None),
        1,
        "the first MIDDLE only"
    );
    assert_eq!(net.drops(1, DropReason::BadIcrc), 1);
    assert!(net.completions(0).is_empty());
    // The requester learns of the gap (a sequence NAK for the LAST) and resends.
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.read_mem(1, 0, data.len()), data);
    net.completed_ok(0, 1);
}

/// Forced mispredictions: two QPs write into two targets of one region at once; every
/// packet of each is received into the *other* QP's plan. Stray bytes may land in the other
/// WRITE's target, but only at or after the byte it expects next, never anywhere else
/// (checked after every receive against a region filled with a known pattern), and both
/// targets end up exactly right.
#[test]
fn mispredicted_datagrams_never_leave_bytes_outside_the_write_in_flight() {
    let mut net = mtu4096();
    let [a0, _] = rc_pair_4096(&mut net);
    let [a1, _] = rc_pair_4096(&mut net);
    let len = 5 * 4096;
    let (d0, d1) = (pattern(1, len), pattern(2, len));
    net.write_mem(0, 0, &d0);
    net.write_mem(0, len, &d1);
    let background = pattern(77, MEM);
    net.write_mem(1, 0, &background);
    let (t0, t1) = (4096usize, 2 * 4096 + len); // the two targets on node 1
    post_write(&mut net, a0, 10, 0, t0 as u64, len as u32);
    post_write(&mut net, a1, 11, len as u64, t1 as u64, len as u32);
    let mut pkts = transmit(&mut net, 0);
    // Interleave the two WRITEs' packets: a0, a1, a0, a1, ...
    let (p0, p1): (Vec<_>, Vec<_>) = pkts
        .drain(..)
        .partition(|p| PacketRepr::parse(&p.1).unwrap().bth.dest_qpn == net_qpn_of(&net, 1, 0));
    let qpns1: Vec<u32> = net.nodes[1].engine.qpns().collect();
    let mut expected = background.clone();
    let mut strays = 0;
    for (i, (x, y)) in p0.iter().zip(&p1).enumerate() {
        for (p, target, data) in [(x, t0, &d0), (y, t1, &d1)] {
            // Into the plan of the QP this packet is not for, if it has one.
            let dest = PacketRepr::parse(&p.1).unwrap().bth.dest_qpn;
            let other = qpns1.iter().copied().find(|&q| q != dest).unwrap();
            let plan = net.nodes[1].engine.plan_placement_for(other);
            receive(&mut net, 1, p, 0, plan);
            // The packet itself ran: its bytes are where they belong.
            let off = i * 4096;
            let n = (len - off).min(4096);
            expected[target + off..target + off + n].copy_from_slice(&data[off..off + n]);
            // Anything else that differs lies in a WRITE still in flight, at or after the
            // byte it expects next.
            let in_flight: Vec<(usize, usize)> = qpns1
                .iter()
                .filter_map(|&q| net.nodes[1].engine.plan_placement_for(q))
                .map(|pl| {
                    let (first, last) = (&pl.pieces()[0], pl.pieces().last().unwrap());
                    (first.offset, last.offset + last.len)
                })
                .collect();
            let now = net.read_mem(1, 0, MEM);
            for (at, (&got, &want)) in now.iter().zip(&expected).enumerate() {
                strays += usize::from(got != want);
                assert!(
                    got == want || in_flight.iter().any(|&(lo, hi)| (lo..hi).contains(&at)),
                    "byte {at} changed outside the WRITEs in flight {in_flight:?}"
                );
            }
        }
    }
    assert!(strays > 4096, "the strays landed ({strays} bytes seen)");
    assert_eq!(net.read_mem(1, t0, len), d0);
    assert_eq!(net.read_mem(1, t1, len), d1);
    assert_eq!(net.read_mem(1, 0, t0), background[..t0]);
    assert_eq!(
        net.read_mem(1, t0 + len, t1 - t0 - len),
        background[t0 + len..t1]
    );
    net.run();
    let mut wc = net.completions(0);
    wc.sort_by_key(|w| w.wr_id);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(10, WcStatus::Success), (11, WcStatus::Success)]
    );
}

/// The QPN of the `k`th RC QP created on node `i` (QPNs count up from the engine's first).
fn net_qpn_of(net: &Net, i: usize, k: usize) -> u32 {
    net.nodes[i].engine.qpns().nth(k).unwrap()
}

/// A duplicate of a packet already run, an ACK, and a packet of another length, each
/// received into a WRITE's plan: none runs in place, each is handled as it would have been
/// otherwise (the duplicate counted as one), and the WRITE still ends right.
#[test]
fn strays_of_every_kind_are_handled_the_ordinary_way() {
    let mut net = mtu4096();
    let [a, b] = rc_pair_4096(&mut net);
    let data = pattern(5, 6 * 4096);
    net.write_mem(0, 0, &data);
    post_write(&mut net, a, 3, 0, 8192, data.len() as u32);
    let pkts = transmit(&mut net, 0);
    receive(&mut net, 1, &pkts[0], 0, None);
    assert_eq!(receive(&mut net, 1, &pkts[1], 0, None), 1);
    let dups_before = net.nodes[1].engine.stats().duplicate_requests;
    // A duplicate of the MIDDLE just run.
    assert_eq!(receive(&mut net, 1, &pkts[1], 0, None), 0);
    assert_eq!(
        net.nodes[1].engine.stats().duplicate_requests,
        dups_before + 1
    );
    // Node 1's ACK of it (as if reflected back), and a short SEND-sized packet: not node 1's
    // to run, dropped as usual.
    let acks = transmit(&mut net, 1);
    for p in &acks {
        assert_eq!(receive(&mut net, 1, p, 0, None), 0);
    }
    // The FIRST again, now a duplicate too.
    assert_eq!(receive(&mut net, 1, &pkts[0], 0, None), 0);
    for p in &pkts[2..] {
        assert_eq!(receive(&mut net, 1, p, 0, None), 1);
    }
    assert_eq!(net.read_mem(1, 8192, data.len()), data);
    let _ = b;
    net.run();
    net.completed_ok(0, 3);
}

/// A 60 KiB READ: the requester receives every response straight into its buffer — the
/// FIRST on its own (its AETH makes it longer than the rest), the MIDDLEs as one GRO batch,
/// the LAST on its own — and the READ completes with the responder's bytes.
#[test]
fn read_responses_land_in_place() {
    let mut net = mtu4096();
    let [a, _b] = rc_pair_4096(&mut net);
    let len = 15 * 4096 - 300;
    let data = pattern(11, len);
    net.write_mem(1, 100, &data);
    net.post_rdma(a, 21, true, 2000, 100, len as u32);
    let requests = transmit(&mut net, 0);
    for p in &requests {
        receive(&mut net, 1, p, 0, None);
    }
    let responses = transmit(&mut net, 1);
    let ops: Vec<Opcode> = responses.iter().map(opcode).collect();
    assert_eq!(ops.len(), 15, "{ops:?}");
    assert_eq!(ops[0], Opcode::RC_RDMA_READ_RESPONSE_FIRST);
    assert_eq!(ops[14], Opcode::RC_RDMA_READ_RESPONSE_LAST);
    // Nothing is expected before the first response names the QP... except that the READ
    // is this QP's own: the engine plans from the last response it got, so a first receive
    // goes the ordinary way.
    assert_eq!(receive(&mut net, 0, &responses[0], 0, None), 0);
    let plan = net.nodes[0]
        .engine
        .plan_placement()
        .expect("the READ's next responses");
    assert_eq!(plan.pieces().len(), 14);
    let middles = batch(&responses[1..14]);
    assert_eq!(receive(&mut net, 0, &middles, 12 + 4096 + 4, None), 13);
    assert_eq!(receive(&mut net, 0, &responses[14], 0, None), 1);
    assert_eq!(net.read_mem(0, 2000, len), data);
    let wc = net.completions(0);
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].status),
        (1, 21, WcStatus::Success)
    );
    assert_eq!(net.drops(0, DropReason::BadIcrc), 0);
    // A second READ: its FIRST response is placed too, the QP's last datagram having been a
    // response of its.
    net.post_rdma(a, 22, true, 2000, 100, 4096 * 2);
    for p in &transmit(&mut net, 0) {
        receive(&mut net, 1, p, 0, None);
    }
    let responses = transmit(&mut net, 1);
    assert_eq!(responses.len(), 2);
    for p in &responses {
        assert_eq!(receive(&mut net, 0, p, 0, None), 1);
    }
    assert_eq!(net.read_mem(0, 2000, 8192), data[..8192]);
    let wc = net.completions(0);
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].status),
        (1, 22, WcStatus::Success)
    );
}
