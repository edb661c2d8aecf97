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

use softrdma_proto::{
    AccessFlags, Instant, Mtu, QpCaps, RecvWr, RegionMemory, SendFlags, SendOp, SendWr, Sge,
    WcOpcode, WcStatus, WorkCompletion,
};
use softrdma_wire::{Psn, PSN_MODULUS};

use crate::fabric::{Fabric, NodeId};
use crate::memory::{Background, SparseMemory};
use crate::rng::SimRng;
use crate::setup::{connect_rc, node_resources, NodeResources, RcParams, SetupError};

/// Bytes left between the SGEs of one SGL, filled with [`CANARY`] and checked afterwards:
/// a scatter that writes past an SGE shows up there.
pub const SGE_GAP_BYTES: u64 = 8;
/// Fill byte of SGL gaps and unused receive-buffer space.
pub const CANARY: u8 = 0xee;
/// Atomic counters per endpoint.
pub const COUNTERS_PER_ENDPOINT: usize = 4;

/// Relative weights of the operation kinds (0 disables a kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpMix {
    /// SEND.
    pub send: u32,
    /// SEND with immediate.
    pub send_imm: u32,
    /// RDMA WRITE.
    pub write: u32,
    /// RDMA WRITE with immediate.
    pub write_imm: u32,
    /// RDMA READ.
    pub read: u32,
    /// Compare and swap.
    pub cmp_swap: u32,
    /// Fetch and add.
    pub fetch_add: u32,
}

impl Default for OpMix {
    fn default() -> OpMix {
        OpMix {
            send: 3,
            send_imm: 2,
            write: 3,
            write_imm: 2,
            read: 3,
            cmp_swap: 1,
            fetch_add: 1,
        }
    }
}

impl OpMix {
    fn pick(&self, rng: &mut SimRng) -> OpKind {
        let table = [
            (self.send, OpKind::Send),
            (self.send_imm, OpKind::SendImm),
            (self.write, OpKind::Write),
            (self.write_imm, OpKind::WriteImm),
            (self.read, OpKind::Read),
            (self.cmp_swap, OpKind::CmpSwap),
            (self.fetch_add, OpKind::FetchAdd),
        ];
        let total: u64 = table.iter().map(|(w, _)| u64::from(*w)).sum();
        let mut x = rng.below(total.max(1));
        for (w, k) in table {
            if x < u64::from(w) {
                return k;
            }
            x -= u64::from(w);
        }
        OpKind::Send
    }
}

/// Workload shape. Everything random is drawn from `seed`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadConfig {
    /// Seed of data, sizes, op choices and PSNs.
    pub seed: u64,
    /// Nodes (all pairs are connected).
    pub nodes: usize,
    /// RC connections per pair of nodes.
    pub qps_per_pair: usize,
    /// Work requests to post in total.
    pub ops: u64,
    /// Path MTU.
    pub mtu: Mtu,
    /// Most WRs one end keeps outstanding.
    pub window: usize,
    /// RECVs each end keeps posted (fewer than the peer's window provokes RNR NAKs).
    pub recv_depth: usize,
    /// Largest message (READ/WRITE/SEND length) in bytes.
    pub max_msg_bytes: u32,
    /// Operation weights.
    pub mix: OpMix,
    /// ACK timeout exponent for every QP.
    pub timeout: u8,
    /// Probability that a QP's initial PSNs are placed just below 2^24, to cross the wrap.
    pub psn_wrap_chance: f64,
}

impl WorkloadConfig {
    /// Two nodes, two QPs per pair, window 16, messages up to 3.5 MTUs.
    pub fn new(seed: u64, ops: u64) -> WorkloadConfig {
        WorkloadConfig {
            seed,
            nodes: 2,
            qps_per_pair: 2,
            ops,
            mtu: Mtu::Mtu1024,
            window: 16,
            recv_depth: 16,
            max_msg_bytes: 3 * 1024 + 512,
            mix: OpMix::default(),
            timeout: 10,
            psn_wrap_chance: 0.5,
        }
    }

    /// QP ends of the run: both ends of `qps_per_pair` connections between every two nodes.
    pub fn qp_ends(&self) -> u64 {
        let n = self.nodes as u64;
        n * n.saturating_sub(1) * self.qps_per_pair as u64
    }

    /// What the run will hold in memory, at most roughly (see [`MemoryEstimate`]).
    pub fn memory_estimate(&self) -> MemoryEstimate {
        let ends = self.qp_ends();
        let page = crate::memory::PAGE as u64;
        let max_msg = u64::from(self.max_msg_bytes);
        let target = (4 * max_msg).max(64).div_ceil(page) * page;
        let in_flight = self.ops.min(ends.saturating_mul(self.window as u64));
        MemoryEstimate {
            qp_ends: ends,
            fixed: ends.saturating_mul(MemoryEstimate::PER_QP_END) + MemoryEstimate::BASE,
            in_flight: in_flight.saturating_mul(max_msg + page),
            written: self
                .ops
                .saturating_mul((max_msg + 2 * page) * 2 / 3)
                .min(ends.saturating_mul(2 * target)),
        }
    }

    /// Sets the MTU and scales the largest message to 3.5 MTUs.
    pub fn with_mtu(self, mtu: Mtu) -> WorkloadConfig {
        WorkloadConfig {
            mtu,
            max_msg_bytes: 3 * mtu.bytes() + mtu.bytes() / 2,
            ..self
        }
    }
}

/// Memory a workload will need, estimated from its shape (bytes).
///
/// Buffers are sparse ([`crate::memory`]), so a QP end costs a fixed amount — engine state,
/// posted receives, the workload's bookkeeping — plus the pages its traffic touches: the
/// messages in flight (their scratch and receive pages) and the target pages WRITEs and
/// atomics changed, kept twice (the target and the model), at most the whole target region.
/// Measured on x86-64 (`/usr/bin/time -v softrdma sim`, MTU 1024): 6.6–6.9 KB per QP end
/// with one op, about 10 KB more per op; the estimate errs high (about 15 KB per op).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// QP ends.
    pub qp_ends: u64,
    /// What does not depend on the traffic.
    pub fixed: u64,
    /// Messages in flight at the busiest moment.
    pub in_flight: u64,
    /// Target and model pages changed by the traffic.
    pub written: u64,
}

impl MemoryEstimate {
    /// Bytes per QP end before any traffic (measured 6.6–6.9 KB, rounded up).
    pub const PER_QP_END: u64 = 8 * 1024;
    /// The process itself: code, fabric, allocator slack.
    pub const BASE: u64 = 16 << 20;

    /// The total in bytes.
    pub fn total(&self) -> u64 {
        self.fixed
            .saturating_add(self.in_flight)
            .saturating_add(self.written)
    }
}

/// The kinds of operation the workload posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    WriteImm,
    /// RDMA READ.
    Read,
    /// Compare and swap.
    CmpSwap,
    /// Fetch and add.
    FetchAdd,
}

impl OpKind {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Send => "SEND",
            OpKind::SendImm => "SEND_IMM",
            OpKind::Write => "WRITE",
            OpKind::WriteImm => "WRITE_IMM",
            OpKind::Read => "READ",
            OpKind::CmpSwap => "CMP_SWAP",
            OpKind::FetchAdd => "FETCH_ADD",
        }
    }
}

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

    fn poll_completions(&mut self, fabric: &mut Fabric) {
        let now = fabric.now();
        for r in 0..self.resources.len() {
            let res = self.resources[r];
            let mut wcs = std::mem::take(&mut self.wc_buf);
            wcs.clear();
            if let Ok(engine) = fabric.engine_mut(res.node) {
                let _ = engine.poll_cq(res.send_cq, usize::MAX, &mut wcs);
            }
            for wc in &wcs {
                self.on_send_completion(now, res.node, wc);
            }
            wcs.clear();
            if let Ok(engine) = fabric.engine_mut(res.node) {
                let _ = engine.poll_cq(res.recv_cq, usize::MAX, &mut wcs);
            }
            for wc in &wcs {
                self.on_recv_completion(fabric, now, res.node, wc);
            }
            self.wc_buf = wcs;
        }
    }

    fn on_send_completion(&mut self, now: Instant, node: NodeId, wc: &WorkCompletion) {
        self.report.ops_completed += 1;
        let Some(&e) = self.by_qp.get(&(node, wc.qp_num)) else {
            self.diverge(
                now,
                format!(
                    "{node}: send completion for unknown qp {:#x}: {wc:?}",
                    wc.qp_num
                ),
            );
            return;
        };
        let label = self.endpoints[e].label();
        let Some(op) = self.endpoints[e].outstanding.pop_front() else {
            self.diverge(
                now,
                format!("{label}: completion with nothing outstanding: {wc:?}"),
            );
            return;
        };
        self.endpoints[e].scratch_ring.free_to(op.alloc_end);
        if op.wr_id != wc.wr_id {
            self.diverge(
                now,
                format!(
                    "{label}: completion order: expected wr_id {} ({}), got {wc:?}",
                    op.wr_id,
                    op.kind.name()
                ),
            );
            return;
        }
        if wc.status != WcStatus::Success {
            if self.keep_error(wc.status) {
                self.report.error_completions.push(format!(
                    "at {} ns {label}: wr_id {} {} {} bytes -> {:?}",
                    now.as_nanos(),
                    op.wr_id,
                    op.kind.name(),
                    op.len,
                    wc.status
                ));
            }
            self.diverge_status(
                now,
                format!(
                    "{label}: wr_id {} ({}, {} bytes, posted at {} ns) completed with {:?} ({})",
                    op.wr_id,
                    op.kind.name(),
                    op.len,
                    op.posted_at.as_nanos(),
                    wc.status,
                    wc.status.as_str()
                ),
                wc.status == WcStatus::WrFlushErr,
            );
            return;
        }
        let want_opcode = match op.kind {
            OpKind::Send | OpKind::SendImm => WcOpcode::Send,
            OpKind::Write | OpKind::WriteImm => WcOpcode::RdmaWrite,
            OpKind::Read => WcOpcode::RdmaRead,
            OpKind::CmpSwap => WcOpcode::CompSwap,
            OpKind::FetchAdd => WcOpcode::FetchAdd,
        };
        if wc.opcode != want_opcode {
            self.diverge(
                now,
                format!(
                    "{label}: wr_id {} expected opcode {want_opcode:?}, got {wc:?}",
                    op.wr_id
                ),
            );
            return;
        }
        let ep = &self.endpoints[e];
        let got = ep.scratch.read(op.alloc.off, op.alloc.len);
        let mut problem = None;
        match op.kind {
            OpKind::Read => {
                if wc.byte_len as u64 != op.len {
                    problem = Some(format!("byte_len {} != {}", wc.byte_len, op.len));
                }
                let expect = op.expect_data.as_deref().unwrap_or(&[]);
                let landed = gather(&got, op.alloc.off, &op.pieces);
                if problem.is_none() {
                    problem = first_difference(expect, &landed).map(|i| {
                        format!(
                            "READ data differs at byte {i} of {}: expected {:#04x}, got {:#04x}",
                            op.len, expect[i], landed[i]
                        )
                    });
                }
                if problem.is_none() {
                    problem = check_gaps(&got, op.alloc.off, &op.pieces);
                }
            }
            OpKind::CmpSwap | OpKind::FetchAdd => {
                let landed = gather(&got, op.alloc.off, &op.pieces);
                let mut w = [0u8; 8];
                w.copy_from_slice(&landed[..8]);
                let orig = u64::from_ne_bytes(w);
                if Some(orig) != op.expect_orig {
                    problem = Some(format!(
                        "{} returned original {orig:#x}, model says {:#x} (applied twice or lost?)",
                        op.kind.name(),
                        op.expect_orig.unwrap_or(0)
                    ));
                }
            }
            _ => {}
        }
        if let Some(p) = problem {
            self.diverge(
                now,
                format!("{label}: wr_id {} ({}): {p}", op.wr_id, op.kind.name()),
            );
            return;
        }
        self.report.ops_ok += 1;
    }

    fn on_recv_completion(
        &mut self,
        fabric: &mut Fabric,
        now: Instant,
        node: NodeId,
        wc: &WorkCompletion,
    ) {
        self.report.recvs_completed += 1;
        let Some(&e) = self.by_qp.get(&(node, wc.qp_num)) else {
            self.diverge(
                now,
                format!(
                    "{node}: recv completion for unknown qp {:#x}: {wc:?}",
                    wc.qp_num
                ),
            );
            return;
        };
        let label = self.endpoints[e].label();
        let Some(posted) = self.endpoints[e].recvs.pop_front() else {
            self.diverge(
                now,
                format!("{label}: recv completion with no RECV posted: {wc:?}"),
            );
            return;
        };
        self.endpoints[e].recv_ring.free_to(posted.alloc_end);
        if wc.status != WcStatus::Success && self.keep_error(wc.status) {
            self.report.error_completions.push(format!(
                "at {} ns {label}: RECV wr_id {} -> {:?}",
                now.as_nanos(),
                posted.wr_id,
                wc.status
            ));
        }
        if wc.status == WcStatus::WrFlushErr {
            self.diverge(now, format!("{label}: RECV wr_id {} flushed", posted.wr_id));
            return;
        }
        let expected = self.endpoints[e].expected_recvs.pop_front();
        let result = self.check_recv(e, &posted, expected.as_ref(), wc);
        if let Err(p) = result {
            self.diverge(now, format!("{label}: RECV wr_id {}: {p}", posted.wr_id));
        }
        if !self.posting_stopped || self.endpoints[e].recvs.len() < self.cfg.recv_depth {
            self.post_one_recv(fabric, e);
        }
    }

    fn check_recv(
        &self,
        e: usize,
        posted: &PostedRecv,
        expected: Option<&ExpectedRecv>,
        wc: &WorkCompletion,
    ) -> Result<(), String> {
        let ep = &self.endpoints[e];
        let Some(x) = expected else {
            return Err(format!(
                "completion without a matching message from the peer: {wc:?}"
            ));
        };
        if wc.wr_id != posted.wr_id {
            return Err(format!(
                "receive order: expected wr_id {}, got {wc:?}",
                posted.wr_id
            ));
        }
        if wc.status != WcStatus::Success {
            return Err(format!(
                "status {:?} ({}) for the message of peer wr_id {}",
                wc.status,
                wc.status.as_str(),
                x.sender_wr_id
            ));
        }
        if wc.opcode != x.opcode {
            return Err(format!(
                "opcode {:?}, expected {:?} (peer wr_id {})",
                wc.opcode, x.opcode, x.sender_wr_id
            ));
        }
        if u64::from(wc.byte_len) != x.byte_len {
            return Err(format!(
                "byte_len {}, expected {} (peer wr_id {})",
                wc.byte_len, x.byte_len, x.sender_wr_id
            ));
        }
        if wc.imm_data != x.imm {
            return Err(format!(
                "imm {:?}, expected {:?} (peer wr_id {})",
                wc.imm_data, x.imm, x.sender_wr_id
            ));
        }
        if wc.src_qp != ep.peer_qpn {
            return Err(format!(
                "src_qp {:#x}, expected {:#x}",
                wc.src_qp, ep.peer_qpn
            ));
        }
        let got = ep.recv_buf.read(posted.alloc.off, posted.alloc.len);
        let landed = gather(&got, posted.alloc.off, &posted.pieces);
        let n = x.data.len().min(landed.len());
        if let Some(i) = first_difference(&x.data, &landed[..n]) {
            return Err(format!(
                "SEND data differs at byte {i} of {} (peer wr_id {}): expected {:#04x}, got {:#04x}",
                x.data.len(),
                x.sender_wr_id,
                x.data[i],
                landed[i]
            ));
        }
        if let Some(i) = landed[x.data.len().min(landed.len())..]
            .iter()
            .position(|&b| b != CANARY)
        {
            return Err(format!(
                "RECV buffer written past the message: byte {} of the SGL changed",
                x.data.len() + i
            ));
        }
        check_gaps(&got, posted.alloc.off, &posted.pieces).map_or(Ok(()), Err)
    }

    fn post_one_recv(&mut self, fabric: &mut Fabric, e: usize) {
        let max_msg = u64::from(self.cfg.max_msg_bytes);
        let nsge = self.rng.range_inclusive(1, 3.min(max_msg.max(1)));
        let total = max_msg + (nsge - 1) * SGE_GAP_BYTES;
        let ep = &mut self.endpoints[e];
        ep.recv_ring.release(&ep.recv_buf, &mut ep.recv_released);
        let Some((off, end)) = self.endpoints[e].recv_ring.alloc(total) else {
            return;
        };
        let pieces = split_pieces(&mut self.rng, off, max_msg, nsge);
        let ep = &self.endpoints[e];
        ep.recv_buf.write(off, &vec![CANARY; total as usize]);
        let sg_list = pieces
            .iter()
            .map(|p| Sge {
                addr: ep.recv_buf.iova + p.off,
                length: p.len as u32,
                lkey: ep.recv_buf.key,
            })
            .collect();
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let (node, qpn) = (ep.node, ep.qpn);
        let now = fabric.now();
        let res = fabric
            .engine_mut(node)
            .map_err(|e| e.to_string())
            .and_then(|eng| {
                eng.post_recv(qpn, RecvWr { wr_id, sg_list })
                    .map_err(|e| e.to_string())
            });
        match res {
            Ok(()) => self.endpoints[e].recvs.push_back(PostedRecv {
                wr_id,
                alloc: Piece { off, len: total },
                alloc_end: end,
                pieces,
            }),
            Err(err) => {
                self.endpoints[e].recv_ring.free_to(end);
                let label = self.endpoints[e].label();
                self.diverge(now, format!("{label}: post_recv refused: {err}"));
            }
        }
    }

    fn post_more(&mut self, fabric: &mut Fabric) {
        if self.posting_stopped {
            return;
        }
        // Bounded: at most one full window per endpoint per pump.
        let budget = self.endpoints.len() * self.cfg.window;
        for _ in 0..budget {
            if self.report.ops_posted >= self.cfg.ops {
                return;
            }
            let open: Vec<usize> = (0..self.endpoints.len())
                .filter(|&k| self.endpoints[k].outstanding.len() < self.cfg.window)
                .collect();
            let Some(&e) = self.rng.pick(&open) else {
                return;
            };
            if !self.post_one_op(fabric, e) {
                return;
            }
        }
    }

    /// Posts one random op from endpoint `e`; `false` if its buffers are momentarily full.
    fn post_one_op(&mut self, fabric: &mut Fabric, e: usize) -> bool {
        let now = fabric.now();
        let kind = self.cfg.mix.pick(&mut self.rng);
        let max_msg = u64::from(self.cfg.max_msg_bytes);
        let mtu = u64::from(self.cfg.mtu.bytes());
        let atomic = matches!(kind, OpKind::CmpSwap | OpKind::FetchAdd);
        let len = if atomic {
            8
        } else {
            match self.rng.below(10) {
                0 => 0,
                1 | 2 => self.rng.range_inclusive(1, 64.min(max_msg)),
                3 => mtu.min(max_msg),
                4 => (mtu * self.rng.range_inclusive(1, 3)).min(max_msg),
                _ => self.rng.range_inclusive(1, max_msg),
            }
        };
        let nsge = if atomic {
            1
        } else if len == 0 {
            0
        } else {
            self.rng.range_inclusive(1, 3.min(len))
        };
        let total = len + nsge.saturating_sub(1) * SGE_GAP_BYTES;
        let ep = &mut self.endpoints[e];
        ep.scratch_ring
            .release(&ep.scratch, &mut ep.scratch_released);
        let Some((off, end)) = self.endpoints[e].scratch_ring.alloc(total) else {
            return false;
        };
        let pieces = if nsge == 0 {
            Vec::new()
        } else {
            split_pieces(&mut self.rng, off, len, nsge)
        };
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        // Source data (SEND/WRITE) or canaries (READ/atomic landing zone).
        let mut payload = vec![0u8; len as usize];
        self.rng.fill_bytes(&mut payload);
        {
            let ep = &self.endpoints[e];
            ep.scratch.write(off, &vec![CANARY; total.max(1) as usize]);
            if !matches!(kind, OpKind::Read) && !atomic {
                let mut at = 0usize;
                for p in &pieces {
                    ep.scratch.write(p.off, &payload[at..at + p.len as usize]);
                    at += p.len as usize;
                }
            }
        }
        let imm = self.rng.next_u64() as u32;
        let ep = &self.endpoints[e];
        let sg_list: Vec<Sge> = pieces
            .iter()
            .map(|p| Sge {
                addr: ep.scratch.iova + p.off,
                length: p.len as u32,
                lkey: ep.scratch.key,
            })
            .collect();
        let data_len = ep.target_data_len;
        let remote_off = self.rng.below(data_len - len + 1);
        let remote_addr = ep.target.iova + remote_off;
        let rkey = ep.target.key;
        let counter = self.rng.below(COUNTERS_PER_ENDPOINT as u64) as usize;
        let counter_addr = ep.target.iova + ep.counter_offset(counter);
        let mut flags = SendFlags::SIGNALED;
        let mut expect_data = None;
        let mut expect_orig = None;
        let mut expected_recv = None;
        let op = match kind {
            OpKind::Send => SendOp::Send,
            OpKind::SendImm => SendOp::SendWithImm { imm },
            OpKind::Write => SendOp::RdmaWrite { remote_addr, rkey },
            OpKind::WriteImm => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            },
            OpKind::Read => SendOp::RdmaRead { remote_addr, rkey },
            OpKind::FetchAdd => SendOp::AtomicFetchAdd {
                remote_addr: counter_addr,
                rkey,
                add: self.rng.next_u64() >> self.rng.below(64),
            },
            OpKind::CmpSwap => {
                let cur = ep.counters[counter];
                let compare = if self.rng.chance(0.7) {
                    cur
                } else {
                    cur ^ (1 << self.rng.below(64))
                };
                SendOp::AtomicCmpSwap {
                    remote_addr: counter_addr,
                    rkey,
                    compare,
                    swap: self.rng.next_u64(),
                }
            }
        };
        match kind {
            OpKind::Write | OpKind::WriteImm => {
                // A retransmitted READ re-reads memory: order this WRITE after any READ still
                // outstanding that overlaps it.
                let lo = remote_off;
                let hi = remote_off + len;
                let overlaps = ep.outstanding.iter().any(|o| {
                    o.kind == OpKind::Read && o.remote_off < hi && lo < o.remote_off + o.len
                });
                if overlaps {
                    flags = flags | SendFlags::FENCE;
                }
            }
            _ => {}
        }
        let ep = &mut self.endpoints[e];
        match (kind, op) {
            (OpKind::Write | OpKind::WriteImm, _) => {
                ep.model.write(remote_off as usize, &payload);
            }
            (OpKind::Read, _) => {
                let mut v = vec![0u8; len as usize];
                ep.model.read(remote_off as usize, &mut v);
                expect_data = Some(v);
            }
            (OpKind::FetchAdd, SendOp::AtomicFetchAdd { add, .. }) => {
                expect_orig = Some(ep.counters[counter]);
                ep.counters[counter] = ep.counters[counter].wrapping_add(add);
            }
            (OpKind::CmpSwap, SendOp::AtomicCmpSwap { compare, swap, .. }) => {
                expect_orig = Some(ep.counters[counter]);
                if ep.counters[counter] == compare {
                    ep.counters[counter] = swap;
                }
            }
            _ => {}
        }
        if atomic {
            let off = ep.counter_offset(counter) as usize;
            ep.model.write(off, &ep.counters[counter].to_ne_bytes());
        }
        match kind {
            OpKind::Send | OpKind::SendImm => {
                expected_recv = Some(ExpectedRecv {
                    opcode: WcOpcode::Recv,
                    data: payload.clone(),
                    byte_len: len,
                    imm: (kind == OpKind::SendImm).then_some(imm),
                    sender_wr_id: wr_id,
                })
            }
            OpKind::WriteImm => {
                expected_recv = Some(ExpectedRecv {
                    opcode: WcOpcode::RecvRdmaWithImm,
                    data: Vec::new(),
                    byte_len: len,
                    imm: Some(imm),
                    sender_wr_id: wr_id,
                })
            }
            _ => {}
        }
        let (node, qpn, peer) = (ep.node, ep.qpn, ep.peer);
        let wr = SendWr {
            wr_id,
            op,
            sg_list,
            flags,
            inline_data: None,
            ud: None,
        };
        let res = fabric
            .engine_mut(node)
            .map_err(|e| e.to_string())
            .and_then(|eng| eng.post_send(now, qpn, wr).map_err(|e| e.to_string()));
        if let Err(err) = res {
            self.endpoints[e].scratch_ring.free_to(end);
            let label = self.endpoints[e].label();
            self.diverge(
                now,
                format!("{label}: post_send of {} refused: {err}", kind.name()),
            );
            // Count it as posted so the run terminates; it can never complete.
            self.report.ops_posted += 1;
            return false;
        }
        self.report.ops_posted += 1;
        *self.report.posted_by_kind.entry(kind.name()).or_insert(0) += 1;
        self.endpoints[e].outstanding.push_back(PendingOp {
            wr_id,
            kind,
            len,
            alloc: Piece {
                off,
                len: total.max(1),
            },
            alloc_end: end,
            pieces,
            remote_off,
            expect_data,
            expect_orig,
            posted_at: now,
        });
        if let Some(x) = expected_recv {
            self.endpoints[peer].expected_recvs.push_back(x);
        }
        true
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

/// Splits `len` bytes starting at `off` into `n` pieces separated by [`SGE_GAP_BYTES`].
fn split_pieces(rng: &mut SimRng, off: u64, len: u64, n: u64) -> Vec<Piece> {
    let n = n.max(1).min(len.max(1));
    // n-1 distinct cut points in 1..len.
    let mut cuts: Vec<u64> = Vec::new();
    while (cuts.len() as u64) < n - 1 {
        let c = rng.range_inclusive(1, len - 1);
        if !cuts.contains(&c) {
            cuts.push(c);
        }
    }
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut prev = 0;
    let mut at = off;
    for c in cuts.into_iter().chain(std::iter::once(len)) {
        pieces.push(Piece {
            off: at,
            len: c - prev,
        });
        at += c - prev + SGE_GAP_BYTES;
        prev = c;
    }
    pieces
}

/// Concatenates the bytes of `pieces` from `buf`, which holds the allocation starting at
/// buffer offset `base`.
fn gather(buf: &[u8], base: u64, pieces: &[Piece]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in pieces {
        let s = (p.off - base) as usize;
        v.extend_from_slice(&buf[s..s + p.len as usize]);
    }
    v
}

/// Checks that the gaps between pieces still hold [`CANARY`].
fn check_gaps(buf: &[u8], base: u64, pieces: &[Piece]) -> Option<String> {
    for w in pieces.windows(2) {
        let s = (w[0].off + w[0].len - base) as usize;
        let t = (w[1].off - base) as usize;
        if let Some(i) = buf[s..t].iter().position(|&b| b != CANARY) {
            return Some(format!(
                "wrote into the gap after an SGE (byte {} of the gap)",
                i
            ));
        }
    }
    None
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

    #[test]
    fn test_split_pieces() {
        let mut rng = SimRng::new(5);
        for len in 1..50u64 {
            for n in 1..=3u64 {
                let p = split_pieces(&mut rng, 100, len, n);
                assert_eq!(p.iter().map(|p| p.len).sum::<u64>(), len);
                assert!(p.iter().all(|p| p.len > 0));
                assert_eq!(p[0].off, 100);
            }
        }
    }
}
