//! Misuse of the engine's object and posting API is a typed error that changes nothing —
//! never a panic, never a half-applied change.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use softrdma_proto::*;
use softrdma_wire::Psn;

fn engine() -> (Engine, PdHandle, CqHandle, u32, u32) {
    engine_with_inline(8)
}

fn engine_with_inline(max_inline_data: u32) -> (Engine, PdHandle, CqHandle, u32, u32) {
    let mut e = Engine::new(EngineConfig::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    let pd = e.alloc_pd();
    let cq = e.create_cq(16);
    let key = e
        .reg_mr(
            pd,
            0x1000,
            64,
            AccessFlags::all(),
            Arc::new(VecMemory::new(64)),
        )
        .unwrap();
    let qpn = e
        .create_qp(
            pd,
            cq,
            cq,
            QpType::Rc,
            QpCaps {
                max_send_wr: 2,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data,
            },
        )
        .unwrap();
    (e, pd, cq, key, qpn)
}

fn to_rts(e: &mut Engine, qpn: u32) {
    let peer = AddressVector {
        dest_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        traffic_class: 0,
        hop_limit: 64,
    };
    e.modify_qp(qpn, &QpAttr::rc_init(AccessFlags::all()))
        .unwrap();
    e.modify_qp(
        qpn,
        &QpAttr::rc_rtr(Mtu::Mtu1024, peer, 0x11, Psn::ZERO, 1, 12),
    )
    .unwrap();
    e.modify_qp(qpn, &QpAttr::rc_rts(Psn::ZERO, 14, 7, 7, 1))
        .unwrap();
}

fn send(wr_id: u64, sg_list: Vec<Sge>) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send,
        sg_list,
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
        xrc_srqn: None,
    }
}

#[test]
fn posting_in_the_wrong_state() {
    let (mut e, _, _, key, qpn) = engine();
    let sge = Sge {
        addr: 0x1000,
        length: 8,
        lkey: key,
    };
    assert_eq!(
        e.post_send(Instant::ZERO, qpn, send(1, vec![sge])),
        Err(EngineError::InvalidState(QpState::Reset))
    );
    assert_eq!(
        e.post_recv(
            qpn,
            RecvWr {
                wr_id: 1,
                sg_list: vec![sge]
            }
        ),
        Err(EngineError::InvalidState(QpState::Reset))
    );
    assert_eq!(
        e.post_send(Instant::ZERO, 0x999, send(1, vec![])),
        Err(EngineError::NoSuchQp)
    );
}

#[test]
fn structural_send_errors() {
    let (mut e, _, _, key, qpn) = engine();
    to_rts(&mut e, qpn);
    let sge = Sge {
        addr: 0x1000,
        length: 8,
        lkey: key,
    };
    assert!(matches!(
        e.post_send(Instant::ZERO, qpn, send(1, vec![sge, sge])),
        Err(EngineError::InvalidArgument(_))
    ));
    let mut inline = send(2, vec![]);
    inline.inline_data = Some(vec![0; 4].into());
    assert!(
        matches!(
            e.post_send(Instant::ZERO, qpn, inline.clone()),
            Err(EngineError::InvalidArgument(_))
        ),
        "inline data without the flag"
    );
    inline.flags = SendFlags::SIGNALED | SendFlags::INLINE;
    inline.inline_data = Some(vec![0; 9].into());
    assert!(
        matches!(
            e.post_send(Instant::ZERO, qpn, inline),
            Err(EngineError::InvalidArgument(_))
        ),
        "longer than max_inline_data"
    );
    let atomic = SendWr {
        wr_id: 3,
        op: SendOp::AtomicFetchAdd {
            remote_addr: 0x1000,
            rkey: 1,
            add: 1,
        },
        sg_list: vec![Sge { length: 4, ..sge }],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
        xrc_srqn: None,
    };
    assert!(
        matches!(
            e.post_send(Instant::ZERO, qpn, atomic),
            Err(EngineError::InvalidArgument(_))
        ),
        "atomic needs 8 bytes"
    );
    let misaligned = SendWr {
        wr_id: 4,
        op: SendOp::AtomicCmpSwap {
            remote_addr: 0x1004,
            rkey: 1,
            compare: 0,
            swap: 1,
        },
        sg_list: vec![sge],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
        xrc_srqn: None,
    };
    assert!(matches!(
        e.post_send(Instant::ZERO, qpn, misaligned),
        Err(EngineError::InvalidArgument(_))
    ));
    // Queue depth.
    e.post_send(Instant::ZERO, qpn, send(5, vec![sge])).unwrap();
    e.post_send(Instant::ZERO, qpn, send(6, vec![sge])).unwrap();
    assert_eq!(
        e.post_send(Instant::ZERO, qpn, send(7, vec![sge])),
        Err(EngineError::QueueFull)
    );
    assert_eq!(
        e.qp(qpn).unwrap().send_queue_len(),
        2,
        "refused WRs were not queued"
    );
}

/// `ibv_wr_atomic_write` hands its 8 bytes over by pointer and the C library carries them as
/// inline data: a QP created without inline room (rdma-core's tests create theirs so) must
/// still take it, while a SEND of as many inline bytes is refused.
#[test]
fn atomic_write_value_is_not_inline_data_of_the_qp() {
    let (mut e, _, _, _, qpn) = engine_with_inline(0);
    to_rts(&mut e, qpn);
    let inline = |wr_id, op| SendWr {
        wr_id,
        op,
        sg_list: vec![],
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        inline_data: Some(vec![7; 8].into()),
        ud: None,
        xrc_srqn: None,
    };
    assert!(matches!(
        e.post_send(Instant::ZERO, qpn, inline(1, SendOp::Send)),
        Err(EngineError::InvalidArgument(_))
    ));
    let atomic_write = SendOp::AtomicWrite {
        remote_addr: 0x2000,
        rkey: 5,
    };
    assert_eq!(
        e.post_send(Instant::ZERO, qpn, inline(2, atomic_write)),
        Ok(())
    );
}

#[test]
fn object_lifetimes() {
    let (mut e, pd, cq, key, qpn) = engine();
    assert_eq!(e.dealloc_pd(pd), Err(EngineError::Busy));
    assert_eq!(e.destroy_cq(cq), Err(EngineError::Busy));
    e.destroy_qp(qpn).unwrap();
    assert_eq!(e.destroy_qp(qpn), Err(EngineError::NoSuchQp));
    e.destroy_cq(cq).unwrap();
    assert_eq!(
        e.dealloc_pd(pd),
        Err(EngineError::Busy),
        "the MR still uses the PD"
    );
    e.dereg_mr(key).unwrap();
    assert_eq!(e.dereg_mr(key), Err(EngineError::NoSuchMr));
    e.dealloc_pd(pd).unwrap();
    assert_eq!(e.dealloc_pd(pd), Err(EngineError::NoSuchPd));
}

#[test]
fn mr_registration_rules() {
    let mut e = Engine::new(EngineConfig::default());
    let pd = e.alloc_pd();
    let mem = Arc::new(VecMemory::new(16));
    assert!(
        matches!(
            e.reg_mr(pd, 0, 16, AccessFlags::REMOTE_WRITE, mem.clone()),
            Err(EngineError::InvalidArgument(_))
        ),
        "remote write needs local write"
    );
    assert!(
        matches!(
            e.reg_mr(pd, 0, 17, AccessFlags::LOCAL_WRITE, mem.clone()),
            Err(EngineError::InvalidArgument(_))
        ),
        "longer than the memory"
    );
    assert!(matches!(
        e.reg_mr(pd, u64::MAX - 4, 16, AccessFlags::LOCAL_WRITE, mem.clone()),
        Err(EngineError::InvalidArgument(_))
    ));
    assert_eq!(
        e.reg_mr(PdHandle(99), 0, 16, AccessFlags::LOCAL_WRITE, mem),
        Err(EngineError::NoSuchPd)
    );
}

#[test]
fn refused_modify_changes_nothing() {
    let (mut e, _, _, _, qpn) = engine();
    let err = e.modify_qp(
        qpn,
        &QpAttr {
            qp_state: Some(QpState::Rts),
            ..Default::default()
        },
    );
    assert!(matches!(
        err,
        Err(EngineError::Modify(ModifyQpError::IllegalTransition { .. }))
    ));
    assert_eq!(e.qp(qpn).unwrap().state(), QpState::Reset);
    let err = e.modify_qp(
        qpn,
        &QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            ..Default::default()
        },
    );
    assert!(matches!(
        err,
        Err(EngineError::Modify(ModifyQpError::MissingAttribute {
            attr: "qp_access_flags",
            ..
        }))
    ));
    assert_eq!(e.qp(qpn).unwrap().state(), QpState::Reset);
}

#[test]
fn error_state_flushes_posted_and_later_work() {
    let (mut e, _, cq, key, qpn) = engine();
    to_rts(&mut e, qpn);
    let sge = Sge {
        addr: 0x1000,
        length: 8,
        lkey: key,
    };
    e.post_recv(
        qpn,
        RecvWr {
            wr_id: 10,
            sg_list: vec![sge],
        },
    )
    .unwrap();
    e.post_send(Instant::ZERO, qpn, send(11, vec![sge]))
        .unwrap();
    e.modify_qp(
        qpn,
        &QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        },
    )
    .unwrap();
    e.post_send(Instant::ZERO, qpn, send(12, vec![sge]))
        .unwrap();
    let mut wcs = Vec::new();
    e.poll_cq(cq, 16, &mut wcs).unwrap();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![
            (11, WcStatus::WrFlushErr),
            (10, WcStatus::WrFlushErr),
            (12, WcStatus::WrFlushErr)
        ]
    );
    let mut buf = Vec::new();
    assert!(
        e.poll_transmit(Instant::ZERO, &mut buf).is_none(),
        "nothing leaves a QP in ERR"
    );
}

#[test]
fn hostile_datagrams_are_counted_not_fatal() {
    let (mut e, _, _, _, qpn) = engine();
    to_rts(&mut e, qpn);
    let meta = DatagramMeta::new("10.0.0.2:49152".parse().unwrap(), e.config().local_ip);
    let mut seed = 0x1234_5678_u64;
    for len in 0..300usize {
        let data: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        e.handle_datagram(Instant::ZERO, &meta, &data);
    }
    assert_eq!(e.stats().rx_packets, 300);
    assert_eq!(e.stats().total_drops(), 300);
    assert!(e.stats().drops_for(DropReason::BadIcrc) > 0);
}

/// A QP moved to the reset state takes its completions out of the CQs it shares with another
/// QP, its send CQ and its receive CQ alike (as mlx5's provider does), so that a program
/// resetting it after an error to use it again polls no flush of its former life; the other
/// QP's completions stay, in order.
#[test]
fn reset_removes_the_qps_completions_from_shared_cqs() {
    let (mut e, pd, _, key, _) = engine();
    let (send_cq, recv_cq) = (e.create_cq(16), e.create_cq(16));
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let [a, b] = [(); 2].map(|_| e.create_qp(pd, send_cq, recv_cq, QpType::Rc, caps).unwrap());
    let sge = Sge {
        addr: 0x1000,
        length: 8,
        lkey: key,
    };
    let recv = |wr_id| RecvWr {
        wr_id,
        sg_list: vec![sge],
    };
    let to_err = QpAttr {
        qp_state: Some(QpState::Err),
        ..QpAttr::default()
    };
    for (qpn, wr_id) in [(b, 10), (a, 20)] {
        to_rts(&mut e, qpn);
        e.post_recv(qpn, recv(wr_id)).unwrap();
        // Sent into the void: in flight until the error flushes it.
        e.post_send(Instant::ZERO, qpn, send(wr_id + 1, vec![sge]))
            .unwrap();
        e.modify_qp(qpn, &to_err).unwrap();
    }
    assert_eq!(e.cq(send_cq).unwrap().len(), 2, "two flushed sends");
    assert_eq!(e.cq(recv_cq).unwrap().len(), 2, "two flushed receives");
    let reset = QpAttr {
        qp_state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    e.modify_qp(a, &reset).unwrap();
    for (cq, wr_id) in [(send_cq, 11), (recv_cq, 10)] {
        let mut out = Vec::new();
        e.poll_cq(cq, 8, &mut out).unwrap();
        let left: Vec<_> = out
            .iter()
            .map(|wc| (wc.qp_num, wc.wr_id, wc.status))
            .collect();
        assert_eq!(left, [(b, wr_id, WcStatus::WrFlushErr)]);
    }
}
