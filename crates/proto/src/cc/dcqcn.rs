//! DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments", SIGCOMM 2015), what ConnectX NICs run per QP: a CNP cuts the rate in
//! proportion to α, the running estimate of how congested the path is; without CNPs α
//! decays and the rate climbs back, first halfway to the rate before the cut (fast recovery),
//! then by steps that grow (additive, then hyper increase). Increase events come from a
//! timer and from a byte counter, so a sender recovers whether it sends much or little.
//!
//! Rates are `f64` bits per second; the arithmetic is the paper's, step for step, and
//! deterministic (no clocks read, time is passed in).

use core::time::Duration;

use super::algorithm::CongestionControl;
use crate::time::Instant;

/// DCQCN's knobs. [`DcqcnParams::paper`] has the published defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DcqcnParams {
    /// The rate a QP starts at and never exceeds (the NIC's line rate), bits per second.
    pub line_rate_bps: u64,
    /// The floor a rate cut stops at, bits per second.
    pub min_rate_bps: u64,
    /// Gain of the α estimate: `g = 1 / g_denominator` (256).
    pub g_denominator: u32,
    /// α decays by `(1 - g)` after each of these without a CNP (`K`, 55 µs).
    pub alpha_timer: Duration,
    /// A rate-increase event every this long without a CNP (`T`, 55 µs).
    pub increase_timer: Duration,
    /// A rate-increase event every this many bytes sent (`B`, 10 MB).
    pub byte_counter: u64,
    /// Increase events of fast recovery before additive increase (`F`, 5).
    pub fast_recovery_steps: u32,
    /// Additive increase step, bits per second (`R_AI`, 40 Mb/s).
    pub ai_rate_bps: u64,
    /// Hyper increase step, bits per second (`R_HAI`, 100 Mb/s), times how far both stages
    /// are past `F`.
    pub hai_rate_bps: u64,
}

impl DcqcnParams {
    /// The defaults of the DCQCN paper for a link of `line_rate_bps`.
    pub fn paper(line_rate_bps: u64) -> DcqcnParams {
        DcqcnParams {
            line_rate_bps,
            min_rate_bps: 10_000_000,
            g_denominator: 256,
            alpha_timer: Duration::from_micros(55),
            increase_timer: Duration::from_micros(55),
            byte_counter: 10 * 1024 * 1024,
            fast_recovery_steps: 5,
            ai_rate_bps: 40_000_000,
            hai_rate_bps: 100_000_000,
        }
    }
}

/// One QP's DCQCN state.
#[derive(Debug, Clone, PartialEq)]
pub struct Dcqcn {
    p: DcqcnParams,
    /// Current rate `R_C`.
    rc: f64,
    /// Target rate `R_T`: where fast recovery heads.
    rt: f64,
    alpha: f64,
    /// Bytes sent since the last byte-counter event.
    bytes: u64,
    /// Increase events from the byte counter and from the timer since the last cut.
    byte_stage: u32,
    timer_stage: u32,
    /// A CNP arrived since the last α update.
    cnp_since_alpha: bool,
    next_alpha: Option<Instant>,
    next_increase: Option<Instant>,
    cuts: u64,
}

impl Dcqcn {
    /// A QP at line rate with α = 1 (the paper's start: the first CNP halves the rate).
    pub fn new(p: DcqcnParams) -> Dcqcn {
        Dcqcn {
            rc: p.line_rate_bps as f64,
            rt: p.line_rate_bps as f64,
            alpha: 1.0,
            bytes: 0,
            byte_stage: 0,
            timer_stage: 0,
            cnp_since_alpha: false,
            next_alpha: None,
            next_increase: None,
            cuts: 0,
            p,
        }
    }

    /// The congestion estimate α (0..=1).
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// The target rate, bits per second.
    pub fn target_rate_bps(&self) -> f64 {
        self.rt
    }

    /// One increase event: fast recovery while both stages are below `F`, hyper increase
    /// once both passed it, additive increase in between.
    fn line_rate(&self) -> f64 {
        self.p.line_rate_bps as f64
    }

    fn g(&self) -> f64 {
        1.0 / f64::from(self.p.g_denominator.max(1))
    }

    fn increase(&mut self) {
        let f = self.p.fast_recovery_steps;
        let (hi, lo) = (
            self.byte_stage.max(self.timer_stage),
            self.byte_stage.min(self.timer_stage),
        );
        if hi >= f {
            if lo > f {
                self.rt += f64::from(lo - f) * self.p.hai_rate_bps as f64;
            } else {
                self.rt += self.p.ai_rate_bps as f64;
            }
        }
        self.rt = self.rt.min(self.line_rate());
        self.rc = ((self.rt + self.rc) / 2.0).min(self.line_rate());
        if self.rc >= self.line_rate() {
            // Back at line rate: nothing left to recover.
            self.next_increase = None;
        }
    }

    fn recovering(&self) -> bool {
        self.rc < self.line_rate()
    }
}

impl CongestionControl for Dcqcn {
    fn on_congestion_notified(&mut self, now: Instant) {
        self.cuts += 1;
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).max(self.p.min_rate_bps as f64);
        let g = self.g();
        self.alpha = (1.0 - g) * self.alpha + g;
        self.cnp_since_alpha = true;
        self.bytes = 0;
        self.byte_stage = 0;
        self.timer_stage = 0;
        self.next_alpha = Some(now + self.p.alpha_timer);
        self.next_increase = Some(now + self.p.increase_timer);
    }

    fn on_sent(&mut self, _now: Instant, bytes: usize) {
        if !self.recovering() {
            return;
        }
        self.bytes += bytes as u64;
        while self.bytes >= self.p.byte_counter && self.recovering() {
            self.bytes -= self.p.byte_counter;
            self.byte_stage += 1;
            self.increase();
        }
    }

    fn on_timeout(&mut self, now: Instant) {
        if let Some(at) = self.next_alpha.filter(|&at| at <= now) {
            if !std::mem::take(&mut self.cnp_since_alpha) {
                self.alpha *= 1.0 - self.g();
            }
            // α keeps decaying while it matters; below 2^-20 it is as good as 0.
            self.next_alpha = (self.alpha > 1e-6).then_some(at + self.p.alpha_timer);
        }
        if let Some(at) = self.next_increase.filter(|&at| at <= now) {
            self.timer_stage += 1;
            self.next_increase = Some(at + self.p.increase_timer);
            self.increase();
        }
    }

    fn next_timeout(&self) -> Option<Instant> {
        [self.next_alpha, self.next_increase]
            .into_iter()
            .flatten()
            .min()
    }

    fn rate_bps(&self) -> f64 {
        self.rc
    }

    fn rate_cuts(&self) -> u64 {
        self.cuts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: f64 = 1.0 / 256.0;

    fn at_us(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    fn params() -> DcqcnParams {
        DcqcnParams::paper(40_000_000_000)
    }

    #[test]
    fn a_cnp_cuts_by_half_alpha_and_raises_alpha() {
        let mut d = Dcqcn::new(params());
        d.on_congestion_notified(at_us(0));
        // α = 1: the rate halves; α stays (1 - g) + g = 1.
        assert_eq!(d.rate_bps(), 20e9);
        assert_eq!(d.target_rate_bps(), 40e9);
        assert_eq!(d.alpha(), 1.0);
        d.on_congestion_notified(at_us(10));
        assert_eq!(d.rate_bps(), 10e9);
        assert_eq!(d.target_rate_bps(), 20e9);
        assert_eq!(d.rate_cuts(), 2);
    }

    #[test]
    fn alpha_decays_without_cnps() {
        let mut d = Dcqcn::new(params());
        d.on_congestion_notified(at_us(0));
        // The first α tick follows the CNP itself: no decay then.
        d.on_timeout(at_us(55));
        assert_eq!(d.alpha(), 1.0);
        d.on_timeout(at_us(110));
        assert_eq!(d.alpha(), 1.0 - G);
        d.on_timeout(at_us(165));
        assert_eq!(d.alpha(), (1.0 - G) * (1.0 - G));
        // A cut now takes (1 - G)^2 / 2 off.
        let before = d.rate_bps();
        let a = d.alpha();
        d.on_congestion_notified(at_us(170));
        assert_eq!(d.rate_bps(), before * (1.0 - a / 2.0));
        assert_eq!(d.alpha(), (1.0 - G) * a + G);
    }

    #[test]
    fn timer_recovery_fast_then_additive_then_hyper() {
        let mut d = Dcqcn::new(params());
        d.on_congestion_notified(at_us(0));
        d.on_congestion_notified(at_us(1));
        // R_C = 10G, R_T = 20G. Fast recovery: five halvings of the gap to R_T.
        let mut rc = 10e9;
        for k in 1..=4u64 {
            d.on_timeout(at_us(1 + 55 * k));
            rc = (20e9 + rc) / 2.0;
            assert_eq!(d.rate_bps(), rc, "fast recovery step {k}");
            assert_eq!(d.target_rate_bps(), 20e9);
        }
        // Timer stage 5 = F: additive increase (the byte stage is still 0).
        d.on_timeout(at_us(1 + 55 * 5));
        let mut rt = 20e9 + 40e6;
        rc = (rt + rc) / 2.0;
        assert_eq!(d.target_rate_bps(), rt);
        assert_eq!(d.rate_bps(), rc);
        // Bytes push the byte stage past F too: then hyper increase by (min stage - F) R_HAI.
        for _ in 0..7 {
            d.on_sent(at_us(300), 10 * 1024 * 1024);
        }
        // Seven byte-counter events, all additive: the byte stage passes F but the timer
        // stage (5) is not above it...
        for _ in 0..7 {
            rt += 40e6;
            rc = (rt + rc) / 2.0;
        }
        assert_eq!(d.target_rate_bps(), rt);
        assert!((d.rate_bps() - rc).abs() < 1.0);
        // ...and with timer stage 6 and byte stage 7, min = 6 > F: hyper, one R_HAI.
        d.on_timeout(at_us(1 + 55 * 6));
        rt += 100e6;
        rc = (rt + rc) / 2.0;
        assert_eq!(d.target_rate_bps(), rt);
        assert!((d.rate_bps() - rc).abs() < 1.0);
    }

    #[test]
    fn recovery_stops_at_line_rate_and_the_floor_holds() {
        let mut p = params();
        p.min_rate_bps = 5_000_000_000;
        let mut d = Dcqcn::new(p);
        for us in 0..10 {
            d.on_congestion_notified(at_us(us));
        }
        assert_eq!(d.rate_bps(), 5e9);
        let mut t = 10;
        while d.next_timeout().is_some() && t < 1_000_000 {
            t += 55;
            d.on_timeout(at_us(t));
        }
        assert_eq!(d.rate_bps(), 40e9);
        assert_eq!(
            d.next_timeout(),
            None,
            "idle once recovered and α negligible"
        );
    }
}
