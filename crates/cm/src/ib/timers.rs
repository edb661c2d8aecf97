//! Time in the CM: IBTA's 4.096 µs × 2^n encodings as Linux converts them, the ACK timeout
//! arithmetic, the one outstanding MAD per connection with its retransmissions, and the
//! ordered index of deadlines that makes `poll_timeout` cheap with many connections.

use std::collections::{BTreeSet, HashMap};

use softrdma_proto::{Duration, Instant};
use softrdma_wire::mad::MAD_LEN;
use softrdma_wire::Gid;

use super::id::IbCmId;
use super::state::CmState;

/// An IBTA time code (4.096 µs × 2^code) in Linux's approximation (`cm_convert_to_ms`):
/// 2^(code − 8) ms, at least 1 ms. Code 20 (rdma_cm's CM response timeout) is 4096 ms, code 19
/// (rxe's ACK timeout, which sets time-wait) 2048 ms, code 24 (rdma_cm's MRA) 65 536 ms.
pub fn iba_time(code: u8) -> Duration {
    Duration::from_millis(1 << code.saturating_sub(8).min(31))
}

/// The local ACK timeout a QP should use on a path (`cm_ack_timeout`): IBTA wants
/// 2 × packet life time + the CA's ACK delay, in powers of two; Linux takes the larger of the
/// two exponents and adds one when the other is within a factor of two. Capped at 31.
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let lifetime = packet_life_time.saturating_add(1);
    let t = if lifetime >= ca_ack_delay {
        lifetime + u8::from(ca_ack_delay >= lifetime - 1)
    } else {
        ca_ack_delay + u8::from(lifetime >= ca_ack_delay - 1)
    };
    t.min(31)
}

/// A MAD that expects an answer and is resent until it gets one (Linux: the MAD layer's
/// `timeout_ms` and `retries` on a send buffer).
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The MAD, resent unchanged.
    pub(crate) mad: [u8; MAD_LEN],
    /// Where it goes.
    pub(crate) dst: Gid,
    /// The destination QP (the peer's GSI QP).
    pub(crate) dst_qpn: u32,
    /// The state the connection was in when it was sent (Linux's `msg->context[1]`): a
    /// timeout in any other state is stale and ignored.
    pub(crate) sent_in: CmState,
    /// When to resend or give up.
    pub(crate) deadline: Instant,
    /// Wait per attempt (an MRA lengthens it for the rest of the attempts).
    pub(crate) timeout: Duration,
    /// Resends still allowed.
    pub(crate) retries_left: u8,
}

/// Deadlines of all connections, ordered, so the earliest is found in O(log n) and a timeout
/// touches only the connections that are due.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    order: BTreeSet<(Instant, IbCmId)>,
    by_id: HashMap<IbCmId, Instant>,
}

impl Deadlines {
    /// Sets (or clears) `id`'s deadline.
    pub(crate) fn set(&mut self, id: IbCmId, at: Option<Instant>) {
        if let Some(old) = self.by_id.remove(&id) {
            self.order.remove(&(old, id));
        }
        if let Some(at) = at {
            self.order.insert((at, id));
            self.by_id.insert(id, at);
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.order.first().map(|&(at, _)| at)
    }

    /// The connections whose deadline is at or before `now`, earliest first.
    pub(crate) fn due(&self, now: Instant) -> Vec<IbCmId> {
        self.order
            .iter()
            .take_while(|&&(at, _)| at <= now)
            .map(|&(_, id)| id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_iba_time() {
        assert_eq!(iba_time(20), Duration::from_millis(4096));
        assert_eq!(iba_time(19), Duration::from_millis(2048));
        assert_eq!(iba_time(24), Duration::from_millis(65_536));
        assert_eq!(iba_time(0), Duration::from_millis(1));
        assert_eq!(iba_time(8), Duration::from_millis(1));
        assert_eq!(iba_time(31), Duration::from_millis(1 << 23));
    }

    #[test]
    fn test_ack_timeout() {
        // rxe: ACK delay 15, rdma_cm's RoCE packet life time 18 → 19, what the REQ carries.
        assert_eq!(ack_timeout(15, 18), 19);
        // The REP's target ACK delay applied to the active side's 19 - 1.
        assert_eq!(ack_timeout(15, 19 - 1), 19);
        // Within a factor of two: one more.
        assert_eq!(ack_timeout(16, 15), 17);
        assert_eq!(ack_timeout(20, 18), 21);
        assert_eq!(ack_timeout(20, 2), 20);
        assert_eq!(ack_timeout(31, 31), 31);
        assert_eq!(ack_timeout(0, 0), 2);
    }

    #[test]
    fn test_deadlines() {
        let mut d = Deadlines::default();
        let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        d.set(IbCmId(1), Some(t(30)));
        d.set(IbCmId(2), Some(t(10)));
        d.set(IbCmId(3), Some(t(20)));
        assert_eq!(d.next(), Some(t(10)));
        d.set(IbCmId(2), Some(t(40)));
        assert_eq!(d.due(t(30)), vec![IbCmId(3), IbCmId(1)]);
        d.set(IbCmId(3), None);
        d.set(IbCmId(1), None);
        assert_eq!(d.next(), Some(t(40)));
        assert!(d.due(t(39)).is_empty());
    }
}
