//! A random RC workload with a reference model that checks every observable result.
//!
//! # What runs
//! Every pair of nodes is joined by `qps_per_pair` RC connections, and both ends of each
//! connection send. Each end (an `Endpoint`) posts random SEND, SEND with immediate,
//! RDMA WRITE, WRITE with immediate, RDMA READ, compare-and-swap and fetch-and-add work
//! requests, of random sizes (0 to a little over 3 MTUs) with SGLs of 1 to 3 elements, keeping
//! at most a window of them outstanding. All data comes from the seed.
//!
//! # Why the final state is predictable
//! Concurrency would make a naive model ambiguous, so the workload is shaped so that only
//! what RC guarantees matters:
//! - each end has its *own* target region on the peer (data area + atomic counters); nobody
//!   else touches it, and RC executes one QP's requests in posting order, so applying each
//!   WRITE and atomic to the model at post time yields exactly the responder's final memory;
//! - a READ therefore returns the model's bytes as they were when it was posted — except that
//!   a responder re-executes a retransmitted READ, which could then see a later WRITE. A
//!   WRITE overlapping a READ still outstanding is posted with `FENCE`, the verbs way of
//!   ordering it after the READ completes;
//! - atomics target counters that READs and WRITEs never touch, so the original value each
//!   returns is the model's value at post time, and the final counter proves exactly-once;
//! - RECVs are consumed in the order the peer posted its SEND / WRITE-with-immediate requests,
//!   so the n-th receive completion must carry the n-th such message.
//!
//! # What is checked
//! Per completion: order (per QP, posting order), status (SUCCESS), opcode, and for READs and
//! atomics the bytes that landed locally (and that SGL gaps stayed untouched); per receive:
//! order, opcode, byte length, immediate, source QP and contents. At the end
//! ([`Workload::finish`]): every target region byte and counter against the model, and that
//! nothing is left outstanding.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use softrdma_proto::{AccessFlags, Instant, QpCaps, WcOpcode, WcStatus, WorkCompletion};
use softrdma_wire::{Psn, PSN_MODULUS};

use crate::fabric::{Fabric, NodeId};
use crate::memory::{Background, SparseMemory};
use crate::rng::SimRng;
use crate::setup::{connect_rc, node_resources, NodeResources, RcParams, SetupError};

mod check;
mod config;
mod post;

pub use config::{MemoryEstimate, OpKind, OpMix, WorkloadConfig};

/// Bytes left between the SGEs of one SGL, filled with [`CANARY`] and checked afterwards:
/// a scatter that writes past an SGE shows up there.
pub const SGE_GAP_BYTES: u64 = 8;
/// Fill byte of SGL gaps and unused receive-buffer space.
pub const CANARY: u8 = 0xee;
/// Atomic counters per endpoint.
pub const COUNTERS_PER_ENDPOINT: usize = 4;

/// The first thing that disagreed with the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Virtual time it was noticed.
    pub at: Instant,
    /// What disagreed, in words.
    pub what: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {} ns: {}", self.at.as_nanos(), self.what)
    }
}

/// Totals and the verdict of a workload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadReport {
    /// Send WRs posted.
    pub ops_posted: u64,
    /// Send WRs completed (any status).
    pub ops_completed: u64,
    /// Send WRs completed with SUCCESS and the right results.
    pub ops_ok: u64,
    /// Receive completions checked.
    pub recvs_completed: u64,
    /// Things that disagreed with the model (each wrong completion, missing op or wrong
    /// memory region counts once).
    pub mismatches: u64,
    /// Posted ops by kind.
    pub posted_by_kind: BTreeMap<&'static str, u64>,
    /// The first disagreement.
    pub first_divergence: Option<Divergence>,
    /// The first few completions with a status other than SUCCESS, in the order polled
    /// (the first divergence alone can hide the cause: a failing WR flushes older ones).
    pub error_completions: Vec<String>,
}

/// How many error completions a report keeps.
pub const MAX_ERROR_COMPLETIONS: usize = 8;

impl WorkloadReport {
    /// Whether every op completed successfully and everything agreed with the model.
    pub fn passed(&self) -> bool {
        self.mismatches == 0
            && self.first_divergence.is_none()
            && self.ops_completed == self.ops_posted
            && self.ops_ok == self.ops_posted
    }
}

/// A FIFO allocator over a buffer: allocations are freed in the order they were made, which
/// is exactly the order RC completes one QP's work requests.
#[derive(Debug, Clone, Copy)]
struct Ring {
    size: u64,
    /// Logical position of the next allocation.
    head: u64,
    /// Logical position of the oldest live byte.
    tail: u64,
}

impl Ring {
    fn new(size: u64) -> Ring {
        Ring {
            size,
            head: 0,
            tail: 0,
        }
    }

    /// Reserves `len` contiguous bytes; returns (offset in the buffer, logical end for
    /// [`Ring::free_to`]).
    fn alloc(&mut self, len: u64) -> Option<(u64, u64)> {
        let len = len.max(1).div_ceil(8) * 8;
        if len > self.size {
            return None;
        }
        let mut start = self.head;
        let off = start % self.size;
        if off + len > self.size {
            start += self.size - off;
        }
        if start + len - self.tail > self.size {
            return None;
        }
        self.head = start + len;
        Some((start % self.size, start + len))
    }

    fn free_to(&mut self, end: u64) {
        self.tail = self.tail.max(end);
    }

    /// Returns the space freed since the last call to `buf`'s background (it will be written
    /// before it is read again), so that memory follows what is in flight.
    fn release(&self, buf: &Buffer, released: &mut u64) {
        let (from, to) = (*released, self.tail);
        if to <= from {
            return;
        }
        *released = to;
        if to - from >= self.size {
            buf.mem.discard(0, self.size as usize);
            return;
        }
        let (a, b) = (from % self.size, to % self.size);
        if a < b {
            buf.mem.discard(a as usize, (b - a) as usize);
        } else {
            buf.mem.discard(a as usize, (self.size - a) as usize);
            buf.mem.discard(0, b as usize);
        }
    }
}

/// A registered buffer the workload reads and writes directly.
#[derive(Clone)]
struct Buffer {
    mem: Arc<SparseMemory>,
    key: u32,
    iova: u64,
    len: u64,
}

impl Buffer {
    fn read(&self, off: u64, len: u64) -> Vec<u8> {
        let mut v = vec![0u8; len as usize];
        self.mem.read(off as usize, &mut v);
        v
    }
    fn write(&self, off: u64, data: &[u8]) {
        self.mem.write(off as usize, data);
    }
}

/// A piece of an SGL: offset within its buffer and length.
#[derive(Debug, Clone, Copy)]
struct Piece {
    off: u64,
    len: u64,
}

/// A send WR the model expects to complete.
#[derive(Debug, Clone)]
struct PendingOp {
    wr_id: u64,
    kind: OpKind,
    len: u64,
    /// Whole allocation in the scratch buffer (pieces plus gaps).
    alloc: Piece,
    alloc_end: u64,
    pieces: Vec<Piece>,
    /// Offset in the target region (READ/WRITE).
    remote_off: u64,
    /// READ: bytes expected to land; atomics: the original value expected.
    expect_data: Option<Vec<u8>>,
    expect_orig: Option<u64>,
    posted_at: Instant,
}

/// A message the peer sent that must land in this end's next RECV.
#[derive(Debug, Clone)]
struct ExpectedRecv {
    opcode: WcOpcode,
    /// SEND payload (empty for WRITE with immediate, which places nothing in the RECV).
    data: Vec<u8>,
    byte_len: u64,
    imm: Option<u32>,
    sender_wr_id: u64,
}

/// A RECV this end posted.
#[derive(Debug, Clone)]
struct PostedRecv {
    wr_id: u64,
    alloc: Piece,
    alloc_end: u64,
    pieces: Vec<Piece>,
}

/// One end of one RC connection, with its share of the model.
struct Endpoint {
    node: NodeId,
    qpn: u32,
    peer: usize,
    peer_qpn: u32,
    scratch: Buffer,
    scratch_ring: Ring,
    /// How far the scratch ring's freed space has been returned to the background.
    scratch_released: u64,
    recv_buf: Buffer,
    recv_ring: Ring,
    recv_released: u64,
    /// This end's target region on the peer, and the model of its contents (the same seeded
    /// background, so it costs only what WRITEs and atomics changed).
    target: Buffer,
    target_data_len: u64,
    model: SparseMemory,
    counters: [u64; COUNTERS_PER_ENDPOINT],
    outstanding: VecDeque<PendingOp>,
    recvs: VecDeque<PostedRecv>,
    expected_recvs: VecDeque<ExpectedRecv>,
}

impl Endpoint {
    fn label(&self) -> String {
        format!("{} qp {:#x}", self.node, self.qpn)
    }

    fn counter_offset(&self, idx: usize) -> u64 {
        self.target_data_len + 8 * idx as u64
    }
}

/// The running workload: endpoints, the model, and the tallies. See the module docs.
pub struct Workload {
    cfg: WorkloadConfig,
    rng: SimRng,
    endpoints: Vec<Endpoint>,
    by_qp: BTreeMap<(NodeId, u32), usize>,
    resources: Vec<NodeResources>,
    next_wr_id: u64,
    report: WorkloadReport,
    wc_buf: Vec<WorkCompletion>,
    /// Stop posting new WRs (the swarm's liveness phase only finishes what is outstanding).
    posting_stopped: bool,
    /// The first divergence so far is a flushed WR (a symptom, not the cause).
    first_flush_only: bool,
}

impl fmt::Debug for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workload")
            .field("endpoints", &self.endpoints.len())
            .field("report", &self.report)
            .finish()
    }
}

/// The initial PSN of one direction: anywhere, or (with `wrap_chance`) within a few packets
/// of 2^24 so that the run crosses the wrap.
fn draw_psn(rng: &mut SimRng, wrap_chance: f64) -> Psn {
    if rng.chance(wrap_chance) {
        Psn::new(PSN_MODULUS - 1 - rng.below(48) as u32)
    } else {
        Psn::new(rng.below(u64::from(PSN_MODULUS)) as u32)
    }
}

impl Workload {
    /// Adds `cfg.nodes` nodes to `fabric` (which should be empty), connects every pair, and
    /// registers and fills every buffer. Nothing is posted yet.
    pub fn setup(fabric: &mut Fabric, cfg: WorkloadConfig) -> Result<Workload, SetupError> {
        let root = SimRng::new(cfg.seed);
        let mut rng = root.fork(0x776f_726b);
        let window = cfg.window.max(1);
        let recv_depth = cfg.recv_depth.max(1);
        let max_msg = u64::from(cfg.max_msg_bytes);
        let params = RcParams {
            mtu: cfg.mtu,
            timeout: cfg.timeout,
            caps: QpCaps {
                max_send_wr: (window as u32).max(16),
                max_recv_wr: (recv_depth as u32).max(16),
                ..QpCaps::default()
            },
            ..RcParams::default()
        };
        let mut resources = Vec::new();
        for _ in 0..cfg.nodes {
            let node = fabric.add_node()?;
            // Every completion of the run could sit in the CQ between two polls only if the
            // workload stopped polling; windows bound what is really pending.
            let cap = (window + recv_depth) * cfg.nodes.max(2) * cfg.qps_per_pair.max(1) * 4;
            resources.push(node_resources(fabric, node, cap.max(1024))?);
        }
        let mut endpoints = Vec::new();
        let mut iova_next: u64 = 0x1000_0000;
        let mut new_buffer = |fabric: &mut Fabric,
                              res: &NodeResources,
                              len: u64,
                              rng: &mut SimRng,
                              fill_random: bool|
         -> Result<Buffer, SetupError> {
            // Random contents are the generator's bytes, computed where read (the generator
            // moves on exactly as if it had filled the buffer); other buffers start as
            // canaries, which the workload writes over every allocation anyway.
            let background = if fill_random {
                let bg = Background::Stream(rng.clone());
                for _ in 0..len.div_ceil(8) {
                    rng.next_u64();
                }
                bg
            } else {
                Background::Fill(CANARY)
            };
            let mem = Arc::new(SparseMemory::new(len as usize, background));
            // Distinct, page-offset addresses: remote addresses are never "0-based".
            let iova = iova_next + (rng.below(512) * 8);
            iova_next += (len + 0x1_0000).div_ceil(0x1_0000) * 0x1_0000 + 0x10_0000;
            let key = fabric
                .engine_mut(res.node)?
                .reg_mr(res.pd, iova, len, AccessFlags::all(), mem.clone())
                .map_err(|source| SetupError::Engine {
                    step: "reg_mr",
                    source,
                })?;
            Ok(Buffer {
                mem,
                key,
                iova,
                len,
            })
        };
        let slot = max_msg + 3 * SGE_GAP_BYTES + 16;
        for i in 0..cfg.nodes {
            for j in (i + 1)..cfg.nodes {
                for _ in 0..cfg.qps_per_pair {
                    let psn_a = draw_psn(&mut rng, cfg.psn_wrap_chance);
                    let psn_b = draw_psn(&mut rng, cfg.psn_wrap_chance);
                    let conn =
                        connect_rc(fabric, &resources[i], &resources[j], &params, psn_a, psn_b)?;
                    let base = endpoints.len();
                    for (me, peer, qpn, peer_qpn, peer_idx) in [
                        (i, j, conn.a.qpn, conn.b.qpn, base + 1),
                        (j, i, conn.b.qpn, conn.a.qpn, base),
                    ] {
                        let scratch_len = slot * window as u64 * 2;
                        let scratch =
                            new_buffer(fabric, &resources[me], scratch_len, &mut rng, false)?;
                        let recv_len = slot * recv_depth as u64 * 2;
                        let recv_buf =
                            new_buffer(fabric, &resources[me], recv_len, &mut rng, false)?;
                        let target_data_len = (4 * max_msg).max(64).div_ceil(8) * 8;
                        let target_len = target_data_len + 8 * COUNTERS_PER_ENDPOINT as u64;
                        let target =
                            new_buffer(fabric, &resources[peer], target_len, &mut rng, true)?;
                        let model =
                            SparseMemory::new(target_len as usize, target.mem.background().clone());
                        let mut counters = [0u64; COUNTERS_PER_ENDPOINT];
                        for (k, c) in counters.iter_mut().enumerate() {
                            let mut w = [0u8; 8];
                            model.read(target_data_len as usize + 8 * k, &mut w);
                            *c = u64::from_ne_bytes(w);
                        }
                        endpoints.push(Endpoint {
                            node: resources[me].node,
                            qpn,
                            peer: peer_idx,
                            peer_qpn,
                            scratch_ring: Ring::new(scratch.len),
                            scratch_released: 0,
                            scratch,
                            recv_ring: Ring::new(recv_buf.len),
                            recv_released: 0,
                            recv_buf,
                            target,
                            target_data_len,
                            model,
                            counters,
                            outstanding: VecDeque::new(),
                            recvs: VecDeque::new(),
                            expected_recvs: VecDeque::new(),
                        });
                    }
                }
            }
        }
        let by_qp = endpoints
            .iter()
            .enumerate()
            .map(|(k, e)| ((e.node, e.qpn), k))
            .collect();
        let mut wl = Workload {
            cfg: WorkloadConfig {
                window,
                recv_depth,
                ..cfg
            },
            rng,
            endpoints,
            by_qp,
            resources,
            next_wr_id: 1,
            report: WorkloadReport::default(),
            wc_buf: Vec::new(),
            posting_stopped: false,
            first_flush_only: false,
        };
        for e in 0..wl.endpoints.len() {
            for _ in 0..recv_depth {
                wl.post_one_recv(fabric, e);
            }
        }
        Ok(wl)
    }

    /// The configuration in force.
    pub fn config(&self) -> &WorkloadConfig {
        &self.cfg
    }

    /// The tallies so far.
    pub fn report(&self) -> &WorkloadReport {
        &self.report
    }

    /// Number of QP ends.
    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    /// Per-node verbs objects.
    pub fn resources(&self) -> &[NodeResources] {
        &self.resources
    }

    /// Stops posting new WRs; outstanding ones still complete and are checked.
    pub fn stop_posting(&mut self) {
        self.posting_stopped = true;
    }

    /// Work requests posted and not yet completed.
    pub fn outstanding(&self) -> u64 {
        self.endpoints
            .iter()
            .map(|e| e.outstanding.len() as u64)
            .sum()
    }

    /// Whether every op has been posted (or posting stopped) and every posted op completed.
    pub fn is_done(&self) -> bool {
        (self.posting_stopped || self.report.ops_posted >= self.cfg.ops) && self.outstanding() == 0
    }

    /// Whether to log one more error completion: every non-flush error (the causes) up to
    /// the limit, but only the first few flushes (their consequences).
    fn keep_error(&self, status: WcStatus) -> bool {
        let logged = &self.report.error_completions;
        if logged.len() >= MAX_ERROR_COMPLETIONS {
            return false;
        }
        status != WcStatus::WrFlushErr
            || logged.iter().filter(|e| e.ends_with("WrFlushErr")).count() < 3
    }

    fn diverge(&mut self, now: Instant, what: String) {
        self.report.mismatches += 1;
        if self.report.first_divergence.is_none() {
            self.report.first_divergence = Some(Divergence { at: now, what });
        }
    }

    /// Records an error completion. A failing WR completes after the older WRs it flushes,
    /// so a flush seen first is only a symptom: the first non-flush error at the same instant
    /// takes its place as the first divergence.
    fn diverge_status(&mut self, now: Instant, what: String, flushed: bool) {
        let replace = !flushed
            && self.first_flush_only
            && self
                .report
                .first_divergence
                .as_ref()
                .is_some_and(|d| d.at == now);
        if self.report.first_divergence.is_none() {
            self.first_flush_only = flushed;
        }
        if replace {
            self.report.first_divergence = None;
            self.first_flush_only = false;
        }
        self.diverge(now, what);
    }

    /// Polls every CQ, checks each completion, and posts more work. Returns [`Workload::is_done`];
    /// shaped to be the predicate of [`Fabric::run_until`].
    pub fn pump(&mut self, fabric: &mut Fabric) -> bool {
        self.poll_completions(fabric);
        self.post_more(fabric);
        self.is_done()
    }

    /// Final checks: nothing outstanding, every message received, every target region and
    /// counter equal to the model. Returns the full report.
    pub fn finish(&mut self, fabric: &Fabric) -> WorkloadReport {
        let now = fabric.now();
        let posted_unfinished = self
            .report
            .ops_posted
            .saturating_sub(self.report.ops_completed);
        if posted_unfinished > 0 {
            let first = self
                .endpoints
                .iter()
                .find_map(|ep| ep.outstanding.front().map(|op| (ep.label(), op.clone())));
            if let Some((label, op)) = first {
                self.diverge(
                    now,
                    format!(
                        "{posted_unfinished} ops never completed; oldest: {label} wr_id {} ({}, {} bytes, posted at {} ns)",
                        op.wr_id,
                        op.kind.name(),
                        op.len,
                        op.posted_at.as_nanos()
                    ),
                );
            }
        }
        for k in 0..self.endpoints.len() {
            let ep = &self.endpoints[k];
            if let Some(x) = ep.expected_recvs.front() {
                let what = format!(
                    "{}: {} messages never received; first is peer wr_id {} ({:?}, {} bytes)",
                    ep.label(),
                    ep.expected_recvs.len(),
                    x.sender_wr_id,
                    x.opcode,
                    x.byte_len
                );
                self.diverge(now, what);
            }
            let ep = &self.endpoints[k];
            let got = ep.target.mem.snapshot();
            let model = ep.model.snapshot();
            if let Some(i) = first_difference(&model, &got) {
                let region = if (i as u64) < ep.target_data_len {
                    format!("data byte {i}")
                } else {
                    format!("counter {}", (i as u64 - ep.target_data_len) / 8)
                };
                let what = format!(
                    "{}: target memory on {} differs at {region}: model {:#04x}, memory {:#04x}",
                    ep.label(),
                    self.endpoints[ep.peer].node,
                    model[i],
                    got[i]
                );
                self.diverge(now, what);
            }
        }
        self.report.clone()
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_ring_fifo() {
        let mut r = Ring::new(64);
        let (a, ea) = r.alloc(24).unwrap();
        let (b, eb) = r.alloc(24).unwrap();
        assert_eq!((a, b), (0, 24));
        // 16 bytes left at the end are too few for 24: wraps, but the front is still live.
        assert!(r.alloc(24).is_none());
        r.free_to(ea);
        let (c, _) = r.alloc(24).unwrap();
        assert_eq!(c, 0);
        r.free_to(eb);
        assert!(r.alloc(65).is_none());
    }
}
