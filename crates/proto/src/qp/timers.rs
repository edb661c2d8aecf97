//! The per-QP timer table: one deadline slot per timer kind, the earliest is the QP's deadline.

use crate::time::Instant;

/// Timer kinds of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Local ACK timeout: no progress on outstanding requests.
    Retransmit = 0,
    /// RNR NAK wait before resending.
    RnrWait = 1,
    /// Congestion control's pacer: the next request packet may leave.
    Pace = 2,
    /// Congestion control's own timers (DCQCN's α decay and rate increase).
    Cc = 3,
    /// Tail-loss probe: a few round trips without an ACK for the newest packets.
    TailProbe = 4,
}

const TIMER_COUNT: usize = 5;

/// Deadlines by timer kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerTable {
    deadlines: [Option<Instant>; TIMER_COUNT],
}

impl TimerTable {
    /// Arms (or re-arms) `timer` for `at`.
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.deadlines[timer as usize] = Some(at);
    }
    /// Disarms `timer`.
    pub fn stop(&mut self, timer: Timer) {
        self.deadlines[timer as usize] = None;
    }
    /// The deadline of `timer`, if armed.
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.deadlines[timer as usize]
    }
    /// Whether `timer` is armed.
    pub fn is_armed(&self, timer: Timer) -> bool {
        self.deadlines[timer as usize].is_some()
    }
    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }
    /// Disarms and returns whether `timer` had expired at `now`.
    pub fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        match self.deadlines[timer as usize] {
            Some(at) if at <= now => {
                self.deadlines[timer as usize] = None;
                true
            }
            _ => false,
        }
    }
    /// Disarms everything.
    pub fn clear(&mut self) {
        self.deadlines = [None; TIMER_COUNT];
    }
}
