//! The out-of-band control channel under a run: perftest's TCP socket, or with `-R` an RC QP
//! connected through rdma_cm, as perftest's `rdma_write_data` / `rdma_read_data` use it.
//!
//! Over rdma_cm every message is one signalled SEND, waited for before the next; the
//! receiver keeps one receive posted (perftest: exactly one, of 56 bytes, reposted after each
//! message is read), so the lock-step exchange never needs a second. The stream seen through
//! [`Read`] is the concatenation of the messages, which is what `softrdma_oob::perftest`
//! expects: both sides read exactly the sizes the other wrote.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use softrdma::{wr, CompletionQueue, MemoryRegion, QueuePair, WcOpcode, WcStatus};
use softrdma_rdmacm::{CmId, EventChannel};

/// How long one wait on a CQ may block before the shutdown flag and the deadline are looked at
/// again.
const TICK: Duration = Duration::from_millis(20);

/// A control QP's work request ids.
const RECV_ID: u64 = 1;
const SEND_ID: u64 = 2;

/// A handle on the control channel (clones share it).
pub(crate) enum Control {
    Tcp(TcpStream),
    Cm(Arc<CmControl>),
}

impl Control {
    /// Another handle on the same channel.
    pub(crate) fn try_clone(&self) -> io::Result<Control> {
        Ok(match self {
            Control::Tcp(s) => Control::Tcp(s.try_clone()?),
            Control::Cm(c) => Control::Cm(c.clone()),
        })
    }

    /// Limits every following read and write (`None`: wait without limit, as perftest does).
    pub(crate) fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Control::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Control::Cm(c) => {
                lock(&c.state).timeout = t;
                Ok(())
            }
        }
    }

    /// Whether the peer has sent something, without consuming it: it finished its part of
    /// the traffic and moved on to the next out-of-band step.
    pub(crate) fn peer_moved_on(&self) -> bool {
        match self {
            Control::Tcp(s) => {
                let _ = s.set_read_timeout(Some(Duration::from_micros(200)));
                let r = matches!(s.peek(&mut [0u8; 1]), Ok(n) if n > 0);
                let _ = s.set_read_timeout(None);
                r
            }
            Control::Cm(c) => c.message_waiting(),
        }
    }

    /// Ends every wait on the channel with an error (the `--timeout` watchdog).
    pub(crate) fn shutdown(&self) {
        match self {
            Control::Tcp(s) => {
                let _ = s.shutdown(Shutdown::Both);
            }
            Control::Cm(c) => c.shut.store(true, Ordering::Release),
        }
    }
}

impl Read for Control {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Control::Tcp(s) => s.read(buf),
            Control::Cm(c) => c.read(buf),
        }
    }
}

impl Write for Control {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Control::Tcp(s) => s.write(buf),
            Control::Cm(c) => c.send(buf).map(|()| buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Control::Tcp(s) => s.flush(),
            Control::Cm(_) => Ok(()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The rdma_cm control QP and its buffers: `mr` holds the send slot, then the receive slot,
/// `slot` bytes each.
pub(crate) struct CmControl {
    id: CmId,
    _events: EventChannel,
    qp: QueuePair,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
    slot: usize,
    state: Mutex<CmState>,
    shut: AtomicBool,
}

struct CmState {
    /// Bytes received and not read yet.
    pending: VecDeque<u8>,
    timeout: Option<Duration>,
    /// The peer disconnected (the QP flushed its receive).
    closed: bool,
}

impl CmControl {
    /// Wraps a connected (or accepted) id whose QP has `mr`'s receive slot posted
    /// ([`CmControl::post_first_recv`]).
    pub(crate) fn new(
        id: CmId,
        events: EventChannel,
        qp: QueuePair,
        (send_cq, recv_cq): (CompletionQueue, CompletionQueue),
        mr: MemoryRegion,
        slot: usize,
    ) -> CmControl {
        CmControl {
            id,
            _events: events,
            qp,
            send_cq,
            recv_cq,
            mr,
            slot,
            state: Mutex::new(CmState {
                pending: VecDeque::new(),
                timeout: Some(softrdma_oob::perftest::DEFAULT_TIMEOUT),
                closed: false,
            }),
            shut: AtomicBool::new(false),
        }
    }

    /// Posts the receive slot of `mr` on `qp`: before the connection, as perftest does, so
    /// the peer's first message finds it.
    pub(crate) fn post_first_recv(
        qp: &QueuePair,
        mr: &MemoryRegion,
        slot: usize,
    ) -> io::Result<()> {
        qp.post_recv([wr::recv(RECV_ID, vec![mr.sge(slot, slot as u32)])])
            .map_err(io::Error::other)
    }

    /// Disconnects the control connection (the run is over; perftest leaves this to its
    /// process exit, which has the kernel send the DREQ).
    pub(crate) fn disconnect(&self) {
        let _ = self.id.disconnect();
    }

    fn deadline(&self) -> Option<Instant> {
        lock(&self.state).timeout.map(|t| Instant::now() + t)
    }

    fn check_shut(&self) -> io::Result<()> {
        if self.shut.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the control connection was shut down",
            ));
        }
        Ok(())
    }

    /// One message: one signalled SEND, complete before returning.
    fn send(&self, msg: &[u8]) -> io::Result<()> {
        self.check_shut()?;
        if msg.len() > self.slot {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {}-byte control message (at most {})",
                    msg.len(),
                    self.slot
                ),
            ));
        }
        self.mr.write(0, msg).map_err(io::Error::other)?;
        self.qp
            .post_send([wr::send(SEND_ID, vec![self.mr.sge(0, msg.len() as u32)])])
            .map_err(io::Error::other)?;
        let deadline = self.deadline();
        let mut wcs = Vec::new();
        loop {
            wcs.clear();
            if self.send_cq.poll_blocking(1, &mut wcs, Some(TICK)) > 0 {
                let wc = wcs[0];
                if wc.status == WcStatus::Success {
                    return Ok(());
                }
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    format!("the control SEND failed: {}", wc.status.as_str()),
                ));
            }
            self.check_shut()?;
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(io::ErrorKind::TimedOut.into());
            }
        }
    }

    /// Moves a received message (if one arrives within `wait`) into `pending` and reposts the
    /// receive. `Ok(false)`: nothing arrived.
    fn receive(&self, st: &mut CmState, wait: Duration) -> io::Result<bool> {
        let mut wcs = Vec::new();
        // Passive: a server waits here for the whole run (for the client's closing message),
        // and a driving waiter would keep its device's progress thread off the socket, so
        // that a passive READ or WRITE target woke a thread for every request.
        if self.recv_cq.poll_blocking_passive(1, &mut wcs, Some(wait)) == 0 {
            return Ok(false);
        }
        let wc = wcs[0];
        match wc.status {
            WcStatus::Success if wc.opcode == WcOpcode::Recv => {
                let bytes = self
                    .mr
                    .read_vec(self.slot, (wc.byte_len as usize).min(self.slot))
                    .map_err(io::Error::other)?;
                st.pending.extend(bytes);
                Self::post_first_recv(&self.qp, &self.mr, self.slot)?;
                Ok(true)
            }
            // The peer disconnected: the QP went to ERR and flushed the receive.
            WcStatus::WrFlushErr => {
                st.closed = true;
                Ok(true)
            }
            other => Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                format!("the control receive failed: {}", other.as_str()),
            )),
        }
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let deadline = self.deadline();
        let mut st = lock(&self.state);
        while st.pending.is_empty() {
            if st.closed {
                return Ok(0);
            }
            self.check_shut()?;
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.receive(&mut st, TICK)?;
        }
        let n = buf.len().min(st.pending.len());
        for (b, p) in buf.iter_mut().zip(st.pending.drain(..n)) {
            *b = p;
        }
        Ok(n)
    }

    fn message_waiting(&self) -> bool {
        let mut st = lock(&self.state);
        if !st.pending.is_empty() || st.closed {
            return true;
        }
        matches!(self.receive(&mut st, Duration::from_micros(200)), Ok(true))
    }
}
