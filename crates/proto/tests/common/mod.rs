//! An in-memory network of engines for scripted tests: each packet's fate is decided by a
//! closure (deliver, drop, duplicate), multicast goes to every member node, and every packet
//! put on the wire is logged for byte-level assertions. Virtual time advances 1 µs per
//! delivered packet and jumps to the next timer when the wire is empty.
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use softrdma_proto::*;
use softrdma_wire::{PacketRepr, Psn};

pub const MEM: usize = 64 * 1024;
pub const BASE: u64 = 0x20_0000;
pub const QKEY: u32 = 0x1111_1111;

pub fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + i as u8))
}

/// What the wire does with one packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fate {
    Deliver,
    Drop,
    Duplicate,
}

/// Decides a packet's fate from its sender, its headers and its index among all packets sent.
pub type FateFn = Box<dyn FnMut(usize, &PacketRepr<'_>, u64) -> Fate>;

pub struct Packet {
    pub from: usize,
    pub src: SocketAddr,
    pub dst: IpAddr,
    pub ecn: u8,
    pub data: Vec<u8>,
}

pub struct Node {
    pub engine: Engine,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub mem: Arc<VecMemory>,
    pub key: u32,
}

pub struct Net {
    pub nodes: Vec<Node>,
    pub now: Instant,
    pub wire: VecDeque<Packet>,
    pub fate: FateFn,
    pub sent: u64,
    /// Every packet put on the wire, for byte-level assertions.
    pub log: Vec<Vec<u8>>,
    /// The ECN codepoint each logged packet was sent with.
    pub ecn_log: Vec<u8>,
    /// Which packets a congested switch would mark Congestion Experienced (only packets sent
    /// ECN-capable are marked): by default none.
    pub mark_ce: Box<dyn FnMut(&PacketRepr<'_>) -> bool>,
}

impl Net {
    pub fn new(n: usize) -> Net {
        Net::with_config(n, |c| c)
    }

    /// [`Net::new`] with each node's engine configuration adjusted by `cfg`.
    pub fn with_config(n: usize, cfg: impl Fn(EngineConfig) -> EngineConfig) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let mut engine = Engine::new(cfg(EngineConfig {
                    port_mtu: Mtu::Mtu1024,
                    ..EngineConfig::new(ip(i))
                }));
                let pd = engine.alloc_pd();
                let cq = engine.create_cq(4096);
                let mem = Arc::new(VecMemory::new(MEM));
                let key = engine
                    .reg_mr(pd, BASE, MEM as u64, AccessFlags::all(), mem.clone())
                    .unwrap();
                Node {
                    engine,
                    pd,
                    cq,
                    mem,
                    key,
                }
            })
            .collect();
        Net {
            nodes,
            now: Instant::ZERO,
            wire: VecDeque::new(),
            fate: Box::new(|_, _, _| Fate::Deliver),
            sent: 0,
            log: Vec::new(),
            ecn_log: Vec::new(),
            mark_ce: Box::new(|_| false),
        }
    }

    pub fn ud_qp(&mut self, i: usize, qkey: u32) -> u32 {
        let n = &mut self.nodes[i];
        let qpn = n
            .engine
            .create_qp(n.pd, n.cq, n.cq, QpType::Ud, QpCaps::default())
            .unwrap();
        n.engine.modify_qp(qpn, &QpAttr::ud_init(qkey)).unwrap();
        n.engine.modify_qp(qpn, &QpAttr::ud_rtr()).unwrap();
        n.engine
            .modify_qp(qpn, &QpAttr::unreliable_rts(Psn::new(0x100)))
            .unwrap();
        qpn
    }

    /// A UC QP on node 0 and one on node 1, connected.
    pub fn uc_pair(&mut self, mtu: Mtu) -> [u32; 2] {
        self.uc_pair_with(mtu, AccessFlags::all())
    }

    /// [`Net::uc_pair`] with the rights both QPs grant.
    pub fn uc_pair_with(&mut self, mtu: Mtu, access: AccessFlags) -> [u32; 2] {
        let qpns = [0, 1].map(|i| {
            let n = &mut self.nodes[i];
            n.engine
                .create_qp(n.pd, n.cq, n.cq, QpType::Uc, QpCaps::default())
                .unwrap()
        });
        for i in 0..2 {
            let e = &mut self.nodes[i].engine;
            e.modify_qp(qpns[i], &QpAttr::rc_init(access)).unwrap();
            let av = AddressVector {
                dest_ip: ip(1 - i),
                traffic_class: 0,
                hop_limit: 64,
            };
            let peer_psn = Psn::new(0x500 * (2 - i as u32));
            e.modify_qp(qpns[i], &QpAttr::uc_rtr(mtu, av, qpns[1 - i], peer_psn))
                .unwrap();
            let own_psn = Psn::new(0x500 * (1 + i as u32));
            e.modify_qp(qpns[i], &QpAttr::unreliable_rts(own_psn))
                .unwrap();
        }
        qpns
    }

    /// An RC QP on node 0 and one on node 1, connected; either may take its receives from
    /// an SRQ of its node.
    pub fn rc_pair_on(&mut self, srqs: [Option<SrqHandle>; 2]) -> [u32; 2] {
        self.rc_pair_with(srqs, [4, 4], [4, 4], AccessFlags::all())
    }

    /// [`Net::rc_pair_on`] with each side's `max_rd_atomic` (initiator depth),
    /// `max_dest_rd_atomic` (responder resources) and the rights both QPs grant.
    pub fn rc_pair_with(
        &mut self,
        srqs: [Option<SrqHandle>; 2],
        max_rd_atomic: [u8; 2],
        max_dest_rd_atomic: [u8; 2],
        access: AccessFlags,
    ) -> [u32; 2] {
        self.rc_connect([0, 1], srqs, max_rd_atomic, max_dest_rd_atomic, access)
    }

    /// An RC QP on each of `nodes`, connected to each other.
    pub fn rc_connect(
        &mut self,
        nodes: [usize; 2],
        srqs: [Option<SrqHandle>; 2],
        max_rd_atomic: [u8; 2],
        max_dest_rd_atomic: [u8; 2],
        access: AccessFlags,
    ) -> [u32; 2] {
        let (rd, dest) = (max_rd_atomic, max_dest_rd_atomic);
        self.rc_connect_mtu(Mtu::Mtu1024, nodes, srqs, rd, dest, access)
    }

    /// [`Net::rc_connect`] at path MTU `mtu` (the nodes' port MTU must allow it).
    pub fn rc_connect_mtu(
        &mut self,
        mtu: Mtu,
        nodes: [usize; 2],
        srqs: [Option<SrqHandle>; 2],
        max_rd_atomic: [u8; 2],
        max_dest_rd_atomic: [u8; 2],
        access: AccessFlags,
    ) -> [u32; 2] {
        let qpns = [0, 1].map(|i| {
            let n = &mut self.nodes[nodes[i]];
            n.engine
                .create_qp_with_srq(n.pd, n.cq, n.cq, QpType::Rc, QpCaps::default(), srqs[i])
                .unwrap()
        });
        for i in 0..2 {
            let e = &mut self.nodes[nodes[i]].engine;
            e.modify_qp(qpns[i], &QpAttr::rc_init(access)).unwrap();
            let av = AddressVector {
                dest_ip: ip(nodes[1 - i]),
                traffic_class: 0,
                hop_limit: 64,
            };
            let peer_psn = Psn::new(0x700 * (2 - i as u32));
            let rtr = QpAttr::rc_rtr(mtu, av, qpns[1 - i], peer_psn, max_dest_rd_atomic[i], 1);
            e.modify_qp(qpns[i], &rtr).unwrap();
            let own_psn = Psn::new(0x700 * (1 + i as u32));
            e.modify_qp(qpns[i], &QpAttr::rc_rts(own_psn, 8, 3, 7, max_rd_atomic[i]))
                .unwrap();
        }
        qpns
    }

    pub fn sge(&self, i: usize, offset: u64, len: u32) -> Sge {
        Sge {
            addr: BASE + offset,
            length: len,
            lkey: self.nodes[i].key,
        }
    }

    pub fn recv(&mut self, i: usize, qpn: u32, wr_id: u64, offset: u64, len: u32) {
        let sge = self.sge(i, offset, len);
        self.nodes[i]
            .engine
            .post_recv(
                qpn,
                RecvWr {
                    wr_id,
                    sg_list: vec![sge],
                },
            )
            .unwrap();
    }

    /// Posts, on node 0's QP `qpn`, an RDMA WRITE (or READ, `read`) of `len` bytes between
    /// offset `local` of node 0's region and offset `remote` of node 1's.
    pub fn post_rdma(
        &mut self,
        qpn: u32,
        wr_id: u64,
        read: bool,
        local: u64,
        remote: u64,
        len: u32,
    ) {
        let sge = self.sge(0, local, len);
        let (remote_addr, rkey) = (BASE + remote, self.nodes[1].key);
        let op = if read {
            SendOp::RdmaRead { remote_addr, rkey }
        } else {
            SendOp::RdmaWrite { remote_addr, rkey }
        };
        let now = self.now;
        self.nodes[0]
            .engine
            .post_send(now, qpn, wr(wr_id, op, sge))
            .unwrap();
    }

    /// The one completion node `i` has, which must be `wr_id`'s, successful.
    pub fn completed_ok(&mut self, i: usize, wr_id: u64) {
        let wc = self.completions(i);
        let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(got, [(wr_id, WcStatus::Success)]);
    }

    pub fn write_mem(&self, i: usize, offset: usize, data: &[u8]) {
        self.nodes[i].mem.write(offset, data);
    }

    pub fn read_mem(&self, i: usize, offset: usize, len: usize) -> Vec<u8> {
        self.nodes[i].mem.snapshot()[offset..offset + len].to_vec()
    }

    /// Delivers everything, applying the fate function, until the wire is empty.
    pub fn run(&mut self) {
        let mut buf = Vec::new();
        loop {
            for i in 0..self.nodes.len() {
                while let Some(t) = self.nodes[i].engine.poll_transmit(self.now, &mut buf) {
                    let data = buf[..t.len].to_vec();
                    self.log.push(data.clone());
                    self.ecn_log.push(t.ecn);
                    self.wire.push_back(Packet {
                        from: i,
                        src: SocketAddr::new(ip(i), t.src_port),
                        dst: t.dst.ip(),
                        ecn: t.ecn,
                        data,
                    });
                }
            }
            let Some(p) = self.wire.pop_front() else {
                return;
            };
            let pkt = PacketRepr::parse(&p.data).unwrap();
            let k = self.sent;
            self.sent += 1;
            let tos = if p.ecn != 0 && (self.mark_ce)(&pkt) {
                0b11
            } else {
                p.ecn
            };
            let copies = match (self.fate)(p.from, &pkt, k) {
                Fate::Deliver => 1,
                Fate::Drop => 0,
                Fate::Duplicate => 2,
            };
            for _ in 0..copies {
                for (j, node) in self.nodes.iter_mut().enumerate() {
                    let member = node.engine.mcast_groups().any(|g| g == p.dst);
                    if p.dst == ip(j) || (p.dst.is_multicast() && member) {
                        let meta = DatagramMeta {
                            tos,
                            ..DatagramMeta::new(p.src, p.dst)
                        };
                        node.engine.handle_datagram(self.now, &meta, &p.data);
                    }
                }
            }
            self.now = self.now + Duration::from_micros(1);
        }
    }

    /// Like [`Net::run`], and also runs timers (retransmission, RNR waits) until nothing is
    /// pending or virtual time has advanced by `limit`.
    pub fn run_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        loop {
            self.run();
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.engine.poll_timeout())
                .min();
            match next {
                Some(at) if at <= end => {
                    if at > self.now {
                        self.now = at;
                    }
                    let now = self.now;
                    for n in &mut self.nodes {
                        n.engine.handle_timeout(now);
                    }
                }
                _ => return,
            }
        }
    }

    pub fn completions(&mut self, i: usize) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        let n = &mut self.nodes[i];
        n.engine.poll_cq(n.cq, usize::MAX, &mut out).unwrap();
        out
    }

    pub fn drops(&self, i: usize, reason: DropReason) -> u64 {
        self.nodes[i].engine.stats().drops_for(reason)
    }
}

pub fn ud_send(wr_id: u64, sge: Sge, to: usize, qpn: u32, qkey: u32, imm: Option<u32>) -> SendWr {
    SendWr {
        wr_id,
        op: match imm {
            Some(imm) => SendOp::SendWithImm { imm },
            None => SendOp::Send,
        },
        sg_list: vec![sge],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: Some(UdDest {
            av: AddressVector {
                dest_ip: ip(to),
                traffic_class: 0,
                hop_limit: 64,
            },
            remote_qpn: qpn,
            remote_qkey: qkey,
        }),
        xrc_srqn: None,
    }
}

pub fn wr(wr_id: u64, op: SendOp, sge: Sge) -> SendWr {
    SendWr::signaled(wr_id, op, vec![sge])
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}
