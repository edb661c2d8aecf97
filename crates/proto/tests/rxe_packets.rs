//! The engine against Linux rxe's own packets (testdata/conformance): set up like the rxe QP
//! in the capture, it sends the very bytes rxe sent (ICRC included, for the IPv4
//! identification rxe's kernel used), and what rxe sent it receives as rxe's peer did.

#[path = "../../wire/tests/common/mod.rs"]
mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use common::{roce_packets, RocePacket};
use softrdma_proto::*;
use softrdma_wire::{Opcode, PacketRepr, GRH_LEN};

const BASE: u64 = 0x7f00_0000_0000;
const MEM: usize = 1 << 16;

struct Side {
    engine: Engine,
    pd: PdHandle,
    cq: CqHandle,
    mem: Arc<VecMemory>,
    key: u32,
}

fn side(ip: IpAddr) -> Side {
    let mut engine = Engine::new(EngineConfig {
        port_mtu: Mtu::Mtu1024,
        ..EngineConfig::new(ip)
    });
    let pd = engine.alloc_pd();
    let cq = engine.create_cq(256);
    let mem = Arc::new(VecMemory::new(MEM));
    let key = engine
        .reg_mr(pd, BASE, MEM as u64, AccessFlags::all(), mem.clone())
        .unwrap();
    Side {
        engine,
        pd,
        cq,
        mem,
        key,
    }
}

fn parse(p: &RocePacket) -> PacketRepr<'_> {
    PacketRepr::parse(p.transport()).unwrap()
}

/// What the capture's receiver knew of packet `p`: addresses, TOS and TTL from its IP header.
fn meta(p: &RocePacket) -> DatagramMeta {
    let ip = &p.ip;
    DatagramMeta {
        tos: ip[1],
        ttl: ip[8],
        ..DatagramMeta::new(SocketAddr::new(p.ctx.src, p.ctx.src_port), p.ctx.dst)
    }
}

/// Polls the next packet as the segment the capture's kernel numbered `p.ctx.ipv4_id`, and
/// checks it is `p`, byte for byte.
fn assert_sends(s: &mut Side, p: &RocePacket) {
    let mut out = Vec::new();
    let t = s
        .engine
        .poll_transmit_segment(Instant::ZERO, &mut out, p.ctx.ipv4_id)
        .unwrap_or_else(|| panic!("{} #{}: nothing sent", p.capture, p.index));
    assert_eq!(
        t.dst,
        SocketAddr::new(p.ctx.dst, p.ctx.dst_port),
        "#{}",
        p.index
    );
    assert_eq!(t.src_port, p.ctx.src_port, "#{}: UDP source port", p.index);
    assert_eq!(
        &out[..t.len],
        p.transport(),
        "{} #{}: bytes differ",
        p.capture,
        p.index
    );
}

#[test]
fn ud_send_like_rxe() {
    let pkts = roce_packets("ud_send.pcap");
    let first = &pkts[0];
    let hdr = parse(first);
    let deth = hdr.ext.deth.unwrap();
    let mut s = side(first.ctx.src);
    let qpn = s
        .engine
        .create_qp(s.pd, s.cq, s.cq, QpType::Ud, QpCaps::default())
        .unwrap();
    assert_eq!(qpn, deth.src_qpn, "rxe's first QPN, like ours");
    s.engine
        .modify_qp(qpn, &QpAttr::ud_init(deth.qkey))
        .unwrap();
    s.engine.modify_qp(qpn, &QpAttr::ud_rtr()).unwrap();
    s.engine
        .modify_qp(qpn, &QpAttr::unreliable_rts(hdr.bth.psn))
        .unwrap();
    // The next three datagrams this side sent, from the same buffer.
    let ours: Vec<&RocePacket> = pkts
        .iter()
        .filter(|p| p.ctx.src == first.ctx.src)
        .take(3)
        .collect();
    for p in &ours {
        let h = parse(p);
        s.mem.write(0, h.payload);
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sg_list: vec![Sge {
                addr: BASE,
                length: h.payload.len() as u32,
                lkey: s.key,
            }],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: Some(UdDest {
                av: AddressVector {
                    dest_ip: p.ctx.dst,
                    traffic_class: 0,
                    hop_limit: 64,
                },
                remote_qpn: h.bth.dest_qpn,
                remote_qkey: h.ext.deth.unwrap().qkey,
            }),
            xrc_srqn: None,
        };
        s.engine.post_send(Instant::ZERO, qpn, wr).unwrap();
        assert_sends(&mut s, p);
    }
}

#[test]
fn ud_receive_fills_the_grh_area_with_rxes_ip_header() {
    let pkts = roce_packets("ud_send.pcap");
    // A datagram g1 sent to g2; be g2.
    let theirs: Vec<&RocePacket> = pkts.iter().filter(|p| p.index > 12).take(4).collect();
    let to = theirs[0].ctx.dst;
    let mut s = side(to);
    let qpn = s
        .engine
        .create_qp(s.pd, s.cq, s.cq, QpType::Ud, QpCaps::default())
        .unwrap();
    let h = parse(theirs[0]);
    s.engine
        .modify_qp(qpn, &QpAttr::ud_init(h.ext.deth.unwrap().qkey))
        .unwrap();
    s.engine.modify_qp(qpn, &QpAttr::ud_rtr()).unwrap();
    for (k, p) in theirs.iter().filter(|p| p.ctx.dst == to).enumerate() {
        let at = (k * 2048) as u64;
        s.engine
            .post_recv(
                qpn,
                RecvWr {
                    wr_id: k as u64,
                    sg_list: vec![Sge {
                        addr: BASE + at,
                        length: 2048,
                        lkey: s.key,
                    }],
                },
            )
            .unwrap();
        s.engine
            .handle_datagram(Instant::ZERO, &meta(p), p.transport());
        let mut wcs = Vec::new();
        s.engine.poll_cq(s.cq, 8, &mut wcs).unwrap();
        assert_eq!(wcs.len(), 1, "#{}", p.index);
        let h = parse(p);
        assert_eq!(wcs[0].status, WcStatus::Success);
        assert_eq!(wcs[0].byte_len as usize, GRH_LEN + h.payload.len());
        assert_eq!(wcs[0].src_qp, h.ext.deth.unwrap().src_qpn);
        let got = s.mem.snapshot();
        let area = &got[at as usize..at as usize + GRH_LEN];
        assert_eq!(area[..20], [0u8; 20]);
        assert_eq!(
            area[20..],
            p.ip[..20],
            "#{}: the IPv4 header rxe's kernel wrote, byte for byte",
            p.index
        );
        assert_eq!(
            &got[at as usize + GRH_LEN..at as usize + GRH_LEN + h.payload.len()],
            h.payload
        );
    }
}

/// A UC QP set up as the sender of `pkts[0]` in its capture.
fn uc_side(pkts: &[RocePacket]) -> (Side, u32) {
    let first = &pkts[0];
    let h = parse(first);
    let mut s = side(first.ctx.src);
    let qpn = s
        .engine
        .create_qp(s.pd, s.cq, s.cq, QpType::Uc, QpCaps::default())
        .unwrap();
    s.engine
        .modify_qp(qpn, &QpAttr::rc_init(AccessFlags::all()))
        .unwrap();
    let av = AddressVector {
        dest_ip: first.ctx.dst,
        traffic_class: 0,
        hop_limit: 64,
    };
    // The peer's first PSN: that of the first packet it sent (if it sent any).
    let rq_psn = pkts
        .iter()
        .find(|p| p.ctx.src == first.ctx.dst)
        .map_or(softrdma_wire::Psn::ZERO, |p| parse(p).bth.psn);
    s.engine
        .modify_qp(
            qpn,
            &QpAttr::uc_rtr(Mtu::Mtu1024, av, h.bth.dest_qpn, rq_psn),
        )
        .unwrap();
    s.engine
        .modify_qp(qpn, &QpAttr::unreliable_rts(h.bth.psn))
        .unwrap();
    (s, qpn)
}

#[test]
fn uc_send_like_rxe_both_ways() {
    let pkts = roce_packets("uc_send.pcap");
    let (mut s, qpn) = uc_side(&pkts);
    let me = pkts[0].ctx.src;
    // Our first message: FIRST, MIDDLE, LAST.
    let ours: Vec<&RocePacket> = pkts.iter().filter(|p| p.ctx.src == me).take(3).collect();
    let msg: Vec<u8> = ours
        .iter()
        .flat_map(|p| parse(p).payload.to_vec())
        .collect();
    assert_eq!(msg.len(), 3000);
    s.mem.write(0, &msg);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: vec![Sge {
            addr: BASE,
            length: 3000,
            lkey: s.key,
        }],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
        xrc_srqn: None,
    };
    s.engine.post_send(Instant::ZERO, qpn, wr).unwrap();
    for p in &ours {
        assert_sends(&mut s, p);
    }
    let mut wcs = Vec::new();
    s.engine.poll_cq(s.cq, 8, &mut wcs).unwrap();
    assert_eq!(
        (wcs[0].status, wcs[0].byte_len),
        (WcStatus::Success, 3000),
        "UC completes on send"
    );

    // Their first message arrives whole into our receive.
    s.engine
        .post_recv(
            qpn,
            RecvWr {
                wr_id: 9,
                sg_list: vec![Sge {
                    addr: BASE + 0x8000,
                    length: 4096,
                    lkey: s.key,
                }],
            },
        )
        .unwrap();
    let theirs: Vec<&RocePacket> = pkts.iter().filter(|p| p.ctx.src != me).take(3).collect();
    let expect: Vec<u8> = theirs
        .iter()
        .flat_map(|p| parse(p).payload.to_vec())
        .collect();
    for p in &theirs {
        s.engine
            .handle_datagram(Instant::ZERO, &meta(p), p.transport());
    }
    wcs.clear();
    s.engine.poll_cq(s.cq, 8, &mut wcs).unwrap();
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (9, 3000));
    assert_eq!(&s.mem.snapshot()[0x8000..0x8000 + 3000], &expect[..]);
}

#[test]
fn uc_write_like_rxe() {
    let pkts = roce_packets("uc_write.pcap");
    let (mut s, qpn) = uc_side(&pkts);
    let ours: Vec<&RocePacket> = pkts.iter().take(4).collect();
    let reth = parse(ours[0]).ext.reth.unwrap();
    assert_eq!(parse(ours[0]).bth.opcode, Opcode::UC_RDMA_WRITE_FIRST);
    let msg: Vec<u8> = ours
        .iter()
        .flat_map(|p| parse(p).payload.to_vec())
        .collect();
    s.mem.write(0, &msg);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::RdmaWrite {
            remote_addr: reth.va,
            rkey: reth.rkey,
        },
        sg_list: vec![Sge {
            addr: BASE,
            length: reth.dma_len,
            lkey: s.key,
        }],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
        xrc_srqn: None,
    };
    s.engine.post_send(Instant::ZERO, qpn, wr).unwrap();
    for p in &ours {
        assert_sends(&mut s, p);
    }
}
