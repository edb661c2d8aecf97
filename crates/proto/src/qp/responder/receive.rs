//! Where a QP's receive WQEs come from: its own receive queue, or the shared receive queue it
//! was created on. The responder stages take, peek at and give back WQEs only through these.

use crate::event::AsyncEvent;
use crate::qp::{Ctx, QpContext};
use crate::wr::RecvWr;

impl QpContext {
    /// Takes the next receive WQE (raising the SRQ limit event if that crosses it).
    pub(crate) fn take_recv(&mut self, ctx: &mut Ctx<'_>) -> Option<RecvWr> {
        match self.srq {
            None => self.rq.pop_front(),
            Some(h) => {
                let (wr, crossed) = ctx.srqs.get_mut(&h)?.take()?;
                if crossed {
                    ctx.events.push_back(AsyncEvent::SrqLimitReached(h));
                }
                Some(wr)
            }
        }
    }

    /// Whether a receive WQE is waiting.
    pub(crate) fn has_recv(&self, ctx: &Ctx<'_>) -> bool {
        self.next_recv_capacity(ctx).is_some()
    }

    /// The capacity in bytes of the receive WQE [`take_recv`](Self::take_recv) would return.
    pub(crate) fn next_recv_capacity(&self, ctx: &Ctx<'_>) -> Option<u64> {
        match self.srq {
            None => self.rq.front(),
            Some(h) => ctx.srqs.get(&h)?.wrs.front(),
        }
        .map(RecvWr::capacity)
    }

    /// Puts back a WQE whose message was abandoned (UC), at the head of the queue it came
    /// from, for the next message.
    pub(crate) fn give_back_recv(&mut self, ctx: &mut Ctx<'_>, wr: RecvWr) {
        match self.srq.and_then(|h| ctx.srqs.get_mut(&h)) {
            Some(srq) => srq.wrs.push_front(wr),
            None => self.rq.push_front(wr),
        }
    }
}
