//! The engine's own cost per byte and per packet, with no I/O: two engines exchange RDMA
//! WRITEs and SENDs through memory. What this measures is the ceiling the engine puts on any
//! backend. Run with `cargo bench -p softrdma-proto --bench engine`.
#![allow(missing_docs)] // criterion macros generate undocumented items

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use softrdma_proto::*;
use softrdma_wire::Psn;

struct Side {
    engine: Engine,
    cq: CqHandle,
    key: u32,
    qpns: Vec<u32>,
    ip: IpAddr,
}

impl Side {
    fn qpn(&self) -> u32 {
        self.qpns[0]
    }
}

const MEM: usize = 1 << 20;
const BASE: u64 = 0x1000_0000;

/// Two engines joined by `qps` connected RC QPs, each side with one region of `mem` bytes.
fn pair(mtu: Mtu, qps: usize, mem: usize) -> [Side; 2] {
    let ips = [
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    ];
    let mut sides = ips.map(|ip| {
        let mut engine = Engine::new(EngineConfig::new(ip));
        let pd = engine.alloc_pd();
        let cq = engine.create_cq(4096.max(2 * qps));
        let key = engine
            .reg_mr(
                pd,
                BASE,
                mem as u64,
                AccessFlags::all(),
                Arc::new(VecMemory::new(mem)),
            )
            .unwrap();
        let caps = QpCaps {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            ..QpCaps::default()
        };
        let qpns = (0..qps)
            .map(|_| engine.create_qp(pd, cq, cq, QpType::Rc, caps).unwrap())
            .collect();
        Side {
            engine,
            cq,
            key,
            qpns,
            ip,
        }
    });
    for i in 0..2 {
        let (peer_qpns, peer_ip) = (sides[1 - i].qpns.clone(), sides[1 - i].ip);
        let s = &mut sides[i];
        let av = AddressVector {
            dest_ip: peer_ip,
            traffic_class: 0,
            hop_limit: 64,
        };
        for (&qpn, &peer_qpn) in s.qpns.iter().zip(&peer_qpns) {
            let steps = [
                QpAttr::rc_init(AccessFlags::all()),
                QpAttr::rc_rtr(mtu, av, peer_qpn, Psn::ZERO, 16, 1),
                QpAttr::rc_rts(Psn::ZERO, 14, 7, 7, 16),
            ];
            for attr in steps {
                s.engine.modify_qp(qpn, &attr).unwrap();
            }
        }
    }
    sides
}

/// A signaled WRITE of `len` bytes from `at` on one side to `at` on the other.
fn write_wr(wr_id: u64, at: u64, len: u32, lkey: u32, rkey: u32) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::RdmaWrite {
            remote_addr: at,
            rkey,
        },
        sg_list: vec![Sge {
            addr: at,
            length: len,
            lkey,
        }],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
        xrc_srqn: None,
    }
}

/// Moves every pending packet between the two engines until both are quiet.
fn pump(sides: &mut [Side; 2], buf: &mut Vec<u8>) {
    loop {
        let mut moved = false;
        for i in 0..2 {
            while let Some(t) = sides[i].engine.poll_transmit(Instant::ZERO, buf) {
                let meta =
                    DatagramMeta::new(SocketAddr::new(sides[i].ip, t.src_port), sides[1 - i].ip);
                sides[1 - i]
                    .engine
                    .handle_datagram(Instant::ZERO, &meta, &buf[..t.len]);
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

fn bench_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    for (mtu, len) in [(Mtu::Mtu4096, 65536u32), (Mtu::Mtu1024, 65536)] {
        let mut sides = pair(mtu, 1, MEM);
        let mut buf = Vec::with_capacity(8192);
        let mut wcs = Vec::new();
        g.throughput(Throughput::Bytes(u64::from(len)));
        g.bench_function(format!("write_{len}_mtu{}", mtu.bytes()), |b| {
            b.iter(|| {
                let wr = write_wr(1, BASE, len, sides[0].key, sides[1].key);
                let qpn = sides[0].qpn();
                sides[0].engine.post_send(Instant::ZERO, qpn, wr).unwrap();
                pump(&mut sides, &mut buf);
                wcs.clear();
                let cq = sides[0].cq;
                sides[0].engine.poll_cq(cq, 16, &mut wcs).unwrap();
                assert_eq!(wcs[0].status, WcStatus::Success);
            })
        });
    }
    // Small SENDs: per-message overhead (one request, one ACK).
    let mut sides = pair(Mtu::Mtu1024, 1, MEM);
    let mut buf = Vec::with_capacity(8192);
    let mut wcs = Vec::new();
    g.throughput(Throughput::Elements(1));
    g.bench_function("send_8", |b| {
        b.iter(|| {
            let (qpn1, key1, qpn0, key0) =
                (sides[1].qpn(), sides[1].key, sides[0].qpn(), sides[0].key);
            sides[1]
                .engine
                .post_recv(
                    qpn1,
                    RecvWr {
                        wr_id: 2,
                        sg_list: vec![Sge {
                            addr: BASE,
                            length: 64,
                            lkey: key1,
                        }],
                    },
                )
                .unwrap();
            let wr = SendWr {
                wr_id: 1,
                op: SendOp::Send,
                sg_list: vec![Sge {
                    addr: BASE,
                    length: 8,
                    lkey: key0,
                }],
                flags: SendFlags::SIGNALED,
                inline_data: None,
                ud: None,
                xrc_srqn: None,
            };
            sides[0].engine.post_send(Instant::ZERO, qpn0, wr).unwrap();
            pump(&mut sides, &mut buf);
            for s in sides.iter_mut() {
                wcs.clear();
                s.engine.poll_cq(s.cq, 16, &mut wcs).unwrap();
            }
        })
    });
    g.finish();
}

/// A thousand QPs, each WRITing 64 KiB from and into its own part of a 64 MiB region
/// (perftest's layout for `write_bw -q 1000`): the engine's share of what a many-QP run
/// costs over one QP — choosing whose turn it is under the device's in-flight budget, and
/// reaching a thousand QPs' state and buffers that no cache holds.
fn bench_many_qps(c: &mut Criterion) {
    const QPS: usize = 1000;
    const LEN: u32 = 65536;
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    let mut sides = pair(Mtu::Mtu4096, QPS, QPS * LEN as usize);
    let mut buf = Vec::with_capacity(8192);
    let mut wcs = Vec::new();
    g.throughput(Throughput::Bytes(QPS as u64 * u64::from(LEN)));
    g.bench_function(format!("write_{LEN}_{QPS}qps_mtu4096"), |b| {
        b.iter(|| {
            let (rkey, lkey) = (sides[1].key, sides[0].key);
            for (i, qpn) in sides[0].qpns.clone().into_iter().enumerate() {
                let at = BASE + i as u64 * u64::from(LEN);
                let wr = write_wr(i as u64, at, LEN, lkey, rkey);
                sides[0].engine.post_send(Instant::ZERO, qpn, wr).unwrap();
            }
            pump(&mut sides, &mut buf);
            wcs.clear();
            let cq = sides[0].cq;
            while sides[0].engine.poll_cq(cq, 256, &mut wcs).unwrap() > 0 {}
            assert_eq!(wcs.len(), QPS);
            assert!(wcs.iter().all(|wc| wc.status == WcStatus::Success));
        })
    });
    g.finish();
}

criterion_group!(benches, bench_write, bench_many_qps);
criterion_main!(benches);
