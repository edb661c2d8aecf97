//! Operations that must fail, beside the RC workload: the error paths of IBTA ch. 9 as rxe
//! takes them, predicted by a model and checked.
//!
//! # What runs
//! Each *scenario* is one RC connection between two nodes (its own QPs, regions and CQs) on
//! which the requester posts some WRITEs that must succeed, then one operation that must fail,
//! then some WRITEs that must be flushed:
//!
//! | kind | the failing operation | expected status |
//! |---|---|---|
//! | `wrong_rkey` | WRITE, READ or atomic with an rkey that names nothing | remote access error |
//! | `out_of_bounds` | WRITE or READ straddling the end of the region | remote access error |
//! | `no_access` | WRITE into a region registered without remote write | remote access error |
//! | `destroyed_mr` | WRITE into a region deregistered before | remote access error |
//! | `rnr` | SEND to a QP with no receive posted, RNR retry count 2 | RNR retry exceeded |
//! | `peer_gone` | WRITE to a QP that was destroyed (nothing answers), retry count 2 | transport retry exceeded |
//!
//! # What is checked
//! - the completions of the scenario, in posting order: SUCCESS for the WRITEs before, the
//!   predicted status for the failing one, WR_FLUSH_ERR for every later one;
//! - the requester's QP ends in ERR; the responder's too after a remote access error (rxe
//!   moves its responder to ERR once the NAK is out), and stays RTS after RNR;
//! - memory: the successful WRITEs landed; the failing operation and the flushed ones
//!   touched nothing (the region the failing one aimed at is still its background).
//!
//! On a lossy fabric a lost NAK (or ACK) makes the requester retry until its retry count runs
//! out, against a responder already in ERR: the first non-success may then be a transport
//! retry exceeded, at the failing operation or before it (and what follows is flushed). The
//! model allows exactly that, and only when the fabric may lose packets; a WRITE before the
//! failing one that did not complete successfully may or may not have executed, so its range
//! may hold the old or the new bytes — but never a mix.

use std::collections::BTreeMap;
use std::sync::Arc;

use softrdma_proto::{
    AccessFlags, Mtu, QpCaps, QpState, SendOp, SendWr, Sge, VecMemory, WcStatus, WorkCompletion,
};
use softrdma_wire::Psn;

use crate::fabric::{Fabric, NodeId};
use crate::rng::SimRng;
use crate::setup::{connect_rc, node_resources, NodeResources, RcConnection, RcParams, SetupError};
use crate::workload::Divergence;

/// Bytes of each scenario's target regions.
const REGION: u64 = 4096;
/// Bytes each WRITE of a scenario carries (each to its own slot of the good region).
const SLOT: u64 = 256;
/// Virtual address of every target region (each region has its own key).
const IOVA: u64 = 0x4000_0000;

/// What makes a scenario's operation fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// An rkey that names no region.
    WrongRkey,
    /// A range straddling the end of the region.
    OutOfBounds,
    /// A region registered without remote write.
    NoAccess,
    /// A region deregistered before the operation.
    DestroyedMr,
    /// A SEND to a QP that never posts a receive (RNR retry count 2).
    Rnr,
    /// A peer QP destroyed before the operation (retry count 2).
    PeerGone,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::WrongRkey,
        ErrorKind::OutOfBounds,
        ErrorKind::NoAccess,
        ErrorKind::DestroyedMr,
        ErrorKind::Rnr,
        ErrorKind::PeerGone,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::WrongRkey => "wrong_rkey",
            ErrorKind::OutOfBounds => "out_of_bounds",
            ErrorKind::NoAccess => "no_access",
            ErrorKind::DestroyedMr => "destroyed_mr",
            ErrorKind::Rnr => "rnr",
            ErrorKind::PeerGone => "peer_gone",
        }
    }

    /// The status the failing operation completes with.
    pub fn expected_status(self) -> WcStatus {
        match self {
            ErrorKind::Rnr => WcStatus::RnrRetryExcErr,
            ErrorKind::PeerGone => WcStatus::RetryExcErr,
            _ => WcStatus::RemAccessErr,
        }
    }
}

/// Shape of the failing traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorConfig {
    /// Seed of kinds, node pairs, op counts and data.
    pub seed: u64,
    /// Nodes of the fabric.
    pub nodes: usize,
    /// Scenarios (each has exactly one failing operation).
    pub scenarios: u64,
    /// Whether the fabric may lose packets (a lost NAK turns into retry exhaustion).
    pub lossy: bool,
    /// Path MTU of the connections.
    pub mtu: Mtu,
    /// Only this kind of failure (tests); `None` draws each scenario's kind.
    pub only: Option<ErrorKind>,
}

/// The tallies and the verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorReport {
    /// Scenarios run, by kind.
    pub scenarios_by_kind: BTreeMap<&'static str, u64>,
    /// Completions, by status name (`WcStatus::snake_name`).
    pub completions_by_status: BTreeMap<&'static str, u64>,
    /// Things that disagreed with the model.
    pub mismatches: u64,
    /// The first disagreement.
    pub first_divergence: Option<Divergence>,
}

impl ErrorReport {
    /// Whether everything agreed with the model.
    pub fn passed(&self) -> bool {
        self.mismatches == 0
    }
}

/// One scenario's state and expectations.
struct Scenario {
    kind: ErrorKind,
    conn: RcConnection,
    /// Node resources of the requester (its own CQs).
    req: NodeResources,
    /// Source buffer of the requester, registered.
    src_key: u32,
    src: Arc<VecMemory>,
    /// The region the successful WRITEs go to, its key and model.
    good: Arc<VecMemory>,
    good_key: u32,
    /// The region the failing operation aims at (for kinds that have one).
    bad: Option<Arc<VecMemory>>,
    /// WRITEs before the failing op (`before`), the failing op's index, flushed after.
    before: u64,
    after: u64,
    /// Completions seen so far, in order.
    seen: Vec<WcStatus>,
}

impl Scenario {
    fn total(&self) -> u64 {
        self.before + 1 + self.after
    }
}

/// The running failing traffic. See the module docs.
pub struct ErrorWorkload {
    cfg: ErrorConfig,
    scenarios: Vec<Scenario>,
    report: ErrorReport,
}

fn background(seed: u64, len: u64) -> Vec<u8> {
    let mut rng = SimRng::new(seed);
    (0..len).map(|_| rng.below(256) as u8).collect()
}

fn write_data(scenario: usize, op: u64) -> Vec<u8> {
    let seed = (scenario as u64) << 16 | op;
    background(seed ^ 0x5752_4954_4500, SLOT)
}

impl ErrorWorkload {
    /// Creates every scenario's connection and regions, posts all their work.
    pub fn setup(fabric: &mut Fabric, cfg: ErrorConfig) -> Result<ErrorWorkload, SetupError> {
        let mut rng = SimRng::new(cfg.seed).fork(0x6572_726f_7273);
        let mut scenarios = Vec::new();
        let mut report = ErrorReport::default();
        for i in 0..cfg.scenarios as usize {
            let drawn = *rng.pick(&ErrorKind::ALL).unwrap_or(&ErrorKind::WrongRkey);
            let kind = cfg.only.unwrap_or(drawn);
            let a = rng.below(cfg.nodes as u64) as usize;
            let b = (a + 1 + rng.below(cfg.nodes as u64 - 1) as usize) % cfg.nodes;
            let req = node_resources(fabric, NodeId(a), 64)?;
            let resp = node_resources(fabric, NodeId(b), 64)?;
            let params = RcParams {
                mtu: cfg.mtu,
                timeout: 8,
                retry_cnt: if kind == ErrorKind::PeerGone { 2 } else { 7 },
                rnr_retry: if kind == ErrorKind::Rnr { 2 } else { 7 },
                caps: QpCaps {
                    max_send_wr: 16,
                    max_recv_wr: 4,
                    ..QpCaps::default()
                },
                ..RcParams::default()
            };
            let psn_a = Psn::new(rng.below(1 << 24) as u32);
            let psn_b = Psn::new(rng.below(1 << 24) as u32);
            let conn = connect_rc(fabric, &req, &resp, &params, psn_a, psn_b)?;
            let step = |step| move |source| SetupError::Engine { step, source };
            let src = Arc::new(VecMemory::new((8 * SLOT) as usize));
            let e = fabric.engine_mut(NodeId(a))?;
            let src_key = e
                .reg_mr(
                    req.pd,
                    IOVA,
                    8 * SLOT,
                    AccessFlags::LOCAL_WRITE,
                    src.clone(),
                )
                .map_err(step("reg_mr source"))?;
            let all = AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC;
            let good = Arc::new(VecMemory::from_vec(background(cfg.seed ^ i as u64, REGION)));
            let e = fabric.engine_mut(NodeId(b))?;
            let good_key = e
                .reg_mr(resp.pd, IOVA, REGION, all, good.clone())
                .map_err(step("reg_mr target"))?;
            let bad_access = match kind {
                ErrorKind::NoAccess => AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                _ => all,
            };
            let (bad, bad_key) = match kind {
                ErrorKind::WrongRkey
                | ErrorKind::OutOfBounds
                | ErrorKind::NoAccess
                | ErrorKind::DestroyedMr => {
                    let m = Arc::new(VecMemory::from_vec(background(
                        !(cfg.seed ^ i as u64),
                        REGION,
                    )));
                    let key = e
                        .reg_mr(resp.pd, IOVA, REGION, bad_access, m.clone())
                        .map_err(step("reg_mr bad target"))?;
                    (Some(m), key)
                }
                _ => (None, 0),
            };
            if kind == ErrorKind::DestroyedMr {
                e.dereg_mr(bad_key).map_err(step("dereg_mr"))?;
            }
            if kind == ErrorKind::PeerGone {
                e.destroy_qp(conn.b.qpn).map_err(step("destroy_qp"))?;
            }
            let before = if kind == ErrorKind::PeerGone {
                0
            } else {
                rng.below(4)
            };
            let after = 1 + rng.below(3);
            *report.scenarios_by_kind.entry(kind.name()).or_default() += 1;
            let s = Scenario {
                kind,
                conn,
                req,
                src_key,
                src,
                good,
                good_key,
                bad,
                before,
                after,
                seen: Vec::new(),
            };
            // The WRITEs' data, then the work: before, the failing op, after.
            let mut wrs = Vec::new();
            for op in 0..s.total() {
                s.src.write(
                    (op * SLOT) as usize % (8 * SLOT) as usize,
                    &write_data(i, op),
                );
            }
            for op in 0..s.total() {
                let wr = if op == s.before {
                    failing_op(&s, &mut rng, bad_key)
                } else {
                    write_op(&s, op)
                };
                wrs.push(wr);
            }
            let now = fabric.now();
            let e = fabric.engine_mut(NodeId(a))?;
            for wr in wrs {
                e.post_send(now, s.conn.a.qpn, wr)
                    .map_err(step("post_send"))?;
            }
            scenarios.push(s);
        }
        Ok(ErrorWorkload {
            cfg,
            scenarios,
            report,
        })
    }

    /// Polls the scenarios' completions and checks them. Returns whether every scenario has
    /// all its completions.
    pub fn pump(&mut self, fabric: &mut Fabric) -> bool {
        let mut wcs = Vec::new();
        for i in 0..self.scenarios.len() {
            let s = &self.scenarios[i];
            if s.seen.len() as u64 == s.total() {
                continue;
            }
            let (node, cq) = (s.req.node, s.req.send_cq);
            wcs.clear();
            let Ok(e) = fabric.engine_mut(node) else {
                continue;
            };
            let _ = e.poll_cq(cq, usize::MAX, &mut wcs);
            for wc in wcs.drain(..) {
                self.on_completion(fabric.now(), i, &wc);
            }
        }
        self.scenarios
            .iter()
            .all(|s| s.seen.len() as u64 == s.total())
    }

    fn diverge(&mut self, now: softrdma_proto::Instant, what: String) {
        self.report.mismatches += 1;
        if self.report.first_divergence.is_none() {
            self.report.first_divergence = Some(Divergence { at: now, what });
        }
    }

    fn on_completion(&mut self, now: softrdma_proto::Instant, i: usize, wc: &WorkCompletion) {
        *self
            .report
            .completions_by_status
            .entry(wc.status.snake_name())
            .or_default() += 1;
        let lossy = self.cfg.lossy;
        let s = &mut self.scenarios[i];
        let op = s.seen.len() as u64;
        s.seen.push(wc.status);
        let label = format!("error scenario {i} ({}) op {op}", s.kind.name());
        let failed_before = s.seen[..op as usize]
            .iter()
            .any(|&st| st != WcStatus::Success);
        let ok = if wc.wr_id != op {
            Err(format!("wr_id {} out of order", wc.wr_id))
        } else if failed_before {
            // Everything after the first failure is flushed.
            expect(wc.status, &[WcStatus::WrFlushErr])
        } else if op < s.before {
            // A WRITE before the failing one: success, or (lossy) retry exhaustion.
            let mut allowed = vec![WcStatus::Success];
            if lossy {
                allowed.push(WcStatus::RetryExcErr);
            }
            expect(wc.status, &allowed)
        } else if op == s.before {
            let mut allowed = vec![s.kind.expected_status()];
            if lossy {
                allowed.push(WcStatus::RetryExcErr);
            }
            expect(wc.status, &allowed)
        } else {
            expect(wc.status, &[WcStatus::WrFlushErr])
        };
        if let Err(e) = ok {
            self.diverge(now, format!("{label}: {e}"));
        }
    }

    /// Final checks: QP states and memory.
    pub fn finish(&mut self, fabric: &Fabric) -> ErrorReport {
        let now = fabric.now();
        let mut problems = Vec::new();
        for (i, s) in self.scenarios.iter().enumerate() {
            let label = format!("error scenario {i} ({})", s.kind.name());
            if (s.seen.len() as u64) < s.total() {
                problems.push(format!(
                    "{label}: {} of {} completions",
                    s.seen.len(),
                    s.total()
                ));
                continue;
            }
            let req_state = fabric
                .engine(s.conn.a.node)
                .ok()
                .and_then(|e| e.qp(s.conn.a.qpn).map(|q| q.state()));
            if req_state != Some(QpState::Err) {
                problems.push(format!("{label}: requester QP in {req_state:?}, not ERR"));
            }
            let resp_state = fabric
                .engine(s.conn.b.node)
                .ok()
                .and_then(|e| e.qp(s.conn.b.qpn).map(|q| q.state()));
            let first_bad = s.seen.iter().position(|&st| st != WcStatus::Success);
            let failing_status = s.seen[s.before as usize];
            let want_resp = match s.kind {
                ErrorKind::PeerGone => Some(None),
                ErrorKind::Rnr => Some(Some(QpState::Rts)),
                // The responder saw the forbidden request: it NAKed and went to ERR.
                _ if first_bad == Some(s.before as usize)
                    && failing_status == WcStatus::RemAccessErr =>
                {
                    Some(Some(QpState::Err))
                }
                // Retry exhaustion: the request may never have arrived.
                _ => None,
            };
            if let Some(want) = want_resp {
                if resp_state != want {
                    problems.push(format!(
                        "{label}: responder QP in {resp_state:?}, want {want:?}"
                    ));
                }
            }
            // Memory: the WRITEs that succeeded landed; the ones that ended in retry
            // exhaustion landed whole or not at all; nothing else touched the region.
            let mut want = background(self.cfg.seed ^ i as u64, REGION);
            let got = s.good.snapshot();
            for op in 0..s.total() {
                if op == s.before {
                    continue;
                }
                let off = (slot_of(op) * SLOT) as usize;
                let range = off..off + SLOT as usize;
                let data = write_data(i, op);
                // A WRITE before the failing one that did not succeed (a lost ACK made the
                // requester give up at it or before it) may have executed all the same.
                let maybe = op < s.before && got[range.clone()] == data[..];
                match s.seen[op as usize] {
                    WcStatus::Success => want[range].copy_from_slice(&data),
                    _ if maybe => want[range].copy_from_slice(&data),
                    _ => {}
                }
            }
            if got != want {
                let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                problems.push(format!("{label}: target region differs at byte {at}"));
            }
            if let Some(bad) = &s.bad {
                if bad.snapshot() != background(!(self.cfg.seed ^ i as u64), REGION) {
                    problems.push(format!("{label}: the failing operation touched memory"));
                }
            }
        }
        for p in problems {
            self.diverge(now, p);
        }
        self.report.clone()
    }
}

fn expect(got: WcStatus, allowed: &[WcStatus]) -> Result<(), String> {
    if allowed.contains(&got) {
        Ok(())
    } else {
        Err(format!(
            "status {} (expected {:?})",
            got.snake_name(),
            allowed
        ))
    }
}

/// The good-region slot of WRITE `op` (the failing op's index is skipped).
fn slot_of(op: u64) -> u64 {
    op % (REGION / SLOT)
}

fn write_op(s: &Scenario, op: u64) -> SendWr {
    let sge = Sge {
        addr: IOVA + (op * SLOT) % (8 * SLOT),
        length: SLOT as u32,
        lkey: s.src_key,
    };
    let remote_addr = IOVA + slot_of(op) * SLOT;
    SendWr::signaled(
        op,
        SendOp::RdmaWrite {
            remote_addr,
            rkey: s.good_key,
        },
        vec![sge],
    )
}

fn failing_op(s: &Scenario, rng: &mut SimRng, bad_key: u32) -> SendWr {
    let op = s.before;
    let sge = |len: u64| Sge {
        addr: IOVA + (op * SLOT) % (8 * SLOT),
        length: len as u32,
        lkey: s.src_key,
    };
    match s.kind {
        ErrorKind::WrongRkey => {
            // An rkey of no region: the bad region's key with its key byte changed.
            let rkey = bad_key ^ 0x5a;
            match rng.below(3) {
                0 => SendWr::signaled(
                    op,
                    SendOp::RdmaWrite {
                        remote_addr: IOVA,
                        rkey,
                    },
                    vec![sge(SLOT)],
                ),
                1 => SendWr::signaled(
                    op,
                    SendOp::RdmaRead {
                        remote_addr: IOVA,
                        rkey,
                    },
                    vec![sge(SLOT)],
                ),
                _ => SendWr::signaled(
                    op,
                    SendOp::AtomicFetchAdd {
                        remote_addr: IOVA,
                        rkey,
                        add: 1,
                    },
                    vec![sge(8)],
                ),
            }
        }
        ErrorKind::OutOfBounds => {
            let remote_addr = IOVA + REGION - SLOT / 2;
            if rng.chance(0.5) {
                SendWr::signaled(
                    op,
                    SendOp::RdmaWrite {
                        remote_addr,
                        rkey: bad_key,
                    },
                    vec![sge(SLOT)],
                )
            } else {
                SendWr::signaled(
                    op,
                    SendOp::RdmaRead {
                        remote_addr,
                        rkey: bad_key,
                    },
                    vec![sge(SLOT)],
                )
            }
        }
        ErrorKind::NoAccess | ErrorKind::DestroyedMr => SendWr::signaled(
            op,
            SendOp::RdmaWrite {
                remote_addr: IOVA,
                rkey: bad_key,
            },
            vec![sge(SLOT)],
        ),
        ErrorKind::Rnr => SendWr::signaled(op, SendOp::Send, vec![sge(SLOT)]),
        ErrorKind::PeerGone => write_op(s, op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::FabricConfig;
    use softrdma_proto::Duration;

    /// A finished run of `scenarios` scenarios of `kind` on two nodes, loss-free.
    fn run(kind: ErrorKind, scenarios: u64) -> (Fabric, ErrorWorkload) {
        let mut fabric = Fabric::new(FabricConfig::new(11));
        for _ in 0..2 {
            fabric.add_node().unwrap();
        }
        let cfg = ErrorConfig {
            seed: 11,
            nodes: 2,
            scenarios,
            lossy: false,
            mtu: Mtu::Mtu1024,
            only: Some(kind),
        };
        let mut w = ErrorWorkload::setup(&mut fabric, cfg).unwrap();
        let end = fabric.now() + Duration::from_secs(2);
        fabric.run_until(end, |f| w.pump(f)).unwrap();
        (fabric, w)
    }

    #[test]
    fn test_each_kind_fails_as_predicted() {
        for kind in ErrorKind::ALL {
            let (fabric, mut w) = run(kind, 3);
            let before: u64 = w.scenarios.iter().map(|s| s.before).sum();
            let after: u64 = w.scenarios.iter().map(|s| s.after).sum();
            let r = w.finish(&fabric);
            assert!(r.passed(), "{kind:?}: {:?}", r.first_divergence);
            // Loss-free, the prediction is exact: every WRITE before succeeded, the failing
            // operation got its status, everything after it was flushed.
            let mut want = BTreeMap::new();
            if before > 0 {
                want.insert("success", before);
            }
            want.insert(kind.expected_status().snake_name(), 3);
            want.insert("wr_flush_error", after);
            assert_eq!(r.completions_by_status, want, "{kind:?}");
        }
    }

    #[test]
    fn test_the_model_sees_a_failed_operation_touch_memory() {
        let (fabric, mut w) = run(ErrorKind::WrongRkey, 1);
        // As if the failing WRITE had landed after all: one byte of its target changed.
        let bad = w.scenarios[0].bad.clone().unwrap();
        let mut b = [0u8; 1];
        bad.read(0, &mut b);
        bad.write(0, &[b[0] ^ 1]);
        let r = w.finish(&fabric);
        assert_eq!(r.mismatches, 1);
        let what = r.first_divergence.unwrap().what;
        assert!(what.contains("touched memory"), "{what}");
    }

    #[test]
    fn test_the_model_sees_a_flushed_write_land() {
        let (fabric, mut w) = run(ErrorKind::NoAccess, 1);
        // As if the first flushed WRITE had executed: its slot holds its data.
        let s = &w.scenarios[0];
        let op = s.before + 1;
        let off = (slot_of(op) * SLOT) as usize;
        s.good.write(off, &write_data(0, op));
        let r = w.finish(&fabric);
        assert_eq!(r.mismatches, 1);
        assert!(r.first_divergence.unwrap().what.contains("differs"));
    }
}
