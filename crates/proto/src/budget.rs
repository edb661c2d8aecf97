//! The device's in-flight budget: how many request packets all QPs of an engine may have
//! sent and not yet seen acknowledged.
//!
//! Each QP has a window, but what overruns a receiver's socket buffer or a slow link's queue
//! is the sum over QPs, and no fixed number is right for every path: 4 MiB in flight is
//! nothing on loopback and a third of a second of queue on a 100 Mb/s link, long past any
//! retransmit timeout. So the budget adapts, between [`InflightBudget::MIN`] and the
//! configured maximum, to the one thing a requester sees of the queue: the round trip. A
//! round trip above half a QP's local ACK timeout means the queue is on its way to causing
//! spurious retransmissions, which would only lengthen it: the budget halves (at most once
//! per round trip). A retransmit timeout halves it as well. It starts at
//! [`InflightBudget::INITIAL`] and, until the first decrease, grows by every acknowledged
//! packet (doubling each round trip, TCP's slow start: the first round trip cannot yet warn of
//! a queue); after that, by an eighth per budget's worth acknowledged. On a quick path the
//! round trip never comes near the timeout and the budget reaches its maximum within a few
//! round trips.

use crate::time::{Duration, Instant};

/// The adaptive limit on request packets in flight over all QPs of an engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InflightBudget {
    limit: u32,
    max: u32,
    /// Acknowledged packets towards the next increase.
    credit: u32,
    /// No second decrease before this: the first one has not had a round trip to act.
    hold_until: Instant,
    /// No decrease yet: grow by every acknowledged packet.
    slow_start: bool,
}

impl InflightBudget {
    /// The budget never goes below this: enough for a few QPs to progress at once.
    pub(crate) const MIN: u32 = 16;
    /// The budget of a new device.
    pub(crate) const INITIAL: u32 = 64;

    pub(crate) fn new(max: u32) -> InflightBudget {
        let max = max.max(1);
        InflightBudget {
            limit: Self::INITIAL.min(max),
            max,
            credit: 0,
            hold_until: Instant::ZERO,
            slow_start: true,
        }
    }

    /// Packets all QPs may have in flight now.
    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    /// A QP measured round trip `rtt` at `now`; its local ACK timeout is `timeout`.
    pub(crate) fn on_rtt(&mut self, now: Instant, rtt: Duration, timeout: Option<Duration>) {
        if timeout.is_some_and(|t| rtt > t / 2) {
            self.decrease(now, rtt);
        }
    }

    /// `n` packets were acknowledged.
    pub(crate) fn on_acked(&mut self, n: u32) {
        if self.limit >= self.max {
            return;
        }
        if self.slow_start {
            self.limit = self.limit.saturating_add(n).min(self.max);
            return;
        }
        self.credit = self.credit.saturating_add(n);
        if self.credit >= self.limit {
            self.credit -= self.limit;
            self.limit = (self.limit + (self.limit / 8).max(1)).min(self.max);
        }
    }

    /// A retransmit timer expired at `now` (the QP's timeout was `rto`).
    pub(crate) fn on_timeout(&mut self, now: Instant, rto: Duration) {
        self.decrease(now, rto);
    }

    fn decrease(&mut self, now: Instant, hold: Duration) {
        if now < self.hold_until {
            return;
        }
        self.limit = (self.limit / 2).max(Self::MIN.min(self.max));
        self.credit = 0;
        self.slow_start = false;
        self.hold_until = now + hold;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_on_queueing_delay_and_grows_back() {
        let t = Some(Duration::from_millis(4));
        let mut b = InflightBudget::new(1024);
        assert_eq!(b.limit(), InflightBudget::INITIAL);
        b.on_acked(64);
        assert_eq!(b.limit(), 128, "slow start: doubles per round trip");
        b.on_acked(2000);
        b.on_rtt(Instant::ZERO, Duration::from_millis(1), t);
        assert_eq!(b.limit(), 1024, "a round trip well inside the timeout");
        let now = Instant::from_nanos(10_000_000);
        b.on_rtt(now, Duration::from_millis(3), t);
        assert_eq!(b.limit(), 512);
        b.on_rtt(now + Duration::from_millis(1), Duration::from_millis(3), t);
        assert_eq!(b.limit(), 512, "once per round trip");
        b.on_timeout(now + Duration::from_millis(4), Duration::from_millis(8));
        assert_eq!(b.limit(), 256);
        for _ in 0..7 {
            b.on_timeout(now + Duration::from_secs(1), Duration::ZERO);
        }
        b.on_timeout(now + Duration::from_secs(2), Duration::ZERO);
        assert_eq!(b.limit(), InflightBudget::MIN);
        b.on_acked(15);
        assert_eq!(b.limit(), 16);
        b.on_acked(1);
        assert_eq!(b.limit(), 18);
        for _ in 0..1000 {
            b.on_acked(1000);
        }
        assert_eq!(b.limit(), 1024, "never above the maximum");
    }
}
