//! Whole-system runs from one seed: the workload over a faulty fabric (safety phase), then over
//! a healed one (liveness phase), then the verdict.
//!
//! TigerBeetle's VOPR and s2n-quic's simulations are the model: a seed picks every knob (node
//! count, QPs, MTU, windows, link faults per direction, targeted interceptors), so a loop over
//! seeds explores configurations nobody would write by hand ("swarm testing"), and a failing
//! seed is a complete reproduction recipe. During the safety phase faults are on and every
//! completion is checked against the model; then [`Fabric::heal`] turns faults off and
//! everything not yet done must finish within a virtual-time bound — a protocol that is safe
//! but stuck fails here.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;

use softrdma_proto::{Duration, Instant, Mtu, NakKind, Stats, WcStatus};
use softrdma_wire::Opcode;

use crate::cm::{CmReport, CmWorkload, CmWorkloadConfig};
use crate::datagrams::{DatagramConfig, DatagramReport, DatagramWorkload};
use crate::errors::{ErrorConfig, ErrorReport, ErrorWorkload};
use crate::fabric::{Fabric, FabricConfig, FabricStats, NodeId, RunOutcome, SimError};
use crate::intercept::{PacketMatch, Targeted, Verdict};
use crate::link::LinkConfig;
use crate::rng::SimRng;
use crate::setup::SetupError;
use crate::workload::{OpMix, Workload, WorkloadConfig, WorkloadReport};

/// The environment variable that replays one seed (`SOFTRDMA_SEED=<n>`).
pub const SEED_ENV: &str = "SOFTRDMA_SEED";

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
    pub rxe_like_responders: bool,
    /// The chance that a datagram is received into another QP's direct placement plan
    /// than its engine expects (see [`FabricConfig::mispredict`]): stray bytes in WRITE
    /// targets, which must never show in memory that the reference model checks.
    pub mispredict: f64,
}

/// Sums of engine counters over all nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineTotals {
    /// Request packets sent again.
    pub retransmissions: u64,
    /// Retransmit timer expirations.
    pub retransmit_timeouts: u64,
    /// Datagrams dropped for a bad ICRC.
    pub icrc_drops: u64,
    /// All drops, any reason.
    pub drops: u64,
    /// NAKs sent (all kinds).
    pub naks_sent: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// Duplicate requests the responders saw.
    pub duplicate_requests: u64,
    /// Atomics executed by responders.
    pub atomics_executed: u64,
    /// Atomic replies replayed for duplicates.
    pub atomics_replayed: u64,
    /// Packets sent by engines.
    pub tx_packets: u64,
    /// NAKs sent, by kind (index: [`NakKind::ALL`] order).
    pub naks_sent_by_kind: [u64; 5],
    /// NAKs received, by kind.
    pub naks_received_by_kind: [u64; 5],
    /// Drops by reason (index: [`softrdma_proto::DropReason::ALL`] order).
    pub drops_by_reason: [u64; softrdma_proto::DropReason::ALL.len()],
    /// Sequence NAKs answered by resending the lost packet alone.
    pub selective_repeats: u64,
    /// Requests responders kept because they came after a lost one.
    pub requests_held: u64,
}

impl fmt::Display for EngineTotals {
    /// One line with every non-zero counter, for failure reports.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tx={} retransmitted={} timeouts={} dup_requests={} atomics={} replayed={}",
            self.tx_packets,
            self.retransmissions,
            self.retransmit_timeouts,
            self.duplicate_requests,
            self.atomics_executed,
            self.atomics_replayed
        )?;
        if self.selective_repeats > 0 || self.requests_held > 0 {
            write!(
                f,
                " selective_repeats={} held={}",
                self.selective_repeats, self.requests_held
            )?;
        }
        for (k, n) in NakKind::ALL.iter().zip(self.naks_sent_by_kind) {
            if n > 0 {
                write!(f, " nak_sent.{}={n}", k.name())?;
            }
        }
        for (k, n) in NakKind::ALL.iter().zip(self.naks_received_by_kind) {
            if n > 0 {
                write!(f, " nak_rcvd.{}={n}", k.name())?;
            }
        }
        for (r, n) in softrdma_proto::DropReason::ALL
            .iter()
            .zip(self.drops_by_reason)
        {
            if n > 0 {
                write!(f, " drop.{}={n}", r.name())?;
            }
        }
        Ok(())
    }
}

impl EngineTotals {
    /// Adds one engine's counters.
    pub fn add(&mut self, s: &Stats) {
        self.retransmissions += s.retransmitted_packets;
        self.retransmit_timeouts += s.retransmit_timeouts;
        self.icrc_drops += s.drops_for(softrdma_proto::DropReason::BadIcrc);
        self.drops += s.total_drops();
        self.naks_sent += s.naks_sent.iter().sum::<u64>();
        self.rnr_naks_sent += s.naks_sent_of(NakKind::Rnr);
        self.duplicate_requests += s.duplicate_requests;
        self.atomics_executed += s.atomics_executed;
        self.atomics_replayed += s.atomics_replayed;
        self.tx_packets += s.tx_packets;
        self.selective_repeats += s.selective_repeats;
        self.requests_held += s.requests_held;
        for (k, kind) in NakKind::ALL.iter().enumerate() {
            self.naks_sent_by_kind[k] += s.naks_sent_of(*kind);
            self.naks_received_by_kind[k] += s.naks_received_of(*kind);
        }
        for (k, r) in softrdma_proto::DropReason::ALL.iter().enumerate() {
            self.drops_by_reason[k] += s.drops_for(*r);
        }
    }

    /// Totals over every node of `fabric`.
    pub fn of(fabric: &Fabric) -> EngineTotals {
        let mut t = EngineTotals::default();
        for id in fabric.node_ids() {
            if let Ok(e) = fabric.engine(id) {
                t.add(e.stats());
            }
        }
        t
    }
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// The workload's verdict and tallies.
    pub workload: WorkloadReport,
    /// The UD/UC traffic's tallies and verdict, if it ran.
    pub datagrams: Option<DatagramReport>,
    /// The failing operations' tallies and verdict, if they ran.
    pub errors: Option<ErrorReport>,
    /// The connection handshakes' tallies and verdict, if they ran.
    pub cm: Option<CmReport>,
    /// What the fabric did.
    pub fabric: FabricStats,
    /// Engine counters summed over nodes.
    pub engines: EngineTotals,
    /// Virtual time at which faults were turned off.
    pub healed_at: Instant,
    /// Virtual time at the end.
    pub end: Instant,
    /// Why the fabric stopped early, if it did (a stall is a failure too).
    pub sim_error: Option<String>,
}

impl RunReport {
    /// Whether the run passed: no fabric error, everything completed and agreed.
    pub fn passed(&self) -> bool {
        self.sim_error.is_none()
            && self.workload.passed()
            && self.datagrams.as_ref().map_or(true, DatagramReport::passed)
            && self.errors.as_ref().map_or(true, ErrorReport::passed)
            && self.cm.as_ref().map_or(true, CmReport::passed)
    }

    /// Completions of every kind of traffic, by status name (`WcStatus::snake_name`): the RC
    /// workload's and the datagrams' successes (their failures are divergences, listed
    /// apart) and every completion of the failing operations.
    pub fn completions_by_status(&self) -> BTreeMap<&'static str, u64> {
        let mut m: BTreeMap<&'static str, u64> = BTreeMap::new();
        let ok = self.workload.ops_ok
            + self.workload.recvs_completed
            + self.datagrams.as_ref().map_or(0, |d| d.successes());
        *m.entry(WcStatus::Success.snake_name()).or_default() += ok;
        if let Some(e) = &self.errors {
            for (k, v) in &e.completions_by_status {
                *m.entry(k).or_default() += v;
            }
        }
        m
    }

    /// The first divergence, or the fabric error, in words.
    pub fn first_failure(&self) -> Option<String> {
        if let Some(e) = &self.sim_error {
            return Some(format!("fabric stopped: {e}"));
        }
        if let Some(d) = &self.workload.first_divergence {
            return Some(d.to_string());
        }
        if let Some(d) = self
            .datagrams
            .as_ref()
            .and_then(|d| d.first_divergence.as_ref())
        {
            return Some(format!("UD/UC: {d}"));
        }
        if let Some(d) = self
            .errors
            .as_ref()
            .and_then(|e| e.first_divergence.as_ref())
        {
            return Some(format!("error paths: {d}"));
        }
        if let Some(c) = &self.cm {
            if let Some(d) = &c.first_divergence {
                return Some(format!("rdma_cm: {d}"));
            }
            if !c.passed() {
                return Some(format!(
                    "rdma_cm: {} of {} connections established, {} disconnected",
                    c.established, c.connections, c.disconnected
                ));
            }
        }
        if !self.workload.passed() {
            return Some(format!(
                "{} of {} ops completed, {} ok",
                self.workload.ops_completed, self.workload.ops_posted, self.workload.ops_ok
            ));
        }
        None
    }
}

/// A run that could not even be set up.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Creating nodes, QPs or memory failed.
    #[error("setup failed: {0}")]
    Setup(#[from] SetupError),
    /// Starting the capture failed.
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// A failed swarm seed: prints as `SOFTRDMA_SEED=<n>` and the first divergence.
#[derive(Debug, Clone)]
pub struct SwarmFailure {
    /// The seed.
    pub seed: u64,
    /// What went wrong first.
    pub what: String,
    /// The drawn configuration, for the reader.
    pub config: String,
    /// Error completions, in order, if any.
    pub errors: Vec<String>,
    /// Engine counters at the end, in words.
    pub engines: String,
}

impl fmt::Display for SwarmFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SEED_ENV}={}\nfirst divergence: {}\nconfig: {}",
            self.seed, self.what, self.config
        )?;
        for e in &self.errors {
            write!(f, "\n  error completion {e}")?;
        }
        if !self.engines.is_empty() {
            write!(f, "\nengines: {}", self.engines)?;
        }
        Ok(())
    }
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

/// Runs `config`: setup, safety phase, heal, liveness phase, final checks. `capture` receives
/// a pcap of every datagram, if given.
pub fn run(config: &RunConfig, capture: Option<Box<dyn Write>>) -> Result<RunReport, RunError> {
    let seed = config.workload.seed;
    let mut fabric = Fabric::new(FabricConfig {
        keep_early_packets: !config.rxe_like_responders,
        mispredict: config.mispredict,
        ..FabricConfig::new(seed)
    });
    if let Some(out) = capture {
        fabric.capture_to(out)?;
    }
    let mut wl = Workload::setup(&mut fabric, config.workload)?;
    let mut dg = match config.datagrams {
        Some(d) => Some(DatagramWorkload::setup(&mut fabric, d)?),
        None => None,
    };
    let mut ew = match config.errors {
        Some(e) => Some(ErrorWorkload::setup(&mut fabric, e)?),
        None => None,
    };
    let mut cw = match config.cm {
        Some(c) => Some(CmWorkload::setup(&mut fabric, c)?),
        None => None,
    };
    // Every workload pumps on every step; the run is done when all are.
    let mut pump = |f: &mut Fabric| {
        let rc = wl.pump(f);
        let ud = dg.as_mut().map_or(true, |d| d.pump(f));
        let er = ew.as_mut().map_or(true, |e| e.pump(f));
        let cm = cw.as_mut().map_or(true, |c| c.pump(f));
        rc && ud && er && cm
    };
    for (i, row) in config.links.iter().enumerate() {
        for (j, link) in row.iter().enumerate() {
            if i != j {
                fabric.set_link(NodeId(i), NodeId(j), *link);
            }
        }
    }
    for f in &config.faults {
        fabric.add_interceptor(Targeted::times(f.matcher, f.nth, f.count, f.verdict));
    }
    let mut sim_error = None;
    let safety_end = fabric.now() + config.safety;
    let outcome = fabric.run_until(safety_end, &mut pump);
    let healed_at = fabric.now();
    fabric.heal();
    let liveness_end = fabric.now() + config.liveness;
    match outcome {
        Ok(RunOutcome::Done) => {}
        Ok(_) => match fabric.run_until(liveness_end, &mut pump) {
            Ok(RunOutcome::Done) => {}
            Ok(_) => {}
            Err(e) => sim_error = Some(e.to_string()),
        },
        Err(e) => sim_error = Some(e.to_string()),
    }
    // Let the last ACKs and duplicates settle so the final memory check sees a quiet network
    // (bounded: the healed network drains in well under the liveness bound).
    if sim_error.is_none() {
        let settle_end = fabric.now() + Duration::from_millis(100);
        if let Err(e) = fabric.run_until(settle_end, |f| {
            pump(f);
            f.in_flight_count() == 0
        }) {
            sim_error = Some(e.to_string());
        }
    }
    if let Err(e) = fabric.finish_capture() {
        sim_error.get_or_insert(e.to_string());
    }
    let workload = wl.finish(&fabric);
    let datagrams = dg.as_mut().map(|d| d.finish(&fabric));
    let errors = ew.as_mut().map(|e| e.finish(&fabric));
    let cm = cw.as_mut().map(CmWorkload::finish);
    Ok(RunReport {
        seed,
        workload,
        datagrams,
        errors,
        cm,
        fabric: *fabric.stats(),
        engines: EngineTotals::of(&fabric),
        healed_at,
        end: fabric.now(),
        sim_error,
    })
}

/// Runs the swarm configuration of `seed` and turns any failure into a [`SwarmFailure`].
pub fn run_seed(seed: u64) -> Result<RunReport, SwarmFailure> {
    run_seed_with_capture(seed, None)
}

/// [`run_seed`], capturing every datagram as pcap to `capture`.
pub fn run_seed_with_capture(
    seed: u64,
    capture: Option<Box<dyn Write>>,
) -> Result<RunReport, SwarmFailure> {
    let config = RunConfig::swarm(seed);
    let fail = |what: String, errors: Vec<String>, engines: String| SwarmFailure {
        seed,
        what,
        config: config.describe(),
        errors,
        engines,
    };
    let report =
        run(&config, capture).map_err(|e| fail(e.to_string(), Vec::new(), String::new()))?;
    match report.first_failure() {
        None => Ok(report),
        Some(what) => Err(fail(
            what,
            report.workload.error_completions.clone(),
            format!(
                "{}\nfabric: sent={} dropped={} dropped_by_interceptor={} duplicated={} corrupted={} reordered={} held={}",
                report.engines,
                report.fabric.packets_sent,
                report.fabric.packets_dropped,
                report.fabric.packets_dropped_by_interceptor,
                report.fabric.packets_duplicated,
                report.fabric.packets_corrupted,
                report.fabric.packets_reordered,
                report.fabric.packets_held
            ),
        )),
    }
}

/// The seed to replay from the environment, if `SOFTRDMA_SEED` is set to a number.
pub fn seed_from_env() -> Option<u64> {
    std::env::var(SEED_ENV).ok()?.trim().parse().ok()
}
