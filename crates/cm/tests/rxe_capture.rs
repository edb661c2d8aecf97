//! softrdma's rdma_cm against the real thing: rping's connection between two Linux rxe hosts
//! (`testdata/conformance/rdma_cm.pcap`) replayed into one side, with our MADs compared byte
//! for byte to what rxe sent in the same role. The only bytes allowed to differ are the ones
//! both implementations draw at random: our communication ID (and the TID half derived from
//! it) and our starting PSN; the test copies ours into rxe's MAD and then demands equality.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::gsi_mads;
use softrdma_cm::ib::CmConfig;
use softrdma_cm::rdma::{ConnParam, RdmaCm, RdmaEventKind, RdmaQpType, Route};
use softrdma_proto::{Instant, QpState};
use softrdma_wire::mad::cm::{CmMad, CmMessage};
use softrdma_wire::mad::cma::PortSpace;
use softrdma_wire::mad::MAD_LEN;
use softrdma_wire::{Gid, Psn};

const SERVER_GUID: u64 = 0x5054_00ff_fe58_000b;
const CLIENT_GUID: u64 = 0x5054_00ff_fe58_000c;

fn server_ip() -> IpAddr {
    "10.88.0.11".parse().unwrap()
}

fn client_ip() -> IpAddr {
    "10.88.0.12".parse().unwrap()
}

fn config(guid: u64) -> CmConfig {
    CmConfig {
        ca_guid: guid,
        tid_agent: 2, // the MAD agent number rxe's TIDs carry
        ..CmConfig::default()
    }
}

/// The capture's five MADs, parsed: REQ, REP, RTU, DREQ, DREP.
fn captured() -> Vec<(IpAddr, CmMad, Vec<u8>)> {
    let mads = gsi_mads("rdma_cm.pcap");
    assert_eq!(mads.len(), 5);
    mads.into_iter()
        .map(|m| (m.src, CmMad::parse(&m.mad).unwrap(), m.mad))
        .collect()
}

/// Rewrites a captured MAD's comm IDs / PSN / TID with `f` and re-emits it.
fn patched(mad: &CmMad, f: impl FnOnce(&mut CmMad)) -> [u8; MAD_LEN] {
    let mut m = *mad;
    f(&mut m);
    m.to_bytes()
}

/// Linux's TID for a comm ID with agent 2 on x86.
fn tid(comm_id: u32) -> u64 {
    (2 << 32) | u64::from(comm_id.swap_bytes())
}

/// We are the rping server; rxe's client connects, we answer as rxe's server did.
#[test]
fn answers_rpings_req_like_rxe() {
    let cap = captured();
    let now = Instant::from_nanos(1_000);
    let mut cm = RdmaCm::new(config(SERVER_GUID));
    let listener = cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
    cm.bind(listener, SocketAddr::new(server_ip(), 7174))
        .unwrap();
    cm.listen(listener).unwrap();

    let client_gid = Gid::from_ip(client_ip());
    cm.handle_mad(now, client_gid, 1, &cap[0].2);
    let ev = cm.poll_event().expect("CONNECT_REQUEST");
    let RdmaEventKind::ConnectRequest {
        listen_id,
        param,
        peer,
        local,
    } = ev.kind
    else {
        panic!("{ev:?}")
    };
    assert_eq!(listen_id, listener);
    assert_eq!(peer, "10.88.0.12:34390".parse().unwrap());
    assert_eq!(local, SocketAddr::new(server_ip(), 7174));
    assert_eq!(
        (
            param.qp_num,
            param.responder_resources,
            param.initiator_depth
        ),
        (0x11, 1, 1)
    );
    assert_eq!((param.retry_count, param.rnr_retry_count), (7, 7));
    assert!(
        param.private_data.iter().all(|&b| b == 0),
        "rping sends none"
    );
    assert!(cm.poll_transmit().is_none(), "rdma_cm's MRA is only armed");

    // Our QP: INIT → RTR → RTS before the REP, as librdmacm does it.
    let rtr = cm.qp_attr(ev.id, QpState::Rtr).unwrap();
    let rts = cm.qp_attr(ev.id, QpState::Rts).unwrap();
    assert_eq!(rtr.dest_qp_num, Some(0x11));
    assert_eq!(rtr.ah_attr.unwrap().dest_ip, client_ip());
    assert_eq!(rtr.ah_attr.unwrap().hop_limit, 64);
    assert_eq!(
        rts.sq_psn,
        Some(Psn::new(0x2b_5620)),
        "we send with the REQ's PSN"
    );
    assert_eq!(
        (rts.timeout, rts.retry_cnt, rts.rnr_retry),
        (Some(19), Some(7), Some(7))
    );
    assert_eq!(
        (rtr.max_dest_rd_atomic, rts.max_rd_atomic),
        (Some(1), Some(1))
    );

    cm.accept(now, ev.id, &ConnParam::rc(0x11)).unwrap();
    let out = cm.poll_transmit().expect("the REP");
    assert_eq!((out.dst, out.dst_qpn), (client_gid, 1));
    let ours = CmMad::parse(&out.mad).unwrap();
    let CmMessage::Rep(our_rep) = ours.msg else {
        panic!("{ours:?}")
    };
    assert_eq!(
        rtr.rq_psn,
        Some(our_rep.starting_psn),
        "we expect our REP's PSN"
    );
    let rxe_rep = patched(&cap[1].1, |m| {
        if let CmMessage::Rep(r) = &mut m.msg {
            r.local_comm_id = our_rep.local_comm_id;
            r.starting_psn = our_rep.starting_psn;
        }
    });
    assert_eq!(out.mad, rxe_rep, "our REP is rxe's, comm ID and PSN aside");
    let server_comm_id = our_rep.local_comm_id;

    // rxe's RTU and DREQ, addressed to our comm ID.
    let rtu = patched(&cap[2].1, |m| {
        if let CmMessage::Rtu(r) = &mut m.msg {
            r.remote_comm_id = server_comm_id;
        }
    });
    cm.handle_mad(now, client_gid, 1, &rtu);
    assert_eq!(
        cm.poll_event().unwrap().kind,
        RdmaEventKind::Established { ud: None }
    );
    let dreq = patched(&cap[3].1, |m| {
        if let CmMessage::Dreq(d) = &mut m.msg {
            d.remote_comm_id = server_comm_id;
        }
    });
    cm.handle_mad(now, client_gid, 1, &dreq);
    assert_eq!(cm.poll_event().unwrap().kind, RdmaEventKind::Disconnected);
    cm.disconnect(now, ev.id).unwrap();
    let drep = cm.poll_transmit().expect("the DREP");
    let rxe_drep = patched(&cap[4].1, |m| {
        if let CmMessage::Drep(d) = &mut m.msg {
            d.local_comm_id = server_comm_id;
        }
    });
    assert_eq!(drep.mad, rxe_drep, "our DREP is rxe's, comm ID aside");
    assert!(cm.poll_transmit().is_none());
    let stats = cm.stats();
    assert_eq!(stats.rx.total(), 3);
    assert_eq!(stats.tx.total(), 2);
}

/// We are the rping client; our REQ, RTU and DREQ are rxe's client's, and rxe's server's REP
/// and DREP complete the exchange.
#[test]
fn connects_like_rping() {
    let cap = captured();
    let now = Instant::from_nanos(1_000);
    let mut cm = RdmaCm::new(config(CLIENT_GUID));
    let id = cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
    // rping's source port in the capture (an ephemeral port: ours would be random).
    cm.bind(id, "10.88.0.12:34390".parse().unwrap()).unwrap();
    let init = cm.qp_attr(id, QpState::Init).unwrap();
    assert_eq!(init.pkey_index, Some(0));
    let server = SocketAddr::new(server_ip(), 7174);
    cm.connect(now, id, server, Route::default(), &ConnParam::rc(0x11))
        .unwrap();
    let out = cm.poll_transmit().expect("the REQ");
    assert_eq!((out.dst, out.dst_qpn), (Gid::from_ip(server_ip()), 1));
    let ours = CmMad::parse(&out.mad).unwrap();
    let CmMessage::Req(our_req) = ours.msg else {
        panic!("{ours:?}")
    };
    let rxe_req = patched(&cap[0].1, |m| {
        m.header.tid = tid(our_req.local_comm_id);
        if let CmMessage::Req(r) = &mut m.msg {
            r.local_comm_id = our_req.local_comm_id;
            r.starting_psn = our_req.starting_psn;
        }
    });
    assert_eq!(out.mad, rxe_req, "our REQ is rxe's, comm ID and PSN aside");
    let client_comm_id = our_req.local_comm_id;

    // rxe's REP, to our comm ID and TID.
    let server_gid = Gid::from_ip(server_ip());
    let rep = patched(&cap[1].1, |m| {
        m.header.tid = tid(client_comm_id);
        if let CmMessage::Rep(r) = &mut m.msg {
            r.remote_comm_id = client_comm_id;
        }
    });
    cm.handle_mad(now, server_gid, 1, &rep);
    let ev = cm.poll_event().unwrap();
    let RdmaEventKind::ConnectResponse { param } = ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!(param.qp_num, 0x11);
    let rtr = cm.qp_attr(id, QpState::Rtr).unwrap();
    let rts = cm.qp_attr(id, QpState::Rts).unwrap();
    assert_eq!(
        rtr.rq_psn,
        Some(our_req.starting_psn),
        "we expect our REQ's PSN"
    );
    assert_eq!(
        rts.sq_psn,
        Some(Psn::new(0xf5_2293)),
        "we send with the REP's PSN"
    );
    assert_eq!(rts.timeout, Some(19), "cm_ack_timeout(15, 19 - 1)");
    cm.complete_connect(now, id).unwrap();
    assert_eq!(
        cm.poll_event().unwrap().kind,
        RdmaEventKind::Established { ud: None }
    );
    let rtu = cm.poll_transmit().expect("the RTU");
    let rxe_rtu = patched(&cap[2].1, |m| {
        m.header.tid = tid(client_comm_id);
        if let CmMessage::Rtu(r) = &mut m.msg {
            r.local_comm_id = client_comm_id;
        }
    });
    assert_eq!(rtu.mad, rxe_rtu, "our RTU is rxe's, comm ID aside");

    cm.disconnect(now, id).unwrap();
    let dreq = cm.poll_transmit().expect("the DREQ");
    let rxe_dreq = patched(&cap[3].1, |m| {
        m.header.tid = tid(client_comm_id);
        if let CmMessage::Dreq(d) = &mut m.msg {
            d.local_comm_id = client_comm_id;
        }
    });
    assert_eq!(dreq.mad, rxe_dreq, "our DREQ is rxe's, comm ID aside");
    let drep = patched(&cap[4].1, |m| {
        m.header.tid = tid(client_comm_id);
        if let CmMessage::Drep(d) = &mut m.msg {
            d.remote_comm_id = client_comm_id;
        }
    });
    cm.handle_mad(now, server_gid, 1, &drep);
    assert_eq!(cm.poll_event().unwrap().kind, RdmaEventKind::Disconnected);
    let exit = cm.poll_timeout().expect("time-wait");
    assert_eq!(exit - now, softrdma_proto::Duration::from_millis(2048));
    cm.handle_timeout(exit);
    assert_eq!(cm.poll_event().unwrap().kind, RdmaEventKind::TimewaitExit);
    assert!(cm.poll_transmit().is_none());
}

/// rxe's SIDR_REPs, from `scripts/lab/udaddy.sh` (softrdma's udaddy client at 10.88.0.1,
/// rdma-core's udaddy server on rxe at 10.88.0.11, 4 UD "connections"): rdma_cm gives UD QPs
/// the Q_Key `RDMA_UDP_QKEY`, 0x01234567. softrdma had another value until this capture
/// showed it.
#[test]
fn rxe_sidr_reps_carry_rdma_udp_qkey() {
    use softrdma_wire::mad::cm::SidrStatus;
    use softrdma_wire::mad::cma::RDMA_UDP_QKEY;
    let reps: Vec<_> = gsi_mads("udaddy_sidr.pcap")
        .into_iter()
        .filter(|m| m.src == server_ip())
        .filter_map(|m| match CmMad::parse(&m.mad).ok()?.msg {
            CmMessage::SidrRep(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(reps.len(), 4);
    for r in reps {
        assert_eq!((r.status, r.qkey), (SidrStatus::Success, RDMA_UDP_QKEY));
    }
    assert_eq!(RDMA_UDP_QKEY, 0x0123_4567);
}
