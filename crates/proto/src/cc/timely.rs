//! TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter",
//! SIGCOMM 2015): a reaction point that needs no switch support. It reads the round trips the
//! requester measures anyway (an AckReq'd packet to its ACK) and steers the rate by their
//! gradient: rising round trips mean a growing queue, so the rate falls in proportion to the
//! rise; falling or flat ones let it climb additively (five times faster after five such
//! samples in a row). Below `t_low` the rate climbs whatever the gradient, above `t_high` it
//! falls whatever the gradient. CNPs are ignored: TIMELY runs where switches do not mark.

use core::time::Duration;

use super::algorithm::CongestionControl;
use crate::time::Instant;

/// TIMELY's knobs. [`TimelyParams::paper`] has the published defaults, with the RTT
/// thresholds scaled to the network's base round trip (the paper's are for its fabric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimelyParams {
    /// The rate a QP starts at and never exceeds, bits per second.
    pub line_rate_bps: u64,
    /// The floor of the rate, bits per second.
    pub min_rate_bps: u64,
    /// Below this round trip the rate always climbs.
    pub t_low: Duration,
    /// Above this round trip the rate always falls.
    pub t_high: Duration,
    /// The propagation round trip the gradient is normalised by.
    pub min_rtt: Duration,
    /// Additive step, bits per second (δ, 10 Mb/s).
    pub additive_bps: u64,
    /// Multiplicative decrease factor β, in thousandths (800 = 0.8).
    pub beta_milli: u32,
    /// EWMA weight of a new RTT difference α, in thousandths (875 = 0.875).
    pub ewma_milli: u32,
    /// Falling-gradient samples in a row after which the step is five times larger (N).
    pub hai_after: u32,
}

impl TimelyParams {
    /// The paper's defaults (δ 10 Mb/s, β 0.8, α 0.875, N 5) for a network whose base round
    /// trip is `min_rtt`: `t_low` 5 and `t_high` 50 base round trips.
    pub fn paper(line_rate_bps: u64, min_rtt: Duration) -> TimelyParams {
        TimelyParams {
            line_rate_bps,
            min_rate_bps: 10_000_000,
            t_low: min_rtt * 5,
            t_high: min_rtt * 50,
            min_rtt,
            additive_bps: 10_000_000,
            beta_milli: 800,
            ewma_milli: 875,
            hai_after: 5,
        }
    }
}

/// One QP's TIMELY state.
#[derive(Debug, Clone, PartialEq)]
pub struct Timely {
    p: TimelyParams,
    rate: f64,
    prev_rtt: Option<f64>,
    rtt_diff: f64,
    falling: u32,
    cuts: u64,
}

impl Timely {
    /// A QP at line rate.
    pub fn new(p: TimelyParams) -> Timely {
        Timely {
            rate: p.line_rate_bps as f64,
            prev_rtt: None,
            rtt_diff: 0.0,
            falling: 0,
            cuts: 0,
            p,
        }
    }

    fn clamp(&mut self) {
        self.rate = self
            .rate
            .clamp(self.p.min_rate_bps as f64, self.p.line_rate_bps as f64);
    }
}

impl CongestionControl for Timely {
    fn on_congestion_notified(&mut self, _now: Instant) {}

    fn on_sent(&mut self, _now: Instant, _bytes: usize) {}

    fn on_rtt_sample(&mut self, _now: Instant, rtt: Duration) {
        let new = rtt.as_nanos() as f64;
        let Some(prev) = self.prev_rtt.replace(new) else {
            return;
        };
        let alpha = f64::from(self.p.ewma_milli) / 1000.0;
        let beta = f64::from(self.p.beta_milli) / 1000.0;
        self.rtt_diff = (1.0 - alpha) * self.rtt_diff + alpha * (new - prev);
        let gradient = self.rtt_diff / (self.p.min_rtt.as_nanos() as f64).max(1.0);
        let delta = self.p.additive_bps as f64;
        let (t_low, t_high) = (
            self.p.t_low.as_nanos() as f64,
            self.p.t_high.as_nanos() as f64,
        );
        if new < t_low {
            self.rate += delta;
        } else if new > t_high {
            self.rate *= 1.0 - beta * (1.0 - t_high / new);
            self.cuts += 1;
        } else if gradient <= 0.0 {
            self.falling += 1;
            let n = if self.falling >= self.p.hai_after {
                5.0
            } else {
                1.0
            };
            self.rate += n * delta;
        } else {
            self.falling = 0;
            self.rate *= 1.0 - beta * gradient.min(1.0);
            self.cuts += 1;
        }
        self.clamp();
    }

    fn on_timeout(&mut self, _now: Instant) {}

    fn next_timeout(&self) -> Option<Instant> {
        None
    }

    fn rate_bps(&self) -> f64 {
        self.rate
    }

    fn rate_cuts(&self) -> u64 {
        self.cuts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn timely() -> Timely {
        // Base RTT 10 µs: t_low 50 µs, t_high 500 µs.
        Timely::new(TimelyParams::paper(10_000_000_000, us(10)))
    }

    #[test]
    fn rising_round_trips_cut_in_proportion_to_the_gradient() {
        let mut t = timely();
        let now = Instant::ZERO;
        t.on_rtt_sample(now, us(60)); // the first sample only sets the reference
        assert_eq!(t.rate_bps(), 10e9);
        t.on_rtt_sample(now, us(62));
        // diff = 0.875 * 2000 ns = 1750; gradient = 1750 / 10000 = 0.175; cut by 0.8 * 0.175.
        assert_eq!(t.rate_bps(), 10e9 * (1.0 - 0.8 * 0.175));
        assert_eq!(t.rate_cuts(), 1);
    }

    #[test]
    fn falling_round_trips_climb_additively_then_five_times_faster() {
        let mut t = timely();
        t.rate = 5e9;
        let now = Instant::ZERO;
        t.on_rtt_sample(now, us(100));
        for k in 1..=6u64 {
            t.on_rtt_sample(now, us(100 - k));
        }
        // Four steps of 10 Mb/s, then (from the fifth falling sample on) two of 50 Mb/s.
        assert_eq!(t.rate_bps(), 5e9 + 4.0 * 10e6 + 2.0 * 50e6);
    }

    #[test]
    fn thresholds_override_the_gradient() {
        let mut t = timely();
        t.rate = 5e9;
        let now = Instant::ZERO;
        t.on_rtt_sample(now, us(40));
        t.on_rtt_sample(now, us(45)); // rising, but below t_low: climb
        assert_eq!(t.rate_bps(), 5e9 + 10e6);
        t.on_rtt_sample(now, us(1000)); // above t_high: cut by 0.8 (1 - 500/1000) = 0.4
        assert!((t.rate_bps() - (5e9 + 10e6) * 0.6).abs() < 1.0);
        assert_eq!(t.rate_cuts(), 1);
    }
}
