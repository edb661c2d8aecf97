//! Shared receive queues over real UDP on loopback (addresses 127.0.47.x): one SRQ feeding
//! eight RC QPs, its limit event, RNR on an empty SRQ, and the QP's
//! last-WQE event when it breaks.

mod common;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::*;
use softrdma::{
    wr, AsyncEvent, AsyncEvents, ConnectOptions, QpInitAttr, QpState, QueuePair, SrqAttr, SrqError,
    WcOpcode, WcStatus,
};

/// The next asynchronous event, waiting at most [`WAIT`].
fn next_event(events: &AsyncEvents) -> AsyncEvent {
    let mut p = libc::pollfd {
        fd: events.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut p, 1, WAIT.as_millis() as i32) };
    assert_eq!(n, 1, "no asynchronous event within {WAIT:?}");
    events.get_event().unwrap()
}

/// Whether an event is pending now.
fn event_pending(events: &AsyncEvents) -> bool {
    let mut p = libc::pollfd {
        fd: events.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, 100) == 1 }
}

#[test]
fn eight_qps_share_one_srq_and_its_limit_fires_once() {
    let a = Side::new("127.0.47.1", 1 << 16);
    let b = Side::new("127.0.47.2", 1 << 16);
    let events = b.dev.async_events().unwrap();
    let srq =
        b.pd.create_srq(SrqAttr {
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    // Eight connections, every receiver on the one SRQ.
    let mut senders: Vec<QueuePair> = Vec::new();
    let mut receivers: Vec<QueuePair> = Vec::new();
    for _ in 0..8 {
        let s = a.pd.create_qp(&QpInitAttr::rc(&a.cq)).unwrap();
        let mut init = QpInitAttr::rc(&b.cq);
        init.srq = Some(srq.clone());
        let r = b.pd.create_qp(&init).unwrap();
        connect(&s, &r);
        senders.push(s);
        receivers.push(r);
    }
    // 32 receives, each its own 256-byte slot; the limit armed at 8.
    srq.post_recv((0..32u64).map(|i| wr::recv(100 + i, vec![b.mr.sge(i as usize * 256, 256)])))
        .unwrap();
    assert_eq!(srq.len(), 32);
    srq.arm_limit(8).unwrap();
    assert_eq!(srq.query().srq_limit, 8);
    // Three messages on every QP: 24 receives taken, 8 left — not yet below the limit.
    let mut sent = 0u64;
    for round in 0..3u8 {
        for (i, s) in senders.iter().enumerate() {
            let tag = [round * 16 + i as u8; 64];
            a.mr.write(sent as usize * 64, &tag).unwrap();
            s.post_send([wr::send(sent, vec![a.mr.sge(sent as usize * 64, 64)])])
                .unwrap();
            sent += 1;
        }
    }
    let wcs = wait_wcs(&b.cq, 24);
    let mut by_qp = std::collections::HashMap::new();
    for wc in &wcs {
        assert_eq!(
            (wc.status, wc.opcode, wc.byte_len),
            (WcStatus::Success, WcOpcode::Recv, 64)
        );
        // The SRQ hands its WQEs out in posting order, whichever QP the message came on.
        let slot = (wc.wr_id - 100) as usize;
        let got = b.mr.read_vec(slot * 256, 64).unwrap();
        let qp_index = receivers
            .iter()
            .position(|r| r.qp_num() == wc.qp_num)
            .unwrap();
        assert!(
            got.iter().all(|&x| x % 16 == qp_index as u8),
            "{got:?} on QP {qp_index}"
        );
        *by_qp.entry(wc.qp_num).or_insert(0) += 1;
    }
    assert_eq!(by_qp.len(), 8);
    assert!(by_qp.values().all(|&n| n == 3), "{by_qp:?}");
    assert_eq!(wait_wcs(&a.cq, 24).len(), 24);
    assert_eq!(srq.len(), 8);
    assert!(
        !event_pending(&events),
        "8 left is not below the limit of 8"
    );
    // One more message: 7 left, below the limit — the event, once; the limit is disarmed.
    senders[0]
        .post_send([wr::send(99, vec![a.mr.sge(0, 64)])])
        .unwrap();
    wait_one(&b.cq);
    assert_eq!(
        next_event(&events),
        AsyncEvent::SrqLimitReached { srq: srq.id() }
    );
    assert_eq!(srq.query().srq_limit, 0, "the limit fired and is disarmed");
    senders[1]
        .post_send([wr::send(98, vec![a.mr.sge(0, 64)])])
        .unwrap();
    wait_one(&b.cq);
    assert!(!event_pending(&events), "a disarmed limit raises nothing");
    wait_wcs(&a.cq, 2);
    // Out-of-range attributes are refused and change nothing.
    assert!(matches!(srq.arm_limit(65), Err(SrqError::InvalidAttr(_))));
    assert!(
        matches!(srq.modify(Some(4), None), Err(SrqError::InvalidAttr(_))),
        "6 WQEs held"
    );
    assert!(matches!(
        b.pd.create_srq(SrqAttr {
            max_wr: 0,
            max_sge: 1,
            srq_limit: 0
        }),
        Err(SrqError::InvalidAttr(_))
    ));
}

/// A message to a QP whose SRQ is empty gets RNR NAKs, as without an SRQ, until a receive
/// is posted; then it lands.
#[test]
fn empty_srq_means_rnr_until_a_receive_is_posted() {
    let a = Side::new("127.0.47.3", 4096);
    let b = Side::new("127.0.47.4", 4096);
    let srq =
        b.pd.create_srq(SrqAttr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let mut init = QpInitAttr::rc(&b.cq);
    init.srq = Some(srq.clone());
    let r = b.pd.create_qp(&init).unwrap();
    let s = a.pd.create_qp(&QpInitAttr::rc(&a.cq)).unwrap();
    let opts = ConnectOptions {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..ConnectOptions::default()
    };
    s.connect(&r.endpoint(), &opts).unwrap();
    r.connect(&s.endpoint(), &opts).unwrap();
    a.mr.write(0, b"srq!").unwrap();
    s.post_send([wr::send(1, vec![a.mr.sge(0, 4)])]).unwrap();
    let deadline = Instant::now() + WAIT;
    while a
        .dev
        .stats()
        .engine
        .naks_received_of(softrdma::NakKind::Rnr)
        == 0
    {
        assert!(Instant::now() < deadline, "no RNR NAK for an empty SRQ");
        std::thread::sleep(Duration::from_millis(1));
    }
    srq.post_recv([wr::recv(7, vec![b.mr.sge(100, 16)])])
        .unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (7, WcStatus::Success, 4)
    );
    assert_eq!(b.mr.read_vec(100, 4).unwrap(), b"srq!");
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
}

/// A QP on an SRQ that enters the error state reports "last WQE reached"; the SRQ lives on
/// while a QP holds it, and its work requests stay for the others.
#[test]
fn a_broken_qp_on_an_srq_reports_last_wqe_reached() {
    let b = Side::new("127.0.47.6", 4096);
    let events = b.dev.async_events().unwrap();
    let srq =
        b.pd.create_srq(SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    srq.post_recv([wr::recv(1, vec![b.mr.sge(0, 16)])]).unwrap();
    let mut init = QpInitAttr::rc(&b.cq);
    init.srq = Some(srq.clone());
    let r = b.pd.create_qp(&init).unwrap();
    r.to_init(all_access()).unwrap();
    r.modify(&softrdma::QpAttr {
        qp_state: Some(QpState::Err),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        next_event(&events),
        AsyncEvent::QpLastWqeReached { qp: r.qp_num() }
    );
    // The SRQ's receive is not flushed: it belongs to the SRQ, not to the QP.
    assert_eq!(srq.len(), 1);
    drop(srq);
    assert_eq!(r.state(), QpState::Err);
}
