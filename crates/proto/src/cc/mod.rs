//! Congestion control for RoCEv2, as RoCE NICs run it (Annex A17): switches mark ECN
//! Congestion Experienced on packets sent ECT; the receiver of a marked packet — the
//! *notification point* — answers with a Congestion Notification Packet (BTH opcode 0x81,
//! BECN set, to the sending QP), at most one per QP per interval; the sender — the *reaction
//! point* — cuts that QP's rate and paces its packets, recovering while no CNPs come.
//!
//! The engine stays sans-IO: a QP's pacer says *when* its next request packet may leave,
//! and the engine arms a timer for it. The algorithm sits behind [`CongestionControl`]:
//! [`dcqcn`] (ECN marks and CNPs) and [`timely`] (round trips, no switch support). A peer that ignores CNPs (Linux rxe) or never sends them changes
//! nothing: marks and CNPs are advice, never required for correctness.

pub mod algorithm;
pub mod dcqcn;
pub mod timely;

use core::time::Duration;

use crate::time::Instant;
pub use algorithm::CongestionControl;
pub use dcqcn::{Dcqcn, DcqcnParams};
pub use timely::{Timely, TimelyParams};

/// Which reaction-point algorithm QPs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcAlgorithm {
    /// DCQCN with these parameters.
    Dcqcn(DcqcnParams),
    /// TIMELY with these parameters.
    Timely(TimelyParams),
}

impl CcAlgorithm {
    /// A fresh controller for one QP.
    pub fn controller(&self) -> Box<dyn CongestionControl> {
        match self {
            CcAlgorithm::Dcqcn(p) => Box::new(Dcqcn::new(*p)),
            CcAlgorithm::Timely(p) => Box::new(Timely::new(*p)),
        }
    }
}

/// An engine's congestion control: off by default (no pacing, no ECT marks, no CNPs), as
/// Linux rxe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcConfig {
    /// The reaction point: connected QPs mark their requests ECT(0), are paced at the rate
    /// the algorithm allows, and react to CNPs. `None`: they send at will and ignore CNPs.
    pub algorithm: Option<CcAlgorithm>,
    /// The notification point: answer a CE-marked packet with a CNP to the sending QP.
    pub notify: bool,
    /// At most one CNP per QP per this interval (50 µs, as ConnectX's default).
    pub cnp_interval: Duration,
    /// The pacer's burst: a QP that sent less than its rate allows may catch up by this many
    /// bytes at once (a token bucket, as NIC rate limiters have), so that pacing costs no
    /// timer per packet on a host whose timers are coarser than a packet's time on the wire.
    pub pace_burst_bytes: u32,
}

impl CcConfig {
    /// Congestion control off.
    pub const OFF: CcConfig = CcConfig {
        algorithm: None,
        notify: false,
        cnp_interval: Duration::from_micros(50),
        pace_burst_bytes: 16 * 1024,
    };

    /// DCQCN with the paper's parameters for `line_rate_bps`, and the notification point on.
    pub fn dcqcn(line_rate_bps: u64) -> CcConfig {
        CcConfig {
            algorithm: Some(CcAlgorithm::Dcqcn(DcqcnParams::paper(line_rate_bps))),
            notify: true,
            ..CcConfig::OFF
        }
    }
}

impl Default for CcConfig {
    fn default() -> CcConfig {
        CcConfig::OFF
    }
}

/// ECN codepoint ECT(0), which a reaction point's packets carry.
pub const ECT0: u8 = 0b10;
/// ECN codepoint Congestion Experienced.
pub const CE: u8 = 0b11;
/// A pause of the pacer at least this long makes the packet before it ask for an ACK: the
/// retransmit timer must not take a slow QP's silence for a loss. (Shorter pauses, at rates
/// near the line rate, would only multiply the ACKs.)
pub const ACK_BEFORE_PAUSE: Duration = Duration::from_micros(50);

/// Bytes of IPv4 and UDP header in front of a RoCEv2 payload: counted when pacing.
pub const IP_UDP_HEADER_BYTES: usize = 28;

/// A connected QP's reaction point: its algorithm and pacer.
///
/// The pacer is a token bucket in bytes: it fills at the allowed rate up to the burst, each
/// packet takes its size, and a packet may leave while the bucket is not in debt. A rate
/// change applies from the moment it happens (the bucket is brought up to date first), so a
/// QP that was slow does not carry its slow past into a faster future.
#[derive(Debug)]
pub(crate) struct ReactionPoint {
    pub ctl: Box<dyn CongestionControl>,
    tokens: f64,
    updated: Instant,
    burst: f64,
}

impl ReactionPoint {
    pub(crate) fn new(alg: &CcAlgorithm, burst_bytes: u32) -> ReactionPoint {
        ReactionPoint {
            ctl: alg.controller(),
            tokens: f64::from(burst_bytes),
            updated: Instant::ZERO,
            burst: f64::from(burst_bytes),
        }
    }

    fn bytes_per_ns(&self) -> f64 {
        self.ctl.rate_bps().max(1.0) / 8e9
    }

    /// The bucket at `now`, without changing it.
    fn tokens_at(&self, now: Instant) -> f64 {
        let dt = now.saturating_duration_since(self.updated).as_nanos() as f64;
        (self.tokens + dt * self.bytes_per_ns()).min(self.burst)
    }

    /// Brings the bucket up to `now` at the rate in force until now (call before the rate
    /// changes).
    pub(crate) fn refill(&mut self, now: Instant) {
        self.tokens = self.tokens_at(now);
        self.updated = self.updated.max(now);
    }

    /// When the next packet may leave.
    pub(crate) fn next_send(&self) -> Instant {
        if self.tokens >= 0.0 {
            return self.updated;
        }
        let wait_ns = (-self.tokens / self.bytes_per_ns()).ceil() as u64;
        self.updated + Duration::from_nanos(wait_ns)
    }

    /// Whether a packet may leave at `now`.
    pub(crate) fn may_send(&self, now: Instant) -> bool {
        self.tokens_at(now) >= 0.0
    }

    /// How long the next packet would wait after one of `len` bytes leaves at `now`.
    pub(crate) fn wait_after(&self, now: Instant, len: usize) -> Duration {
        let debt = ((len + IP_UDP_HEADER_BYTES) as f64) - self.tokens_at(now);
        Duration::from_nanos((debt.max(0.0) / self.bytes_per_ns()) as u64)
    }

    /// A packet of `len` RoCEv2 bytes left at `now`.
    pub(crate) fn on_sent(&mut self, now: Instant, len: usize) {
        let wire = len + IP_UDP_HEADER_BYTES;
        self.refill(now);
        self.tokens -= wire as f64;
        self.ctl.on_sent(now, wire);
    }
}

/// A connected QP's notification point: whether a CNP is due, and when the last one left.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NotificationPoint {
    pub pending: bool,
    pub last: Option<Instant>,
}

impl NotificationPoint {
    /// A CE-marked packet arrived at `now`: a CNP is due unless one left within `interval`.
    pub(crate) fn on_ce(&mut self, now: Instant, interval: Duration) {
        if self.last.map_or(true, |l| now >= l + interval) {
            self.pending = true;
        }
    }

    /// The CNP left at `now`.
    pub(crate) fn sent(&mut self, now: Instant) {
        self.pending = false;
        self.last = Some(now);
    }
}
