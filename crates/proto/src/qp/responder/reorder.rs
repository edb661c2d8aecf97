//! Request packets that arrived ahead of a lost one (responder side).
//!
//! IBTA's RC responder executes requests strictly in PSN order and, after a gap, NAKs once
//! and drops everything until the missing packet comes (C9-92), so one lost packet costs the
//! requester a go-back-N resend of everything after it. softrdma's responder instead keeps
//! such early packets, unexecuted, and runs them in order once the missing one arrives: the
//! execution order, the NAK on the wire and every completion are exactly IBTA's; only the
//! resend shrinks, to the lost packets alone, for a requester that notices (see the
//! requester's repair mode). Bounded per QP by packets, per engine by bytes, and in PSNs by
//! [`MAX_HOLD_DISTANCE`]; beyond that packets are dropped as IBTA says.

use std::collections::BTreeMap;

use softrdma_wire::Psn;

/// How far ahead of the expected PSN a packet may be and still be kept (PSNs).
///
/// A requester has far fewer PSNs outstanding than this (Linux rxe at most 128, softrdma its
/// window), so a packet beyond it belongs to no request in flight: a stale one (an earlier
/// connection on the same QPN), a forged one, or one with a corrupt PSN. Kept, it would run
/// as the request of that PSN when the sequence got there, and the real request be answered
/// as its duplicate; and until then each in-order request found "a gap with packets kept
/// beyond it" and was NAKed instead of ACKed (the rxe lab's errpaths case
/// `psn_window_edge_ahead`: a SEND 2^23 - 1 PSNs ahead). Dropped, it costs at most one NAK,
/// as on rxe. 2^16 PSNs is 64 MiB in flight at MTU 1024, or a READ of that size lost ahead of
/// what follows it (which is then resent go-back-N, as IBTA does anyway).
pub(crate) const MAX_HOLD_DISTANCE: u32 = 1 << 16;

/// Early packets of one QP, keyed by their distance from a base PSN (`base` is the expected
/// PSN when the first one was kept; distances stay far below 2^23 while any is held).
#[derive(Debug, Default)]
pub(crate) struct ReorderBuffer {
    base: Psn,
    held: BTreeMap<u32, Box<[u8]>>,
    bytes: usize,
}

impl ReorderBuffer {
    /// Keeps `packet` (its PSN is `psn`, ahead of `expected`) if fewer than `cap` are held
    /// and it is at most [`MAX_HOLD_DISTANCE`] ahead. Returns the bytes now held, or `None`
    /// when it was not kept (full, too far ahead, or already held).
    pub(crate) fn hold(
        &mut self,
        expected: Psn,
        psn: Psn,
        packet: Box<[u8]>,
        cap: usize,
    ) -> Option<usize> {
        debug_assert!(psn.distance(expected) > 0, "only early packets are held");
        if i64::from(psn.distance(expected)) > i64::from(MAX_HOLD_DISTANCE) {
            return None;
        }
        if self.held.is_empty() {
            self.base = expected;
        }
        if self.held.len() >= cap {
            return None;
        }
        let key = u32::try_from(psn.distance(self.base)).ok()?;
        if self.held.contains_key(&key) {
            return None;
        }
        let n = packet.len();
        self.held.insert(key, packet);
        self.bytes += n;
        Some(n)
    }

    /// The held packet for `expected`, if any; held packets before it (made stale by a
    /// multi-PSN request such as a READ) are discarded. Returns the packet and the bytes freed.
    pub(crate) fn take(&mut self, expected: Psn) -> Option<(Box<[u8]>, usize)> {
        if self.held.is_empty() {
            return None;
        }
        let at = u32::try_from(expected.distance(self.base)).ok()?;
        let mut freed = 0;
        while let Some((&k, _)) = self.held.first_key_value() {
            if k >= at {
                break;
            }
            freed += self.held.remove(&k).map_or(0, |p| p.len());
        }
        let found = self.held.remove(&at);
        if let Some(p) = &found {
            freed += p.len();
        }
        self.bytes -= freed;
        found.map(|p| (p, freed))
    }

    /// Whether any packet is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Drops everything; returns the bytes freed.
    pub(crate) fn clear(&mut self) -> usize {
        self.held.clear();
        std::mem::take(&mut self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(n: usize) -> Box<[u8]> {
        vec![0u8; n].into_boxed_slice()
    }

    #[test]
    fn test_hold_take_in_order_and_bounded() {
        let mut r = ReorderBuffer::default();
        let e = Psn::new(0xff_fffe); // across the 24-bit wrap
        assert_eq!(r.hold(e, e.add(2), pkt(10), 2), Some(10));
        assert_eq!(r.hold(e, e.add(2), pkt(10), 2), None, "held already");
        assert_eq!(r.hold(e, e.add(1), pkt(20), 2), Some(20));
        assert_eq!(r.hold(e, e.add(3), pkt(5), 2), None, "full");
        assert!(r.take(e).is_none(), "the missing one is not held");
        assert_eq!(r.take(e.add(1)).map(|(p, f)| (p.len(), f)), Some((20, 20)));
        assert_eq!(r.take(e.add(2)).map(|(p, f)| (p.len(), f)), Some((10, 10)));
        assert!(r.is_empty());
        assert_eq!(r.bytes, 0);
    }

    #[test]
    fn test_packets_too_far_ahead_are_not_held() {
        let mut r = ReorderBuffer::default();
        let e = Psn::new(0xff_fff0); // across the 24-bit wrap
        assert_eq!(r.hold(e, e.add(MAX_HOLD_DISTANCE + 1), pkt(1), 8), None);
        assert_eq!(r.hold(e, e.add(0x7f_ffff), pkt(1), 8), None);
        assert!(r.is_empty());
        assert_eq!(r.hold(e, e.add(MAX_HOLD_DISTANCE), pkt(1), 8), Some(1));
    }

    #[test]
    fn test_stale_entries_are_dropped_when_expected_jumps() {
        let mut r = ReorderBuffer::default();
        let e = Psn::new(100);
        r.hold(e, e.add(1), pkt(1), 8);
        r.hold(e, e.add(5), pkt(2), 8);
        // A READ at `e` covered e..e+4: e+1 is stale, e+5 is next.
        assert_eq!(r.take(e.add(5)).map(|(_, f)| f), Some(3));
        assert_eq!(r.clear(), 0);
    }
}
