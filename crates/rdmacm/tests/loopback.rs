//! rdma_cm between two softrdma devices over real UDP on loopback (one device per 127.0.x.y),
//! and again over the in-process fabric, duplicating and reordering (`over_fabric.rs`): connect and exchange
//! data, reject with private data, a port nobody listens on, many connections at once,
//! disconnect on both sides.

mod common;

use std::time::Duration;

use common::addr;
use softrdma::{wr, AccessFlags, CompletionQueue, QpInitAttr, QueuePair, WcStatus};
use softrdma_rdmacm::{
    CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RdmaQpType, RejectReason,
};

const WAIT: Duration = Duration::from_secs(10);

fn next(ch: &EventChannel) -> CmEvent {
    ch.get_event(Some(WAIT)).expect("an event within 10 s")
}

fn qp_for(id: &CmId) -> (QueuePair, CompletionQueue) {
    let pd = id.pd().unwrap();
    let cq = id.device().unwrap().create_cq(64).unwrap();
    let qp = id.create_qp(&pd, &QpInitAttr::rc(&cq)).unwrap();
    (qp, cq)
}

/// A client id on `ch`, resolved towards `dst` from `src`, with its QP.
fn client(ch: &EventChannel, src: &str, dst: &str) -> (CmId, QueuePair, CompletionQueue) {
    let id = CmId::new(ch, PortSpace::Tcp, RdmaQpType::Rc);
    id.resolve_addr(Some(addr(src)), addr(dst)).unwrap();
    assert_eq!(next(ch).kind, CmEventKind::AddrResolved);
    id.resolve_route().unwrap();
    assert_eq!(next(ch).kind, CmEventKind::RouteResolved);
    let (qp, cq) = qp_for(&id);
    (id, qp, cq)
}

fn listener(ch: &EventChannel, at: &str) -> CmId {
    let id = CmId::new(ch, PortSpace::Tcp, RdmaQpType::Rc);
    id.bind_addr(addr(at)).unwrap();
    id.listen().unwrap();
    id
}

#[test]
fn connect_send_and_disconnect() {
    let (sch, cch) = (EventChannel::new(), EventChannel::new());
    let l = listener(&sch, "127.0.60.2:7471");
    let (c, cqp, ccq) = client(&cch, "127.0.60.1:0", "127.0.60.2:7471");
    let hello = b"private hello".to_vec();
    c.connect(&ConnParam {
        private_data: hello.clone(),
        ..ConnParam::rc(0)
    })
    .unwrap();

    let req = next(&sch);
    let CmEventKind::ConnectRequest { param, peer, local } = &req.kind else {
        panic!("{req:?}");
    };
    assert_eq!(req.listen_id.as_ref(), Some(&l));
    assert_eq!(&param.private_data[..hello.len()], &hello[..]);
    assert_eq!(peer.ip(), addr("127.0.60.1:0").ip());
    assert_eq!(*local, addr("127.0.60.2:7471"));
    let s = req.id.clone();
    let (sqp, scq) = qp_for(&s);
    s.accept(&ConnParam::rc(0)).unwrap();

    assert!(matches!(next(&cch).kind, CmEventKind::Established { .. }));
    assert!(matches!(next(&sch).kind, CmEventKind::Established { .. }));

    // Data flows on the connected QPs.
    let pd_s = s.pd().unwrap();
    let pd_c = c.pd().unwrap();
    let rmr = pd_s.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let smr = pd_c.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    smr.write(0, b"over rdma_cm").unwrap();
    sqp.post_recv([wr::recv(1, vec![rmr.sge(0, 64)])]).unwrap();
    cqp.post_send([wr::send(2, vec![smr.sge(0, 12)])]).unwrap();
    let mut out = Vec::new();
    ccq.poll_blocking(1, &mut out, Some(WAIT));
    scq.poll_blocking(1, &mut out, Some(WAIT));
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out.iter().all(|w| w.status == WcStatus::Success), "{out:?}");
    assert_eq!(rmr.read_vec(0, 12).unwrap(), b"over rdma_cm");

    // Disconnect: the DREQ tells the server, whose own disconnect answers with the DREP
    // (as rping's server does); then the client hears of it. Both QPs are in error.
    c.disconnect().unwrap();
    assert_eq!(next(&sch).kind, CmEventKind::Disconnected);
    s.disconnect().unwrap();
    assert_eq!(next(&cch).kind, CmEventKind::Disconnected);
    assert_eq!(sqp.state(), softrdma::QpState::Err);
    assert_eq!(cqp.state(), softrdma::QpState::Err);
}

#[test]
fn reject_with_private_data_and_no_listener() {
    let (sch, cch) = (EventChannel::new(), EventChannel::new());
    let _l = listener(&sch, "127.0.60.4:7471");
    let (c, _qp, _cq) = client(&cch, "127.0.60.3:0", "127.0.60.4:7471");
    c.connect(&ConnParam::rc(0)).unwrap();
    let req = next(&sch);
    assert!(matches!(req.kind, CmEventKind::ConnectRequest { .. }));
    req.id.reject(b"go away").unwrap();
    let CmEventKind::Rejected {
        reason,
        private_data,
    } = next(&cch).kind
    else {
        panic!("not rejected");
    };
    assert_eq!(reason, RejectReason::ConsumerDefined);
    assert_eq!(&private_data[..7], b"go away");

    // Nobody listens on 7472: REJ "invalid service ID" (8), as Linux answers.
    let (c2, _qp2, _cq2) = client(&cch, "127.0.60.3:0", "127.0.60.4:7472");
    c2.connect(&ConnParam::rc(0)).unwrap();
    let e = next(&cch);
    assert_eq!(e.id, c2);
    assert!(
        matches!(
            e.kind,
            CmEventKind::Rejected {
                reason: RejectReason::InvalidServiceId,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn sixty_four_connections_at_once() {
    let (sch, cch) = (EventChannel::new(), EventChannel::new());
    let _l = listener(&sch, "127.0.60.6:7471");
    let clients: Vec<_> = (0..64)
        .map(|_| {
            let (c, qp, cq) = client(&cch, "127.0.60.5:0", "127.0.60.6:7471");
            c.connect(&ConnParam::rc(0)).unwrap();
            (c, qp, cq)
        })
        .collect();
    let server = std::thread::spawn(move || {
        let mut accepted = Vec::new();
        let mut established = 0;
        while established < 64 {
            let e = next(&sch);
            match e.kind {
                CmEventKind::ConnectRequest { .. } => {
                    let (qp, cq) = qp_for(&e.id);
                    e.id.accept(&ConnParam::rc(0)).unwrap();
                    accepted.push((e.id, qp, cq));
                }
                CmEventKind::Established { .. } => established += 1,
                other => panic!("server: {other:?}"),
            }
        }
        (sch, accepted)
    });
    let mut established = 0;
    while established < 64 {
        match next(&cch).kind {
            CmEventKind::Established { .. } => established += 1,
            other => panic!("client: {other:?}"),
        }
    }
    let (sch, accepted) = server.join().unwrap();
    assert_eq!(accepted.len(), 64);
    // Tear all down at once from the client side.
    for (c, _, _) in &clients {
        c.disconnect().unwrap();
    }
    let mut gone = 0;
    while gone < 64 {
        if next(&sch).kind == CmEventKind::Disconnected {
            gone += 1;
        }
    }
}

#[test]
fn the_blocking_shortcut_connects_and_disconnects() {
    let listener = softrdma_rdmacm::Listener::bind(addr("127.0.60.8:7471")).unwrap();
    let (checked, wait_checked) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let cq_slot = std::sync::Mutex::new(None);
        let conn = listener
            .accept(
                |dev| {
                    let cq = dev.create_cq(16).unwrap();
                    *cq_slot.lock().unwrap() = Some(cq.clone());
                    QpInitAttr::rc(&cq)
                },
                &ConnParam {
                    private_data: b"welcome".to_vec(),
                    ..ConnParam::rc(0)
                },
                WAIT,
            )
            .unwrap();
        assert_eq!(&conn.private_data[..5], b"hello");
        assert_eq!(conn.qp.state(), softrdma::QpState::Rts);
        checked.send(()).unwrap();
        // The client's disconnect arrives; answering it ends the connection.
        let e = conn.events().get_event(Some(WAIT)).unwrap();
        assert_eq!(e.kind, CmEventKind::Disconnected);
        e.id.disconnect().unwrap();
    });
    let conn = softrdma_rdmacm::connect(
        Some(addr("127.0.60.7:0")),
        addr("127.0.60.8:7471"),
        |dev| QpInitAttr::rc(&dev.create_cq(16).unwrap()),
        &ConnParam {
            private_data: b"hello".to_vec(),
            ..ConnParam::rc(0)
        },
        WAIT,
    )
    .unwrap();
    assert_eq!(&conn.private_data[..7], b"welcome");
    assert_eq!(conn.qp.state(), softrdma::QpState::Rts);
    wait_checked.recv_timeout(WAIT).unwrap();
    conn.disconnect(WAIT).unwrap();
    server.join().unwrap();
}

#[test]
fn a_listener_gone_mid_handshake_rejects_not_hangs() {
    let (sch, cch) = (EventChannel::new(), EventChannel::new());
    let l = listener(&sch, "127.0.60.10:7471");
    let (c, _qp, _cq) = client(&cch, "127.0.60.9:0", "127.0.60.10:7471");
    c.connect(&ConnParam::rc(0)).unwrap();
    let req = next(&sch);
    assert!(matches!(req.kind, CmEventKind::ConnectRequest { .. }));
    // The server goes away between the REQ and its answer: the request's id and the
    // listener are destroyed without accept or reject.
    drop(req);
    drop(l);
    let e = next(&cch);
    assert!(matches!(e.kind, CmEventKind::Rejected { .. }), "{e:?}");
}

/// A listener dropped while a connect request waits unread in its channel: as after the
/// kernel's `rdma_destroy_id`, the request is rejected at once and the port is free to listen
/// on again (the unread event used to keep the listener, its port and the client waiting).
#[test]
fn a_listener_dropped_with_an_unread_request_rejects_it_and_frees_its_port() {
    let (sch, cch) = (EventChannel::new(), EventChannel::new());
    let l = listener(&sch, "127.0.60.26:7471");
    let (c, _qp, _cq) = client(&cch, "127.0.60.25:0", "127.0.60.26:7471");
    c.connect(&ConnParam::rc(0)).unwrap();
    let asked = std::time::Instant::now();
    while !sch.has_event() {
        assert!(
            asked.elapsed() < WAIT,
            "the request never reached the server"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(l);
    assert!(
        sch.try_get_event().is_none(),
        "the request went with its listener"
    );
    let again = listener(&sch, "127.0.60.26:7471");
    let e = next(&cch);
    assert_eq!(e.id, c);
    assert!(matches!(e.kind, CmEventKind::Rejected { .. }), "{e:?}");
    // The new listener takes the next request.
    let (c2, _qp2, _cq2) = client(&cch, "127.0.60.25:0", "127.0.60.26:7471");
    c2.connect(&ConnParam::rc(0)).unwrap();
    let req = next(&sch);
    assert_eq!(req.listen_id.as_ref(), Some(&again));
    assert!(matches!(req.kind, CmEventKind::ConnectRequest { .. }));
}
