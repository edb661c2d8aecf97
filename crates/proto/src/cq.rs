//! Completion queues: bounded FIFOs of work completions, shareable by many QPs.

use std::collections::VecDeque;

use crate::wr::WorkCompletion;

/// A completion queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

/// One completion queue.
#[derive(Debug)]
pub struct CompletionQueue {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    /// Set when a completion had to be dropped because the queue was full (ibverbs raises
    /// `IBV_EVENT_CQ_ERR`); a CQ overrun is an application bug, so it is made visible, not hidden.
    pub overrun: bool,
    /// Completions ever added (lets waiters detect arrivals without polling).
    pub produced: u64,
}

impl CompletionQueue {
    /// An empty queue holding at most `capacity` completions.
    pub fn new(capacity: usize) -> CompletionQueue {
        CompletionQueue {
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

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}
