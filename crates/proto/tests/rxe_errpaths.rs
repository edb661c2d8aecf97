//! RC error paths, packet by packet, against Linux rxe: the crafted packets of
//! `scripts/lab/errpaths.py`, replayed into softrdma's engine, must get the answers Linux
//! 6.1's rdma_rxe gave them in the lab (`fixtures/rxe_errpaths.txt`, written by
//! `scripts/lab/errpaths.sh` with `ERR_FIXTURE=1`), or the ones [`DIFFERENCES`] documents.
//!
//! The fixture is the injector's transcript of rxe, case by case. A *responder* case lists
//! the requests sent to the QP under test (`in`), each followed by what the QP answered
//! within 300 ms (`out`: opcode, PSN, AETH syndrome, MSN); a *requester* case names the work
//! requests the QP's application posted (`post`) and how the injector answered them
//! (`policy`), then every request packet the QP sent (`seen`). Both end with the
//! application's completions and the QP state (`wc STATUS:OPCODE:BYTES:MS ... state=S`).
//! This test plays the injector against one engine in virtual time, writes softrdma's
//! transcript the same way, and compares the two after [`normalize`], which keeps what IBTA
//! defines and drops what it leaves open (timings; the opcode and length of an error
//! completion, which ibverbs leaves undefined; how many packets one retransmission round
//! sends: what counts is the number of rounds).

mod common;

use std::collections::VecDeque;

use common::*;
use softrdma_proto::*;
use softrdma_wire::{IcrcContext, PacketRepr, Psn};

const FIXTURE: &str = include_str!("fixtures/rxe_errpaths.txt");
/// The first PSN of the injector's requests (the QP's rq_psn) and the QP's own first PSN.
const RQ_PSN: u32 = 0x100;
const SQ_PSN: u32 = 0x500;
/// The injector's QPN, and where the QP's own requests point (errpaths_dut's constants).
const OUR_QPN: u32 = 0x4242;
const BAD_RKEY_XOR: u32 = 0x00AB_CD00;
const PORT: u16 = 0xd00d;
/// The injector's round trip in the replay (the lab's was 0.1–1 ms).
const RTT: Duration = Duration::from_micros(100);
/// How long the injector waits for answers after each request of a responder case.
const STEP_WAIT: Duration = Duration::from_millis(300);
/// More transmissions than this in a case's window: retries without end.
const UNBOUNDED: usize = 16;

/// Where softrdma answers differently from rxe, on purpose: (case, rxe's normalized line,
/// softrdma's, why). Each must match a line of the fixture, so a stale entry fails too.
const DIFFERENCES: &[(&str, &str, &str, &str)] = &[
    (
        "psn_ahead",
        "out ACKNOWLEDGE psn=0x100 syn=0x1f msn=1",
        "out ACKNOWLEDGE psn=0x101 syn=0x60 msn=1",
        "IBTA C9-92: NAK the first out-of-sequence request, drop the rest until the expected \
         PSN comes. softrdma keeps the early SENDs instead (qp/responder/reorder.rs); when the expected \
         PSN came and a gap remains before the kept ones, it NAKs that gap at once: the \
         NAK-once state ends with the expected PSN, and a PSN sequence NAK acknowledges \
         everything before it. rxe dropped them, so it only ACKs",
    ),
    (
        "psn_window_edge_behind",
        "out ACKNOWLEDGE psn=0xffffff syn=0x1f msn=0",
        "out ACKNOWLEDGE psn=0xff syn=0x1f msn=0",
        "IBTA 9.7.5.1.6: a duplicate SEND or WRITE is acknowledged again. Before anything was \
         executed softrdma names expected - 1, the newest PSN done; rxe its last acknowledged \
         PSN, still its initial 0 - 1, unrelated to rq_psn. Both lie before anything the \
         requester has outstanding, which ignores them",
    ),
    (
        "psn_far_behind",
        "out ACKNOWLEDGE psn=0xffffff syn=0x1f msn=0",
        "out ACKNOWLEDGE psn=0xff syn=0x1f msn=0",
        "as psn_window_edge_behind",
    ),
    (
        "retry_cnt_7",
        "timeouts unbounded",
        "timeouts 8",
        "the transport retry count is 0..7 retries (IBTA 9.7.5.1.3, the Modify QP attributes \
         of chapter 11, ibv_modify_qp(3)); only the RNR retry count gives 7 the meaning \
         'infinite'. rxe 6.1 never decrements a retry_cnt of 7: it resent every 67 ms for as \
         long as the lab watched (6 s, 89 times)",
    ),
    (
        "retry_cnt_7",
        "wc state=RTS",
        "wc 12 state=ERR",
        "the same: seven retries without progress end in RETRY_EXC_ERR and the error state",
    ),
    (
        "ghost_ack",
        "seen SEND_ONLY@0x500",
        "seen SEND_ONLY@0x500 SEND_ONLY@0x500",
        "an ACK for a PSN after the last one sent acknowledges nothing the requester sent \
         (IBTA 9.7.5: a response's PSN is checked against the outstanding requests) and is \
         dropped, so the SEND goes again and the honest ACK completes it. rxe takes it as \
         acknowledging everything before it and completes a SEND nobody acknowledged",
    ),
];

/// Normalized lines of one case: what IBTA fixes, none of what it leaves to the device.
fn normalize(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let requester = lines[0].split_whitespace().nth(2) == Some("requester");
    let policy = lines
        .iter()
        .find_map(|l| l.strip_prefix("policy "))
        .unwrap_or("");
    let mut seen = Vec::new();
    let mut timeouts = None;
    for l in lines {
        let (kind, rest) = l.split_once(' ').unwrap_or((l, ""));
        match kind {
            "seen" | "late" => {
                let mut w = rest.split_whitespace();
                let op = w.next().unwrap();
                let psn = w.next().unwrap().trim_start_matches("psn=");
                seen.push(format!("{op}@{psn}"));
            }
            "timeouts" => timeouts = Some(rest.parse::<usize>().unwrap()),
            "wc" => {
                if requester {
                    out.push(summary(policy, &seen, timeouts));
                }
                let mut v = vec!["wc".to_string()];
                for w in rest.split_whitespace() {
                    if w.starts_with("state=") {
                        v.push(w.to_string());
                        continue;
                    }
                    let f: Vec<&str> = w.split(':').collect();
                    // ibverbs: only wr_id, status, qp_num and vendor_err are valid in an
                    // error completion.
                    v.push(if f[0] == "0" {
                        format!("{}:{}:{}", f[0], f[1], f[2])
                    } else {
                        f[0].to_string()
                    });
                }
                out.push(v.join(" "));
            }
            _ => out.push(l.clone()),
        }
    }
    out
}

/// A requester case's packets, as IBTA counts them: RNR retries are one packet each; a
/// retransmit timeout's round may send several (softrdma's do, see `retry_copies`), so it is
/// the rounds that count — rxe sends one packet per timeout (its captures: 67 ms apart), so
/// its transmissions are its rounds; the other policies' exact sequence.
fn summary(policy: &str, seen: &[String], timeouts: Option<usize>) -> String {
    let bounded = |n: usize| {
        if n > UNBOUNDED {
            "unbounded".to_string()
        } else {
            n.to_string()
        }
    };
    if policy.starts_with("rnr:") {
        format!("transmissions {}", bounded(seen.len()))
    } else if policy == "silent" {
        format!("timeouts {}", bounded(timeouts.unwrap_or(seen.len())))
    } else {
        format!("seen {}", seen.join(" "))
    }
}

/// The fixture's cases: each a `case` line and the lines after it.
fn cases(text: &str) -> Vec<Vec<String>> {
    let mut v: Vec<Vec<String>> = Vec::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        if l.starts_with("case ") {
            v.push(Vec::new());
        }
        v.last_mut()
            .expect("the fixture starts with a case")
            .push(l.to_string());
    }
    v
}

fn key(words: &str, k: &str) -> Option<i64> {
    words.split_whitespace().find_map(|w| {
        let v = w.strip_prefix(k)?.strip_prefix('=')?;
        let (neg, v) = v.strip_prefix('-').map_or((false, v), |v| (true, v));
        let n = match v.strip_prefix("0x") {
            Some(h) => i64::from_str_radix(h, 16).ok()?,
            None => v.parse().ok()?,
        };
        Some(if neg { -n } else { n })
    })
}

const NAMES: &[(u8, &str)] = &[
    (0x00, "SEND_FIRST"),
    (0x01, "SEND_MIDDLE"),
    (0x02, "SEND_LAST"),
    (0x04, "SEND_ONLY"),
    (0x06, "WRITE_FIRST"),
    (0x0a, "WRITE_ONLY"),
    (0x0c, "READ_REQUEST"),
    (0x0d, "READ_RESPONSE_FIRST"),
    (0x0e, "READ_RESPONSE_MIDDLE"),
    (0x0f, "READ_RESPONSE_LAST"),
    (0x10, "READ_RESPONSE_ONLY"),
    (0x11, "ACKNOWLEDGE"),
    (0x12, "ATOMIC_ACKNOWLEDGE"),
    (0x13, "COMPARE_SWAP"),
    (0x14, "FETCH_ADD"),
    (0x64, "UD_SEND_ONLY"),
    (0x1f, "RESERVED_1F"),
];

fn op_code(name: &str) -> u8 {
    NAMES.iter().find(|(_, n)| *n == name).unwrap().0
}

fn op_name(code: u8) -> String {
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(format!("OP_{code:02x}"), |(_, n)| n.to_string())
}

/// One RoCEv2 packet from the injector (ip(1)) with a valid ICRC, built byte by byte as
/// errpaths.py builds it: BTH, then `ext`, the payload, its pad and the ICRC.
fn packet(opcode: u8, qpn: u32, psn: u32, ack_req: bool, ext: &[u8], payload: &[u8]) -> Vec<u8> {
    let pad = (4 - payload.len() % 4) % 4;
    let mut b = vec![opcode, (pad as u8) << 4, 0xff, 0xff];
    b.extend_from_slice(&(qpn & 0xff_ffff).to_be_bytes());
    b.extend_from_slice(&((u32::from(ack_req) << 31) | (psn & 0xff_ffff)).to_be_bytes());
    b.extend_from_slice(ext);
    b.extend_from_slice(payload);
    b.resize(b.len() + pad + 4, 0);
    IcrcContext::new(ip(1), ip(0), PORT, 4791)
        .fill(&mut b)
        .unwrap();
    b
}

fn aeth(syn: u8, msn: u32) -> [u8; 4] {
    ((u32::from(syn) << 24) | (msn & 0xff_ffff)).to_be_bytes()
}

/// A network with the QP under test, set up from the keys of the case's first line.
fn dut(case: &[String]) -> (Net, u32) {
    let mut net = Net::new(1);
    let keys = case[0].split_whitespace().skip(3).collect::<Vec<_>>();
    let qpn = setup(&mut net, &keys.join(" "));
    (net, qpn)
}

/// The QP under test on node 0, as errpaths_dut sets it up from the case's keys.
fn setup(net: &mut Net, keys: &str) -> u32 {
    let get = |k: &str, d: i64| key(keys, k).unwrap_or(d) as u8;
    let n = &mut net.nodes[0];
    let qpn = n
        .engine
        .create_qp(n.pd, n.cq, n.cq, QpType::Rc, QpCaps::default())
        .unwrap();
    n.engine
        .modify_qp(qpn, &QpAttr::rc_init(AccessFlags::all()))
        .unwrap();
    for i in 0..get("recvs", 0) {
        net.recv(0, qpn, 100 + u64::from(i), 32768, 32768);
    }
    let av = AddressVector {
        dest_ip: ip(1),
        traffic_class: 0,
        hop_limit: 64,
    };
    let rtr = QpAttr::rc_rtr(
        Mtu::Mtu1024,
        av,
        OUR_QPN,
        Psn::new(RQ_PSN),
        16,
        get("min_rnr", 12),
    );
    let e = &mut net.nodes[0].engine;
    e.modify_qp(qpn, &rtr).unwrap();
    let rts = QpAttr::rc_rts(
        Psn::new(SQ_PSN),
        get("timeout", 14),
        get("retry_cnt", 7),
        get("rnr_retry", 7),
        16,
    );
    e.modify_qp(qpn, &rts).unwrap();
    qpn
}

fn deliver(net: &mut Net, pkt: &[u8]) {
    let meta = DatagramMeta::new(std::net::SocketAddr::new(ip(1), PORT), ip(0));
    net.nodes[0].engine.handle_datagram(net.now, &meta, pkt);
}

/// One packet node 0 sent, parsed: (opcode, PSN, syndrome and MSN if an AETH, RETH length,
/// AckReq).
struct Sent {
    op: u8,
    psn: u32,
    aeth: Option<(u8, u32)>,
    len: u32,
    ack_req: bool,
}

fn transmit(net: &mut Net) -> Vec<Sent> {
    let mut v = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = net.nodes[0].engine.poll_transmit(net.now, &mut buf) {
        let p = PacketRepr::parse(&buf[..t.len]).unwrap();
        v.push(Sent {
            op: p.bth.opcode.0,
            psn: p.bth.psn.value(),
            aeth: p.ext.aeth.map(|a| (a.syndrome.to_byte(), a.msn)),
            len: p.ext.reth.map_or(0, |r| r.dma_len),
            ack_req: p.bth.ack_req,
        });
    }
    v
}

/// Runs node 0's timers until `end` (or until nothing is pending).
fn settle(net: &mut Net, end: Instant, out: &mut Vec<String>) {
    loop {
        for s in transmit(net) {
            out.push(format!("out {}", fmt_out(&s)));
        }
        match net.nodes[0].engine.poll_timeout() {
            Some(at) if at <= end => {
                net.now = net.now.max(at);
                let now = net.now;
                net.nodes[0].engine.handle_timeout(now);
            }
            _ => break,
        }
    }
    net.now = net.now.max(end);
}

fn fmt_out(s: &Sent) -> String {
    let mut l = format!("{} psn=0x{:x}", op_name(s.op), s.psn);
    if let Some((syn, msn)) = s.aeth {
        l += &format!(" syn=0x{syn:02x} msn={msn}");
    }
    l
}

fn wc_line(net: &mut Net, qpn: u32) -> String {
    let mut l = "wc".to_string();
    for wc in net.completions(0) {
        let op = match wc.opcode {
            WcOpcode::Send => 0,
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RdmaRead => 2,
            WcOpcode::CompSwap => 3,
            WcOpcode::FetchAdd => 4,
            WcOpcode::Recv => 128,
            other => panic!("{other:?}"),
        };
        l += &format!(" {}:{op}:{}:0", wc.status.ibv_code(), wc.byte_len);
    }
    let state = match net.nodes[0].engine.qp(qpn).unwrap().state() {
        QpState::Rts => "RTS",
        QpState::Err => "ERR",
        QpState::Sqe => "SQE",
        other => panic!("{other:?}"),
    };
    l + &format!(" state={state}")
}

/// A responder case: the fixture's requests into the QP, its answers after each.
fn replay_responder(case: &[String]) -> Vec<String> {
    let (mut net, qpn) = dut(case);
    let rkey = net.nodes[0].key;
    let mut out = vec![case[0].clone()];
    for l in &case[1..] {
        if let Some(n) = l.strip_prefix("recv ") {
            for i in 0..n.parse::<u64>().unwrap() {
                net.recv(0, qpn, 200 + i, 32768, 32768);
            }
            out.push(l.clone());
            continue;
        }
        let Some(rest) = l.strip_prefix("in ") else {
            continue;
        };
        out.push(l.clone());
        let (op, args) = rest.split_once(' ').unwrap();
        let psn = key(args, "psn").unwrap().rem_euclid(1 << 24) as u32;
        let len = key(args, "len").unwrap_or(0) as usize;
        let va = BASE + key(args, "va").unwrap_or(0) as u64;
        let rk = if args.contains("rkey=bad") {
            rkey ^ BAD_RKEY_XOR
        } else {
            rkey
        };
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        let mut ext = Vec::new();
        let mut pay = &payload[..];
        match op {
            "WRITE_ONLY" | "WRITE_FIRST" | "READ_REQUEST" => {
                ext.extend_from_slice(&va.to_be_bytes());
                ext.extend_from_slice(&rk.to_be_bytes());
                ext.extend_from_slice(&(len as u32).to_be_bytes());
                if op == "READ_REQUEST" {
                    pay = &[];
                }
            }
            "COMPARE_SWAP" | "FETCH_ADD" => {
                ext.extend_from_slice(&va.to_be_bytes());
                ext.extend_from_slice(&rk.to_be_bytes());
                ext.extend_from_slice(&1u64.to_be_bytes());
                ext.extend_from_slice(&0x5a5a_5a5a_5a5a_5a5au64.to_be_bytes());
                pay = &[];
            }
            "UD_SEND_ONLY" => {
                ext.extend_from_slice(&QKEY.to_be_bytes());
                ext.extend_from_slice(&OUR_QPN.to_be_bytes());
            }
            "ACKNOWLEDGE" => {
                ext.extend_from_slice(&aeth(0x1f, 1));
                pay = &[];
            }
            _ => {}
        }
        let pkt = packet(op_code(op), qpn, psn, op != "ACKNOWLEDGE", &ext, pay);
        deliver(&mut net, &pkt);
        let end = net.now + STEP_WAIT;
        settle(&mut net, end, &mut out);
    }
    let end = net.now + Duration::from_millis(500);
    settle(&mut net, end, &mut out);
    out.push(wc_line(&mut net, qpn));
    out
}

/// The injector's answers to the QP's request packets, by policy (errpaths.py's
/// `run_requester`).
struct Injector {
    policy: String,
    msn: u32,
    n: usize,
    done: bool,
}

impl Injector {
    /// The honest answer: complete what the request asks.
    fn answer(&mut self, qpn: u32, s: &Sent) -> Option<Vec<u8>> {
        let name = op_name(s.op);
        match name.as_str() {
            "READ_REQUEST" => {
                self.msn += 1;
                let data = vec![0u8; s.len as usize];
                Some(packet(
                    0x10,
                    qpn,
                    s.psn,
                    false,
                    &aeth(0x1f, self.msn),
                    &data,
                ))
            }
            "COMPARE_SWAP" | "FETCH_ADD" => {
                self.msn += 1;
                let mut ext = aeth(0x1f, self.msn).to_vec();
                ext.extend_from_slice(&[0; 8]);
                Some(packet(0x12, qpn, s.psn, false, &ext, &[]))
            }
            "SEND_LAST" | "SEND_ONLY" | "WRITE_ONLY" => {
                self.msn += 1;
                Some(packet(0x11, qpn, s.psn, false, &aeth(0x1f, self.msn), &[]))
            }
            _ if s.ack_req => Some(packet(0x11, qpn, s.psn, false, &aeth(0x1f, self.msn), &[])),
            _ => None,
        }
    }

    fn react(&mut self, qpn: u32, s: &Sent) -> Option<Vec<u8>> {
        self.n += 1;
        let ack = |psn: u32, syn: u8, msn: u32| packet(0x11, qpn, psn, false, &aeth(syn, msn), &[]);
        let name = op_name(s.op);
        let p = self.policy.clone();
        if p == "silent" {
            None
        } else if let Some(t) = p.strip_prefix("rnr:") {
            Some(ack(s.psn, 0x20 | t.parse::<u8>().unwrap(), self.msn))
        } else if let Some(c) = p.strip_prefix("nak:") {
            Some(ack(s.psn, 0x60 | c.parse::<u8>().unwrap(), self.msn))
        } else if p == "ghost" {
            if self.n == 1 {
                Some(ack(s.psn + 10, 0x1f, 1))
            } else {
                self.answer(qpn, s)
            }
        } else if p == "seqnak" {
            if name == "SEND_LAST" && !self.done {
                self.done = true;
                Some(ack(SQ_PSN + 1, 0x60, self.msn))
            } else if self.done {
                self.answer(qpn, s)
            } else {
                None
            }
        } else if p == "implied" {
            if name == "READ_REQUEST" && !self.done {
                None
            } else if name == "SEND_ONLY" && !self.done {
                self.done = true;
                Some(ack(s.psn, 0x1f, 1))
            } else {
                self.answer(qpn, s)
            }
        } else {
            panic!("unknown policy {p}")
        }
    }
}

/// A requester case: the fixture's work requests posted, the injector answering as its
/// policy says, for the case's window (errpaths.py's, in virtual time).
fn replay_requester(case: &[String], name: &str) -> Vec<String> {
    let (mut net, qpn) = dut(case);
    let mut out = vec![case[0].clone()];
    let policy = case
        .iter()
        .find_map(|l| l.strip_prefix("policy "))
        .unwrap()
        .to_string();
    out.push(format!("policy {policy}"));
    let t0 = net.now;
    for (i, l) in case
        .iter()
        .filter_map(|l| l.strip_prefix("post "))
        .enumerate()
    {
        let (op, len) = l.split_once(' ').unwrap();
        let (rkey, va) = (0x1234, 0x10000);
        let op = match op {
            "send" => SendOp::Send,
            "write" => SendOp::RdmaWrite {
                remote_addr: va,
                rkey,
            },
            "read" => SendOp::RdmaRead {
                remote_addr: va,
                rkey,
            },
            "faa" => SendOp::AtomicFetchAdd {
                remote_addr: va,
                rkey,
                add: 1,
            },
            "cas" => SendOp::AtomicCmpSwap {
                remote_addr: va,
                rkey,
                compare: 1,
                swap: 2,
            },
            other => panic!("{other}"),
        };
        let sge = net.sge(0, 0, len.parse().unwrap());
        let now = net.now;
        net.nodes[0]
            .engine
            .post_send(now, qpn, wr(1 + i as u64, op, sge))
            .unwrap();
        out.push(format!("post {l}"));
    }
    // errpaths.py's observation windows (seconds), and 300 ms more for late packets.
    let window_ms = match name {
        n if n.starts_with("retry_cnt_7") => 6000,
        n if n.starts_with("retry_cnt") => 4000,
        _ => 3000,
    };
    let end = t0 + Duration::from_millis(window_ms + 300);
    let mut inj = Injector {
        policy,
        msn: 0,
        n: 0,
        done: false,
    };
    let mut wire: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut seen = 0usize;
    loop {
        for s in transmit(&mut net) {
            seen += 1;
            out.push(format!("seen {} psn=0x{:x}", op_name(s.op), s.psn));
            if let Some(p) = inj.react(qpn, &s) {
                wire.push_back((net.now + RTT, p));
            }
        }
        if seen > 2000 {
            break; // retries without end: enough seen
        }
        let timer = net.nodes[0].engine.poll_timeout();
        let next = match (wire.front().map(|w| w.0), timer) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => break,
            },
        };
        if next > end {
            break;
        }
        net.now = net.now.max(next);
        while wire.front().is_some_and(|w| w.0 <= net.now) {
            let (_, p) = wire.pop_front().unwrap();
            deliver(&mut net, &p);
        }
        let now = net.now;
        net.nodes[0].engine.handle_timeout(now);
    }
    out.push(format!(
        "timeouts {}",
        net.nodes[0].engine.stats().retransmit_timeouts
    ));
    out.push(wc_line(&mut net, qpn));
    out
}

#[test]
fn softrdma_answers_the_crafted_packets_as_rxe_does() {
    let cases = cases(FIXTURE);
    assert!(cases.len() >= 30, "the fixture has {} cases", cases.len());
    let mut used = vec![false; DIFFERENCES.len()];
    let mut failures = Vec::new();
    for case in &cases {
        let name = case[0].split_whitespace().nth(1).unwrap();
        let requester = case[0].split_whitespace().nth(2) == Some("requester");
        let mine = if requester {
            replay_requester(case, name)
        } else {
            replay_responder(case)
        };
        let mut expected = normalize(case);
        for (i, (c, rxe, ours, _)) in DIFFERENCES.iter().enumerate() {
            if *c != name {
                continue;
            }
            if let Some(l) = expected.iter_mut().find(|l| l == rxe) {
                *l = ours.to_string();
                used[i] = true;
            }
        }
        let got = normalize(&mine);
        if got != expected {
            failures.push(format!(
                "{name}:\n  rxe (with DIFFERENCES): {expected:#?}\n  softrdma: {got:#?}"
            ));
        }
    }
    for (i, u) in used.iter().enumerate() {
        if !u {
            failures.push(format!(
                "DIFFERENCES[{i}] ({}: {:?}) matches no line of the fixture",
                DIFFERENCES[i].0, DIFFERENCES[i].1
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The case rxe cannot answer: Linux 6.1's rdma_rxe panics on a packet with a reserved RC
/// opcode (0x1f), in its ICRC check, which takes the packet's length from an opcode table
/// that has no entry for it (seen in the lab; the injector spares rxe this case). softrdma
/// drops it as an unknown opcode, uncounted against the QP: the PSN is not consumed, no
/// answer goes out, and the SEND at the same PSN after it is executed and acknowledged.
#[test]
fn a_reserved_opcode_is_dropped_and_the_qp_lives_on() {
    let case: Vec<String> = [
        "case opcode_reserved responder recvs=2",
        "in RESERVED_1F psn=0x100 len=8",
        "in SEND_ONLY psn=0x100 len=8",
    ]
    .map(String::from)
    .to_vec();
    assert!(!FIXTURE.contains("case opcode_reserved"));
    assert_eq!(
        normalize(&replay_responder(&case)),
        [
            "case opcode_reserved responder recvs=2",
            "in RESERVED_1F psn=0x100 len=8",
            "in SEND_ONLY psn=0x100 len=8",
            "out ACKNOWLEDGE psn=0x100 syn=0x1f msn=1",
            "wc 0:128:8 state=RTS",
        ]
    );
}
