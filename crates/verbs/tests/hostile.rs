//! Hostile input while RDMA traffic runs: random bytes, truncated headers, wrong QPNs, PSNs
//! far outside the window, bad ICRCs and packets from foreign addresses are thrown at both
//! devices' ports. Nothing panics, the traffic completes with exact results, forged WRITEs
//! never land, and the drop counters rise. Addresses 127.0.6.x.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use softrdma::{wr, ConnectOptions, DropReason, Mtu, WcStatus};
use softrdma_wire::{Aeth, AtomicEth, Bth, ExtHeaders, Opcode, Psn, Reth, Syndrome};

/// What the attacker knows: the QPNs, the initial PSNs, a valid rkey and a canary address.
#[derive(Clone, Copy)]
struct Target {
    a: SocketAddr,
    b: SocketAddr,
    qpn_a: u32,
    qpn_b: u32,
    psn_a: u32,
    psn_b: u32,
    canary: u64,
    rkey: u32,
}

fn attack(t: Target, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    // Spoofers share the peers' IPs (other ports); the foreigner does not.
    let spoof_a = UdpSocket::bind(SocketAddr::new(t.a.ip(), 0)).unwrap();
    let spoof_b = UdpSocket::bind(SocketAddr::new(t.b.ip(), 0)).unwrap();
    let foreign = UdpSocket::bind("127.0.6.3:0").unwrap();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // PSNs at least 2^22 away from anything the real traffic uses.
    let far =
        |rng: &mut Rng, base: u32| Psn::new(base).add(0x40_0000 + rng.below(0x40_0000) as u32);
    let behind =
        |rng: &mut Rng, base: u32| Psn::new(base).sub(0x40_0000 + rng.below(0x30_0000) as u32);
    while !stop.load(Ordering::Relaxed) {
        let src_a = spoof_a.local_addr().unwrap();
        let src_b = spoof_b.local_addr().unwrap();
        let src_f = foreign.local_addr().unwrap();
        let reth = |len| ExtHeaders {
            reth: Some(Reth {
                va: t.canary,
                rkey: t.rkey,
                dma_len: len,
            }),
            ..Default::default()
        };
        let (sock, dst, pkt) = match rng.below(10) {
            0 => {
                let n = rng.below(300) as usize;
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                (&spoof_a, t.b, bytes)
            }
            1 => {
                let p = forge(
                    src_a,
                    t.b,
                    Opcode::RC_SEND_ONLY,
                    t.qpn_b,
                    far(&mut rng, t.psn_a),
                    ExtHeaders::default(),
                    &[0xEE; 64],
                );
                let cut = rng.below(p.len() as u64) as usize;
                (&spoof_a, t.b, p[..cut].to_vec())
            }
            2 => {
                let qpn = (t.qpn_b + 1 + rng.below(1000) as u32) & 0xff_ffff;
                (
                    &spoof_a,
                    t.b,
                    forge(
                        src_a,
                        t.b,
                        Opcode::RC_SEND_ONLY,
                        qpn,
                        Psn::new(t.psn_a),
                        ExtHeaders::default(),
                        &[0xEE; 32],
                    ),
                )
            }
            3 => (
                &spoof_a,
                t.b,
                forge(
                    src_a,
                    t.b,
                    Opcode::RC_RDMA_WRITE_ONLY,
                    t.qpn_b,
                    far(&mut rng, t.psn_a),
                    reth(8),
                    &[0xEE; 8],
                ),
            ),
            4 => (
                &spoof_a,
                t.b,
                forge(
                    src_a,
                    t.b,
                    Opcode::RC_RDMA_WRITE_ONLY,
                    t.qpn_b,
                    behind(&mut rng, t.psn_a),
                    reth(8),
                    &[0xEE; 8],
                ),
            ),
            5 => (
                &spoof_a,
                t.b,
                forge(
                    src_a,
                    t.b,
                    Opcode::RC_RDMA_READ_REQUEST,
                    t.qpn_b,
                    behind(&mut rng, t.psn_a),
                    reth(64),
                    &[],
                ),
            ),
            6 => {
                let ext = ExtHeaders {
                    atomic_eth: Some(AtomicEth {
                        va: t.canary,
                        rkey: t.rkey,
                        swap_add: 0xEE,
                        compare: 0,
                    }),
                    ..Default::default()
                };
                (
                    &spoof_a,
                    t.b,
                    forge(
                        src_a,
                        t.b,
                        Opcode::RC_FETCH_ADD,
                        t.qpn_b,
                        far(&mut rng, t.psn_a),
                        ext,
                        &[],
                    ),
                )
            }
            7 => {
                // ACKs to the requester for PSNs it never sent or long since retired.
                let ext = ExtHeaders {
                    aeth: Some(Aeth {
                        syndrome: Syndrome::ACK,
                        msn: 0,
                    }),
                    ..Default::default()
                };
                let psn = if rng.below(2) == 0 {
                    far(&mut rng, t.psn_a)
                } else {
                    behind(&mut rng, t.psn_a)
                };
                (
                    &spoof_b,
                    t.a,
                    forge(src_b, t.a, Opcode::RC_ACKNOWLEDGE, t.qpn_a, psn, ext, &[]),
                )
            }
            8 => {
                let mut p = forge(
                    src_a,
                    t.b,
                    Opcode::RC_RDMA_WRITE_ONLY,
                    t.qpn_b,
                    Psn::new(t.psn_a),
                    reth(8),
                    &[0xEE; 8],
                );
                // A bad ICRC: flip a bit the ICRC covers. BTH byte 4 (FECN, BECN, reserved) is
                // masked out of it by design; flipped there, this forgery of the expected PSN
                // would be a perfectly valid packet, which no RoCE peer can tell from its
                // real peer's (the responder would rightly execute it).
                let i = loop {
                    let i = rng.below(p.len() as u64) as usize;
                    if i != Bth::FECN_BECN_OFFSET {
                        break i;
                    }
                };
                p[i] ^= 1 << rng.below(8);
                (&spoof_a, t.b, p)
            }
            _ => (
                &foreign,
                t.b,
                forge(
                    src_f,
                    t.b,
                    Opcode::RC_RDMA_WRITE_ONLY,
                    t.qpn_b,
                    Psn::new(t.psn_a),
                    reth(8),
                    &[0xEE; 8],
                ),
            ),
        };
        let _ = sock.send_to(&pkt, dst);
        sent.fetch_add(1, Ordering::Relaxed);
        if rng.below(16) == 0 {
            std::thread::yield_now();
        }
    }
}

#[test]
fn traffic_survives_hostile_input() {
    let a = Side::new("127.0.6.1", 1 << 16);
    let b = Side::new("127.0.6.2", 1 << 16);
    let opts = ConnectOptions {
        path_mtu: Some(Mtu::Mtu1024),
        ..Default::default()
    };
    a.qp.connect(&b.qp.endpoint(), &opts).unwrap();
    b.qp.connect(&a.qp.endpoint(), &opts).unwrap();
    let canary_off = 60_000usize;
    let target = Target {
        a: a.dev.local_addr(),
        b: b.dev.local_addr(),
        qpn_a: a.qp.qp_num(),
        qpn_b: b.qp.qp_num(),
        psn_a: a.qp.local_psn(),
        psn_b: b.qp.local_psn(),
        canary: b.mr.addr() + canary_off as u64,
        rkey: b.mr.rkey(),
    };
    let _ = target.psn_b;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let attacker = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || attack(target, stop, sent))
    };
    while sent.load(Ordering::Relaxed) < 500 {
        std::thread::yield_now();
    }

    let r = b.mr.remote();
    for i in 0..150u64 {
        let data = pattern(3000, i);
        a.mr.write(0, &data).unwrap();
        b.qp.post_recv([wr::recv(i, vec![b.mr.sge(0, 4096)])])
            .unwrap();
        a.qp.post_send([
            wr::send(1, vec![a.mr.sge(0, 3000)]),
            wr::write(2, vec![a.mr.sge(0, 3000)], r.at(8192), r.rkey),
            wr::read(3, vec![a.mr.sge(16384, 3000)], r.at(8192), r.rkey),
            wr::fetch_add(4, a.mr.sge(32768, 8), r.at(40000), r.rkey, 1),
        ])
        .unwrap();
        let wcs = wait_wcs(&a.cq, 4);
        for (k, wc) in wcs.iter().enumerate() {
            assert_eq!(
                (wc.wr_id, wc.status),
                (k as u64 + 1, WcStatus::Success),
                "iteration {i}"
            );
        }
        let wc = wait_one(&b.cq);
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (i, WcStatus::Success, 3000)
        );
        assert_eq!(b.mr.read_vec(0, 3000).unwrap(), data);
        assert_eq!(b.mr.read_vec(8192, 3000).unwrap(), data);
        assert_eq!(a.mr.read_vec(16384, 3000).unwrap(), data);
        assert_eq!(a.mr.read_u64(32768).unwrap(), i);
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    assert_eq!(b.mr.read_u64(40000).unwrap(), 150);
    assert_eq!(
        b.mr.read_vec(canary_off, 64).unwrap(),
        vec![0u8; 64],
        "a forged request landed"
    );

    let sb = b.dev.stats().engine;
    let sa = a.dev.stats().engine;
    let n = sent.load(Ordering::Relaxed);
    eprintln!(
        "sent {n} hostile datagrams; B drops: {:?}",
        DropReason::ALL
            .iter()
            .map(|r| (r.name(), sb.drops_for(*r)))
            .collect::<Vec<_>>()
    );
    eprintln!(
        "A drops: {:?}",
        DropReason::ALL
            .iter()
            .map(|r| (r.name(), sa.drops_for(*r)))
            .collect::<Vec<_>>()
    );
    assert!(sb.drops_for(DropReason::BadIcrc) > 0);
    assert!(sb.drops_for(DropReason::UnknownQp) > 0);
    assert!(sb.drops_for(DropReason::WrongSource) > 0);
    assert!(sb.drops_for(DropReason::OutOfSequence) + sb.drops_for(DropReason::Duplicate) > 0);
    assert!(sa.total_drops() > 0);
}
