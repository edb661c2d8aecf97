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

use softrdma_proto::{Duration, Instant, NakKind, Stats, WcStatus};

use crate::cm::{CmReport, CmWorkload};
use crate::datagrams::{DatagramReport, DatagramWorkload};
use crate::errors::{ErrorReport, ErrorWorkload};
use crate::fabric::{Fabric, FabricConfig, FabricStats, NodeId, RunOutcome, SimError};
use crate::intercept::Targeted;
use crate::setup::SetupError;
use crate::workload::{Workload, WorkloadReport};

mod config;
pub use config::{RunConfig, TargetedFault};

/// The environment variable that replays one seed (`SOFTRDMA_SEED=<n>`).
pub const SEED_ENV: &str = "SOFTRDMA_SEED";

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
