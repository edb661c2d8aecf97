//! Event descriptors: completion channels (ibverbs `ibv_comp_channel`) and a device's
//! asynchronous events (the `async_fd` of an `ibv_context`).
//!
//! Both are a pipe carrying fixed-size records, so the read end is an ordinary file
//! descriptor that `poll(2)`, `epoll(7)` or an async runtime's reactor can watch, exactly like
//! the descriptors the kernel's uverbs hands out: readable while an event is pending, one
//! record per event. The device writes records under its lock, non-blocking (a full pipe drops
//! the event and counts it; with one completion event per [`CompletionQueue::req_notify`] the
//! pipe holds thousands of them).
//!
//! [`CompletionQueue::req_notify`]: crate::CompletionQueue::req_notify

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One record: a kind and a 64-bit value.
const RECORD_BYTES: usize = 16;

/// A pipe of event records (the shared part of a channel).
#[derive(Debug)]
pub(crate) struct EventPipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Records dropped because the pipe was full.
    dropped: AtomicU64,
}

impl EventPipe {
    fn new() -> io::Result<EventPipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the live two-element array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The device must never block on a full pipe; the reader's end stays as the
        // application sets it (blocking by default, like uverbs' descriptors).
        let fd = write.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventPipe {
            read,
            write,
            dropped: AtomicU64::new(0),
        })
    }

    /// Appends a record; never blocks.
    pub(crate) fn push(&self, kind: u32, value: u64) {
        let mut rec = [0u8; RECORD_BYTES];
        rec[..4].copy_from_slice(&kind.to_ne_bytes());
        rec[8..].copy_from_slice(&value.to_ne_bytes());
        // SAFETY: writes RECORD_BYTES bytes from a live array to our own pipe. Writes of at
        // most PIPE_BUF bytes are atomic, so records never interleave.
        let n = unsafe { libc::write(self.write.as_raw_fd(), rec.as_ptr().cast(), RECORD_BYTES) };
        if n != RECORD_BYTES as isize {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reads one record: blocks unless the application made the read end non-blocking, in
    /// which case an empty pipe is `WouldBlock`.
    fn pop(&self) -> io::Result<(u32, u64)> {
        let mut rec = [0u8; RECORD_BYTES];
        loop {
            // SAFETY: reads at most RECORD_BYTES bytes into a live array from our own pipe.
            let n =
                unsafe { libc::read(self.read.as_raw_fd(), rec.as_mut_ptr().cast(), RECORD_BYTES) };
            if n == RECORD_BYTES as isize {
                let kind = u32::from_ne_bytes([rec[0], rec[1], rec[2], rec[3]]);
                let mut v = [0u8; 8];
                v.copy_from_slice(&rec[8..]);
                return Ok((kind, u64::from_ne_bytes(v)));
            }
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // Records are written whole and read whole: a short read cannot happen.
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short event record",
            ));
        }
    }
}

/// A completion channel (`ibv_comp_channel`): a file descriptor that becomes readable when a
/// completion queue attached to it, armed with [`req_notify`], gets a completion.
///
/// Attach CQs with [`CompletionQueue::attach_channel`], giving each a token; each event
/// [`get_event`](Self::get_event) returns is the token of the CQ that fired. As in ibverbs,
/// an armed CQ produces one event and must be armed again; arm, then poll the CQ empty, then
/// wait, so that a completion that arrived before the arming is not missed.
///
/// [`req_notify`]: crate::CompletionQueue::req_notify
/// [`CompletionQueue::attach_channel`]: crate::CompletionQueue::attach_channel
#[derive(Debug, Clone)]
pub struct CompletionChannel {
    pub(crate) pipe: Arc<EventPipe>,
}

impl CompletionChannel {
    /// A new channel (a pipe; fails only when out of file descriptors).
    pub fn new() -> io::Result<CompletionChannel> {
        Ok(CompletionChannel {
            pipe: Arc::new(EventPipe::new()?),
        })
    }

    /// Waits for the next event and returns the token of the CQ that fired. Blocks unless
    /// the descriptor was made non-blocking (`fcntl(fd, F_SETFL, O_NONBLOCK)`), in which case
    /// no pending event is [`io::ErrorKind::WouldBlock`].
    pub fn get_event(&self) -> io::Result<u64> {
        self.pipe.pop().map(|(_, token)| token)
    }

    /// Events lost because more than the pipe's capacity were pending.
    pub fn dropped(&self) -> u64 {
        self.pipe.dropped.load(Ordering::Relaxed)
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.pipe.read.as_raw_fd()
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.pipe.read.as_fd()
    }
}

/// An asynchronous event of a device (ibverbs `ibv_async_event`): something that happened
/// outside any work request's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// A completion queue overran: a completion was lost because the queue was full
    /// (`IBV_EVENT_CQ_ERR`). Carries [`CompletionQueue::id`](crate::CompletionQueue::id).
    CqOverrun {
        /// The CQ's id.
        cq: u32,
    },
    /// A QP broke down without a work request to report it on (`IBV_EVENT_QP_FATAL`).
    QpFatal {
        /// The QP number.
        qp: u32,
    },
    /// An incoming request was invalid and moved the responder QP to the error state
    /// (`IBV_EVENT_QP_REQ_ERR`).
    QpRequestError {
        /// The QP number.
        qp: u32,
    },
    /// An incoming request violated access rights and moved the responder QP to the error
    /// state (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessError {
        /// The QP number.
        qp: u32,
    },
    /// A QP on a shared receive queue entered the error state and will take no further
    /// receive from it (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached {
        /// The QP number.
        qp: u32,
    },
    /// A shared receive queue's work requests dropped below its armed limit
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`); the limit is disarmed until armed again. Carries
    /// [`SharedReceiveQueue::id`](crate::SharedReceiveQueue::id).
    SrqLimitReached {
        /// The SRQ's id.
        srq: u32,
    },
    /// The port became active (`IBV_EVENT_PORT_ACTIVE`).
    PortActive,
    /// The port went down (`IBV_EVENT_PORT_ERR`).
    PortError,
}

const EVENT_CQ_OVERRUN: u32 = 1;
const EVENT_QP_FATAL: u32 = 2;
const EVENT_QP_REQ_ERR: u32 = 3;
const EVENT_QP_ACCESS_ERR: u32 = 4;
const EVENT_QP_LAST_WQE: u32 = 5;
const EVENT_SRQ_LIMIT: u32 = 6;
const EVENT_PORT_ACTIVE: u32 = 7;
const EVENT_PORT_ERR: u32 = 8;

impl AsyncEvent {
    fn encode(self) -> (u32, u64) {
        match self {
            AsyncEvent::CqOverrun { cq } => (EVENT_CQ_OVERRUN, u64::from(cq)),
            AsyncEvent::QpFatal { qp } => (EVENT_QP_FATAL, u64::from(qp)),
            AsyncEvent::QpRequestError { qp } => (EVENT_QP_REQ_ERR, u64::from(qp)),
            AsyncEvent::QpAccessError { qp } => (EVENT_QP_ACCESS_ERR, u64::from(qp)),
            AsyncEvent::QpLastWqeReached { qp } => (EVENT_QP_LAST_WQE, u64::from(qp)),
            AsyncEvent::SrqLimitReached { srq } => (EVENT_SRQ_LIMIT, u64::from(srq)),
            AsyncEvent::PortActive => (EVENT_PORT_ACTIVE, 0),
            AsyncEvent::PortError => (EVENT_PORT_ERR, 0),
        }
    }

    fn decode(kind: u32, value: u64) -> Option<AsyncEvent> {
        let id = u32::try_from(value).ok()?;
        Some(match kind {
            EVENT_CQ_OVERRUN => AsyncEvent::CqOverrun { cq: id },
            EVENT_QP_FATAL => AsyncEvent::QpFatal { qp: id },
            EVENT_QP_REQ_ERR => AsyncEvent::QpRequestError { qp: id },
            EVENT_QP_ACCESS_ERR => AsyncEvent::QpAccessError { qp: id },
            EVENT_QP_LAST_WQE => AsyncEvent::QpLastWqeReached { qp: id },
            EVENT_SRQ_LIMIT => AsyncEvent::SrqLimitReached { srq: id },
            EVENT_PORT_ACTIVE => AsyncEvent::PortActive,
            EVENT_PORT_ERR => AsyncEvent::PortError,
            _ => return None,
        })
    }

    /// The event the engine raised, as the application sees it (`None` for the CQ error,
    /// which the device reports from the CQ's own overrun flag).
    pub(crate) fn from_engine(e: softrdma_proto::AsyncEvent) -> Option<AsyncEvent> {
        use softrdma_proto::AsyncEvent as E;
        Some(match e {
            E::CqError(_) => return None,
            E::QpFatal(qp) => AsyncEvent::QpFatal { qp },
            E::QpRequestError(qp) => AsyncEvent::QpRequestError { qp },
            E::QpAccessError(qp) => AsyncEvent::QpAccessError { qp },
            E::QpLastWqeReached(qp) => AsyncEvent::QpLastWqeReached { qp },
            E::SrqLimitReached(srq) => AsyncEvent::SrqLimitReached { srq: srq.0 },
            E::PortActive => AsyncEvent::PortActive,
            E::PortError => AsyncEvent::PortError,
        })
    }
}

/// The asynchronous events of a device ([`Device::async_events`](crate::Device::async_events)):
/// a file descriptor readable while events are pending, and [`get_event`](Self::get_event).
#[derive(Debug, Clone)]
pub struct AsyncEvents {
    pub(crate) pipe: Arc<EventPipe>,
}

impl AsyncEvents {
    pub(crate) fn new() -> io::Result<AsyncEvents> {
        Ok(AsyncEvents {
            pipe: Arc::new(EventPipe::new()?),
        })
    }

    pub(crate) fn push(&self, event: AsyncEvent) {
        let (kind, value) = event.encode();
        self.pipe.push(kind, value);
    }

    /// Waits for the next event (blocking unless the descriptor was made non-blocking, then
    /// [`io::ErrorKind::WouldBlock`] when none is pending).
    pub fn get_event(&self) -> io::Result<AsyncEvent> {
        loop {
            let (kind, value) = self.pipe.pop()?;
            if let Some(e) = AsyncEvent::decode(kind, value) {
                return Ok(e);
            }
        }
    }
}

impl AsRawFd for AsyncEvents {
    fn as_raw_fd(&self) -> RawFd {
        self.pipe.read.as_raw_fd()
    }
}

impl AsFd for AsyncEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.pipe.read.as_fd()
    }
}
