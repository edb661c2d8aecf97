//! The responder's state between packets: the message being received or written, the
//! answers waiting to go out, and the READ/atomic resources kept for duplicates. Only state;
//! the responder stages (`responder/`) move it.

use std::collections::VecDeque;

use softrdma_wire::{Psn, Syndrome};

use crate::mr::PdHandle;
use crate::qp::responder::reorder::ReorderBuffer;
use crate::wr::RecvWr;

/// A multi-packet SEND being received into a receive WQE.
#[derive(Debug, Clone)]
pub(crate) struct SendInProgress {
    pub wr: RecvWr,
    /// Bytes placed so far.
    pub offset: u64,
}

/// A multi-packet WRITE being placed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteInProgress {
    pub rkey: u32,
    /// Where the next packet's payload goes.
    pub va: u64,
    /// Bytes still expected.
    pub remaining: u64,
    /// Total length from the RETH (reported by a WRITE with immediate).
    pub total: u32,
}

/// What a READ or atomic request left behind, to answer its duplicates (IBTA 9.7.5.1.6).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resource {
    /// A READ covering `npkts` response PSNs from `psn`, of `len` bytes at `va` under `rkey`:
    /// a duplicate may ask for that again, or for the rest of it, and for nothing else.
    Read {
        psn: Psn,
        npkts: u32,
        rkey: u32,
        va: u64,
        len: u32,
    },
    /// An executed atomic and the value it returned: never executed twice.
    Atomic { psn: Psn, orig: u64, msn: u32 },
    /// An executed ATOMIC_WRITE or FLUSH: its acknowledgement is replayed, never the action.
    Placement { psn: Psn, msn: u32 },
}

impl Resource {
    /// The first PSN the resource answers for.
    pub(crate) fn psn(&self) -> Psn {
        match *self {
            Resource::Read { psn, .. }
            | Resource::Atomic { psn, .. }
            | Resource::Placement { psn, .. } => psn,
        }
    }
}

/// An answer waiting to go out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Output {
    /// ACK or NAK.
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
    },
    /// READ response packets still to send.
    Read {
        /// The READ request's PSN (its resource), to find the response again.
        start: Psn,
        /// The protection domain the request was checked in (an XRC target's changes with
        /// each message).
        pd: PdHandle,
        psn: Psn,
        rkey: u32,
        va: u64,
        remaining: u64,
        first: bool,
        msn: u32,
    },
    /// Atomic acknowledge.
    AtomicAck { psn: Psn, orig: u64, msn: u32 },
    /// The empty READ RESPONSE ONLY that acknowledges an ATOMIC_WRITE or FLUSH.
    PlacementAck { psn: Psn, msn: u32 },
}

impl Output {
    /// Whether this is (part of) the answer to the resource starting at `psn`.
    fn answers(&self, res: Psn) -> bool {
        match *self {
            Output::Read { start, .. } => start == res,
            Output::AtomicAck { psn, .. } | Output::PlacementAck { psn, .. } => psn == res,
            Output::Ack { .. } => false,
        }
    }
}

/// Responder state of a QP.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// The PSN the next new request must carry.
    pub(in crate::qp::responder) expected_psn: Psn,
    /// Messages completed (24 bits on the wire).
    pub(in crate::qp::responder) msn: u32,
    pub(in crate::qp::responder) send: Option<SendInProgress>,
    pub(in crate::qp::responder) write: Option<WriteInProgress>,
    /// A sequence-error NAK was sent and the expected PSN has not arrived since.
    pub(in crate::qp::responder) nak_sent: bool,
    /// Recent READ/atomic requests, oldest first, at most max(1, max_dest_rd_atomic).
    pub(in crate::qp::responder) resources: VecDeque<Resource>,
    /// Resources (by first PSN) answered again for a duplicate request: whatever answer is
    /// queued for them is a repeat (see [`Responder::reserve`]). At most one per resource.
    pub(in crate::qp::responder) replayed: Vec<Psn>,
    pub(in crate::qp::responder) output: VecDeque<Output>,
    /// A fatal NAK is queued: accept nothing more; enter ERR once it is sent.
    pub(in crate::qp::responder) fatal: bool,
    /// Requests that arrived ahead of a missing one, to run once it comes.
    pub(in crate::qp::responder) early: ReorderBuffer,
    /// A request packet of this QP went out ahead of the queued ACK (see
    /// `QpContext::poll_transmit`); the ACK goes next.
    pub(in crate::qp::responder) ack_yielded: bool,
}

impl Responder {
    pub(crate) fn reset(&mut self, psn: Psn) {
        *self = Responder {
            expected_psn: psn,
            ..Responder::default()
        };
    }

    pub(crate) fn clear_output(&mut self) {
        self.output.clear();
        self.send = None;
        self.write = None;
    }

    pub(crate) fn has_output(&self) -> bool {
        !self.output.is_empty()
    }

    /// Whether a request packet may go ahead of what is queued: one plain ACK that has not
    /// let one go ahead yet (see `QpContext::poll_transmit`).
    pub(crate) fn ack_may_yield(&self) -> bool {
        !self.ack_yielded && self.only_an_ack()
    }

    /// Records whether a request packet just went ahead of the queued ACK.
    pub(crate) fn set_ack_yielded(&mut self, yielded: bool) {
        self.ack_yielded = yielded;
    }

    /// Drops the early packets kept for a gap (the QP resets, fails or goes); the bytes they
    /// held, for the engine's account.
    pub(crate) fn drop_early(&mut self) -> usize {
        self.early.clear()
    }

    /// The SEND in progress, taken (the QP flushes its receive WQE).
    pub(crate) fn take_send(&mut self) -> Option<SendInProgress> {
        self.send.take()
    }

    /// Whether all that is queued is one plain ACK (no NAK, READ response or atomic ACK).
    pub(crate) fn only_an_ack(&self) -> bool {
        self.output.len() == 1
            && matches!(
                self.output.front(),
                Some(Output::Ack {
                    syndrome: Syndrome::Ack { .. },
                    ..
                })
            )
    }

    /// Queues an ACK or NAK, replacing a queued ACK right before it (coalescing) and the same
    /// NAK right before that: a peer repeating a request the responder refuses (an RNR NAK's
    /// SEND, resent with nothing polling the output in between) must not grow the queue by
    /// one answer per packet.
    pub(crate) fn push_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        let msn = self.msn;
        if let Some(Output::Ack {
            syndrome: Syndrome::Ack { .. },
            ..
        }) = self.output.back()
        {
            self.output.pop_back();
        }
        if matches!(self.output.back(), Some(&Output::Ack { psn: p, syndrome: s, .. })
            if p == psn && s == syndrome)
        {
            self.output.pop_back();
        }
        self.output.push_back(Output::Ack { psn, syndrome, msn });
    }

    /// Makes room for one more READ/atomic resource among `max` (`max_dest_rd_atomic`).
    /// `false` if there is none, which the requester provoked (IBTA C9-151: Invalid Request):
    /// `max` is 0, or every resource is still being answered for the first time — a
    /// requester that honours the negotiated depth cannot have completed the oldest one, so
    /// it has too many outstanding. Otherwise the oldest is forgotten: the requester has its
    /// answer. A repeat of that answer still queued for a duplicate request goes with it:
    /// the requester asked again before the first answer reached it, and completed the
    /// request with that one (refused instead, a new READ after a spurious duplicate failed
    /// the requester's QP with a remote invalid request error; rxe reuses its oldest resource
    /// whatever it is doing).
    pub(crate) fn reserve(&mut self, max: u8) -> bool {
        if max == 0 {
            return false;
        }
        while self.resources.len() >= usize::from(max) {
            let oldest = self.resources[0].psn();
            let repeat = self.replayed.contains(&oldest);
            if !repeat && self.output.iter().any(|o| o.answers(oldest)) {
                return false;
            }
            if repeat {
                self.cancel_answer(oldest);
                self.replayed.retain(|&p| p != oldest);
            }
            self.resources.pop_front();
        }
        true
    }

    /// Records that the resource starting at `psn` is being answered again, for a duplicate.
    pub(crate) fn mark_replayed(&mut self, psn: Psn) {
        if !self.replayed.contains(&psn) {
            self.replayed.push(psn);
        }
    }

    /// Drops any answer still queued for the resource starting at `psn` (a duplicate request
    /// replaces it).
    pub(crate) fn cancel_answer(&mut self, psn: Psn) {
        self.output.retain(|o| !o.answers(psn));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four one-packet READs at depth 4, the oldest one's answer still queued.
    fn four_reads_first_answer_queued() -> Responder {
        let mut r = Responder::default();
        for i in 0..4 {
            r.resources.push_back(Resource::Read {
                psn: Psn::new(i * 10),
                npkts: 1,
                rkey: 1,
                va: 0x1000,
                len: 8,
            });
        }
        r.output.push_back(Output::Read {
            start: Psn::new(0),
            pd: PdHandle(1),
            psn: Psn::new(0),
            rkey: 1,
            va: 0x1000,
            remaining: 8,
            first: true,
            msn: 1,
        });
        r
    }

    /// A new READ while the oldest resource is answered for the first time is one too many
    /// (IBTA C9-151); while it is answered again for a duplicate, the requester has the first
    /// answer (it would not exceed the depth otherwise): the repeat goes, the READ is taken.
    #[test]
    fn a_repeat_answer_does_not_hold_the_oldest_resource() {
        let mut first = four_reads_first_answer_queued();
        assert!(!first.reserve(4));
        assert_eq!((first.resources.len(), first.output.len()), (4, 1));

        let mut again = four_reads_first_answer_queued();
        again.mark_replayed(Psn::new(0));
        again.mark_replayed(Psn::new(0));
        assert_eq!(again.replayed, [Psn::new(0)]);
        assert!(again.reserve(4));
        assert!(again.output.is_empty(), "the repeat is dropped");
        assert_eq!(again.resources.len(), 3);
        assert!(again.replayed.is_empty());
    }
}
