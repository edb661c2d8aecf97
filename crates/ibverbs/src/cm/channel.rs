//! Event channels (`struct rdma_event_channel`) and the events they deliver.
//!
//! softrdma's rdma_cm (`softrdma_rdmacm`) delivers every id's events to one Rust channel of
//! the library's; a thread of the library's takes them from there, makes them C events and
//! queues each on the channel its id is on *now* (so `rdma_migrate_id` only changes where
//! the next ones go). A channel's descriptor is an eventfd that is readable exactly while
//! events wait: programs poll, epoll and `fcntl(O_NONBLOCK)` it as librdmacm's.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Condvar, Mutex, MutexGuard};

use softrdma_rdmacm::CmEvent;

use super::abi::*;
use crate::util::{is_live, register, unregister, Kind};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An event as the program gets it: the C struct first (the pointer the program holds), then
/// what its pointers point into and the Rust event, whose handles keep the ids alive until
/// the program acknowledges it.
#[repr(C)]
pub(crate) struct Event {
    pub raw: rdma_cm_event,
    /// `param.conn.private_data` / `param.ud.private_data` point here.
    pub private_data: Vec<u8>,
    pub rust: Option<CmEvent>,
}

// SAFETY: the raw pointers name ids and data that live as long as the event; the event moves
// between threads only through a channel's queue.
unsafe impl Send for Event {}

/// A channel: the C struct first.
#[repr(C)]
pub(crate) struct Channel {
    pub raw: rdma_event_channel,
    fd: OwnedFd,
    queue: Mutex<VecDeque<Box<Event>>>,
    ready: Condvar,
    /// A channel of a synchronous id (one created with a NULL channel): private to the id.
    pub private: bool,
}

impl Channel {
    /// A new channel, registered.
    pub(crate) fn create(private: bool) -> Result<*mut Channel, c_int> {
        // SAFETY: eventfd has no memory arguments; the descriptor is checked below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        // SAFETY: a descriptor just opened and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let ch = Box::into_raw(Box::new(Channel {
            raw: rdma_event_channel { fd: raw },
            fd,
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            private,
        }));
        register(ch, Kind::CmChannel, std::ptr::null_mut::<()>());
        Ok(ch)
    }

    /// The channel behind a live handle.
    pub(crate) fn from_handle<'a>(ch: *mut rdma_event_channel) -> Result<&'a Channel, c_int> {
        if !is_live(ch, Kind::CmChannel) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live channel handles are boxed `Channel`s (raw first) until destroyed.
        Ok(unsafe { &*ch.cast::<Channel>() })
    }

    pub(crate) fn handle(&self) -> *mut rdma_event_channel {
        std::ptr::from_ref(&self.raw).cast_mut()
    }

    /// Makes the descriptor readable (a first event) or not (the last one taken).
    fn signal(&self, readable: bool) {
        let fd = self.fd.as_raw_fd();
        if readable {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd.
            let _ = unsafe { libc::write(fd, std::ptr::from_ref(&one).cast(), 8) };
        } else {
            let mut n = 0u64;
            // SAFETY: reads 8 bytes into a live u64 from our eventfd, whose count is 1 (it
            // was written when the first event came), so the read does not block even if the
            // program made the descriptor blocking.
            let _ = unsafe { libc::read(fd, std::ptr::from_mut(&mut n).cast(), 8) };
        }
    }

    /// Queues an event.
    pub(crate) fn push(&self, e: Box<Event>) {
        let mut q = lock(&self.queue);
        q.push_back(e);
        if q.len() == 1 {
            self.signal(true);
        }
        self.ready.notify_all();
    }

    /// Takes the events `pick` selects out of the queue (an id destroyed or migrated). Boxed
    /// as in the queue: an event reaches the program as the address of its box.
    #[allow(clippy::vec_box)]
    pub(crate) fn take_where(&self, mut pick: impl FnMut(&Event) -> bool) -> Vec<Box<Event>> {
        let mut q = lock(&self.queue);
        let was = q.len();
        let (taken, kept): (Vec<_>, Vec<_>) = q.drain(..).partition(|e| pick(e));
        q.extend(kept);
        if was != 0 && q.is_empty() {
            self.signal(false);
        }
        taken
    }

    fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on our own descriptor.
        let flags = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_GETFL) };
        flags >= 0 && flags & libc::O_NONBLOCK != 0
    }

    /// The next event: waits for one unless the program made the descriptor non-blocking
    /// (then `EAGAIN`, as librdmacm's read of the kernel's descriptor).
    pub(crate) fn next(&self, wait: bool) -> Result<Box<Event>, c_int> {
        let mut q = lock(&self.queue);
        loop {
            if let Some(e) = q.pop_front() {
                if q.is_empty() {
                    self.signal(false);
                }
                return Ok(e);
            }
            if !wait || self.nonblocking() {
                return Err(libc::EAGAIN);
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Frees a channel (a private one when its id is destroyed; the program's own when it has
/// no ids left).
pub(crate) fn destroy_private(channel: *mut rdma_event_channel) {
    if unregister(channel, Kind::CmChannel) {
        // SAFETY: a live, now unregistered channel: a boxed `Channel`, freed once.
        drop(unsafe { Box::from_raw(channel.cast::<Channel>()) });
    }
}
