//! Scripted two-CM tests (the `Pair` pattern of `crates/proto/tests/pair.rs`): two rdma_cm
//! instances joined by an in-memory GSI "wire" with virtual time that jumps to the next
//! deadline. Each test scripts its faults — lost, duplicated, delayed MADs, a listener that
//! goes away, a consumer that refuses — and asserts the events each side sees, the MADs on the
//! wire (attribute, sender, time, bytes) and the counters.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use softrdma_cm::ib::{CmConfig, CmDrop, CmState, CMA_MRA_SERVICE_TIMEOUT};
use softrdma_cm::rdma::{
    ConnParam, RdmaCm, RdmaEvent, RdmaEventKind, RdmaId, RdmaQpType, RdmaState, Route,
};
use softrdma_proto::{Duration, Instant, QpState};
use softrdma_wire::mad::cm::{attr, CmMad, CmMessage, MsgResponse, RejectReason, SidrStatus};
use softrdma_wire::mad::cma::{PortSpace, RDMA_UDP_QKEY};
use softrdma_wire::mad::{MadHeader, Method, MgmtClass, MAD_LEN};
use softrdma_wire::Gid;

/// One-way latency of the virtual wire.
const LAT: Duration = Duration::from_micros(50);
const MS: u64 = 1_000_000;

/// rdma_cm's REQ wait: 2 × 2^(18−8) ms + 2^(20−8) ms.
const REQ_TIMEOUT: Duration = Duration::from_millis(6144);
/// The passive side's REP wait: the REQ's local CM response timeout, 2^(20−8) ms.
const REP_TIMEOUT: Duration = Duration::from_millis(4096);
/// Time-wait: the ACK timeout code 19 → 2^11 ms.
const TIMEWAIT: Duration = Duration::from_millis(2048);

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + i as u8))
}

/// What the wire does with one MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    Duplicate,
    Delay(Duration),
}

/// A MAD put on the wire.
#[derive(Debug, Clone)]
struct Sent {
    from: usize,
    at: Instant,
    mad: CmMad,
    bytes: [u8; MAD_LEN],
    fate: Fate,
}

impl Sent {
    fn name(&self) -> &'static str {
        self.mad.msg.name()
    }
}

struct InFlight {
    to: usize,
    from: usize,
    arrive: Instant,
    seq: u64,
    bytes: [u8; MAD_LEN],
}

type FateFn = Box<dyn FnMut(&Sent, usize) -> Fate>;

/// How a node's consumer reacts to events on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Auto {
    accept: bool,
    complete: bool,
    disconnect_reply: bool,
    destroy_after_timewait: bool,
}

const MANUAL: Auto = Auto {
    accept: false,
    complete: false,
    disconnect_reply: false,
    destroy_after_timewait: false,
};
const AUTO: Auto = Auto {
    accept: true,
    complete: true,
    disconnect_reply: true,
    destroy_after_timewait: false,
};

struct Node {
    cm: RdmaCm,
    events: Vec<(Instant, RdmaEvent)>,
    seen: usize,
    auto: Auto,
}

struct Pair {
    nodes: [Node; 2],
    now: Instant,
    wire: Vec<InFlight>,
    seq: u64,
    fate: FateFn,
    /// Per (sender, attribute): how many have been sent, for "drop the first REQ" scripts.
    counts: BTreeMap<(usize, u16), usize>,
    log: Vec<Sent>,
}

fn config(i: usize) -> CmConfig {
    CmConfig {
        ca_guid: 0x0200_00ff_fe00_0001 + i as u64,
        tid_agent: 2,
        rng_seed: 0xc0ffee + i as u64,
        ..CmConfig::default()
    }
}

impl Pair {
    fn new() -> Pair {
        Self::with(MANUAL, MANUAL)
    }

    fn with(a: Auto, b: Auto) -> Pair {
        let node = |i: usize, auto| Node {
            cm: RdmaCm::new(config(i)),
            events: Vec::new(),
            seen: 0,
            auto,
        };
        Pair {
            nodes: [node(0, a), node(1, b)],
            now: Instant::ZERO,
            wire: Vec::new(),
            seq: 0,
            fate: Box::new(|_, _| Fate::Deliver),
            counts: BTreeMap::new(),
            log: Vec::new(),
        }
    }

    fn fate(mut self, f: impl FnMut(&Sent, usize) -> Fate + 'static) -> Pair {
        self.fate = Box::new(f);
        self
    }

    fn cm(&mut self, i: usize) -> &mut RdmaCm {
        &mut self.nodes[i].cm
    }

    fn elapsed(&self) -> Duration {
        self.now - Instant::ZERO
    }

    fn listen(&mut self, i: usize, ps: PortSpace, qp: RdmaQpType, port: u16) -> RdmaId {
        let cm = self.cm(i);
        let id = cm.create_id(ps, qp);
        cm.bind(id, SocketAddr::new(ip(i), port)).unwrap();
        cm.listen(id).unwrap();
        id
    }

    fn connect(
        &mut self,
        i: usize,
        ps: PortSpace,
        qp: RdmaQpType,
        port: u16,
        param: ConnParam,
    ) -> RdmaId {
        let now = self.now;
        let cm = self.cm(i);
        let id = cm.create_id(ps, qp);
        cm.bind(id, SocketAddr::new(ip(i), 0)).unwrap();
        cm.connect(
            now,
            id,
            SocketAddr::new(ip(1 - i), port),
            Route::default(),
            &param,
        )
        .unwrap();
        self.flush();
        id
    }

    /// The usual start: node 1 listens on TCP port [`PORT`], node 0 connects an RC id to it
    /// with QP 0x11.
    fn listen_and_connect(&mut self) -> RdmaId {
        self.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
        self.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11))
    }

    /// Puts every node's output on the wire.
    fn flush(&mut self) {
        for from in 0..2 {
            while let Some(out) = self.nodes[from].cm.poll_transmit() {
                assert_eq!(out.dst, Gid::from_ip(ip(1 - from)), "MADs go to the peer");
                assert_eq!(out.dst_qpn, 1, "to the GSI QP");
                let mad = CmMad::parse(&out.mad).expect("we emit CM MADs that parse");
                let n = self.counts.entry((from, mad.msg.attr_id())).or_default();
                let mut sent = Sent {
                    from,
                    at: self.now,
                    mad,
                    bytes: out.mad,
                    fate: Fate::Deliver,
                };
                sent.fate = (self.fate)(&sent, *n);
                *n += 1;
                let copies = match sent.fate {
                    Fate::Deliver | Fate::Delay(_) => 1,
                    Fate::Drop => 0,
                    Fate::Duplicate => 2,
                };
                let delay = match sent.fate {
                    Fate::Delay(d) => d,
                    _ => Duration::ZERO,
                };
                for _ in 0..copies {
                    self.seq += 1;
                    self.wire.push(InFlight {
                        to: 1 - from,
                        from,
                        arrive: self.now + LAT + delay,
                        seq: self.seq,
                        bytes: out.mad,
                    });
                }
                self.log.push(sent);
            }
        }
    }

    /// The consumer side of node `i`: collect events, react if automatic.
    fn drive(&mut self, i: usize) {
        let now = self.now;
        while let Some(e) = self.nodes[i].cm.poll_event() {
            self.nodes[i].events.push((now, e.clone()));
            let auto = self.nodes[i].auto;
            let cm = &mut self.nodes[i].cm;
            match e.kind {
                RdmaEventKind::ConnectRequest { param, .. } if auto.accept => {
                    let reply = ConnParam {
                        qp_num: 0x100 + e.id.raw() as u32,
                        responder_resources: param.responder_resources,
                        initiator_depth: param.initiator_depth,
                        rnr_retry_count: 7,
                        ..ConnParam::default()
                    };
                    cm.accept(now, e.id, &reply).unwrap();
                }
                RdmaEventKind::ConnectResponse { .. } if auto.complete => {
                    cm.complete_connect(now, e.id).unwrap();
                }
                RdmaEventKind::Disconnected if auto.disconnect_reply => {
                    // rdma_disconnect after DISCONNECTED: the DREP if the DREQ was the peer's.
                    let _ = cm.disconnect(now, e.id);
                }
                RdmaEventKind::TimewaitExit if auto.destroy_after_timewait => {
                    cm.destroy(now, e.id).unwrap();
                }
                _ => {}
            }
        }
    }

    /// One step: flush, deliver the earliest arrived MAD, else jump time to the next arrival
    /// or deadline. False when nothing is left to happen.
    fn step(&mut self) -> bool {
        self.flush();
        for i in 0..2 {
            self.drive(i);
        }
        self.flush();
        let due = self
            .wire
            .iter()
            .enumerate()
            .filter(|(_, p)| p.arrive <= self.now)
            .min_by_key(|(_, p)| (p.arrive, p.seq))
            .map(|(k, _)| k);
        if let Some(k) = due {
            let p = self.wire.remove(k);
            let now = self.now;
            self.nodes[p.to]
                .cm
                .handle_mad(now, Gid::from_ip(ip(p.from)), 1, &p.bytes);
            self.drive(p.to);
            return true;
        }
        let next_arrival = self.wire.iter().map(|p| p.arrive).min();
        let next_timeout = self.nodes.iter().filter_map(|n| n.cm.poll_timeout()).min();
        let Some(next) = [next_arrival, next_timeout].into_iter().flatten().min() else {
            return false;
        };
        self.now = self.now.max(next);
        let now = self.now;
        for i in 0..2 {
            if self.nodes[i].cm.poll_timeout().is_some_and(|t| t <= now) {
                self.nodes[i].cm.handle_timeout(now);
                self.drive(i);
            }
        }
        true
    }

    /// Steps until nothing is left (or `limit` of virtual time passed).
    fn run(&mut self, limit: Duration) {
        let end = self.now + limit;
        while self.now <= end && self.step() {}
    }

    /// Steps until `cond` holds; panics after `limit`.
    fn run_until(&mut self, limit: Duration, mut cond: impl FnMut(&Pair) -> bool) {
        let end = self.now + limit;
        loop {
            // Look at the state of things before time moves on.
            self.flush();
            for i in 0..2 {
                self.drive(i);
            }
            self.flush();
            if cond(self) {
                break;
            }
            assert!(self.now <= end, "condition not met by {:?}", self.elapsed());
            assert!(
                self.step(),
                "nothing left to happen at {:?}",
                self.elapsed()
            );
        }
    }

    /// Steps until node `i` has seen an ESTABLISHED event.
    fn run_until_established(&mut self, i: usize, limit: Duration) {
        self.run_until(limit, |p| {
            p.has_event(i, |k| matches!(k, RdmaEventKind::Established { .. }))
        });
    }

    /// Events of node `i` not yet taken.
    fn take(&mut self, i: usize) -> Vec<RdmaEvent> {
        self.drive(i);
        let n = &mut self.nodes[i];
        let out = n.events[n.seen..].iter().map(|(_, e)| e.clone()).collect();
        n.seen = n.events.len();
        out
    }

    /// The attribute names on the wire, with sender, in order.
    fn trace(&self) -> Vec<(usize, &'static str)> {
        self.log.iter().map(|s| (s.from, s.name())).collect()
    }

    fn sent(&self, from: usize, name: &str) -> Vec<&Sent> {
        self.log
            .iter()
            .filter(|s| s.from == from && s.name() == name)
            .collect()
    }

    /// The IB connection state behind an rdma id.
    fn info(&self, i: usize, id: RdmaId) -> softrdma_cm::ib::ConnInfo {
        let cm = &self.nodes[i].cm;
        cm.ib().info(cm.cm_id(id).unwrap()).unwrap()
    }

    fn has_event(&self, i: usize, f: impl Fn(&RdmaEventKind) -> bool) -> bool {
        self.nodes[i].events.iter().any(|(_, e)| f(&e.kind))
    }
}

/// Loses the first MAD of attribute `name`, from either side.
fn lose_first(name: &'static str) -> impl FnMut(&Sent, usize) -> Fate {
    move |s, n| {
        if s.name() == name && n == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }
}

fn kinds(events: &[RdmaEvent]) -> Vec<&'static str> {
    events
        .iter()
        .map(|e| match e.kind {
            RdmaEventKind::ConnectRequest { .. } => "CONNECT_REQUEST",
            RdmaEventKind::ConnectResponse { .. } => "CONNECT_RESPONSE",
            RdmaEventKind::Established { .. } => "ESTABLISHED",
            RdmaEventKind::Rejected { .. } => "REJECTED",
            RdmaEventKind::Unreachable { .. } => "UNREACHABLE",
            RdmaEventKind::Disconnected => "DISCONNECTED",
            RdmaEventKind::TimewaitExit => "TIMEWAIT_EXIT",
        })
        .collect()
}

const PORT: u16 = 7174;

/// REQ → REP → RTU by hand, with the QP attributes both sides get, then the active side
/// disconnects: DREQ, DREP, DISCONNECTED on both, TIMEWAIT_EXIT 2048 ms later on both.
#[test]
fn handshake_and_teardown() {
    let mut p = Pair::new();
    let listener = p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
    let mut param = ConnParam::rc(0x11);
    param.private_data = b"hello".to_vec();
    let client = p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, param);
    p.run_until(Duration::from_secs(1), |p| !p.nodes[1].events.is_empty());
    let ev = p.take(1);
    assert_eq!(kinds(&ev), ["CONNECT_REQUEST"]);
    let RdmaEventKind::ConnectRequest {
        listen_id,
        param,
        peer,
        local,
    } = &ev[0].kind
    else {
        unreachable!()
    };
    let server = ev[0].id;
    assert_eq!(*listen_id, listener);
    assert_eq!(&param.private_data[..5], b"hello");
    assert_eq!(
        param.private_data.len(),
        56,
        "the REQ's 92 bytes minus rdma_cm's header"
    );
    assert_eq!(
        (
            param.qp_num,
            param.responder_resources,
            param.initiator_depth
        ),
        (0x11, 1, 1)
    );
    assert_eq!(*local, SocketAddr::new(ip(1), PORT));
    assert_eq!(peer.ip(), ip(0));
    assert_eq!(Some(*peer), p.cm(0).addresses(client).unwrap().0);

    // The passive QP goes INIT → RTR → RTS before the REP, as librdmacm does it.
    let now = p.now;
    let init = p.cm(1).qp_attr(server, QpState::Init).unwrap();
    assert!(init
        .qp_access_flags
        .unwrap()
        .contains(softrdma_proto::AccessFlags::REMOTE_READ));
    let rtr = p.cm(1).qp_attr(server, QpState::Rtr).unwrap();
    let rts = p.cm(1).qp_attr(server, QpState::Rts).unwrap();
    let mut reply = ConnParam::rc(0x22);
    reply.private_data = b"welcome".to_vec();
    p.cm(1).accept(now, server, &reply).unwrap();
    p.run_until(Duration::from_secs(1), |p| !p.nodes[0].events.is_empty());
    let ev = p.take(0);
    assert_eq!(kinds(&ev), ["CONNECT_RESPONSE"]);
    let RdmaEventKind::ConnectResponse { param } = &ev[0].kind else {
        unreachable!()
    };
    assert_eq!(param.qp_num, 0x22);
    assert_eq!(&param.private_data[..7], b"welcome");
    assert_eq!(param.private_data.len(), 196);
    let a_rtr = p.cm(0).qp_attr(client, QpState::Rtr).unwrap();
    let a_rts = p.cm(0).qp_attr(client, QpState::Rts).unwrap();
    let now = p.now;
    p.cm(0).complete_connect(now, client).unwrap();
    assert_eq!(kinds(&p.take(0)), ["ESTABLISHED"]);
    p.run_until(Duration::from_secs(1), |p| p.nodes[1].events.len() == 2);
    assert_eq!(kinds(&p.take(1)), ["ESTABLISHED"]);
    assert_eq!(p.trace(), [(0, "REQ"), (1, "REP"), (0, "RTU")]);

    // Each side sends with the PSN the other expects, to the other's QP.
    let (req, rep) = (p.sent(0, "REQ")[0].mad.msg, p.sent(1, "REP")[0].mad.msg);
    let (CmMessage::Req(req), CmMessage::Rep(rep)) = (req, rep) else {
        unreachable!()
    };
    assert_eq!(a_rtr.rq_psn, Some(req.starting_psn));
    assert_eq!(rts.sq_psn, Some(req.starting_psn));
    assert_eq!(rtr.rq_psn, Some(rep.starting_psn));
    assert_eq!(a_rts.sq_psn, Some(rep.starting_psn));
    assert_eq!(
        (a_rtr.dest_qp_num, rtr.dest_qp_num),
        (Some(0x22), Some(0x11))
    );
    assert_eq!(a_rtr.ah_attr.unwrap().dest_ip, ip(1));
    assert_eq!(rtr.ah_attr.unwrap().dest_ip, ip(0));
    assert_eq!((a_rts.timeout, rts.timeout), (Some(19), Some(19)));
    assert_eq!((a_rts.retry_cnt, a_rts.rnr_retry), (Some(7), Some(7)));
    assert_eq!(
        (rtr.max_dest_rd_atomic, a_rts.max_rd_atomic),
        (Some(1), Some(1))
    );
    assert_eq!(rtr.path_mtu, Some(softrdma_proto::Mtu::Mtu1024));
    // The TIDs: REP and RTU echo the REQ's.
    let tid = p.sent(0, "REQ")[0].mad.header.tid;
    assert_eq!(tid >> 32, 2, "our MAD agent number");
    assert_eq!(p.sent(1, "REP")[0].mad.header.tid, tid);
    assert_eq!(p.sent(0, "RTU")[0].mad.header.tid, tid);

    let now = p.now;
    p.cm(0).disconnect(now, client).unwrap();
    p.run_until(Duration::from_secs(1), |p| p.nodes[1].events.len() == 3);
    assert_eq!(kinds(&p.take(1)), ["DISCONNECTED"]);
    let now = p.now;
    p.cm(1).disconnect(now, server).unwrap();
    p.run(Duration::from_secs(10));
    assert_eq!(kinds(&p.take(0)), ["DISCONNECTED", "TIMEWAIT_EXIT"]);
    assert_eq!(kinds(&p.take(1)), ["TIMEWAIT_EXIT"]);
    assert_eq!(
        p.trace(),
        [(0, "REQ"), (1, "REP"), (0, "RTU"), (0, "DREQ"), (1, "DREP")]
    );
    // Time-wait: 2048 ms from the DREP on the passive side (sent) and the active (received).
    let drep_at = p.sent(1, "DREP")[0].at;
    let exit_at = |i: usize| {
        p.nodes[i]
            .events
            .iter()
            .find(|(_, e)| e.kind == RdmaEventKind::TimewaitExit)
            .unwrap()
            .0
    };
    assert_eq!(exit_at(1), drep_at + TIMEWAIT);
    assert_eq!(exit_at(0), drep_at + LAT + TIMEWAIT);
    assert_eq!(p.info(0, client).state, CmState::Idle);
    for i in 0..2 {
        assert_eq!(p.cm(i).stats().rx_duplicates.total(), 0);
        assert_eq!(p.cm(i).stats().tx_retries.total(), 0);
    }
}

/// The first REQ is lost: the same bytes go out again one REQ timeout (6144 ms) later.
#[test]
fn lost_req_is_retransmitted() {
    let mut p = Pair::with(MANUAL, AUTO).fate(lose_first("REQ"));
    p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
    p.nodes[0].auto = AUTO;
    p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11));
    p.run_until_established(1, Duration::from_secs(30));
    let reqs = p.sent(0, "REQ");
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].bytes, reqs[1].bytes, "retransmitted unchanged");
    assert_eq!(reqs[1].at - reqs[0].at, REQ_TIMEOUT);
    assert_eq!(p.trace(), [(0, "REQ"), (0, "REQ"), (1, "REP"), (0, "RTU")]);
    assert_eq!(p.cm(0).stats().tx_retries.get(attr::REQ), 1);
}

/// The REP is lost: the passive side resends it after 4096 ms; the active side's REQ
/// retransmission (due later) is not needed, and nothing is duplicated.
#[test]
fn lost_rep_is_retransmitted_by_the_passive_side() {
    let mut p = Pair::with(AUTO, AUTO).fate(lose_first("REP"));
    p.listen_and_connect();
    p.run_until_established(1, Duration::from_secs(30));
    let reps = p.sent(1, "REP");
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[1].at - reps[0].at, REP_TIMEOUT);
    assert_eq!(reps[0].bytes, reps[1].bytes);
    assert_eq!(p.trace(), [(0, "REQ"), (1, "REP"), (1, "REP"), (0, "RTU")]);
}

/// The RTU is lost: the retransmitted REP finds the active side established, which answers
/// with the same RTU again (`cm_dup_rep_handler`).
#[test]
fn lost_rtu_is_answered_by_the_duplicate_rep() {
    let mut p = Pair::with(AUTO, AUTO).fate(lose_first("RTU"));
    p.listen_and_connect();
    p.run_until_established(1, Duration::from_secs(30));
    assert_eq!(
        p.trace(),
        [(0, "REQ"), (1, "REP"), (0, "RTU"), (1, "REP"), (0, "RTU")]
    );
    let rtus = p.sent(0, "RTU");
    assert_eq!(rtus[0].bytes, rtus[1].bytes);
    assert_eq!(p.cm(0).stats().rx_duplicates.get(attr::REP), 1);
    assert_eq!(kinds(&p.take(0)), ["CONNECT_RESPONSE", "ESTABLISHED"]);
    assert_eq!(kinds(&p.take(1)), ["CONNECT_REQUEST", "ESTABLISHED"]);
}

/// The RTU is lost but the passive QP sees traffic: `established` (COMM_EST) establishes the
/// connection and stops the REP; nothing more goes on the wire.
#[test]
fn first_packet_before_rtu_establishes() {
    let mut p = Pair::with(AUTO, AUTO).fate(|s, _| {
        if s.name() == "RTU" {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.listen_and_connect();
    p.run_until(Duration::from_secs(1), |p| p.sent(0, "RTU").len() == 1);
    let server = p.nodes[1].events[0].1.id;
    let now = p.now;
    p.cm(1).established(now, server).unwrap();
    p.run(Duration::from_secs(60));
    assert_eq!(p.trace(), [(0, "REQ"), (1, "REP"), (0, "RTU")]);
    assert_eq!(kinds(&p.take(1)), ["CONNECT_REQUEST", "ESTABLISHED"]);
    assert!(p.cm(1).established(now, server).is_err(), "only once");
}

/// A consumer that takes its time: the retransmitted REQ is answered with rdma_cm's MRA
/// (service timeout 24), and the active side then waits 2^16 + 2^11 ms before its next REQ.
#[test]
fn slow_accept_gets_an_mra() {
    let mut p = Pair::with(AUTO, MANUAL);
    let client = p.listen_and_connect();
    // Nobody accepts: REQ, REQ again after 6144 ms, which gets the MRA.
    p.run_until(Duration::from_secs(10), |p| p.sent(1, "MRA").len() == 1);
    let mra = p.sent(1, "MRA")[0].clone();
    let CmMessage::Mra(m) = mra.mad.msg else {
        unreachable!()
    };
    assert_eq!(
        (m.msg_mraed, m.service_timeout),
        (MsgResponse::Req, CMA_MRA_SERVICE_TIMEOUT)
    );
    let req = p.sent(0, "REQ")[0];
    assert_eq!(mra.mad.header.tid, req.mad.header.tid);
    let CmMessage::Req(r) = req.mad.msg else {
        unreachable!()
    };
    assert_eq!(m.remote_comm_id, r.local_comm_id);
    let cm = p.cm(0).cm_id(client).unwrap();
    p.run_until(Duration::from_secs(1), |p| {
        p.nodes[0].cm.ib().info(cm).unwrap().state == CmState::MraReqRcvd
    });
    // The next REQ comes 65 536 + 2048 ms after the MRA arrived.
    p.run_until(Duration::from_secs(100), |p| p.sent(0, "REQ").len() == 3);
    let reqs = p.sent(0, "REQ");
    assert_eq!(
        reqs[2].at - (mra.at + LAT),
        Duration::from_millis(65_536 + 2048)
    );
    // It gets the MRA again; then the consumer accepts and all is well.
    p.run_until(Duration::from_secs(1), |p| p.sent(1, "MRA").len() == 2);
    let server = p.nodes[1].events[0].1.id;
    let now = p.now;
    p.cm(1).accept(now, server, &ConnParam::rc(0x22)).unwrap();
    p.run_until_established(1, Duration::from_secs(1));
    assert_eq!(p.cm(1).stats().rx_duplicates.get(attr::REQ), 2);
    assert_eq!(kinds(&p.take(0)), ["CONNECT_RESPONSE", "ESTABLISHED"]);
}

/// Lost DREQ: resent after the connection's timeout. Lost DREP: the DREQ is resent after
/// the passive side's time-wait (2048 ms, shorter than the 6144 ms DREQ timeout) ended and its
/// consumer destroyed the id, as rping does; the CM answers for the forgotten connection
/// (`cm_issue_drep`) with the same DREP bytes.
#[test]
fn lost_dreq_and_lost_drep() {
    for lose in ["DREQ", "DREP"] {
        let passive = Auto {
            destroy_after_timewait: true,
            ..AUTO
        };
        let mut p = Pair::with(AUTO, passive).fate(lose_first(lose));
        p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
        let client = p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11));
        p.run_until(Duration::from_secs(1), |p| p.nodes[1].events.len() == 2);
        let now = p.now;
        p.cm(0).disconnect(now, client).unwrap();
        p.run(Duration::from_secs(30));
        let dreqs = p.sent(0, "DREQ");
        assert_eq!(dreqs.len(), 2, "{lose}");
        assert_eq!(dreqs[1].at - dreqs[0].at, REQ_TIMEOUT, "{lose}");
        assert_eq!(dreqs[0].bytes, dreqs[1].bytes);
        let dreps = p.sent(1, "DREP");
        assert_eq!(dreps.len(), if lose == "DREP" { 2 } else { 1 }, "{lose}");
        assert_eq!(
            dreps[dreps.len() - 1].mad.header.tid,
            dreqs[0].mad.header.tid
        );
        if lose == "DREP" {
            assert_eq!(dreps[0].bytes, dreps[1].bytes);
            assert_eq!(p.cm(1).stats().rx_duplicates.get(attr::DREQ), 1);
        }
        for i in 0..2 {
            let k = kinds(&p.take(i));
            assert_eq!(
                &k[k.len() - 2..],
                ["DISCONNECTED", "TIMEWAIT_EXIT"],
                "{lose} node {i}"
            );
        }
    }
}

/// Every MAD arrives twice: each event still happens once; the duplicates are recognised and
/// counted (REQ and DREQ dropped, REP answered with the RTU again, RTU dropped, DREP ignored).
#[test]
fn duplicated_mads() {
    let mut p = Pair::with(AUTO, AUTO).fate(|_, _| Fate::Duplicate);
    let client = p.listen_and_connect();
    p.run_until(Duration::from_secs(1), |p| p.nodes[1].events.len() == 2);
    let now = p.now;
    p.cm(0).disconnect(now, client).unwrap();
    p.run(Duration::from_secs(30));
    assert_eq!(
        kinds(&p.take(0)),
        [
            "CONNECT_RESPONSE",
            "ESTABLISHED",
            "DISCONNECTED",
            "TIMEWAIT_EXIT"
        ]
    );
    assert_eq!(
        kinds(&p.take(1)),
        [
            "CONNECT_REQUEST",
            "ESTABLISHED",
            "DISCONNECTED",
            "TIMEWAIT_EXIT"
        ]
    );
    let (a, b) = (*p.cm(0).stats(), *p.cm(1).stats());
    assert_eq!(b.rx_duplicates.get(attr::REQ), 1);
    assert_eq!(
        a.rx_duplicates.get(attr::REP),
        1,
        "the second REP gets an RTU"
    );
    // Two RTUs (the second provoked by the duplicate REP), each delivered twice: one counts.
    assert_eq!(b.rx_duplicates.get(attr::RTU), 3);
    // The duplicate DREQ finds time-wait and gets the DREP again: two DREPs, each delivered
    // twice, of which the active side takes one and finds itself in time-wait for three.
    assert_eq!(b.rx_duplicates.get(attr::DREQ), 1);
    assert_eq!(p.sent(1, "DREP").len(), 2);
    assert_eq!(a.drops(CmDrop::WrongState), 3);
    assert_eq!(p.sent(0, "RTU").len(), 2);
    assert_eq!(p.sent(0, "REQ").len(), 1);
    assert_eq!(p.sent(1, "REP").len(), 1);
}

/// Reordering: the RTU is delayed past the active side's DREQ. The passive side, still
/// waiting for the RTU, takes the DREQ: the connection is disconnected without ever being
/// established there, and the late RTU is a duplicate.
#[test]
fn dreq_overtaking_the_rtu() {
    let mut p = Pair::with(AUTO, AUTO).fate(|s, _| {
        if s.name() == "RTU" {
            Fate::Delay(Duration::from_millis(10))
        } else {
            Fate::Deliver
        }
    });
    let client = p.listen_and_connect();
    p.run_until(Duration::from_secs(1), |p| p.sent(0, "RTU").len() == 1);
    let now = p.now;
    p.cm(0).disconnect(now, client).unwrap();
    p.run(Duration::from_secs(30));
    assert_eq!(
        kinds(&p.take(1)),
        ["CONNECT_REQUEST", "DISCONNECTED", "TIMEWAIT_EXIT"]
    );
    assert_eq!(
        kinds(&p.take(0)),
        [
            "CONNECT_RESPONSE",
            "ESTABLISHED",
            "DISCONNECTED",
            "TIMEWAIT_EXIT"
        ]
    );
    assert_eq!(p.cm(1).stats().rx_duplicates.get(attr::RTU), 1);
    assert_eq!(
        p.sent(1, "REP").len(),
        1,
        "the DREQ stopped the REP's retransmission"
    );
}

/// Nobody listens on the port: REJ 8 (invalid service ID) from the CM itself, with no comm
/// ID of its own; the active side reports REJECTED with that reason at once.
#[test]
fn no_listener_is_rejected_with_invalid_service_id() {
    let mut p = Pair::new();
    p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT + 1);
    let client = p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11));
    p.run(Duration::from_secs(60));
    assert_eq!(p.trace(), [(0, "REQ"), (1, "REJ")]);
    let CmMessage::Rej(rej) = p.sent(1, "REJ")[0].mad.msg else {
        unreachable!()
    };
    let CmMessage::Req(req) = p.sent(0, "REQ")[0].mad.msg else {
        unreachable!()
    };
    assert_eq!(rej.reason, RejectReason::InvalidServiceId);
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id),
        (0, req.local_comm_id)
    );
    assert_eq!(rej.msg_rejected, MsgResponse::Req);
    let ev = p.take(0);
    assert_eq!(ev.len(), 1);
    assert!(matches!(
        ev[0].kind,
        RdmaEventKind::Rejected {
            reason: RejectReason::InvalidServiceId,
            ..
        }
    ));
    assert!(p.take(1).is_empty());
    assert_eq!(p.cm(0).state(client), Some(RdmaState::Connect));
    assert_eq!(p.info(0, client).state, CmState::Idle);
}

/// The consumer refuses with private data: REJ 28 carrying it, REJECTED on the active side.
#[test]
fn consumer_reject_with_private_data() {
    let mut p = Pair::new();
    p.listen_and_connect();
    p.run_until(Duration::from_secs(1), |p| !p.nodes[1].events.is_empty());
    let server = p.take(1)[0].id;
    let now = p.now;
    p.cm(1).reject(now, server, b"go away").unwrap();
    p.run(Duration::from_secs(60));
    assert_eq!(p.trace(), [(0, "REQ"), (1, "REJ")]);
    let ev = p.take(0);
    let RdmaEventKind::Rejected {
        reason,
        private_data,
    } = &ev[0].kind
    else {
        panic!("{ev:?}")
    };
    assert_eq!(*reason, RejectReason::ConsumerDefined);
    assert_eq!(private_data.len(), 148);
    assert_eq!(&private_data[..7], b"go away");
    assert!(private_data[7..].iter().all(|&b| b == 0));
    let CmMessage::Rej(rej) = p.sent(1, "REJ")[0].mad.msg else {
        unreachable!()
    };
    // rdma_cm had armed its MRA, so the REJ carries the passive comm ID (MRA_REQ_SENT).
    assert_ne!(rej.local_comm_id, 0);
    assert_eq!(rej.msg_rejected, MsgResponse::Req);
    // Too much private data is refused before anything is sent.
    assert!(p.cm(1).reject(now, server, &[0; 149]).is_err());
}

/// The listener goes away mid-handshake. A REQ received before: the new connection lives on,
/// and destroying it unanswered sends REJ 28. A REQ retransmitted after: REJ 8.
#[test]
fn listener_goes_away_mid_handshake() {
    // (a) The first REQ is lost, the listener closes, the retransmission finds nobody.
    let mut p = Pair::new().fate(lose_first("REQ"));
    let listener = p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
    p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11));
    let now = p.now;
    p.cm(1).destroy(now, listener).unwrap();
    p.run(Duration::from_secs(60));
    assert_eq!(p.trace(), [(0, "REQ"), (0, "REQ"), (1, "REJ")]);
    assert!(matches!(
        p.take(0)[0].kind,
        RdmaEventKind::Rejected {
            reason: RejectReason::InvalidServiceId,
            ..
        }
    ));

    // (b) The REQ arrived; the listener closes; the new id is still accepted normally.
    let mut p = Pair::with(AUTO, MANUAL);
    let listener = p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
    p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11));
    p.run_until(Duration::from_secs(1), |p| !p.nodes[1].events.is_empty());
    let server = p.take(1)[0].id;
    let now = p.now;
    p.cm(1).destroy(now, listener).unwrap();
    p.cm(1).accept(now, server, &ConnParam::rc(0x22)).unwrap();
    p.run_until_established(1, Duration::from_secs(1));

    // (c) The REQ arrived; listener and new id are destroyed without an answer: REJ 28.
    let mut p = Pair::new();
    let listener = p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
    p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11));
    p.run_until(Duration::from_secs(1), |p| !p.nodes[1].events.is_empty());
    let server = p.take(1)[0].id;
    let now = p.now;
    p.cm(1).destroy(now, listener).unwrap();
    p.cm(1).destroy(now, server).unwrap();
    p.run(Duration::from_secs(60));
    assert_eq!(p.trace(), [(0, "REQ"), (1, "REJ")]);
    assert!(matches!(
        p.take(0)[0].kind,
        RdmaEventKind::Rejected {
            reason: RejectReason::ConsumerDefined,
            ..
        }
    ));
    assert!(
        p.cm(1).ids().next().is_none(),
        "nothing left on the passive side"
    );
}

/// No answer at all: 1 + 15 REQs, 6144 ms apart, then UNREACHABLE; the id is idle.
#[test]
fn unanswered_req_gives_unreachable() {
    let mut p = Pair::new().fate(|s, _| {
        if s.from == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let client = p.listen_and_connect();
    p.run(Duration::from_secs(200));
    let reqs = p.sent(0, "REQ");
    assert_eq!(reqs.len(), 16);
    for w in reqs.windows(2) {
        assert_eq!(w[1].at - w[0].at, REQ_TIMEOUT);
    }
    let ev = &p.nodes[0].events;
    assert_eq!(ev.len(), 1);
    assert_eq!(
        ev[0].1.kind,
        RdmaEventKind::Unreachable { sidr_status: None }
    );
    assert_eq!(ev[0].0, Instant::ZERO + REQ_TIMEOUT * 16);
    assert_eq!(p.info(0, client).state, CmState::Idle);
    assert!(p.cm(0).poll_timeout().is_none(), "nothing left to time");
    // Destroying it now says nothing more.
    let now = p.now;
    p.cm(0).destroy(now, client).unwrap();
    p.flush();
    assert_eq!(p.sent(0, "REJ").len(), 0);
}

/// The active side gives up early (destroys its id in REQ_SENT): REJ 4 (timeout) with its CA
/// GUID as ARI, which the passive side finds its connection by.
#[test]
fn active_side_giving_up_sends_rej_timeout() {
    let mut p = Pair::with(MANUAL, MANUAL);
    let client = p.listen_and_connect();
    p.run_until(Duration::from_secs(1), |p| !p.nodes[1].events.is_empty());
    let server = p.take(1)[0].id;
    let now = p.now;
    p.cm(0).destroy(now, client).unwrap();
    p.run(Duration::from_secs(1));
    let CmMessage::Rej(rej) = p.sent(0, "REJ")[0].mad.msg else {
        unreachable!()
    };
    assert_eq!(rej.reason, RejectReason::Timeout);
    assert_eq!(rej.ari(), &config(0).ca_guid.to_be_bytes());
    assert_eq!(rej.msg_rejected, MsgResponse::Other);
    assert_eq!(p.info(1, server).state, CmState::Idle);
    assert!(matches!(
        p.take(1)[0].kind,
        RdmaEventKind::Rejected {
            reason: RejectReason::Timeout,
            ..
        }
    ));
}

/// A QP that already has a connection here asks again (its CM lost the old one: a restarted
/// node with the same CA GUID and QPN): REJ 10 (stale connection), and the old connection
/// gets a DREQ, which the restarted node, knowing nothing of it, answers with a DREP.
#[test]
fn stale_connection() {
    let mut p = Pair::with(AUTO, AUTO);
    p.listen_and_connect();
    p.run_until(Duration::from_secs(1), |p| p.nodes[1].events.len() == 2);
    // Node 0 restarts: same CA GUID, another seed (other comm IDs), same QP number.
    p.nodes[0].cm = RdmaCm::new(CmConfig {
        rng_seed: 77,
        ..config(0)
    });
    p.nodes[0].auto = MANUAL;
    let old_log = p.log.len();
    p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11));
    p.run(Duration::from_secs(30));
    let trace: Vec<_> = p.trace()[old_log..].to_vec();
    assert_eq!(trace, [(0, "REQ"), (1, "REJ"), (1, "DREQ"), (0, "DREP")]);
    let CmMessage::Rej(rej) = p.sent(1, "REJ")[0].mad.msg else {
        unreachable!()
    };
    assert_eq!(rej.reason, RejectReason::StaleConnection);
    let k = kinds(
        &p.nodes[0]
            .events
            .iter()
            .map(|(_, e)| e.clone())
            .collect::<Vec<_>>(),
    );
    assert_eq!(k[k.len() - 1], "REJECTED");
    assert_eq!(
        kinds(&p.take(1)),
        [
            "CONNECT_REQUEST",
            "ESTABLISHED",
            "DISCONNECTED",
            "TIMEWAIT_EXIT"
        ]
    );
    assert_eq!(
        p.cm(0).stats().rx_duplicates.get(attr::DREQ),
        1,
        "answered by cm_issue_drep"
    );
}

/// 64 connections set up at once, then torn down at once, half from each side: every one
/// established with matching QPNs and PSNs, every one disconnected, no drops, no retries.
#[test]
fn sixty_four_concurrent_connections() {
    const N: usize = 64;
    let mut p = Pair::with(AUTO, AUTO);
    p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
    let clients: Vec<RdmaId> = (0..N)
        .map(|k| {
            p.connect(
                0,
                PortSpace::Tcp,
                RdmaQpType::Rc,
                PORT,
                ConnParam::rc(0x1000 + k as u32),
            )
        })
        .collect();
    p.run_until(Duration::from_secs(5), |p| {
        p.nodes[1]
            .events
            .iter()
            .filter(|(_, e)| matches!(e.kind, RdmaEventKind::Established { .. }))
            .count()
            == N
    });
    let servers: Vec<RdmaId> = p.nodes[1]
        .events
        .iter()
        .filter(|(_, e)| matches!(e.kind, RdmaEventKind::ConnectRequest { .. }))
        .map(|(_, e)| e.id)
        .collect();
    assert_eq!(servers.len(), N);
    for (k, &c) in clients.iter().enumerate() {
        let a = p.info(0, c);
        assert_eq!(a.state, CmState::Established);
        // Find its passive half by the comm IDs.
        let s = servers
            .iter()
            .map(|&s| p.info(1, s))
            .find(|b| b.remote_comm_id == a.local_comm_id)
            .expect("a passive half");
        assert_eq!(s.state, CmState::Established);
        assert_eq!(
            (s.remote_qpn, a.local_qpn),
            (0x1000 + k as u32, 0x1000 + k as u32)
        );
        assert_eq!(a.remote_qpn, s.local_qpn);
        assert_eq!((a.sq_psn, a.rq_psn), (s.rq_psn, s.sq_psn));
        // What both QPs get: the REP's ACK delay on the active side, MTU 1024, ACK timeout 19.
        assert_eq!((a.target_ack_delay, a.path.mtu, s.path.mtu), (15, 3, 3));
        assert_eq!((a.ack_timeout, s.ack_timeout), (19, 19));
        assert_eq!((a.flow_control, s.srq), (false, false));
    }
    let now = p.now;
    for k in 0..N {
        if k % 2 == 0 {
            p.cm(0).disconnect(now, clients[k]).unwrap();
        } else {
            p.cm(1).disconnect(now, servers[k]).unwrap();
        }
    }
    p.run(Duration::from_secs(30));
    for i in 0..2 {
        let ev: Vec<RdmaEvent> = p.nodes[i].events.iter().map(|(_, e)| e.clone()).collect();
        let count = |name| kinds(&ev).iter().filter(|&&k| k == name).count();
        assert_eq!(count("ESTABLISHED"), N, "node {i}");
        assert_eq!(count("DISCONNECTED"), N, "node {i}");
        assert_eq!(count("TIMEWAIT_EXIT"), N, "node {i}");
        let s = p.cm(i).stats();
        assert_eq!(
            s.tx_retries.total() + s.rx_duplicates.total(),
            0,
            "node {i}"
        );
        for d in CmDrop::ALL {
            assert_eq!(s.drops(d), 0, "node {i} {d:?}");
        }
    }
    assert_eq!(p.log.len(), 5 * N, "REQ, REP, RTU, DREQ, DREP each");
    // Every id is destroyed cleanly and nothing is left.
    let now = p.now;
    for &c in &clients {
        p.cm(0).destroy(now, c).unwrap();
    }
    for &s in &servers {
        p.cm(1).destroy(now, s).unwrap();
    }
    p.flush();
    assert_eq!(p.log.len(), 5 * N, "destroying idle ids sends nothing");
    assert_eq!(p.cm(0).ib().ids().count(), 0);
    assert_eq!(p.cm(1).ib().ids().count(), 0);
}

/// UD services: SIDR_REQ with rdma_cm's header, the listener's QPN and rdma_cm's Q_Key back
/// in the SIDR_REP; a port nobody listens on answers "unsupported".
#[test]
fn sidr_resolves_ud_services() {
    let mut p = Pair::with(MANUAL, AUTO);
    p.listen(1, PortSpace::Udp, RdmaQpType::Ud, PORT);
    let param = ConnParam {
        private_data: b"udaddy".to_vec(),
        ..ConnParam::default()
    };
    let client = p.connect(0, PortSpace::Udp, RdmaQpType::Ud, PORT, param);
    p.run(Duration::from_secs(1));
    assert_eq!(p.trace(), [(0, "SIDR_REQ"), (1, "SIDR_REP")]);
    let req = kinds(&p.take(1));
    assert_eq!(req, ["CONNECT_REQUEST"]);
    let RdmaEventKind::ConnectRequest { param, .. } = &p.nodes[1].events[0].1.kind else {
        unreachable!()
    };
    assert_eq!(&param.private_data[..6], b"udaddy");
    assert_eq!(param.private_data.len(), 180);
    let ev = p.take(0);
    let RdmaEventKind::Established { ud: Some(ud) } = &ev[0].kind else {
        panic!("{ev:?}")
    };
    assert_eq!(ud.qkey, RDMA_UDP_QKEY);
    assert_eq!(ud.qp_num, 0x100 + p.nodes[1].events[0].1.id.raw() as u32);
    assert_eq!(ud.peer, Some(ip(1)));
    let CmMessage::SidrReq(s) = p.sent(0, "SIDR_REQ")[0].mad.msg else {
        unreachable!()
    };
    assert_eq!(s.service_id, PortSpace::Udp.service_id(PORT));
    assert_eq!(client.raw(), 1);

    let mut p = Pair::new();
    p.connect(
        0,
        PortSpace::Udp,
        RdmaQpType::Ud,
        PORT,
        ConnParam::default(),
    );
    p.run(Duration::from_secs(1));
    assert_eq!(
        p.take(0)[0].kind,
        RdmaEventKind::Unreachable {
            sidr_status: Some(SidrStatus::Unsupported)
        }
    );
}

/// Both sides disconnect at once: the DREQs cross, each side reports DISCONNECTED once and
/// answers the other's DREQ, and both end in time-wait.
#[test]
fn simultaneous_disconnect() {
    let mut p = Pair::with(AUTO, AUTO);
    let client = p.listen_and_connect();
    p.run_until(Duration::from_secs(1), |p| p.nodes[1].events.len() == 2);
    let server = p.nodes[1].events[0].1.id;
    let now = p.now;
    p.cm(0).disconnect(now, client).unwrap();
    p.cm(1).disconnect(now, server).unwrap();
    p.run(Duration::from_secs(30));
    for i in 0..2 {
        let k = kinds(&p.take(i));
        assert_eq!(&k[2..], ["DISCONNECTED", "TIMEWAIT_EXIT"], "node {i}");
        assert_eq!(p.sent(i, "DREQ").len(), 1);
        assert_eq!(p.sent(i, "DREP").len(), 1);
    }
}

/// What is not a CM Send MAD: garbage and other classes are counted and dropped; a Get of
/// ClassPortInfo gets Linux's "unsupported method/attribute" answer; LAP is ignored on RoCE.
#[test]
fn foreign_and_malformed_mads_are_counted() {
    let mut cm = RdmaCm::new(config(0));
    let now = Instant::from_nanos(MS);
    let peer = Gid::from_ip(ip(1));
    cm.handle_mad(now, peer, 1, &[0u8; 10]);
    let mut mad = [0u8; MAD_LEN];
    MadHeader {
        mgmt_class: MgmtClass::SUBN_ADM,
        ..MadHeader::cm(attr::REQ, 1)
    }
    .emit(&mut mad);
    cm.handle_mad(now, peer, 1, &mad);
    MadHeader {
        method: Method::GET,
        ..MadHeader::cm(attr::CLASS_PORT_INFO, 9)
    }
    .emit(&mut mad);
    cm.handle_mad(now, peer, 1, &mad);
    let out = cm.poll_transmit().expect("an answer to the Get");
    let h = MadHeader::parse(&out.mad).unwrap();
    assert_eq!((h.method, h.status, h.tid), (Method::GET_RESP, 0x000c, 9));
    let lap = CmMad::new(3, CmMessage::Lap(Default::default())).to_bytes();
    cm.handle_mad(now, peer, 1, &lap);
    let rtu = CmMad::new(3, CmMessage::Rtu(Default::default())).to_bytes();
    cm.handle_mad(now, peer, 1, &rtu);
    assert!(cm.poll_transmit().is_none());
    assert!(cm.poll_event().is_none());
    let s = cm.stats();
    assert_eq!(s.drops(CmDrop::Malformed), 1);
    assert_eq!(s.drops(CmDrop::NotCm), 1);
    assert_eq!(s.drops(CmDrop::Method), 1);
    assert_eq!(s.drops(CmDrop::AlternatePath), 1);
    assert_eq!(s.drops(CmDrop::NoSuchConnection), 1);
}

/// The private data limits rdma_cm enforces: 56 bytes of application data in a REQ, 196 in a
/// REP, 180 in a SIDR_REQ.
#[test]
fn private_data_limits() {
    let mut p = Pair::new();
    p.listen(1, PortSpace::Tcp, RdmaQpType::Rc, PORT);
    let cm = p.cm(0);
    let id = cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
    cm.bind(id, SocketAddr::new(ip(0), 0)).unwrap();
    let dst = SocketAddr::new(ip(1), PORT);
    let mut param = ConnParam::rc(1);
    param.private_data = vec![1; 57];
    assert!(cm
        .connect(Instant::ZERO, id, dst, Route::default(), &param)
        .is_err());
    param.private_data = vec![1; 56];
    cm.connect(Instant::ZERO, id, dst, Route::default(), &param)
        .unwrap();
    p.run_until(Duration::from_secs(1), |p| !p.nodes[1].events.is_empty());
    let server = p.take(1)[0].id;
    let now = p.now;
    let mut reply = ConnParam::rc(2);
    reply.private_data = vec![2; 197];
    assert!(p.cm(1).accept(now, server, &reply).is_err());
    reply.private_data = vec![2; 196];
    p.cm(1).accept(now, server, &reply).unwrap();
    let ud = p.cm(0).create_id(PortSpace::Udp, RdmaQpType::Ud);
    p.cm(0).bind(ud, SocketAddr::new(ip(0), 0)).unwrap();
    let big = ConnParam {
        private_data: vec![3; 181],
        ..ConnParam::default()
    };
    assert!(p
        .cm(0)
        .connect(now, ud, dst, Route::default(), &big)
        .is_err());
}

/// An active consumer slow to ready its QP after the REP: the passive side's retransmitted
/// REP (4096 ms) is answered with rdma_cm's MRA for the REP, and the next REP waits
/// 2^16 + 2^11 ms; the RTU then completes it.
#[test]
fn slow_rtu_gets_an_mra() {
    let mut p = Pair::with(MANUAL, AUTO);
    let client = p.listen_and_connect();
    p.run_until(Duration::from_secs(10), |p| p.sent(0, "MRA").len() == 1);
    let reps = p.sent(1, "REP");
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[1].at - reps[0].at, REP_TIMEOUT);
    let mra = p.sent(0, "MRA")[0].clone();
    let CmMessage::Mra(m) = mra.mad.msg else {
        unreachable!()
    };
    assert_eq!(
        (m.msg_mraed, m.service_timeout),
        (MsgResponse::Rep, CMA_MRA_SERVICE_TIMEOUT)
    );
    p.run_until(Duration::from_secs(100), |p| p.sent(1, "REP").len() == 3);
    let reps = p.sent(1, "REP");
    assert_eq!(
        reps[2].at - (mra.at + LAT),
        Duration::from_millis(65_536 + 2048)
    );
    let now = p.now;
    p.cm(0).complete_connect(now, client).unwrap();
    p.run_until_established(1, Duration::from_secs(1));
    assert_eq!(p.cm(0).stats().rx_duplicates.get(attr::REP), 2);
}

/// rdma_cm checks its header before a listener sees the request: a destination address the
/// listener is not bound to, or a header version other than 0, is refused with REJ 28 (Linux:
/// the request handler fails, `cm_destroy_id` rejects as the consumer).
#[test]
fn rdma_cm_header_checks_reject_with_28() {
    // The listener is bound to another address of the passive node.
    let mut p = Pair::new();
    let cm = p.cm(1);
    let listener = cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
    cm.bind(listener, "10.0.0.99:7174".parse().unwrap())
        .unwrap();
    cm.listen(listener).unwrap();
    p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x11));
    p.run(Duration::from_secs(1));
    assert_eq!(p.trace(), [(0, "REQ"), (1, "REJ")]);
    assert!(p.take(1).is_empty(), "the listener never hears of it");
    assert!(matches!(
        p.take(0)[0].kind,
        RdmaEventKind::Rejected {
            reason: RejectReason::ConsumerDefined,
            ..
        }
    ));

    // A REQ whose rdma_cm header has version 1, to a listener that would take it otherwise.
    let mut p = Pair::new().fate(|_, _| Fate::Drop);
    p.listen_and_connect();
    let mut req = p.sent(0, "REQ")[0].mad;
    if let CmMessage::Req(r) = &mut req.msg {
        r.private_data.0[0] = 1;
    }
    let now = p.now;
    p.cm(1)
        .handle_mad(now, Gid::from_ip(ip(0)), 1, &req.to_bytes());
    let out = p.cm(1).poll_transmit().expect("a REJ");
    let CmMessage::Rej(rej) = CmMad::parse(&out.mad).unwrap().msg else {
        panic!()
    };
    assert_eq!(rej.reason, RejectReason::ConsumerDefined);
    assert!(p.cm(1).poll_event().is_none());
    // A TCP listener does not take a UC request either.
    let mut uc = req;
    if let CmMessage::Req(r) = &mut uc.msg {
        r.private_data.0[0] = 0;
        r.transport = softrdma_wire::mad::cm::TransportType::Uc;
        r.local_comm_id ^= 1;
    }
    p.cm(1)
        .handle_mad(now, Gid::from_ip(ip(0)), 1, &uc.to_bytes());
    let out = p.cm(1).poll_transmit().expect("a REJ");
    assert!(matches!(
        CmMad::parse(&out.mad).unwrap().msg,
        CmMessage::Rej(r) if r.reason == RejectReason::ConsumerDefined
    ));
}

/// The table of connections has a limit: a REQ beyond it is dropped unanswered (Linux drops
/// a REQ it cannot allocate for, so that a retransmission may succeed) and counted.
#[test]
fn requests_beyond_max_connections_are_dropped() {
    let mut p = Pair::with(AUTO, MANUAL);
    p.nodes[1].cm = RdmaCm::new(CmConfig {
        max_connections: 1,
        ..config(1)
    });
    p.listen_and_connect();
    p.connect(0, PortSpace::Tcp, RdmaQpType::Rc, PORT, ConnParam::rc(0x12));
    p.run(Duration::from_millis(100));
    assert_eq!(p.trace(), [(0, "REQ"), (0, "REQ")]);
    assert_eq!(kinds(&p.take(1)), ["CONNECT_REQUEST"]);
    assert_eq!(p.cm(1).stats().drops(CmDrop::NoResources), 1);
}

/// A connection request that no listener takes is named for the caller (on a shared address,
/// a request the kernel steered to the wrong device, which the caller drops instead of
/// rejecting); one a listener takes, one of a connection already known, and any other MAD
/// are not. A request the caller drops counts as misdirected and gets no answer.
#[test]
fn requests_no_listener_takes_are_named_for_the_caller() {
    let mut p = Pair::new().fate(|_, _| Fate::Drop);
    p.listen_and_connect();
    let req = p.sent(0, "REQ")[0].mad;
    let CmMessage::Req(r) = req.msg else {
        panic!("{req:?}")
    };
    let bytes = req.to_bytes();
    assert_eq!(
        p.cm(1).unlistened_request(&bytes),
        None,
        "node 1 listens on it"
    );
    assert_eq!(p.cm(0).unlistened_request(&bytes), Some(r.service_id));
    let mut elsewhere = req;
    if let CmMessage::Req(r) = &mut elsewhere.msg {
        r.service_id += 1;
    }
    let elsewhere = elsewhere.to_bytes();
    assert_eq!(
        p.cm(1).unlistened_request(&elsewhere),
        Some(r.service_id + 1),
        "no listener on the next port"
    );
    // A SIDR_REQ too (UD's request), by its service.
    let sidr = CmMad::new(
        4,
        CmMessage::SidrReq(softrdma_wire::mad::cm::SidrReq {
            service_id: r.service_id,
            ..Default::default()
        }),
    )
    .to_bytes();
    assert_eq!(p.cm(0).unlistened_request(&sidr), Some(r.service_id));
    // Not requests: an RTU, a Get.
    let rtu = CmMad::new(3, CmMessage::Rtu(Default::default())).to_bytes();
    assert_eq!(p.cm(0).unlistened_request(&rtu), None);
    let mut get = [0u8; MAD_LEN];
    MadHeader {
        method: Method::GET,
        ..MadHeader::cm(attr::REQ, 1)
    }
    .emit(&mut get);
    assert_eq!(p.cm(0).unlistened_request(&get), None);

    // Once node 1 has the REQ, a request with its communication ID belongs to that
    // connection (a retransmission), whatever service it names.
    let now = p.now;
    p.cm(1).handle_mad(now, Gid::from_ip(ip(0)), 1, &bytes);
    assert_eq!(p.cm(1).unlistened_request(&elsewhere), None);

    p.cm(0).misdirected();
    assert_eq!(p.cm(0).stats().drops(CmDrop::Misdirected), 1);
    assert!(p.cm(0).poll_transmit().is_none());
}
