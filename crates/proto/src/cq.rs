//! Completion queues: bounded FIFOs of work completions, shareable by many QPs.

use std::collections::VecDeque;

use crate::wr::WorkCompletion;

/// A completion queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

/// One completion queue.
///
/// The engine's context of a CQ, as a NIC's CQ context; the application's handle is
/// `softrdma::CompletionQueue`.
#[derive(Debug)]
pub struct CqContext {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    /// Set when a completion had to be dropped because the queue was full (ibverbs raises
    /// `IBV_EVENT_CQ_ERR`); a CQ overrun is an application bug, so it is made visible, not hidden.
    pub overrun: bool,
    /// Completions ever added (lets waiters detect arrivals without polling).
    pub produced: u64,
}

impl CqContext {
    /// An empty queue holding at most `capacity` completions.
    pub fn new(capacity: usize) -> CqContext {
        CqContext {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
            overrun: false,
            produced: 0,
        }
    }

    /// Adds a completion; on overrun the completion is dropped and `overrun` set.
    pub fn push(&mut self, wc: WorkCompletion) -> bool {
        if self.entries.len() >= self.capacity {
            self.overrun = true;
            return false;
        }
        self.entries.push_back(wc);
        self.produced += 1;
        true
    }

    /// Removes up to `max` completions, oldest first, appending them to `out`.
    pub fn poll(&mut self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let n = max.min(self.entries.len());
        out.extend(self.entries.drain(..n));
        n
    }

    /// Removes the completions of QP `qpn` still waiting (a QP moved to the reset state takes
    /// them along, as mlx5's and mlx4's providers clean their CQs); returns how many.
    pub fn discard_qp(&mut self, qpn: u32) -> usize {
        let before = self.entries.len();
        self.entries.retain(|wc| wc.qp_num != qpn);
        before - self.entries.len()
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets the capacity (ibverbs `ibv_resize_cq`); `false`, and nothing changed, when more
    /// completions wait than `capacity` holds (rxe: `EINVAL`).
    pub fn resize(&mut self, capacity: usize) -> bool {
        if capacity < self.entries.len() {
            return false;
        }
        self.capacity = capacity.max(1);
        true
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::{WcOpcode, WcStatus};

    fn wc(wr_id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: 1,
            src_qp: 2,
            grh: false,
            timestamp: crate::time::Instant::ZERO,
        }
    }

    /// A CQ grows and shrinks around the completions waiting in it, never below them.
    #[test]
    fn resize_keeps_what_waits_and_refuses_to_drop_it() {
        let mut q = CqContext::new(3);
        for id in 0..3 {
            assert!(q.push(wc(id)));
        }
        assert!(!q.push(wc(3)), "full at 3");
        assert!(!q.resize(2), "3 wait: cannot shrink to 2");
        assert_eq!(q.capacity(), 3);
        assert!(q.resize(5));
        assert!(q.push(wc(4)) && q.push(wc(5)) && !q.push(wc(6)));
        let mut out = Vec::new();
        q.poll(4, &mut out);
        assert!(q.resize(1), "one waits: 1 holds it");
        let ids: Vec<u64> = out.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [0, 1, 2, 4]);
        q.poll(4, &mut out);
        assert_eq!(out.last().map(|w| w.wr_id), Some(5));
    }
}
