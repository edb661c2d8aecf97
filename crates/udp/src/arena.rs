//! Receive buffers owned by the caller, filled by one `recvmmsg(2)` at a time.

use crate::datagram::RecvMeta;
use crate::{imp, RECV_SLOTS_MAX};

/// A caller-owned set of receive slots: one contiguous buffer cut into `slots` slots, plus the
/// per-slot metadata and the system-call scratch, all allocated once.
///
/// [`RoceSocket::try_recv`](crate::RoceSocket::try_recv) overwrites it; after a call, [`RecvArena::iter`] lists the messages
/// received and [`RecvArena::datagrams`] splits GRO messages into datagrams.
pub struct RecvArena {
    pub(crate) buf: Box<[u8]>,
    pub(crate) slot_len: usize,
    pub(crate) meta: Box<[RecvMeta]>,
    pub(crate) filled: usize,
    /// Most messages a receive takes (at most the slots).
    pub(crate) limit: usize,
    pub(crate) scratch: imp::RecvScratch,
}

impl RecvArena {
    /// An arena of `slots` slots of `slot_len` bytes each. `slots` is clamped to
    /// `1..=RECV_SLOTS_MAX` and `slot_len` to `1..=65535`. A GRO socket needs slots of
    /// [`MAX_UDP_PAYLOAD`](crate::MAX_UDP_PAYLOAD) bytes (see [`RecvArena::for_socket`]); otherwise the path MTU is enough.
    #[must_use]
    pub fn new(slots: usize, slot_len: usize) -> Self {
        let slots = slots.clamp(1, RECV_SLOTS_MAX);
        let slot_len = slot_len.clamp(1, usize::from(u16::MAX));
        let mut buf = vec![0u8; slots * slot_len].into_boxed_slice();
        let scratch = imp::RecvScratch::new(&mut buf, slot_len);
        Self {
            buf,
            slot_len,
            meta: vec![RecvMeta::default(); slots].into_boxed_slice(),
            filled: 0,
            limit: slots,
            scratch,
        }
    }

    /// Number of slots.
    #[must_use]
    pub fn slots(&self) -> usize {
        self.meta.len()
    }

    /// Bytes per slot.
    #[must_use]
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Messages filled by the last receive.
    #[must_use]
    pub fn len(&self) -> usize {
        self.filled
    }

    /// Whether the last receive got nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// Message `i` of the last receive: its metadata and bytes.
    #[must_use]
    pub fn get(&self, i: usize) -> Option<(&RecvMeta, &[u8])> {
        if i >= self.filled {
            return None;
        }
        let meta = &self.meta[i];
        let start = i * self.slot_len;
        let len = meta.len.min(self.slot_len);
        Some((meta, &self.buf[start..start + len]))
    }

    /// The bytes of slot `i`, for a receive made by other means than
    /// [`RoceSocket::try_recv`](crate::RoceSocket::try_recv) (a scattered receive lays its
    /// scratch pieces over a slot); record it with [`RecvArena::set_received`].
    pub fn slot_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        if i >= self.meta.len() {
            return None;
        }
        let start = i * self.slot_len;
        Some(&mut self.buf[start..start + self.slot_len])
    }

    /// Has the following receives take at most `n` messages (at least 1, at most
    /// [`RecvArena::slots`]): a caller that wants to look at one datagram before it decides
    /// how to receive the next takes them one at a time.
    pub fn set_limit(&mut self, n: usize) {
        self.limit = n.clamp(1, self.meta.len());
    }

    /// Forgets the messages of the last receive (as a receive that got nothing does).
    pub fn clear(&mut self) {
        self.filled = 0;
    }

    /// Records that slot 0 holds the one message `meta` describes (its `len` bytes, capped
    /// at the slot), as if the last receive had got that message alone.
    pub fn set_received(&mut self, meta: RecvMeta) {
        self.meta[0] = RecvMeta {
            len: meta.len.min(self.slot_len),
            ..meta
        };
        self.filled = 1;
    }

    /// Appends one message received by other means than a socket (an in-process fabric):
    /// `bytes` go into the next free slot, cut at the slot's length (then
    /// [`RecvMeta::truncated`]), and `meta.len` becomes what the slot holds. `false`, and
    /// nothing recorded, once the receive limit ([`RecvArena::set_limit`]) is reached; start
    /// a receive with [`RecvArena::clear`].
    pub fn push(&mut self, meta: RecvMeta, bytes: &[u8]) -> bool {
        let i = self.filled;
        if i >= self.limit.min(self.meta.len()) {
            return false;
        }
        let len = bytes.len().min(self.slot_len);
        let start = i * self.slot_len;
        self.buf[start..start + len].copy_from_slice(&bytes[..len]);
        self.meta[i] = RecvMeta {
            len,
            truncated: meta.truncated || len < bytes.len(),
            ..meta
        };
        self.filled = i + 1;
        true
    }

    /// The messages of the last receive, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (&RecvMeta, &[u8])> + '_ {
        (0..self.filled).filter_map(move |i| self.get(i))
    }

    /// The datagrams of the last receive: GRO messages split at their stride.
    pub fn datagrams(&self) -> impl Iterator<Item = (&RecvMeta, &[u8])> + '_ {
        self.iter().flat_map(|(meta, bytes)| {
            let stride = if meta.stride == 0 {
                bytes.len().max(1)
            } else {
                meta.stride
            };
            bytes.chunks(stride).map(move |chunk| (meta, chunk))
        })
    }
}

impl std::fmt::Debug for RecvArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvArena")
            .field("slots", &self.slots())
            .field("slot_len", &self.slot_len)
            .field("filled", &self.filled)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_splits_at_stride() {
        let mut arena = RecvArena::new(2, 100);
        arena.buf[..10].copy_from_slice(&[1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
        arena.meta[0] = RecvMeta {
            len: 10,
            stride: 4,
            ..RecvMeta::default()
        };
        arena.filled = 1;
        let parts: Vec<&[u8]> = arena.datagrams().map(|(_, b)| b).collect();
        assert_eq!(parts, [&[1, 1, 1, 1][..], &[2, 2, 2, 2], &[3, 3]]);
        assert!(arena.get(1).is_none());
        // A message received by other means into slot 1's bytes is not slot 0's...
        arena.slot_mut(1).unwrap()[..3].copy_from_slice(&[9, 9, 9]);
        assert!(arena.slot_mut(2).is_none());
        // ... but into slot 0's, recorded, it is what the arena holds.
        arena.slot_mut(0).unwrap()[..3].copy_from_slice(&[7, 8, 9]);
        arena.set_received(RecvMeta {
            len: 500,
            stride: 2,
            ..RecvMeta::default()
        });
        assert_eq!(arena.len(), 1);
        assert_eq!(arena.get(0).unwrap().1.len(), 100, "capped at the slot");
        assert_eq!(&arena.get(0).unwrap().1[..3], &[7, 8, 9]);
    }

    #[test]
    fn pushed_messages_fill_slots_up_to_the_limit_and_are_cut_at_the_slot() {
        let mut arena = RecvArena::new(3, 8);
        arena.set_limit(2);
        let meta = RecvMeta {
            stride: 4,
            tos: 2,
            ..RecvMeta::default()
        };
        assert!(arena.push(meta, &[1, 2, 3, 4, 5]));
        assert!(arena.push(meta, &[6; 12]));
        assert!(!arena.push(meta, &[7]), "past the limit");
        assert_eq!(arena.len(), 2);
        let (m0, b0) = arena.get(0).unwrap();
        assert_eq!(
            (b0, m0.len, m0.truncated, m0.tos),
            (&[1, 2, 3, 4, 5][..], 5, false, 2)
        );
        let (m1, b1) = arena.get(1).unwrap();
        assert_eq!((b1, m1.truncated), (&[6; 8][..], true));
        assert_eq!(arena.datagrams().count(), 4, "split at their stride");
        arena.clear();
        assert!(arena.push(meta, &[9]));
        assert_eq!(arena.get(0).unwrap().1, &[9]);
    }
}
