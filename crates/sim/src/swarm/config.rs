//! What one swarm run does ([`RunConfig`]) and how a seed draws it ([`RunConfig::swarm`]): node
//! count, QPs, MTU, windows, the op mix, link faults per direction, targeted interceptors,
//! the traffic beside the RC workload, and the phases' bounds.
//!
//! Kept apart from the run itself ([`super::run`]) and its verdict: this is the swarm's case
//! generator, whose draws must stay what they are for every seed (a seed is a reproduction
//! recipe), so it changes rarely and on its own.

use softrdma_proto::{Duration, Mtu};
use softrdma_wire::Opcode;

use crate::cm::CmWorkloadConfig;
use crate::datagrams::DatagramConfig;
use crate::errors::ErrorConfig;
use crate::intercept::{PacketMatch, Verdict};
use crate::link::LinkConfig;
use crate::rng::SimRng;
use crate::workload::{OpMix, WorkloadConfig};

/// A targeted fault a swarm run installs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetedFault {
    /// Which packets.
    pub matcher: PacketMatch,
    /// The first matching packet (0-based) acted on.
    pub nth: u64,
    /// How many consecutive matches are acted on.
    pub count: u64,
    /// What is done to them.
    pub verdict: Verdict,
}

/// Everything one run does, drawn from the seed by [`RunConfig::swarm`] or set by hand.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// The workload (its seed is the run's seed).
    pub workload: WorkloadConfig,
    /// UD and UC traffic beside it, if any.
    pub datagrams: Option<DatagramConfig>,
    /// Operations that must fail, beside it, if any (see [`crate::errors`]).
    pub errors: Option<ErrorConfig>,
    /// rdma_cm handshakes over QP 1 beside it, if any (see [`crate::cm`]).
    pub cm: Option<CmWorkloadConfig>,
    /// Link model during the safety phase, per ordered node pair (row = sender).
    pub links: Vec<Vec<LinkConfig>>,
    /// Targeted faults during the safety phase.
    pub faults: Vec<TargetedFault>,
    /// How long the safety phase lasts at most (virtual time); it ends early when the
    /// workload is done.
    pub safety: Duration,
    /// How long the healed network gets to finish everything (virtual time).
    pub liveness: Duration,
    /// Responders drop requests that follow a gap, as Linux rxe does, instead of keeping
    /// them (see [`FabricConfig::keep_early_packets`]).
    ///
    /// [`FabricConfig::keep_early_packets`]: crate::fabric::FabricConfig::keep_early_packets
    pub rxe_like_responders: bool,
    /// The chance that a datagram is received into another QP's direct placement plan
    /// than its engine expects (see [`FabricConfig::mispredict`]): stray bytes in WRITE
    /// targets, which must never show in memory that the reference model checks.
    ///
    /// [`FabricConfig::mispredict`]: crate::fabric::FabricConfig::mispredict
    pub mispredict: f64,
}

/// Packet kinds a swarm run may target.
const TARGETABLE: [Opcode; 19] = [
    Opcode::RC_SEND_FIRST,
    Opcode::RC_SEND_MIDDLE,
    Opcode::RC_SEND_LAST,
    Opcode::RC_SEND_ONLY,
    Opcode::RC_RDMA_WRITE_FIRST,
    Opcode::RC_RDMA_WRITE_LAST,
    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_READ_REQUEST,
    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_ATOMIC_ACKNOWLEDGE,
    Opcode::RC_FETCH_ADD,
    Opcode::UC_SEND_FIRST,
    Opcode::UC_SEND_LAST_WITH_IMMEDIATE,
    Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    Opcode::UD_SEND_ONLY,
    Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
];

impl RunConfig {
    /// A run with the same faulty link everywhere, faults on for at most `safety`.
    pub fn uniform(workload: WorkloadConfig, link: LinkConfig, safety: Duration) -> RunConfig {
        let n = workload.nodes;
        RunConfig {
            workload,
            datagrams: None,
            errors: None,
            cm: None,
            links: vec![vec![link; n]; n],
            faults: Vec::new(),
            safety,
            liveness: Duration::from_secs(5),
            rxe_like_responders: false,
            mispredict: 0.0,
        }
    }

    /// Draws every knob from `seed`: a small workload (30–60 ops) on 2–3 nodes, per-direction
    /// link faults, sometimes targeted faults, a safety phase of 0.2–40 ms.
    pub fn swarm(seed: u64) -> RunConfig {
        let mut rng = SimRng::new(seed).fork(0x0073_7761_726d);
        let nodes = if rng.chance(0.3) { 3 } else { 2 };
        let mtu = *rng
            .pick(&[
                Mtu::Mtu256,
                Mtu::Mtu512,
                Mtu::Mtu1024,
                Mtu::Mtu1024,
                Mtu::Mtu2048,
                Mtu::Mtu4096,
            ])
            .unwrap_or(&Mtu::Mtu1024);
        let mut mix = OpMix::default();
        for w in [
            &mut mix.send,
            &mut mix.send_imm,
            &mut mix.write,
            &mut mix.write_imm,
            &mut mix.read,
            &mut mix.cmp_swap,
            &mut mix.fetch_add,
        ] {
            // Swarm: sometimes a kind is absent, sometimes dominant.
            *w = *rng.pick(&[0, 1, 2, 3, 6]).unwrap_or(&1);
        }
        if mix.send
            + mix.send_imm
            + mix.write
            + mix.write_imm
            + mix.read
            + mix.cmp_swap
            + mix.fetch_add
            == 0
        {
            mix = OpMix::default();
        }
        let workload = WorkloadConfig {
            seed,
            nodes,
            qps_per_pair: rng.range_inclusive(1, 3) as usize,
            ops: rng.range_inclusive(30, 60),
            window: rng.range_inclusive(1, 16) as usize,
            recv_depth: rng.range_inclusive(1, 16) as usize,
            mix,
            timeout: rng.range_inclusive(8, 12) as u8,
            psn_wrap_chance: 0.5,
            ..WorkloadConfig::new(seed, 0).with_mtu(mtu)
        };
        // Half the seeds also carry UD (unicast, and multicast with three nodes) and UC traffic.
        let datagrams = rng.chance(0.5).then(|| DatagramConfig {
            mtu,
            max_len: rng.range_inclusive(16, 3 * u64::from(mtu.bytes())) as u32,
            window: rng.range_inclusive(1, 8) as usize,
            recv_depth: rng.range_inclusive(1, 8) as usize,
            multicast: rng.chance(0.7),
            ..DatagramConfig::new(
                seed,
                nodes,
                rng.range_inclusive(0, 40),
                rng.range_inclusive(0, 40),
            )
        });
        let base_delay_ns = rng.range_inclusive(500, 20_000);
        let bandwidth_bps = *rng
            .pick(&[
                0,
                1_000_000_000,
                10_000_000_000,
                25_000_000_000,
                100_000_000_000,
            ])
            .unwrap_or(&0);
        let mut links = vec![vec![LinkConfig::IDEAL; nodes]; nodes];
        for row in links.iter_mut() {
            for l in row.iter_mut() {
                let draw = |rng: &mut SimRng, max: f64| {
                    if rng.chance(0.6) {
                        rng.unit_f64() * max
                    } else {
                        0.0
                    }
                };
                *l = LinkConfig {
                    delay: Duration::from_nanos(base_delay_ns),
                    bandwidth_bps,
                    loss: draw(&mut rng, 0.08),
                    duplicate: draw(&mut rng, 0.05),
                    reorder: draw(&mut rng, 0.2),
                    reorder_jitter: Duration::from_nanos(rng.range_inclusive(1_000, 50_000)),
                    corrupt: draw(&mut rng, 0.03),
                };
            }
        }
        let mut faults = Vec::new();
        if rng.chance(0.4) {
            for _ in 0..rng.range_inclusive(1, 3) {
                let opcode = *rng.pick(&TARGETABLE).unwrap_or(&Opcode::RC_ACKNOWLEDGE);
                let verdict = match rng.below(4) {
                    0 => Verdict::Drop,
                    1 => Verdict::Duplicate,
                    2 => Verdict::Delay(Duration::from_nanos(rng.range_inclusive(1_000, 200_000))),
                    _ => Verdict::CorruptBit(rng.below(1 << 16) as usize),
                };
                faults.push(TargetedFault {
                    matcher: PacketMatch::opcode(opcode),
                    nth: rng.below(4),
                    count: rng.range_inclusive(1, 3),
                    verdict,
                });
            }
        }
        let safety = Duration::from_nanos(rng.range_inclusive(200_000, 40_000_000));
        // Half the seeds also run failing operations; drawn from a stream of their own, so the
        // rest of every seed's draw is what it was before they existed.
        let mut erng = SimRng::new(seed).fork(0x6572_7273);
        let lossy = links
            .iter()
            .flatten()
            .any(|l| l.loss > 0.0 || l.corrupt > 0.0)
            || faults
                .iter()
                .any(|f| matches!(f.verdict, Verdict::Drop | Verdict::CorruptBit(_)));
        let errors = erng.chance(0.5).then(|| ErrorConfig {
            seed,
            nodes,
            scenarios: erng.range_inclusive(1, 4),
            lossy,
            mtu,
            only: None,
        });
        // A third of the seeds also run rdma_cm handshakes over the same faulty links.
        let cm = erng.chance(0.3).then(|| CmWorkloadConfig {
            seed,
            nodes,
            connections: erng.range_inclusive(1, 3) as usize,
        });
        RunConfig {
            workload,
            datagrams,
            errors,
            cm,
            links,
            faults,
            safety,
            // The CM retransmits a lost MAD after seconds (its response timeouts): room for a
            // few rounds once the network is healed.
            liveness: if cm.is_some() {
                Duration::from_secs(120)
            } else {
                Duration::from_secs(5)
            },
            // A quarter of the seeds: requesters must notice and fall back to go-back-N.
            rxe_like_responders: rng.chance(0.25),
            // Half the seeds receive a third of their datagrams into the wrong plan. Drawn
            // from a stream of its own: the knobs above mean what they meant for each seed.
            mispredict: if SimRng::new(seed).fork(0x6d69_7370_7264).chance(0.5) {
                0.3
            } else {
                0.0
            },
        }
    }

    /// A one-line description of the drawn knobs.
    pub fn describe(&self) -> String {
        let w = &self.workload;
        let l = self
            .links
            .first()
            .and_then(|r| r.get(1))
            .copied()
            .unwrap_or_default();
        format!(
            "nodes={} qps={} ops={} mtu={} window={} recv_depth={} timeout={} mix={:?} \
             link0->1={{delay={}ns bw={} loss={:.3} dup={:.3} reorder={:.3} corrupt={:.3}}} \
             targeted={} safety={}us rxe_like_responders={} mispredict={}{}",
            w.nodes,
            w.qps_per_pair,
            w.ops,
            w.mtu.bytes(),
            w.window,
            w.recv_depth,
            w.timeout,
            w.mix,
            l.delay.as_nanos(),
            l.bandwidth_bps,
            l.loss,
            l.duplicate,
            l.reorder,
            l.corrupt,
            self.faults.len(),
            self.safety.as_micros(),
            self.rxe_like_responders,
            self.mispredict,
            self.datagrams.map_or(String::new(), |d| format!(
                " datagrams={{ud={} uc={} max_len={} window={} recv_depth={} multicast={}}}",
                d.ud_ops, d.uc_ops, d.max_len, d.window, d.recv_depth, d.multicast
            ))
        ) + &self.errors.map_or(String::new(), |e| {
            format!(" errors={{scenarios={} lossy={}}}", e.scenarios, e.lossy)
        }) + &self.cm.map_or(String::new(), |c| {
            format!(" cm={{connections={}}}", c.connections)
        })
    }
}
