//! Every CM MAD of the bundled rdma_cm captures (rping, ucmatose, `ib_write_bw -R`,
//! `ib_send_bw -R`, all rxe ↔ rxe): the GSI datagram around it, byte-exact parse → emit of the
//! whole MAD, and field values checked against the rest of the capture — communication IDs
//! that pair up across REQ/REP/RTU/DREQ/DREP, the QPNs and starting PSNs the RC traffic then
//! uses, the service ID of the tool's port, rdma_cm's IP header naming the packet's own
//! addresses, and the flow label rdma_cm derives from the ports.

mod common;

use std::collections::HashMap;
use std::net::IpAddr;

use common::roce_packets;
use softrdma_wire::mad::cm::{CmMad, CmMessage, Req, TransportType};
use softrdma_wire::mad::cma::{roce_flow_label, CmaHeader, PortSpace, CMA_VERSION};
use softrdma_wire::mad::{MadHeader, Method, MgmtClass, GSI_QKEY, GSI_QPN, MAD_LEN};
use softrdma_wire::{Gid, IpPacket, Opcode, PacketRepr, Psn};

/// One CM MAD of a capture, with where it came from.
struct CapturedMad {
    index: usize,
    src: IpAddr,
    dst: IpAddr,
    bytes: Vec<u8>,
    mad: CmMad,
}

/// The CM MADs of a capture, in order, each checked for the GSI framing rxe uses.
fn cm_mads(capture: &'static str) -> Vec<CapturedMad> {
    let mut out = Vec::new();
    for p in roce_packets(capture) {
        let ip = IpPacket::parse(&p.ip).unwrap();
        let packet = PacketRepr::parse(p.transport()).unwrap();
        if packet.bth.dest_qpn != GSI_QPN {
            continue;
        }
        let at = format!("{capture} #{}", p.index);
        assert_eq!(packet.bth.opcode, Opcode::UD_SEND_ONLY, "{at}");
        let deth = packet.ext.deth.expect("UD packets carry a DETH");
        assert_eq!((deth.qkey, deth.src_qpn), (GSI_QKEY, GSI_QPN), "{at}");
        assert_eq!(packet.payload.len(), MAD_LEN, "{at}");
        let mad = CmMad::parse(packet.payload).unwrap_or_else(|e| panic!("{at}: {e}"));
        out.push(CapturedMad {
            index: p.index,
            src: ip.ip.src(),
            dst: ip.ip.dst(),
            bytes: packet.payload.to_vec(),
            mad,
        });
    }
    out
}

/// The first PSN each (source address, destination QPN) pair sends RC requests with.
fn first_rc_psns(capture: &'static str) -> HashMap<(IpAddr, u32), Psn> {
    let mut out = HashMap::new();
    for p in roce_packets(capture) {
        let ip = IpPacket::parse(&p.ip).unwrap();
        let packet = PacketRepr::parse(p.transport()).unwrap();
        let name = packet.bth.opcode.name();
        if name.starts_with("RC_") && !name.contains("ACKNOWLEDGE") && !name.contains("RESPONSE") {
            out.entry((ip.ip.src(), packet.bth.dest_qpn))
                .or_insert(packet.bth.psn);
        }
    }
    out
}

/// A capture of an rdma_cm tool: the server's port, the CM MADs in it, and the retry and RNR
/// retry counts the client's `rdma_conn_param` asks for.
struct CmCapture {
    name: &'static str,
    port: u16,
    mads: usize,
    retry: (u8, u8),
}

const CM_CAPTURES: [CmCapture; 4] = [
    CmCapture {
        name: "rdma_cm.pcap",
        port: 7174,
        mads: 5,
        retry: (7, 7),
    },
    CmCapture {
        name: "ucmatose.pcap",
        port: 7471,
        mads: 10,
        retry: (5, 0),
    },
    CmCapture {
        name: "write_bw_cm.pcap",
        port: 18515,
        mads: 10,
        retry: (7, 7),
    },
    CmCapture {
        name: "send_bw_cm.pcap",
        port: 18515,
        mads: 10,
        retry: (7, 7),
    },
];

#[test]
fn test_parse_emit_identical_bytes() {
    for c in &CM_CAPTURES {
        let capture = c.name;
        let mads = cm_mads(capture);
        assert_eq!(mads.len(), c.mads, "{capture}");
        for m in &mads {
            let at = format!("{capture} #{}", m.index);
            assert_eq!(m.mad.to_bytes()[..], m.bytes[..], "{at}: emit differs");
            // Linux's CM: base version 1, class 2, method Send, status 0, attr_mod 0.
            assert_eq!(
                m.mad.header,
                MadHeader::cm(m.mad.msg.attr_id(), m.mad.header.tid),
                "{at}"
            );
            assert_eq!(m.mad.header.mgmt_class, MgmtClass::CM);
            assert_eq!(m.mad.header.method, Method::SEND);
        }
    }
}

/// Checks one REQ → REP → RTU exchange and returns (active comm ID, passive comm ID).
fn check_handshake(
    c: &CmCapture,
    req: &CapturedMad,
    rep: &CapturedMad,
    psns: &HashMap<(IpAddr, u32), Psn>,
) -> (u32, u32) {
    let (capture, port) = (c.name, c.port);
    let (CmMessage::Req(q), CmMessage::Rep(p)) = (req.mad.msg, rep.mad.msg) else {
        panic!("{capture}: expected REQ then REP");
    };
    let at = format!("{capture} #{}", req.index);
    // rdma_cm's service ID: the TCP port space and the server's port.
    assert_eq!(q.service_id, PortSpace::Tcp.service_id(port), "{at}");
    // ib_cm's TID: the agent number above, the local comm ID's bytes (little-endian host)
    // below; responses echo it.
    assert_eq!(
        req.mad.header.tid & 0xffff_ffff,
        u64::from(q.local_comm_id.swap_bytes()),
        "{at}"
    );
    assert_eq!(
        rep.mad.header.tid, req.mad.header.tid,
        "{at}: REP echoes the TID"
    );
    assert_eq!(p.remote_comm_id, q.local_comm_id, "{at}");
    // rdma_cm's fixed REQ parameters (CMA_CM_RESPONSE_TIMEOUT, CMA_MAX_CM_RETRIES), RoCE's
    // permissive LIDs and P_Key, rxe's 1024-byte MTU.
    check_rdma_cm_req(&q, &at);
    assert_eq!((q.retry_count, q.rnr_retry_count), c.retry, "{at}");
    // The path names the packet's own addresses; the GUIDs are rxe's EUI-64 node GUIDs.
    assert_eq!(q.primary_path.local_gid, Gid::from_ip(req.src), "{at}");
    assert_eq!(q.primary_path.remote_gid, Gid::from_ip(req.dst), "{at}");
    assert_eq!(
        q.local_ca_guid >> 24 & 0xffff,
        0xfffe,
        "{at}: EUI-64 node GUID"
    );
    assert_eq!(
        p.local_ca_guid >> 24 & 0xffff,
        0xfffe,
        "{at}: EUI-64 node GUID"
    );
    // rdma_cm's IP header: version 0, IPv4, the packet's addresses, the active side's port;
    // the flow label is the hash of its ports.
    let h = CmaHeader::parse(&q.private_data).unwrap();
    assert_eq!(h.version, CMA_VERSION, "{at}");
    assert_eq!(
        (h.src_ip(), h.dst_ip()),
        (Some(req.src), Some(req.dst)),
        "{at}"
    );
    assert_eq!(
        q.primary_path.flow_label,
        roce_flow_label(h.src_port, port),
        "{at}"
    );
    // rxe's REP: its ACK delay (15) and the RNR retry rdma_cm asked for.
    assert_eq!((p.target_ack_delay, p.rnr_retry_count), (15, 7), "{at}");
    // The QPs then talk: the active side sends with the REP's PSN to the REP's QPN, the
    // passive side (if it sends requests at all: not on perftest's WRITE connection) with the
    // REQ's PSN to the REQ's QPN (ib_cm's sq_psn/rq_psn).
    assert_eq!(
        psns.get(&(req.src, p.local_qpn)),
        Some(&p.starting_psn),
        "{at}"
    );
    if let Some(psn) = psns.get(&(req.dst, q.local_qpn)) {
        assert_eq!(*psn, q.starting_psn, "{at}");
    }
    (q.local_comm_id, p.local_comm_id)
}

fn check_rdma_cm_req(q: &Req, at: &str) {
    assert_eq!(q.transport, TransportType::Rc, "{at}");
    assert_eq!(
        (q.remote_cm_response_timeout, q.local_cm_response_timeout),
        (20, 20),
        "{at}"
    );
    assert_eq!(q.max_cm_retries, 15, "{at}");
    assert_eq!((q.pkey, q.path_mtu), (0xffff, 3), "{at}");
    let path = &q.primary_path;
    assert_eq!((path.local_lid, path.remote_lid), (0xffff, 0xffff), "{at}");
    assert_eq!((path.hop_limit, path.local_ack_timeout), (64, 19), "{at}");
    assert!(!q.alternate_path.is_present(), "{at}");
}

#[test]
fn test_rping_exchange() {
    let mads = cm_mads("rdma_cm.pcap");
    let psns = first_rc_psns("rdma_cm.pcap");
    let (active, passive) = check_handshake(&CM_CAPTURES[0], &mads[0], &mads[1], &psns);
    assert_eq!((active, passive), (0x823b_9cb1, 0x5ed9_9b66));
    let CmMessage::Req(req) = mads[0].mad.msg else {
        unreachable!()
    };
    // rping's conn_param: one READ each way.
    assert_eq!((req.responder_resources, req.initiator_depth), (1, 1));
    let CmMessage::Rep(rep) = mads[1].mad.msg else {
        unreachable!()
    };
    // The REP's fields are checked one by one in the wire crate's unit tests; here, that it
    // answers this REQ with rxe's QP and PSN.
    assert_eq!(
        (rep.local_qpn, rep.starting_psn),
        (0x11, Psn::new(0xf5_2293))
    );
    assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 1));
    // RTU from the active side, then the client's DREQ naming the server's QP, then the DREP.
    let ids = |m: &CapturedMad| match m.mad.msg {
        CmMessage::Rtu(r) => (r.local_comm_id, r.remote_comm_id),
        CmMessage::Dreq(r) => (r.local_comm_id, r.remote_comm_id),
        CmMessage::Drep(r) => (r.local_comm_id, r.remote_comm_id),
        other => panic!("unexpected {}", other.name()),
    };
    assert_eq!(ids(&mads[2]), (active, passive));
    assert_eq!(mads[2].mad.header.tid, mads[0].mad.header.tid);
    assert_eq!(ids(&mads[3]), (active, passive));
    let CmMessage::Dreq(dreq) = mads[3].mad.msg else {
        unreachable!()
    };
    assert_eq!(dreq.remote_qpn, rep.local_qpn);
    assert_eq!(ids(&mads[4]), (passive, active));
    assert_eq!(
        mads[4].mad.header.tid, mads[3].mad.header.tid,
        "DREP echoes the TID"
    );
}

/// The teardown of a connection: a DREQ from either side naming the other's QP, then the
/// DREP echoing its TID with the IDs swapped.
fn check_teardown(mads: &[CapturedMad], active: u32, passive: u32, qpns: (u32, u32)) -> IpAddr {
    let pair = |d: &softrdma_wire::mad::cm::Dreq| {
        (d.local_comm_id, d.remote_comm_id) == (active, passive)
            || (d.local_comm_id, d.remote_comm_id) == (passive, active)
    };
    let dreq = mads
        .iter()
        .find(|m| matches!(&m.mad.msg, CmMessage::Dreq(d) if pair(d)))
        .expect("a DREQ for the connection");
    let CmMessage::Dreq(d) = dreq.mad.msg else {
        unreachable!()
    };
    let (local, remote) = (d.local_comm_id, d.remote_comm_id);
    // The DREQ names the receiver's QP: the REP's for the active side, the REQ's otherwise.
    let receiver_qpn = if local == active { qpns.1 } else { qpns.0 };
    assert_eq!(d.remote_qpn, receiver_qpn);
    let drep = mads
        .iter()
        .find(|m| matches!(m.mad.msg, CmMessage::Drep(r) if (r.local_comm_id, r.remote_comm_id) == (remote, local)))
        .expect("the DREP");
    assert_eq!(drep.mad.header.tid, dreq.mad.header.tid);
    dreq.src
}

#[test]
fn test_two_connection_captures() {
    for c in &CM_CAPTURES[1..] {
        let capture = c.name;
        let mads = cm_mads(capture);
        let psns = first_rc_psns(capture);
        let reqs: Vec<&CapturedMad> = mads
            .iter()
            .filter(|m| matches!(m.mad.msg, CmMessage::Req(_)))
            .collect();
        assert_eq!(reqs.len(), 2, "{capture}");
        for req in reqs {
            let CmMessage::Req(q) = req.mad.msg else {
                unreachable!()
            };
            let rep = mads
                .iter()
                .find(|m| matches!(m.mad.msg, CmMessage::Rep(p) if p.remote_comm_id == q.local_comm_id))
                .expect("a REP");
            let CmMessage::Rep(p) = rep.mad.msg else {
                unreachable!()
            };
            let (active, passive) = check_handshake(c, req, rep, &psns);
            assert!(mads.iter().any(|m| matches!(m.mad.msg,
                CmMessage::Rtu(r) if (r.local_comm_id, r.remote_comm_id) == (active, passive))));
            check_teardown(&mads, active, passive, (q.local_qpn, p.local_qpn));
        }
    }
    // ucmatose's server disconnects both connections; perftest's client and server each
    // disconnect one.
    let ucma = cm_mads("ucmatose.pcap");
    assert!(ucma
        .iter()
        .filter(|m| matches!(m.mad.msg, CmMessage::Dreq(_)))
        .all(|m| m.src == "10.88.0.11".parse::<IpAddr>().unwrap()));
}
