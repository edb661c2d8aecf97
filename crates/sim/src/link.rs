//! The per-direction link model: what happens to a datagram between two nodes.
//!
//! Every ordered pair of nodes (a → b) has its own [`Link`]: a FIFO transmitter of finite
//! bandwidth followed by a wire of fixed propagation delay, plus seeded faults. A datagram
//! handed to the link at `now` starts serialising when the transmitter is free, leaves it
//! `serialization_ns` later and arrives `delay` after that; reordering adds random extra delay
//! to single packets, which lets later packets overtake them. Faults are drawn from the link's
//! own PRNG stream, so one link's traffic never changes another link's luck.

use softrdma_proto::{Duration, Instant};

use crate::rng::SimRng;

/// Bytes of IPv4 + UDP header in front of every RoCEv2 payload, counted for serialisation.
pub const IP_UDP_OVERHEAD_BYTES: usize = 20 + 8;

/// Fault and timing knobs of one direction of one link.
///
/// Probabilities are per datagram and independent; values outside `[0, 1]` are clamped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Propagation delay added to every datagram.
    pub delay: Duration,
    /// Line rate in bits per second; 0 means infinite (no serialisation time, no queueing).
    pub bandwidth_bps: u64,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram is delivered twice (the copy arrives shortly after).
    pub duplicate: f64,
    /// Probability that a datagram gets extra random delay of up to `reorder_jitter`, so that
    /// later datagrams may overtake it.
    pub reorder: f64,
    /// The largest extra delay a reordered datagram gets.
    pub reorder_jitter: Duration,
    /// Probability that one random ICRC-covered bit of the UDP payload is flipped (the
    /// receiver's ICRC check must catch it; see [`covered_bit`]).
    pub corrupt: f64,
}

impl LinkConfig {
    /// A perfect link: 1 µs delay, infinite bandwidth, no faults.
    pub const IDEAL: LinkConfig = LinkConfig {
        delay: Duration::from_micros(1),
        bandwidth_bps: 0,
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_jitter: Duration::from_micros(20),
        corrupt: 0.0,
    };

    /// Whether any random fault is enabled.
    pub fn has_faults(&self) -> bool {
        self.loss > 0.0 || self.duplicate > 0.0 || self.reorder > 0.0 || self.corrupt > 0.0
    }

    /// The same timing with every random fault turned off (the liveness phase of a swarm run).
    pub fn healed(&self) -> LinkConfig {
        LinkConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            ..*self
        }
    }

    /// Time to put `ip_len` bytes of IP datagram on the wire at this link's rate.
    pub fn serialization_time(&self, ip_len: usize) -> Duration {
        serialization_time(ip_len, self.bandwidth_bps)
    }
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig::IDEAL
    }
}

/// Nanoseconds to send `bytes` at `bandwidth_bps`, rounded up (0 for infinite bandwidth).
pub fn serialization_time(bytes: usize, bandwidth_bps: u64) -> Duration {
    if bandwidth_bps == 0 {
        return Duration::ZERO;
    }
    let bits = (bytes as u128) * 8 * 1_000_000_000;
    let ns = bits.div_ceil(u128::from(bandwidth_bps));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Byte of the BTH that the ICRC does not cover (FECN, BECN and 6 reserved bits: fields a
/// network may legitimately change, e.g. when marking congestion).
pub const ICRC_MASKED_BTH_BYTE: usize = 4;

/// Number of payload bits the ICRC covers in a UDP payload of `payload_len` bytes.
pub fn covered_bits(payload_len: usize) -> usize {
    if payload_len > ICRC_MASKED_BTH_BYTE {
        payload_len * 8 - 8
    } else {
        payload_len * 8
    }
}

/// Maps the `index`th ICRC-covered bit (modulo [`covered_bits`]) to its bit position in the
/// payload. Corruption only flips covered bits: a flip in the masked BTH byte is invisible to
/// the ICRC by design, so it would not model a transmission error but a (legal) rewrite.
pub fn covered_bit(index: usize, payload_len: usize) -> usize {
    let n = covered_bits(payload_len).max(1);
    let i = index % n;
    if payload_len > ICRC_MASKED_BTH_BYTE && i >= ICRC_MASKED_BTH_BYTE * 8 {
        i + 8
    } else {
        i
    }
}

/// What the link decided for one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkFate {
    /// `None`: the datagram is lost. Otherwise its arrival time.
    pub arrival: Option<Instant>,
    /// Arrival time of a duplicate, if one is made.
    pub duplicate_arrival: Option<Instant>,
    /// Bit index (within the UDP payload; never in the ICRC-masked BTH byte) to flip, if the
    /// datagram is corrupted.
    pub corrupt_bit: Option<usize>,
    /// Whether extra reordering delay was added.
    pub reordered: bool,
}

/// One direction of a link: configuration, transmitter state and its own PRNG stream.
#[derive(Debug, Clone)]
pub struct Link {
    /// The knobs; may be changed at any time (e.g. healed).
    pub config: LinkConfig,
    /// When the transmitter finishes the datagram it is sending.
    busy_until: Instant,
    rng: SimRng,
}

impl Link {
    /// A link with its own random stream.
    pub fn new(config: LinkConfig, rng: SimRng) -> Link {
        Link {
            config,
            busy_until: Instant::ZERO,
            rng,
        }
    }

    /// When the transmitter becomes idle.
    pub fn busy_until(&self) -> Instant {
        self.busy_until
    }

    /// Schedules a datagram of `payload_len` UDP payload bytes handed over at `now`.
    ///
    /// A lost datagram still occupies the transmitter (it was sent; the wire lost it), so loss
    /// does not speed up the survivors. Random draws happen in a fixed order (loss, corrupt,
    /// reorder, duplicate) so a given seed always means the same faults.
    pub fn transmit(&mut self, now: Instant, payload_len: usize) -> LinkFate {
        let c = self.config;
        let start = now.max(self.busy_until);
        let done = start + c.serialization_time(payload_len + IP_UDP_OVERHEAD_BYTES);
        self.busy_until = done;
        let base = done + c.delay;
        let lost = self.rng.chance(c.loss);
        let corrupt_bit = if !lost && payload_len > 0 && self.rng.chance(c.corrupt) {
            let n = covered_bits(payload_len) as u64;
            Some(covered_bit(self.rng.below(n) as usize, payload_len))
        } else {
            None
        };
        let mut arrival = base;
        let mut reordered = false;
        if !lost && self.rng.chance(c.reorder) {
            let jitter_ns = u64::try_from(c.reorder_jitter.as_nanos()).unwrap_or(u64::MAX);
            arrival = base + Duration::from_nanos(self.rng.range_inclusive(1, jitter_ns.max(1)));
            reordered = true;
        }
        let duplicate_arrival = if !lost && self.rng.chance(c.duplicate) {
            // The copy trails the original by a little, as a switch replaying a frame would.
            let lag_ns = self.rng.range_inclusive(1, 2_000);
            Some(arrival + Duration::from_nanos(lag_ns))
        } else {
            None
        };
        LinkFate {
            arrival: (!lost).then_some(arrival),
            duplicate_arrival,
            corrupt_bit,
            reordered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_serialization_arithmetic() {
        // 1000 bytes at 8 Gb/s = 1 µs exactly; at 3 b/s rounding goes up.
        assert_eq!(
            serialization_time(1000, 8_000_000_000),
            Duration::from_micros(1)
        );
        assert_eq!(
            serialization_time(1, 3),
            Duration::from_nanos(2_666_666_667)
        );
        assert_eq!(serialization_time(1000, 0), Duration::ZERO);
    }

    #[test]
    fn test_covered_bits_skip_masked_byte() {
        assert_eq!(covered_bits(20), 152);
        assert_eq!(covered_bit(31, 20), 31);
        assert_eq!(covered_bit(32, 20), 40);
        assert_eq!(covered_bit(151, 20), 159);
        assert_eq!(covered_bit(152, 20), 0);
        assert_eq!(covered_bit(5, 3), 5);
    }

    #[test]
    fn test_fifo_queueing() {
        let cfg = LinkConfig {
            delay: Duration::from_micros(5),
            bandwidth_bps: 8_000_000_000,
            ..LinkConfig::IDEAL
        };
        let mut link = Link::new(cfg, SimRng::new(1));
        let payload = 1000 - IP_UDP_OVERHEAD_BYTES;
        let a = link.transmit(Instant::ZERO, payload).arrival.unwrap();
        let b = link.transmit(Instant::ZERO, payload).arrival.unwrap();
        assert_eq!(a, Instant::from_nanos(6_000));
        // The second waits for the first to leave the transmitter.
        assert_eq!(b, Instant::from_nanos(7_000));
        // An idle transmitter starts at once.
        let c = link
            .transmit(Instant::from_nanos(100_000), payload)
            .arrival
            .unwrap();
        assert_eq!(c, Instant::from_nanos(106_000));
    }
}
