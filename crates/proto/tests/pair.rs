//! Scripted two-engine tests (quinn's `Pair` pattern): two engines joined by an in-memory
//! wire with virtual time that jumps to the next deadline. Each test injects its own fault and
//! asserts exact outcomes: memory bytes, completion statuses, counters.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use softrdma_proto::*;
use softrdma_wire::{OpKind, Opcode, PacketRepr, Psn};

const LAT: Duration = Duration::from_micros(5);

/// A packet on the wire, with who sent it.
struct InFlight {
    from: usize,
    arrive: Instant,
    src: SocketAddr,
    data: Vec<u8>,
}

/// Decides the fate of each packet: `true` = deliver.
type Filter = Box<dyn FnMut(usize, &PacketRepr<'_>) -> bool>;

struct Node {
    engine: Engine,
    cq: CqHandle,
    mem: Arc<VecMemory>,
    key: u32,
    qpn: u32,
}

struct Pair {
    nodes: [Node; 2],
    now: Instant,
    wire: VecDeque<InFlight>,
    filter: Filter,
    /// Packets delivered, by (sender, opcode).
    log: Vec<(usize, Opcode, Psn)>,
    /// The most packets each node had on the wire at once.
    most_on_wire: [usize; 2],
}

const MEM: usize = 64 * 1024;
const BASE: u64 = 0x10_0000;

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + i as u8))
}

impl Pair {
    fn new(mtu: Mtu, psns: [u32; 2]) -> Pair {
        Self::with(mtu, psns, 3)
    }

    /// Two connected engines; `rnr_retry` for both requesters (retry_cnt is 3, timeout 8).
    fn with(mtu: Mtu, psns: [u32; 2], rnr_retry: u8) -> Pair {
        Self::configured(mtu, psns, rnr_retry, EngineConfig::new)
    }

    /// Like [`Pair::with`], each engine configured by `config` (given its address).
    fn configured(
        mtu: Mtu,
        psns: [u32; 2],
        rnr_retry: u8,
        config: impl Fn(IpAddr) -> EngineConfig,
    ) -> Pair {
        let mk = |i: usize| {
            let mut engine = Engine::new(config(ip(i)));
            let pd = engine.alloc_pd();
            let cq = engine.create_cq(1024);
            let mem = Arc::new(VecMemory::new(MEM));
            let key = engine
                .reg_mr(pd, BASE, MEM as u64, AccessFlags::all(), mem.clone())
                .unwrap();
            let qpn = engine
                .create_qp(pd, cq, cq, QpType::Rc, QpCaps::default())
                .unwrap();
            Node {
                engine,
                cq,
                mem,
                key,
                qpn,
            }
        };
        let mut nodes = [mk(0), mk(1)];
        for i in 0..2 {
            let peer_qpn = nodes[1 - i].qpn;
            let e = &mut nodes[i].engine;
            let qpn = nodes[i].qpn;
            e.modify_qp(qpn, &QpAttr::rc_init(AccessFlags::all()))
                .unwrap();
            let av = AddressVector {
                dest_ip: ip(1 - i),
                traffic_class: 0,
                hop_limit: 64,
            };
            let rq_psn = Psn::new(psns[1 - i]);
            e.modify_qp(qpn, &QpAttr::rc_rtr(mtu, av, peer_qpn, rq_psn, 4, 1))
                .unwrap();
            let rts = QpAttr::rc_rts(Psn::new(psns[i]), 8, 3, rnr_retry, 4);
            e.modify_qp(qpn, &rts).unwrap();
        }
        Pair {
            nodes,
            now: Instant::ZERO,
            wire: VecDeque::new(),
            filter: Box::new(|_, _| true),
            log: Vec::new(),
            most_on_wire: [0; 2],
        }
    }

    /// One step: flush all output onto the wire, deliver what has arrived, else jump time.
    /// Returns false when nothing at all is pending.
    fn step(&mut self) -> bool {
        let mut buf = Vec::new();
        for i in 0..2 {
            while let Some(t) = self.nodes[i].engine.poll_transmit(self.now, &mut buf) {
                let data = buf[..t.len].to_vec();
                self.wire.push_back(InFlight {
                    from: i,
                    arrive: self.now + LAT,
                    src: SocketAddr::new(ip(i), t.src_port),
                    data,
                });
            }
        }
        for i in 0..2 {
            let n = self.wire.iter().filter(|p| p.from == i).count();
            self.most_on_wire[i] = self.most_on_wire[i].max(n);
        }
        if let Some(pos) = self.wire.iter().position(|p| p.arrive <= self.now) {
            let p = self.wire.remove(pos).unwrap();
            let pkt = PacketRepr::parse(&p.data).unwrap();
            if (self.filter)(p.from, &pkt) {
                self.log.push((p.from, pkt.bth.opcode, pkt.bth.psn));
                let meta = DatagramMeta::new(p.src, ip(1 - p.from));
                self.nodes[1 - p.from]
                    .engine
                    .handle_datagram(self.now, &meta, &p.data);
            }
            return true;
        }
        let next_arrival = self.wire.iter().map(|p| p.arrive).min();
        let next_timer = self
            .nodes
            .iter()
            .filter_map(|n| n.engine.poll_timeout())
            .min();
        match (next_arrival, next_timer) {
            (None, None) => false,
            (a, t) => {
                let next = [a, t].into_iter().flatten().min().unwrap();
                self.now = self.now.max(next);
                for n in &mut self.nodes {
                    n.engine.handle_timeout(self.now);
                }
                true
            }
        }
    }

    fn drive(&mut self) {
        for _ in 0..100_000 {
            if !self.step() {
                return;
            }
        }
        panic!("pair did not go idle");
    }

    fn post_send(&mut self, i: usize, wr: SendWr) {
        let now = self.now;
        let n = &mut self.nodes[i];
        n.engine.post_send(now, n.qpn, wr).unwrap();
    }

    fn post_recv(&mut self, i: usize, wr_id: u64, addr: u64, len: u32) {
        let n = &mut self.nodes[i];
        n.engine
            .post_recv(
                n.qpn,
                RecvWr {
                    wr_id,
                    sg_list: vec![Sge {
                        addr,
                        length: len,
                        lkey: n.key,
                    }],
                },
            )
            .unwrap();
    }

    fn completions(&mut self, i: usize) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        let n = &mut self.nodes[i];
        n.engine.poll_cq(n.cq, 1 << 20, &mut out).unwrap();
        out
    }

    fn write_mem(&self, i: usize, addr: u64, data: &[u8]) {
        self.nodes[i].mem.write((addr - BASE) as usize, data);
    }

    fn read_mem(&self, i: usize, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.nodes[i].mem.read((addr - BASE) as usize, &mut v);
        v
    }

    fn sge(&self, i: usize, addr: u64, len: u32) -> Sge {
        Sge {
            addr,
            length: len,
            lkey: self.nodes[i].key,
        }
    }

    fn stats(&self, i: usize) -> &Stats {
        self.nodes[i].engine.stats()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn wr(wr_id: u64, op: SendOp, sg_list: Vec<Sge>) -> SendWr {
    SendWr::signaled(wr_id, op, sg_list)
}

/// Drops the `nth` (0-based) packet from `from` whose opcode satisfies `pred`.
fn drop_nth(
    from_node: usize,
    nth: usize,
    pred: impl Fn(&PacketRepr<'_>) -> bool + 'static,
) -> Filter {
    let mut seen = 0;
    Box::new(move |from, pkt| {
        if from == from_node && pred(pkt) {
            seen += 1;
            return seen - 1 != nth;
        }
        true
    })
}

fn kind(pkt: &PacketRepr<'_>) -> OpKind {
    pkt.bth.opcode.info().unwrap().kind
}

fn one_ok(wcs: &[WorkCompletion], wr_id: u64, opcode: WcOpcode, byte_len: u32) {
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode, wcs[0].byte_len),
        (wr_id, WcStatus::Success, opcode, byte_len),
        "{wcs:?}"
    );
}

// --- each operation, with each of its packets dropped once ------------------------------

fn send_case(mtu: Mtu, len: usize, filter: Option<Filter>) {
    let mut p = Pair::new(mtu, [0x10, 0xfffffe]);
    if let Some(f) = filter {
        p.filter = f;
    }
    let data = pattern(len, 7);
    p.write_mem(0, BASE, &data);
    p.post_recv(1, 99, BASE + 0x8000, 16384);
    let s = p.sge(0, BASE, len as u32);
    p.post_send(0, wr(1, SendOp::SendWithImm { imm: 0xabcd }, vec![s]));
    p.drive();
    one_ok(&p.completions(0), 1, WcOpcode::Send, len as u32);
    let r = p.completions(1);
    one_ok(&r, 99, WcOpcode::Recv, len as u32);
    assert_eq!(r[0].imm_data, Some(0xabcd));
    assert_eq!(r[0].src_qp, p.nodes[0].qpn);
    assert_eq!(p.read_mem(1, BASE + 0x8000, len), data);
}

#[test]
fn send_multi_packet() {
    send_case(Mtu::Mtu1024, 4000, None);
    send_case(Mtu::Mtu256, 0, None);
}

#[test]
fn send_drop_each_packet() {
    for nth in 0..4 {
        send_case(
            Mtu::Mtu1024,
            4000,
            Some(drop_nth(0, nth, |p| kind(p) == OpKind::Send)),
        );
    }
    // The ACK.
    send_case(
        Mtu::Mtu1024,
        4000,
        Some(drop_nth(1, 0, |p| kind(p) == OpKind::Acknowledge)),
    );
}

fn write_case(len: usize, filter: Option<Filter>) -> Pair {
    let mut p = Pair::new(Mtu::Mtu1024, [0xfffff0, 5]);
    if let Some(f) = filter {
        p.filter = f;
    }
    let data = pattern(len, 3);
    p.write_mem(0, BASE, &data);
    let s = p.sge(0, BASE, len as u32);
    p.post_send(
        0,
        wr(
            2,
            SendOp::RdmaWrite {
                remote_addr: BASE + 0x100,
                rkey: p.nodes[1].key,
            },
            vec![s],
        ),
    );
    p.drive();
    one_ok(&p.completions(0), 2, WcOpcode::RdmaWrite, len as u32);
    assert!(
        p.completions(1).is_empty(),
        "a WRITE is invisible to the responder's application"
    );
    assert_eq!(p.read_mem(1, BASE + 0x100, len), data);
    p
}

#[test]
fn write_drop_each_packet() {
    write_case(3000, None);
    for nth in 0..3 {
        let p = write_case(3000, Some(drop_nth(0, nth, |p| kind(p) == OpKind::Write)));
        assert!(p.stats(0).retransmitted_packets > 0);
    }
    write_case(
        3000,
        Some(drop_nth(1, 0, |p| kind(p) == OpKind::Acknowledge)),
    );
}

/// A message longer than the requester's in-flight window goes out a window at a time, and
/// so does its go-back-N retransmission: at most `max_inflight_packets` PSNs unacknowledged,
/// counted per packet as rxe's requester counts them (a per-message check let an 8 MiB WRITE
/// out in one 8192-packet burst, which a slow rxe peer's queue mostly dropped, again and
/// again, until the retries ran out).
#[test]
fn long_message_stays_within_the_inflight_window() {
    const WINDOW: u32 = 16;
    let len = 48 * 256; // 48 packets at MTU 256
    let run = |drop_first_window: bool| {
        let window = |ip| EngineConfig {
            max_inflight_packets: WINDOW,
            ..EngineConfig::new(ip)
        };
        let mut p = Pair::configured(Mtu::Mtu256, [0xfffff8, 5], 3, window);
        if drop_first_window {
            // The whole first window is lost: the retransmission is a window too.
            let mut seen = 0u32;
            p.filter = Box::new(move |from, _| {
                seen += u32::from(from == 0);
                from != 0 || seen > WINDOW
            });
        }
        let data = pattern(len, 9);
        p.write_mem(0, BASE, &data);
        let s = p.sge(0, BASE, len as u32);
        let rkey = p.nodes[1].key;
        let op = SendOp::RdmaWrite {
            remote_addr: BASE + 0x8000,
            rkey,
        };
        p.post_send(0, wr(7, op, vec![s]));
        p.step();
        assert_eq!(
            p.wire.iter().filter(|x| x.from == 0).count(),
            WINDOW as usize,
            "the first burst is one window"
        );
        p.drive();
        one_ok(&p.completions(0), 7, WcOpcode::RdmaWrite, len as u32);
        assert_eq!(p.read_mem(1, BASE + 0x8000, len), data);
        assert_eq!(p.most_on_wire[0], WINDOW as usize);
        p
    };
    let p = run(false);
    assert_eq!(p.stats(0).retransmitted_packets, 0);
    let p = run(true);
    assert_eq!(
        p.stats(0).retransmitted_packets,
        u64::from(WINDOW),
        "one timeout resends the lost window and nothing beyond it"
    );
}

fn read_case(len: usize, filter: Option<Filter>) -> Pair {
    let mut p = Pair::new(Mtu::Mtu1024, [0x3, 0x4]);
    if let Some(f) = filter {
        p.filter = f;
    }
    let data = pattern(len, 9);
    p.write_mem(1, BASE + 0x2000, &data);
    let s = p.sge(0, BASE + 0x100, len as u32);
    p.post_send(
        0,
        wr(
            3,
            SendOp::RdmaRead {
                remote_addr: BASE + 0x2000,
                rkey: p.nodes[1].key,
            },
            vec![s],
        ),
    );
    p.drive();
    one_ok(&p.completions(0), 3, WcOpcode::RdmaRead, len as u32);
    assert_eq!(p.read_mem(0, BASE + 0x100, len), data);
    p
}

#[test]
fn read_drop_request_and_each_response() {
    read_case(3500, None);
    read_case(0, None);
    read_case(
        3500,
        Some(drop_nth(0, 0, |p| kind(p) == OpKind::ReadRequest)),
    );
    for nth in 0..4 {
        let p = read_case(
            3500,
            Some(drop_nth(1, nth, |p| kind(p) == OpKind::ReadResponse)),
        );
        assert!(p.stats(1).reads_served >= 2, "the READ was restarted");
    }
}

/// After a timeout has asked for the rest of a READ again, responses beyond the first missing
/// one are the old response still arriving, not a new loss: no second request until the
/// replay shows up or the timer runs out again (rxe's `started_retry`). Answering each such
/// gap with another request made rxe under TCG run several 2 MiB replays at once, lose
/// packets of all of them and exhaust the retries (read-lat -a against ib_read_lat).
#[test]
fn read_timeout_retry_is_not_repeated_for_the_gap_it_left() {
    // 4 response packets; the responder's first answer loses packets 1 to 3 (nothing out
    // of order arrives, the timer fires), its replay from 1 loses packet 1 again.
    let mut seen = [0u32; 4];
    let mut first = None;
    let filter: Filter = Box::new(move |from, pkt| {
        if from != 1 || kind(pkt) != OpKind::ReadResponse {
            return true;
        }
        let base = *first.get_or_insert(pkt.bth.psn);
        let k = pkt.bth.psn.distance(base) as usize;
        seen[k] += 1;
        !matches!((k, seen[k]), (1..=3, 1) | (1, 2))
    });
    let p = read_case(3500, Some(filter));
    let reqs: Vec<Psn> = p
        .log
        .iter()
        .filter(|(f, op, _)| *f == 0 && *op == Opcode::RC_RDMA_READ_REQUEST)
        .map(|(_, _, psn)| *psn)
        .collect();
    // The first timeout asks once; the second, which followed no progress, asks twice
    // (`retry_copies`). None of them is for a gap the replay left.
    assert_eq!(reqs.len(), 4, "the first request, then 1 and 2 per timeout");
    assert!(
        reqs[1..].iter().all(|&psn| psn == reqs[0].add(1)),
        "{reqs:?}"
    );
    assert_eq!(p.stats(0).retransmit_timeouts, 2);
}

#[test]
fn read_restart_asks_only_for_the_rest() {
    // Drop the third response packet: the restarted request must start at its PSN.
    let p = read_case(
        3500,
        Some(drop_nth(1, 2, |p| kind(p) == OpKind::ReadResponse)),
    );
    let reqs: Vec<_> = p
        .log
        .iter()
        .filter(|(f, op, _)| *f == 0 && *op == Opcode::RC_RDMA_READ_REQUEST)
        .collect();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].2, reqs[0].2.add(2));
}

/// A long READ is asked for chunk by chunk, half a window each, so its responses stay within
/// the window like any packets (an 8 MiB READ answered in one burst of 2048 packets overran a
/// 4 MiB socket buffer, and with 16 QPs at once exhausted the retries); a lost response is
/// asked for again only up to the end of its chunk.
#[test]
fn long_read_is_requested_chunk_by_chunk() {
    const WINDOW: u32 = 16;
    let len = 30 * 256; // 30 response packets at MTU 256: chunks of 8, 8, 8 and 6
    let run = |drop_k: Option<i32>| {
        let window = |ip| EngineConfig {
            max_inflight_packets: WINDOW,
            ..EngineConfig::new(ip)
        };
        let mut p = Pair::configured(Mtu::Mtu256, [0xfffff0, 5], 3, window);
        let requests = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let seen = requests.clone();
        let mut first_response = None;
        let mut dropped = false;
        p.filter = Box::new(move |from, pkt| {
            if from == 0 && pkt.bth.opcode == Opcode::RC_RDMA_READ_REQUEST {
                let reth = pkt.ext.reth.expect("a READ request has a RETH");
                seen.borrow_mut().push((pkt.bth.psn, reth.va, reth.dma_len));
            }
            if from == 1 && kind(pkt) == OpKind::ReadResponse {
                let base = *first_response.get_or_insert(pkt.bth.psn);
                if Some(pkt.bth.psn.distance(base)) == drop_k && !dropped {
                    dropped = true;
                    return false;
                }
            }
            true
        });
        let data = pattern(len, 5);
        p.write_mem(1, BASE + 0x4000, &data);
        let s = p.sge(0, BASE + 0x100, len as u32);
        let op = SendOp::RdmaRead {
            remote_addr: BASE + 0x4000,
            rkey: p.nodes[1].key,
        };
        p.post_send(0, wr(9, op, vec![s]));
        p.drive();
        one_ok(&p.completions(0), 9, WcOpcode::RdmaRead, len as u32);
        assert_eq!(p.read_mem(0, BASE + 0x100, len), data);
        if drop_k.is_none() {
            assert_eq!(
                p.most_on_wire[1], WINDOW as usize,
                "two chunks' responses at most"
            );
        }
        let reqs = requests.borrow().clone();
        (p, reqs)
    };
    let (_, reqs) = run(None);
    let first = reqs[0].0;
    let chunks: Vec<_> = [(0u32, 8u32), (8, 8), (16, 8), (24, 6)]
        .iter()
        .map(|&(k, n)| (first.add(k), BASE + 0x4000 + u64::from(k) * 256, n * 256))
        .collect();
    assert_eq!(reqs, chunks, "one request per chunk, in order");
    // Response 10 (in the second chunk) is lost: the request that asks for it again ends
    // where that chunk ends; the chunks after it are asked for again as go-back-N does.
    let (p, reqs) = run(Some(10));
    assert_eq!(
        reqs.iter()
            .find(|r| r.0 == first.add(10))
            .map(|r| (r.1, r.2)),
        Some((BASE + 0x4000 + 10 * 256, 6 * 256)),
        "{reqs:x?}"
    );
    assert!(
        p.stats(1).reads_served >= 5,
        "the chunk was asked for again"
    );
}

fn atomic_case(filter: Option<Filter>, dup: bool) -> Pair {
    let mut p = Pair::new(Mtu::Mtu1024, [0x100, 0x200]);
    if let Some(f) = filter {
        p.filter = f;
    }
    p.write_mem(1, BASE + 0x40, &40u64.to_ne_bytes());
    let rkey = p.nodes[1].key;
    let s = p.sge(0, BASE, 8);
    p.post_send(
        0,
        wr(
            4,
            SendOp::AtomicFetchAdd {
                remote_addr: BASE + 0x40,
                rkey,
                add: 2,
            },
            vec![s],
        ),
    );
    let s2 = p.sge(0, BASE + 8, 8);
    p.post_send(
        0,
        wr(
            5,
            SendOp::AtomicCmpSwap {
                remote_addr: BASE + 0x40,
                rkey,
                compare: 42,
                swap: 7,
            },
            vec![s2],
        ),
    );
    if dup {
        // Deliver the first atomic request twice.
        let mut dup_done = false;
        let mut buf = Vec::new();
        let t = p.nodes[0].engine.poll_transmit(p.now, &mut buf).unwrap();
        for _ in 0..2 {
            let meta = DatagramMeta::new(SocketAddr::new(ip(0), t.src_port), ip(1));
            p.nodes[1]
                .engine
                .handle_datagram(p.now, &meta, &buf[..t.len]);
            dup_done = true;
        }
        assert!(dup_done);
    }
    p.drive();
    let wcs = p.completions(0);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (4, WcStatus::Success, WcOpcode::FetchAdd)
    );
    assert_eq!(
        (wcs[1].wr_id, wcs[1].status, wcs[1].opcode),
        (5, WcStatus::Success, WcOpcode::CompSwap)
    );
    assert_eq!(p.read_mem(0, BASE, 8), 40u64.to_ne_bytes());
    assert_eq!(p.read_mem(0, BASE + 8, 8), 42u64.to_ne_bytes());
    assert_eq!(p.read_mem(1, BASE + 0x40, 8), 7u64.to_ne_bytes());
    assert_eq!(
        p.stats(1).atomics_executed,
        2,
        "each atomic executed exactly once"
    );
    p
}

#[test]
fn atomics_drop_request_and_ack() {
    atomic_case(None, false);
    atomic_case(
        Some(drop_nth(0, 0, |p| {
            matches!(kind(p), OpKind::FetchAdd | OpKind::CompareSwap)
        })),
        false,
    );
    // Losing the first atomic ACK makes the requester resend both atomics (the second ACK
    // implies the first was answered): both are answered from responder resources.
    let p = atomic_case(
        Some(drop_nth(1, 0, |p| kind(p) == OpKind::AtomicAcknowledge)),
        false,
    );
    assert_eq!(p.stats(1).atomics_replayed, 2);
}

#[test]
fn duplicated_atomic_executes_once() {
    let p = atomic_case(None, true);
    assert!(p.stats(1).atomics_replayed >= 1);
}

#[test]
fn retry_exhaustion_then_flush() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    p.filter = Box::new(|from, _| from != 0); // black hole towards node 1
    let s = p.sge(0, BASE, 8);
    p.post_send(
        0,
        wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: BASE,
                rkey: p.nodes[1].key,
            },
            vec![s],
        ),
    );
    p.post_send(0, wr(2, SendOp::Send, vec![s]));
    p.drive();
    let wcs = p.completions(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        p.stats(0).retransmit_timeouts,
        4,
        "retry_cnt 3: the first timeout plus 3 retries"
    );
    assert_eq!(
        p.nodes[0].engine.qp(p.nodes[0].qpn).unwrap().state(),
        QpState::Err
    );
    // Later posts flush at once.
    p.post_send(0, wr(3, SendOp::Send, vec![]));
    assert_eq!(p.completions(0)[0].status, WcStatus::WrFlushErr);
}

#[test]
fn rnr_then_late_recv_succeeds() {
    // rnr_retry 7 retries forever (IBTA), so the late receive is always found.
    let mut p = Pair::with(Mtu::Mtu1024, [1, 2], 7);
    let s = p.sge(0, BASE, 16);
    p.post_send(0, wr(1, SendOp::Send, vec![s]));
    for _ in 0..20 {
        p.step();
    }
    assert!(p.stats(1).naks_sent_of(NakKind::Rnr) >= 1);
    p.post_recv(1, 7, BASE, 64);
    p.drive();
    one_ok(&p.completions(0), 1, WcOpcode::Send, 16);
    one_ok(&p.completions(1), 7, WcOpcode::Recv, 16);
}

#[test]
fn rnr_retry_exhaustion() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    let s = p.sge(0, BASE, 16);
    p.post_send(0, wr(1, SendOp::Send, vec![s]));
    p.post_send(0, wr(2, SendOp::Send, vec![s]));
    p.drive();
    let wcs = p.completions(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        p.stats(1).naks_sent_of(NakKind::Rnr),
        4,
        "rnr_retry 3: first NAK plus 3 retries"
    );
}

#[test]
fn bad_rkey_gives_remote_access_error() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    p.post_recv(1, 50, BASE, 64);
    let s = p.sge(0, BASE, 8);
    p.post_send(
        0,
        wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: BASE,
                rkey: p.nodes[1].key ^ 0x100,
            },
            vec![s],
        ),
    );
    p.post_send(0, wr(2, SendOp::Send, vec![s]));
    p.drive();
    let wcs = p.completions(0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.stats(1).naks_sent_of(NakKind::RemoteAccess), 1);
    // The responder went to ERR too and flushed its receive.
    let r = p.completions(1);
    assert_eq!(
        r.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(50, WcStatus::WrFlushErr)]
    );
    // Out of bounds is the same error.
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    let s = p.sge(0, BASE, 16);
    p.post_send(
        0,
        wr(
            1,
            SendOp::RdmaRead {
                remote_addr: BASE + MEM as u64 - 8,
                rkey: p.nodes[1].key,
            },
            vec![s],
        ),
    );
    p.drive();
    assert_eq!(p.completions(0)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn recv_too_small_gives_length_errors() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    p.post_recv(1, 50, BASE, 8);
    let s = p.sge(0, BASE, 100);
    p.post_send(0, wr(1, SendOp::Send, vec![s]));
    p.drive();
    assert_eq!(p.completions(0)[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.completions(1)[0].status, WcStatus::LocLenErr);
}

#[test]
fn bad_lkey_gives_local_protection_error() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    let mut s = p.sge(0, BASE, 100);
    s.lkey ^= 0x100;
    p.post_send(0, wr(1, SendOp::Send, vec![s]));
    p.drive();
    assert_eq!(p.completions(0)[0].status, WcStatus::LocProtErr);
}

#[test]
fn psn_wraps_at_2_pow_24() {
    // Both directions start a few PSNs before the wrap, and messages span it.
    let mut p = Pair::new(Mtu::Mtu256, [0xfffffd, 0xfffffe]);
    for round in 0..3u64 {
        let data = pattern(1000, round as u8);
        p.write_mem(0, BASE, &data);
        let s = p.sge(0, BASE, 1000);
        p.post_send(
            0,
            wr(
                round,
                SendOp::RdmaWrite {
                    remote_addr: BASE + 0x4000,
                    rkey: p.nodes[1].key,
                },
                vec![s],
            ),
        );
        let s = p.sge(0, BASE + 0x1000, 1000);
        p.post_send(
            0,
            wr(
                100 + round,
                SendOp::RdmaRead {
                    remote_addr: BASE + 0x4000,
                    rkey: p.nodes[1].key,
                },
                vec![s],
            ),
        );
        p.drive();
        let wcs = p.completions(0);
        assert_eq!(
            wcs.iter().map(|w| w.status).collect::<Vec<_>>(),
            vec![WcStatus::Success; 2]
        );
        assert_eq!(p.read_mem(0, BASE + 0x1000, 1000), data);
    }
    assert!(
        p.log.iter().any(|(_, _, psn)| psn.value() < 16),
        "PSNs wrapped"
    );
}

#[test]
fn unsignaled_writes_complete_silently_in_order() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    let s = p.sge(0, BASE, 8);
    let rkey = p.nodes[1].key;
    let mut w = wr(
        1,
        SendOp::RdmaWrite {
            remote_addr: BASE,
            rkey,
        },
        vec![s],
    );
    w.flags = SendFlags::empty();
    p.post_send(0, w);
    p.post_send(
        0,
        wr(
            2,
            SendOp::RdmaWrite {
                remote_addr: BASE + 8,
                rkey,
            },
            vec![s],
        ),
    );
    p.drive();
    let wcs = p.completions(0);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn sequence_error_naks_once_and_recovers() {
    // Drop the first of 4 SEND packets: the responder NAKs once for packets 2..4.
    let mut p = Pair::new(Mtu::Mtu256, [1, 2]);
    p.filter = drop_nth(0, 0, |p| kind(p) == OpKind::Send);
    p.post_recv(1, 9, BASE + 0x1000, 4096);
    let s = p.sge(0, BASE, 1024);
    p.post_send(0, wr(1, SendOp::Send, vec![s]));
    p.drive();
    assert_eq!(p.stats(1).naks_sent_of(NakKind::PsnSequence), 1);
    one_ok(&p.completions(0), 1, WcOpcode::Send, 1024);
    one_ok(&p.completions(1), 9, WcOpcode::Recv, 1024);
}

#[test]
fn peer_ipv4_id_habit_is_learned() {
    use softrdma_wire::IcrcContext;
    // node 0 sends SENDs; re-fill the ICRC of each as if the kernel had used `id`.
    let deliver = |p: &mut Pair, id: u16| -> bool {
        let s = p.sge(0, BASE, 8);
        p.post_recv(1, 1, BASE, 64);
        p.post_send(0, wr(1, SendOp::Send, vec![s]));
        let mut buf = Vec::new();
        let t = p.nodes[0].engine.poll_transmit(p.now, &mut buf).unwrap();
        let mut data = buf[..t.len].to_vec();
        let ctx = IcrcContext {
            ipv4_id: id,
            ..IcrcContext::new(ip(0), ip(1), t.src_port, 4791)
        };
        ctx.fill(&mut data).unwrap();
        let before = p.stats(1).drops_for(DropReason::BadIcrc);
        let meta = DatagramMeta::new(SocketAddr::new(ip(0), t.src_port), ip(1));
        p.nodes[1].engine.handle_datagram(p.now, &meta, &data);
        p.drive();
        p.completions(0);
        p.completions(1);
        p.stats(1).drops_for(DropReason::BadIcrc) == before
    };
    // A softrdma-like peer: identification 0 (or a small GSO segment number) every time.
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    for i in 0..10 {
        assert!(deliver(&mut p, (i % 3) as u16));
    }
    assert!(
        !deliver(&mut p, 0x1234),
        "a large identification from a zero-ID peer is a corruption"
    );
    // The same large identification again (a stuck bit aliases the same way) changes nothing.
    for _ in 0..3 {
        assert!(!deliver(&mut p, 0x1234));
    }
    // A peer that keeps counting up is a counting peer that happened to start low.
    assert!(!deliver(&mut p, 0x1235));
    assert!(deliver(&mut p, 0x1236));
    assert!(deliver(&mut p, 0x1237));
    // An rxe-like peer counts up from anywhere: accepted.
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    for i in 0..10 {
        assert!(deliver(&mut p, 0xe565 + i));
    }
}

/// A NAK can acknowledge the WQEs before the one it fails (its PSN minus one). Those complete
/// successfully, the NAKed one carries the error, and only the ones after it are flushed —
/// here with the ACK of the first WRITE lost, so the NAK is what acknowledges it.
#[test]
fn nak_completes_earlier_wqes_and_fails_the_right_one() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    p.filter = drop_nth(1, 0, |p| kind(p) == OpKind::Acknowledge);
    let s = p.sge(0, BASE, 8);
    let rkey = p.nodes[1].key;
    p.post_send(
        0,
        wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: BASE,
                rkey,
            },
            vec![s],
        ),
    );
    p.post_send(
        0,
        wr(
            2,
            SendOp::RdmaWrite {
                remote_addr: BASE,
                rkey: rkey ^ 0x100,
            },
            vec![s],
        ),
    );
    p.post_send(
        0,
        wr(
            3,
            SendOp::RdmaWrite {
                remote_addr: BASE,
                rkey,
            },
            vec![s],
        ),
    );
    p.drive();
    let got: Vec<_> = p
        .completions(0)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::RemAccessErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
}

/// RNR retries run out on the second SEND while the first was received: the first succeeds,
/// the second fails with RNR_RETRY_EXC_ERR, the third is flushed.
#[test]
fn rnr_exhaustion_after_a_received_send() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    p.post_recv(1, 70, BASE, 64); // exactly one receive
    let s = p.sge(0, BASE, 16);
    for id in 1..=3 {
        p.post_send(0, wr(id, SendOp::Send, vec![s]));
    }
    p.drive();
    let got: Vec<_> = p
        .completions(0)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::RnrRetryExcErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    one_ok(&p.completions(1), 70, WcOpcode::Recv, 16);
}

/// A fatal error detected by the responder (a WRITE to a bad rkey) puts the responder's QP in
/// the error state too: its own outstanding SENDs and its receives are flushed, and later
/// requests to it are dropped, not executed.
#[test]
fn responder_error_flushes_the_responders_own_work() {
    let mut p = Pair::new(Mtu::Mtu1024, [1, 2]);
    p.post_recv(1, 80, BASE, 64);
    let s1 = p.sge(1, BASE + 0x100, 8);
    // Node 1 has a SEND of its own outstanding (node 0 posted no receive: it RNR-waits).
    p.post_send(1, wr(81, SendOp::Send, vec![s1]));
    let s0 = p.sge(0, BASE, 8);
    let bad = p.nodes[1].key ^ 0x100;
    p.post_send(
        0,
        wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: BASE,
                rkey: bad,
            },
            vec![s0],
        ),
    );
    p.drive();
    assert_eq!(p.completions(0)[0].status, WcStatus::RemAccessErr);
    let mut got: Vec<_> = p
        .completions(1)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    got.sort_unstable_by_key(|(id, _)| *id);
    assert_eq!(
        got,
        vec![(80, WcStatus::WrFlushErr), (81, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        p.nodes[1].engine.qp(p.nodes[1].qpn).unwrap().state(),
        QpState::Err
    );
    // Nothing reached node 1's memory.
    assert_eq!(p.read_mem(1, BASE, 8), vec![0; 8]);
}
