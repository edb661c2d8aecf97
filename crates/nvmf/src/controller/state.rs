//! A controller's state: its properties (CC, CSTS), features, keep alive timer, pending
//! asynchronous event requests, error log, and the queues connected to it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::subsystem::{lock, Limits, Subsystem};
use crate::wire::cqe::Status;
use crate::wire::fabrics::{
    CC_EN, CC_SHN_MASK, CSTS_CFS, CSTS_RDY, CSTS_SHST_COMPLETE, CSTS_SHST_MASK,
};
use crate::wire::log::ErrorEntry;

/// Error log entries kept (Identify Controller's ELPE + 1).
pub(crate) const ERROR_LOG_ENTRIES: usize = 64;
/// Asynchronous event requests held at most (AERL + 1, as nvmet-rdma).
pub(crate) const MAX_AERS: usize = 4;

/// A connected queue as the controller sees it: something it can tell to close.
pub trait QueueHandle: Send + Sync {
    /// Disconnect the queue (its transport drops the connection and its resources).
    fn shut_down(&self);
}

/// Why a controller went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeardownReason {
    /// The host disconnected its admin queue.
    AdminQueueClosed,
    /// No command within the keep alive timeout.
    KeepAliveExpired,
    /// A transport error on one of its queues (controller fatal status).
    Fatal,
    /// The target shut down.
    TargetStopped,
}

/// A controller: created by an admin queue's Connect, joined by I/O queues' Connects.
pub struct Controller {
    /// Controller id.
    pub cntlid: u16,
    /// Its subsystem.
    pub subsys: Arc<Subsystem>,
    /// The host's NQN.
    pub hostnqn: String,
    /// The host's identifier.
    pub hostid: [u8; 16],
    pub(crate) limits: Limits,
    state: Mutex<State>,
    /// Commands executed (for statistics).
    pub commands: AtomicU64,
}

struct State {
    cc: u32,
    csts: u32,
    kato_ms: u32,
    /// Start of the current keep alive window, and whether a command came in it.
    window_start: Instant,
    traffic: bool,
    /// Set Features Number of Queues' grant (I/O queues); the maximum until set.
    io_queues: u16,
    async_event_config: u32,
    /// Command ids of asynchronous event requests held (no event is ever raised: they
    /// complete with the controller's end).
    aers: Vec<u16>,
    errors: VecDeque<ErrorEntry>,
    error_count: u64,
    queues: BTreeMap<u16, Arc<dyn QueueHandle>>,
    torn_down: Option<TeardownReason>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.state);
        f.debug_struct("Controller")
            .field("cntlid", &self.cntlid)
            .field("subsys", &self.subsys.nqn)
            .field("hostnqn", &self.hostnqn)
            .field("queues", &s.queues.keys().collect::<Vec<_>>())
            .field("torn_down", &s.torn_down)
            .finish()
    }
}

impl Controller {
    pub(crate) fn new(
        cntlid: u16,
        subsys: Arc<Subsystem>,
        hostnqn: String,
        hostid: [u8; 16],
        limits: Limits,
        kato_ms: u32,
        now: Instant,
    ) -> Controller {
        Controller {
            cntlid,
            subsys,
            hostnqn,
            hostid,
            limits,
            state: Mutex::new(State {
                cc: 0,
                csts: 0,
                kato_ms,
                window_start: now,
                traffic: false,
                io_queues: limits.max_io_queues,
                async_event_config: 0,
                aers: Vec::new(),
                errors: VecDeque::new(),
                error_count: 0,
                queues: BTreeMap::new(),
                torn_down: None,
            }),
            commands: AtomicU64::new(0),
        }
    }

    /// CC.
    pub fn cc(&self) -> u32 {
        lock(&self.state).cc
    }

    /// CSTS.
    pub fn csts(&self) -> u32 {
        lock(&self.state).csts
    }

    /// Whether the host enabled the controller and it is ready for commands.
    pub fn is_ready(&self) -> bool {
        let s = lock(&self.state);
        s.cc & CC_EN != 0 && s.csts & CSTS_RDY != 0
    }

    /// A write of CC: enabling checks the entry sizes and page size (CSTS.CFS when they are
    /// not 64/16 bytes and 4 KiB), disabling resets, a shutdown notification completes at
    /// once (nothing is cached that a flush does not already write).
    pub(crate) fn write_cc(&self, new: u32) {
        let mut s = lock(&self.state);
        let old = s.cc;
        s.cc = new;
        if new & CC_EN != 0 && old & CC_EN == 0 {
            let (iosqes, iocqes, mps, css) = (
                (new >> 16) & 0xf,
                (new >> 20) & 0xf,
                (new >> 7) & 0xf,
                (new >> 4) & 7,
            );
            s.csts = if iosqes == 6 && iocqes == 4 && mps == 0 && css == 0 {
                CSTS_RDY
            } else {
                CSTS_CFS
            };
        }
        if new & CC_EN == 0 && old & CC_EN != 0 {
            s.csts &= !(CSTS_RDY | CSTS_CFS);
            s.aers.clear();
        }
        if new & CC_SHN_MASK != 0 && old & CC_SHN_MASK == 0 {
            s.csts = (s.csts & !(CSTS_SHST_MASK | CSTS_RDY)) | CSTS_SHST_COMPLETE;
        }
        if new & CC_SHN_MASK == 0 && old & CC_SHN_MASK != 0 {
            s.csts &= !CSTS_SHST_MASK;
        }
    }

    /// The keep alive timeout in milliseconds (0: none).
    pub fn kato_ms(&self) -> u32 {
        lock(&self.state).kato_ms
    }

    pub(crate) fn set_kato(&self, ms: u32, now: Instant) {
        let mut s = lock(&self.state);
        s.kato_ms = ms;
        s.window_start = now;
        s.traffic = false;
    }

    /// A command arrived (any command: traffic based keep alive, CTRATT bit 6, as
    /// nvmet-rdma advertises), or a queue came or went: the host is alive.
    pub(crate) fn touch(&self) {
        lock(&self.state).traffic = true;
        self.commands.fetch_add(1, Ordering::Relaxed);
    }

    /// The keep alive check, as nvmet runs it: once per timeout, the controller expires if
    /// no command came in the window just ended, else a new window begins. A silent host is
    /// found between one and two timeouts after its last command: a Keep Alive delayed by a
    /// retransmission or two on a lossy path does not cost the host its controller.
    pub fn keep_alive_expired(&self, now: Instant) -> bool {
        let mut s = lock(&self.state);
        if s.torn_down.is_some() || s.kato_ms == 0 {
            return false;
        }
        let kato = Duration::from_millis(u64::from(s.kato_ms));
        if now.saturating_duration_since(s.window_start) < kato {
            return false;
        }
        if s.traffic {
            s.traffic = false;
            s.window_start = now;
            return false;
        }
        true
    }

    /// I/O queues granted.
    pub fn io_queues(&self) -> u16 {
        lock(&self.state).io_queues
    }

    pub(crate) fn set_io_queues(&self, n: u16) {
        lock(&self.state).io_queues = n;
    }

    pub(crate) fn async_event_config(&self) -> u32 {
        lock(&self.state).async_event_config
    }

    pub(crate) fn set_async_event_config(&self, v: u32) {
        lock(&self.state).async_event_config = v;
    }

    /// Holds an asynchronous event request; false when the limit is reached.
    pub(crate) fn hold_aer(&self, cid: u16) -> bool {
        let mut s = lock(&self.state);
        if s.aers.len() >= MAX_AERS {
            return false;
        }
        s.aers.push(cid);
        true
    }

    /// Asynchronous event requests held.
    pub fn aers_held(&self) -> usize {
        lock(&self.state).aers.len()
    }

    /// Records a failed command in the error log (newest first, [`ERROR_LOG_ENTRIES`] kept).
    pub(crate) fn record_error(&self, mut e: ErrorEntry) {
        let mut s = lock(&self.state);
        s.error_count += 1;
        e.error_count = s.error_count;
        s.errors.push_front(e);
        s.errors.truncate(ERROR_LOG_ENTRIES);
    }

    /// The error log, newest first, and how many errors there were in all.
    pub fn errors(&self) -> (Vec<ErrorEntry>, u64) {
        let s = lock(&self.state);
        (s.errors.iter().copied().collect(), s.error_count)
    }

    /// Connects queue `qid`; false if it is connected already or the controller is gone.
    pub(crate) fn attach(&self, qid: u16, handle: Arc<dyn QueueHandle>) -> Result<(), Status> {
        let mut s = lock(&self.state);
        if s.torn_down.is_some() || s.queues.contains_key(&qid) {
            return Err(Status::CONNECT_CONTROLLER_BUSY.dnr());
        }
        s.queues.insert(qid, handle);
        s.traffic = true;
        Ok(())
    }

    /// Queue `qid` went away.
    pub(crate) fn detach(&self, qid: u16) {
        let mut s = lock(&self.state);
        s.queues.remove(&qid);
        s.traffic = true;
    }

    /// The connected queues' ids.
    pub fn queues(&self) -> Vec<u16> {
        lock(&self.state).queues.keys().copied().collect()
    }

    /// Why the controller went away, once it has.
    pub fn torn_down(&self) -> Option<TeardownReason> {
        lock(&self.state).torn_down
    }

    /// Ends the controller: every queue is told to close (outside the lock: a transport
    /// may call back into the controller while closing). Only the first reason counts.
    pub(crate) fn tear_down(&self, reason: TeardownReason) {
        let queues = {
            let mut s = lock(&self.state);
            if s.torn_down.is_some() {
                return;
            }
            s.torn_down = Some(reason);
            if reason == TeardownReason::Fatal {
                s.csts |= CSTS_CFS;
            }
            if s.csts & CSTS_SHST_COMPLETE == 0 && reason != TeardownReason::TargetStopped {
                self.subsys
                    .counters
                    .unsafe_shutdowns
                    .fetch_add(1, Ordering::Relaxed);
            }
            s.aers.clear();
            std::mem::take(&mut s.queues)
        };
        for q in queues.values() {
            q.shut_down();
        }
    }
}
