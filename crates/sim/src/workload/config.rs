//! What a workload is asked to do: its size, shape, operation mix and timing, and the memory
//! that shape will need.

use softrdma_proto::Mtu;

use crate::rng::SimRng;

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
    pub(super) fn pick(&self, rng: &mut SimRng) -> OpKind {
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
