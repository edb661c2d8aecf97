//! `IbCm::farewell`: in every state of a connection, the MAD `destroy` would send, ahead of
//! time (what a driver leaves for someone else to send if its process is killed), and
//! `farewell_changes`, which reports exactly the connections whose farewell changed.

use std::net::{IpAddr, Ipv4Addr};

use softrdma_cm::ib::RepParams;
use softrdma_cm::ib::{CmConfig, CmState, IbCm, IbCmEvent, IbCmId, OutMad, PathRecord, ReqParams};
use softrdma_proto::Instant;
use softrdma_wire::mad::cm::{CmMad, CmMessage, RejectReason};
use softrdma_wire::Gid;

const A_GUID: u64 = 0x0a0a_0a0a_0a0a_0a0a;

fn gid(last: u8) -> Gid {
    Gid::from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
}

/// Two CMs, A (active, 10.0.0.1) and B (passive, 10.0.0.2), MADs carried by hand.
struct Pair {
    a: IbCm,
    b: IbCm,
    now: Instant,
}

impl Pair {
    fn new() -> Pair {
        let config = |guid, seed| CmConfig {
            ca_guid: guid,
            rng_seed: seed,
            ..CmConfig::default()
        };
        let mut b = IbCm::new(config(0x0b0b, 2));
        b.listen(0x0106_0000_0000_4e20, 0).expect("listen");
        Pair {
            a: IbCm::new(config(A_GUID, 1)),
            b,
            now: Instant::from_nanos(1_000_000),
        }
    }

    /// A's REQ is on its way; the connection's id at A.
    fn connect(&mut self) -> IbCmId {
        let path = PathRecord::roce(gid(1), gid(2), 3, 0);
        let p = ReqParams::rdma_cm(path, 0x0106_0000_0000_4e20, 0x11);
        self.a.connect(self.now, &p).expect("connect")
    }

    /// Carries what A sent to B and what B sent to A (once each way, in that order).
    fn carry(&mut self) {
        while let Some(m) = self.a.poll_transmit() {
            self.b.handle_mad(self.now, gid(1), 1, &m.mad);
        }
        while let Some(m) = self.b.poll_transmit() {
            self.a.handle_mad(self.now, gid(2), 1, &m.mad);
        }
    }

    /// B's id of the request it received.
    fn b_request(&mut self) -> IbCmId {
        while let Some(e) = self.b.poll_event() {
            if let IbCmEvent::ReqReceived { id, .. } = e {
                return id;
            }
        }
        panic!("B got no REQ")
    }

    fn accept(&mut self, id: IbCmId) {
        let p = RepParams {
            qpn: 0x12,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            ..RepParams::default()
        };
        self.b.accept(self.now, id, &p).expect("accept");
    }

    /// Both sides established: (A's id, B's id).
    fn established(&mut self) -> (IbCmId, IbCmId) {
        let a = self.connect();
        self.carry();
        let b = self.b_request();
        self.accept(b);
        self.carry();
        self.a.send_rtu(self.now, a, &[]).expect("rtu");
        self.carry();
        assert_eq!(self.a.info(a).map(|i| i.state), Some(CmState::Established));
        assert_eq!(self.b.info(b).map(|i| i.state), Some(CmState::Established));
        (a, b)
    }
}

fn drain(cm: &mut IbCm) -> Vec<OutMad> {
    std::iter::from_fn(|| cm.poll_transmit()).collect()
}

/// `cm`'s farewell for `id`, then destroys `id`: the first MAD destroy sends must be that
/// farewell, byte for byte; returns it.
fn said_on_destroy(cm: &mut IbCm, id: IbCmId, now: Instant) -> Option<OutMad> {
    drain(cm);
    let farewell = cm.farewell(id);
    cm.destroy(now, id).expect("destroy");
    let sent = drain(cm);
    assert_eq!(
        sent.first(),
        farewell.as_ref(),
        "destroy said something else"
    );
    farewell
}

fn message(m: &OutMad) -> CmMessage {
    CmMad::parse(&m.mad).expect("a CM MAD").msg
}

#[test]
fn active_side_waiting_for_the_rep_leaves_a_rej_timeout_with_its_guid() {
    let mut p = Pair::new();
    let a = p.connect();
    assert_eq!(p.a.info(a).map(|i| i.state), Some(CmState::ReqSent));
    let f = said_on_destroy(&mut p.a, a, p.now).expect("a REJ");
    assert_eq!(f.dst, gid(2));
    assert_eq!(f.dst_qpn, 1);
    match message(&f) {
        CmMessage::Rej(r) => {
            assert_eq!(r.reason, RejectReason::Timeout);
            assert_eq!(&r.ari[..8], &A_GUID.to_be_bytes());
        }
        other => panic!("expected a REJ, got {other:?}"),
    }
}

#[test]
fn passive_side_before_and_after_its_rep_leaves_a_consumer_rej() {
    for accepted in [false, true] {
        let mut p = Pair::new();
        p.connect();
        p.carry();
        let b = p.b_request();
        if accepted {
            p.accept(b);
        }
        let state = p.b.info(b).map(|i| i.state);
        let want = if accepted {
            CmState::RepSent
        } else {
            CmState::ReqRcvd
        };
        assert_eq!(state, Some(want));
        let f = said_on_destroy(&mut p.b, b, p.now).expect("a REJ");
        assert_eq!(f.dst, gid(1));
        match message(&f) {
            CmMessage::Rej(r) => assert_eq!(r.reason, RejectReason::ConsumerDefined),
            other => panic!("expected a REJ, got {other:?}"),
        }
    }
}

#[test]
fn active_side_before_its_rtu_leaves_a_consumer_rej() {
    let mut p = Pair::new();
    let a = p.connect();
    p.carry();
    let b = p.b_request();
    p.accept(b);
    p.carry();
    assert_eq!(p.a.info(a).map(|i| i.state), Some(CmState::RepRcvd));
    let f = said_on_destroy(&mut p.a, a, p.now).expect("a REJ");
    assert!(matches!(message(&f), CmMessage::Rej(r) if r.reason == RejectReason::ConsumerDefined));
}

#[test]
fn established_connections_leave_one_dreq_that_the_peer_takes() {
    let mut p = Pair::new();
    let (a, b) = p.established();
    let f = said_on_destroy(&mut p.a, a, p.now).expect("a DREQ");
    let dreq = match message(&f) {
        CmMessage::Dreq(d) => d,
        other => panic!("expected a DREQ, got {other:?}"),
    };
    assert_eq!(dreq.remote_qpn, 0x12, "names the peer's QP");
    // Said by someone else, as the MAD alone: the peer disconnects and answers.
    while p.b.poll_event().is_some() {}
    p.b.handle_mad(p.now, gid(1), 1, &f.mad);
    let events: Vec<IbCmEvent> = std::iter::from_fn(|| p.b.poll_event()).collect();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, IbCmEvent::DreqReceived { id, .. } if *id == b)),
        "{events:?}"
    );
    // B's own farewell is now the DREP it owes.
    let drep = p.b.farewell(b).expect("a DREP");
    assert!(matches!(message(&drep), CmMessage::Drep(_)));
    assert_eq!(said_on_destroy(&mut p.b, b, p.now), Some(drep));
}

#[test]
fn nothing_is_left_once_a_disconnect_is_under_way_or_over() {
    let mut p = Pair::new();
    let (a, b) = p.established();
    p.a.disconnect(p.now, a, &[]).expect("disconnect");
    assert_eq!(p.a.info(a).map(|i| i.state), Some(CmState::DreqSent));
    assert_eq!(
        p.a.farewell(a),
        None,
        "Linux cancels its DREQ and says nothing more"
    );
    p.carry();
    p.b.send_drep(p.now, b, &[]).expect("drep");
    p.carry();
    assert_eq!(p.a.info(a).map(|i| i.state), Some(CmState::Timewait));
    assert_eq!(p.b.info(b).map(|i| i.state), Some(CmState::Timewait));
    assert_eq!(said_on_destroy(&mut p.a, a, p.now), None);
    assert_eq!(said_on_destroy(&mut p.b, b, p.now), None);
}

#[test]
fn farewell_changes_report_each_change_once() {
    let mut p = Pair::new();
    assert!(p.a.farewell_changes().is_empty());
    let a = p.connect();
    let first = p.a.farewell_changes();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0, a);
    assert!(matches!(
        first[0].1.as_ref().map(message),
        Some(CmMessage::Rej(_))
    ));
    assert!(p.a.farewell_changes().is_empty(), "nothing changed since");
    p.carry();
    let b = p.b_request();
    p.accept(b);
    p.carry();
    p.a.send_rtu(p.now, a, &[]).expect("rtu");
    let established = p.a.farewell_changes();
    assert_eq!(established.len(), 1);
    assert!(matches!(
        established[0].1.as_ref().map(message),
        Some(CmMessage::Dreq(_))
    ));
    assert_eq!(established[0].1, p.a.farewell(a));
    p.a.destroy(p.now, a).expect("destroy");
    assert_eq!(p.a.farewell_changes(), vec![(a, None)], "gone");
    assert!(p.a.farewell_changes().is_empty());
}
