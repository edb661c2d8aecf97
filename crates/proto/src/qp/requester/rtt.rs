//! The requester's round-trip estimate and the retransmit timeout it yields.
//!
//! IBTA gives the QP one number, the local ACK timeout T = 4.096 µs × 2^timeout, and lets the
//! requester's timer fire anywhere between T and 4T (IBTA 9.7.6.1.3). A fixed T is either too
//! long for a quick path, so a tail loss stalls the QP, or too short for a loaded one, where
//! queueing delay outgrows it and spurious retransmissions feed the very queue that delayed
//! the ACKs. softrdma measures the round trip as TCP does (RFC 6298: smoothed RTT and its
//! variation, one sample in flight, none from retransmitted packets — Karn's rule) and arms
//! the timer at `srtt + 4 × rttvar`, held inside [T, 4T].

use softrdma_wire::Psn;

use crate::time::{Duration, Instant};

/// Smoothed round-trip time of one QP, from acknowledged request packets.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The packet being timed: its PSN and when it left.
    sample: Option<(Psn, Instant)>,
    /// A tail probe went while the sample was timed (see [`RttEstimator::on_probe`]).
    sample_probed: bool,
}

impl RttEstimator {
    /// Times `psn`, sent for the first time at `now`, unless another packet is being timed.
    pub(crate) fn on_send(&mut self, psn: Psn, now: Instant) {
        if self.sample.is_none() {
            self.sample = Some((psn, now));
            self.sample_probed = false;
        }
    }

    /// Everything before `unacked` is acknowledged at `now`: takes the sample if it is, and
    /// returns it — unless a tail probe went while it was timed. Such a sample still enters
    /// the estimate: it is timed from the first transmission, so the probe can only make it
    /// longer, and without it a path slower than the probe's delay would never be measured.
    /// But when the probe repaired a loss, the sample holds the probe's delay: it is no
    /// measure of queueing, and the device budget and congestion control must not see it
    /// (one recovered tail loss halved the budget at local ACK timeout 11).
    pub(crate) fn on_ack(&mut self, unacked: Psn, now: Instant) -> Option<Duration> {
        let (psn, sent) = self.sample?;
        if !psn.is_before(unacked) {
            return None;
        }
        self.sample = None;
        let probed = std::mem::take(&mut self.sample_probed);
        let r = now.saturating_duration_since(sent);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let err = if r > srtt { r - srtt } else { srtt - r };
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
        (!probed).then_some(r)
    }

    /// A retransmission is under way: an ACK can no longer tell which transmission it answers.
    pub(crate) fn on_retransmit(&mut self) {
        self.sample = None;
    }

    /// A tail probe resent a packet: the sample stays (see [`RttEstimator::on_ack`]).
    pub(crate) fn on_probe(&mut self) {
        self.sample_probed = self.sample.is_some();
    }

    /// The retransmit timeout for local ACK timeout `t` (`None`: timeout 0, infinite), after
    /// `backoff` timeouts in a row without progress: each doubles it (RFC 6298's back-off), so
    /// a path that is congested or losing in bursts gets longer to recover between retries,
    /// always within [T, 4T].
    pub(crate) fn rto(&self, t: Option<Duration>, backoff: u8) -> Option<Duration> {
        let t = t?;
        let estimate = match self.srtt {
            Some(srtt) => srtt + self.rttvar * 4,
            None => t,
        };
        let rto = estimate.clamp(t, t * 4);
        Some((rto * (1u32 << backoff.min(2))).min(t * 4))
    }

    /// The smoothed round trip, once measured.
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    #[test]
    fn rto_follows_the_round_trip_within_t_and_4t() {
        let t = Some(Duration::from_micros(100));
        let mut e = RttEstimator::default();
        assert_eq!(e.rto(t, 0), t, "unmeasured: T");
        e.on_send(Psn::new(5), at(0));
        e.on_send(Psn::new(6), at(1)); // one sample at a time
        e.on_ack(Psn::new(5), at(50)); // does not cover PSN 5
        assert_eq!(e.srtt(), None);
        e.on_ack(Psn::new(6), at(300));
        assert_eq!(e.srtt(), Some(Duration::from_micros(300)));
        // 300 + 4 × 150 = 900 µs, above 4T.
        assert_eq!(e.rto(t, 0), Some(Duration::from_micros(400)));
        for i in 0..50 {
            e.on_send(Psn::new(10 + i), at(1000 * u64::from(i + 1)));
            e.on_ack(Psn::new(11 + i), at(1000 * u64::from(i + 1) + 20));
        }
        assert_eq!(e.rto(t, 0), t, "a quick path: T, never below");
        assert_eq!(e.rto(None, 0), None);
        // Each timeout without progress doubles it, up to 4T.
        assert_eq!(e.rto(t, 1), Some(Duration::from_micros(200)));
        assert_eq!(e.rto(t, 2), Some(Duration::from_micros(400)));
        assert_eq!(e.rto(t, 7), Some(Duration::from_micros(400)));
    }

    #[test]
    fn karn_no_sample_from_a_retransmission() {
        let mut e = RttEstimator::default();
        e.on_send(Psn::new(1), at(0));
        e.on_retransmit();
        e.on_ack(Psn::new(2), at(900));
        assert_eq!(e.srtt(), None);
        e.on_send(Psn::new(3), at(1000));
        e.on_ack(Psn::new(4), at(1010));
        assert_eq!(e.srtt(), Some(Duration::from_micros(10)));
    }
}
