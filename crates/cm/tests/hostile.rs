//! Hostile input: random and mutated MADs (real ones from rxe's captures and ours, with bytes
//! flipped where it hurts — comm IDs, attribute IDs, states' fields), interleaved with time
//! jumps and consumer calls on whatever connections exist. Nothing may panic; everything the
//! CM sends must be a well-formed CM MAD; handled deadlines must not stay due; the connection
//! table must stay within its limit. `SOFTRDMA_CM_FUZZ_ITERS` runs longer.

mod common;

use std::net::SocketAddr;

use softrdma_cm::ib::CmConfig;
use softrdma_cm::rdma::{ConnParam, RdmaCm, RdmaQpType, Route};
use softrdma_proto::{Duration, Instant, QpState};
use softrdma_wire::mad::cm::CmMad;
use softrdma_wire::mad::cma::PortSpace;
use softrdma_wire::Gid;

/// xorshift64*: deterministic inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const MAX_CONNECTIONS: usize = 32;

/// A node listening on TCP 7174 and 7471 (rping's and ucmatose's ports) and UDP 7174, with
/// the listeners' ids.
fn node() -> (RdmaCm, Vec<softrdma_cm::rdma::RdmaId>) {
    let mut cm = RdmaCm::new(CmConfig {
        ca_guid: 0x5054_00ff_fe58_000b,
        max_connections: MAX_CONNECTIONS,
        ..CmConfig::default()
    });
    let mut listeners = Vec::new();
    for (ps, qp, port) in [
        (PortSpace::Tcp, RdmaQpType::Rc, 7174),
        (PortSpace::Tcp, RdmaQpType::Rc, 7471),
        (PortSpace::Udp, RdmaQpType::Ud, 7174),
    ] {
        let id = cm.create_id(ps, qp);
        cm.bind(id, SocketAddr::new("10.88.0.11".parse().unwrap(), port))
            .unwrap();
        cm.listen(id).unwrap();
        listeners.push(id);
    }
    (cm, listeners)
}

#[test]
fn hostile_mads_never_panic_and_outputs_stay_well_formed() {
    let iters: usize = std::env::var("SOFTRDMA_CM_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut seeds: Vec<Vec<u8>> = ["rdma_cm.pcap", "ucmatose.pcap", "write_bw_cm.pcap"]
        .iter()
        .flat_map(|c| common::gsi_mads(c))
        .map(|m| m.mad)
        .collect();
    let mut rng = Rng(0x6d61_6473_2121);
    let (mut cm, listeners) = node();
    let peers: Vec<Gid> = ["10.88.0.12", "10.88.0.13"]
        .iter()
        .map(|s| Gid::from_ip(s.parse().unwrap()))
        .collect();
    let mut now = Instant::from_nanos(1);
    let mut sent = 0usize;
    for i in 0..iters {
        // A MAD: a seed (or something we sent), mutated at a few places.
        let mut mad = seeds[rng.below(seeds.len())].clone();
        for _ in 0..rng.below(4) {
            let at = match rng.below(4) {
                0 => 24 + rng.below(8), // the comm IDs
                1 => 16 + rng.below(2), // the attribute ID
                2 => rng.below(24),     // the header
                _ => rng.below(mad.len()),
            };
            mad[at] ^= 1 << rng.below(8);
        }
        if rng.below(3) == 0 && mad.len() >= 64 {
            // A fresh exchange: new comm ID and QPN (the REQ's, or any message's first words).
            let fresh = rng.next().to_be_bytes();
            mad[24..28].copy_from_slice(&fresh[..4]);
            mad[56..59].copy_from_slice(&fresh[4..7]);
        }
        if rng.below(50) == 0 {
            mad.truncate(rng.below(mad.len()));
        }
        cm.handle_mad(now, peers[rng.below(2)], 1, &mad);

        // The consumer pokes at whatever exists; errors are fine, panics are not.
        let ids: Vec<_> = cm.ids().filter(|id| !listeners.contains(id)).collect();
        if let Some(&id) = ids.get(rng.below(ids.len().max(1))) {
            let p = ConnParam {
                qp_num: rng.next() as u32 & 0xff_ffff,
                ..ConnParam::default()
            };
            let _ = match rng.below(10) {
                0 | 8 | 9 => cm.accept(now, id, &p),
                1 => cm.reject(now, id, b"no"),
                2 => cm.complete_connect(now, id),
                3 => cm.disconnect(now, id),
                4 => cm.destroy(now, id),
                5 => cm.established(now, id),
                6 => cm.qp_attr(id, QpState::Rtr).map(|_| ()),
                _ => Ok(()),
            };
        }
        if rng.below(200) == 0 {
            let id = cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
            if cm.bind(id, "10.88.0.11:0".parse().unwrap()).is_ok() {
                let _ = cm.connect(
                    now,
                    id,
                    "10.88.0.12:7174".parse().unwrap(),
                    Route::default(),
                    &ConnParam::default(),
                );
            }
        }

        // Time moves; what was due is handled.
        now = now + Duration::from_millis(rng.below(3000) as u64);
        if let Some(t) = cm.poll_timeout().filter(|&t| t <= now) {
            cm.handle_timeout(now);
            assert!(
                cm.poll_timeout().is_none_or(|t2| t2 > now),
                "iteration {i}: deadline {t:?} handled at {now:?} is still due"
            );
        }
        while let Some(out) = cm.poll_transmit() {
            let mad = CmMad::parse(&out.mad)
                .or_else(|_| {
                    // Linux's unsupported-method answer is the only non-CM-Send MAD we send.
                    softrdma_wire::mad::Mad::parse(&out.mad)
                        .map(|m| {
                            assert_eq!(m.header.method, softrdma_wire::mad::Method::GET_RESP);
                        })
                        .map_err(|e| e.to_string())?;
                    Err("get response".to_string())
                })
                .ok();
            if let Some(m) = mad {
                // Feed our own output back in later: answers to answers.
                if seeds.len() < 400 {
                    seeds.push(m.to_bytes().to_vec());
                }
            }
            sent += 1;
        }
        while cm.poll_event().is_some() {}
        assert!(cm.ib().ids().count() <= MAX_CONNECTIONS, "iteration {i}");
    }
    assert!(sent > 0, "the CM answered something");
    // The handshake was really exercised: every message came in, and we sent REQs, REJs, REPs,
    // DREQs and DREPs (an RTU needs a REP to our own REQ, which mutation does not forge).
    let s = cm.stats();
    for attr in [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18] {
        assert!(s.rx.get(attr) > 0, "received {attr:#x}: {s:?}");
    }
    for attr in [0x10, 0x12, 0x13, 0x15, 0x16] {
        assert!(s.tx.get(attr) > 0, "sent {attr:#x}: {s:?}");
    }
}
