//! Wake-ups: the event fds threads sleep on, and the per-CQ state that decides who to wake
//! when completions arrive.

use std::os::fd::RawFd;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Waker;

use crate::event::EventPipe;

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
/// A level-triggered wake-up file descriptor (eventfd).
#[derive(Debug)]
pub(crate) struct WakeFd(pub(crate) RawFd);

impl WakeFd {
    pub(crate) fn new() -> std::io::Result<WakeFd> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(WakeFd(fd))
    }

    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A full counter (EAGAIN)
        // still leaves the fd readable, which is all that matters.
        let _ = unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd.
        let _ = unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
    }
}

impl Drop for WakeFd {
    fn drop(&mut self) {
        // SAFETY: the fd is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}
