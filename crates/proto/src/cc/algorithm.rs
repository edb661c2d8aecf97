//! The interface every congestion-control algorithm of a reaction point implements.

use core::fmt;
use core::time::Duration;

use crate::time::Instant;

/// A reaction point's algorithm: what a QP's rate does on congestion notifications, on
/// sending, and over time.
pub trait CongestionControl: fmt::Debug + Send {
    /// A CNP for this QP arrived.
    fn on_congestion_notified(&mut self, now: Instant);
    /// The QP sent a packet of `bytes` (on the wire).
    fn on_sent(&mut self, now: Instant, bytes: usize);
    /// The requester measured a round trip (an AckReq'd packet to its ACK); algorithms that
    /// read the network's delay use it.
    fn on_rtt_sample(&mut self, now: Instant, rtt: Duration) {
        let _ = (now, rtt);
    }
    /// The time [`next_timeout`](Self::next_timeout) named has come.
    fn on_timeout(&mut self, now: Instant);
    /// When the algorithm next needs [`on_timeout`](Self::on_timeout).
    fn next_timeout(&self) -> Option<Instant>;
    /// The rate the QP may send at, bits per second.
    fn rate_bps(&self) -> f64;
    /// Rate cuts so far.
    fn rate_cuts(&self) -> u64;
}
