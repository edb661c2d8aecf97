//! Wake-ups: the event fds threads sleep on, and the per-CQ state that decides who to wake
//! when completions arrive.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Waker;

use crate::event::EventPipe;
use crate::wake::WakeFd;

/// Wake-up state of one completion queue: async wakers, and an event fd for a thread that
/// waits (ibverbs' completion channel, per CQ). The fd is written only while a waiter has
/// `armed` it — like `ibv_req_notify_cq` — so producing completions costs no system call when
/// nobody sleeps on them.
#[derive(Debug)]
pub(crate) struct CqNotify {
    pub state: Mutex<NotifyState>,
    pub fd: WakeFd,
    pub armed: AtomicBool,
    /// The completion channel this CQ reports to, and the token its events carry.
    pub channel: OnceLock<(Arc<EventPipe>, u64)>,
    /// Armed by `req_notify`: the next completion writes one event to `channel`.
    pub channel_armed: AtomicBool,
}

/// Guarded by [`CqNotify::state`].
#[derive(Debug, Default)]
pub(crate) struct NotifyState {
    /// Async waiters to wake.
    pub wakers: Vec<Waker>,
}

impl CqNotify {
    pub(crate) fn new() -> std::io::Result<CqNotify> {
        Ok(CqNotify {
            state: Mutex::new(NotifyState::default()),
            fd: WakeFd::new()?,
            armed: AtomicBool::new(false),
            channel: OnceLock::new(),
            channel_armed: AtomicBool::new(false),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, NotifyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
