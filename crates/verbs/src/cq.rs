//! Completion queues, polled or waited on from threads and from async code.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use softrdma_proto::{CqHandle, WorkCompletion};

use crate::error::{AttachChannelError, CreateCqError, ResizeCqError};
use crate::event::CompletionChannel;
use crate::limits::MAX_CQE;
use crate::progress::{Access, CqNotify};
use crate::Device;

pub(crate) struct CqInner {
    device: Device,
    pub(crate) handle: CqHandle,
    notify: Arc<CqNotify>,
    /// Capacity; changed by [`CompletionQueue::resize`] under the device lock.
    cqe: std::sync::atomic::AtomicU32,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // Every QP using the CQ holds it, so none is left: this cannot be refused.
        self.device.inner().destroy_cq(self.handle);
    }
}

/// How often [`CompletionQueue::wait_activity`] looks whether another thread received a
/// datagram.
const ACTIVITY_CHECK: Duration = Duration::from_millis(1);

/// A completion queue (`ibv_cq`): one [`WorkCompletion`] per finished work request of the
/// queue pairs attached to it.
///
/// Poll it ([`poll`](Self::poll)), block a thread until a completion arrives
/// ([`wait`](Self::wait), [`poll_blocking`](Self::poll_blocking)), or await one from async
/// code ([`ready`](Self::ready), [`poll_async`](Self::poll_async)); these play the role of
/// ibverbs' completion channel (`ibv_req_notify_cq` + `ibv_get_cq_event`), without a runtime
/// dependency: the progress thread wakes the waiters whenever completions are added.
///
/// A cheap handle; it keeps its device alive.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("handle", &self.inner.handle.0)
            .field("cqe", &self.inner.cqe)
            .finish()
    }
}

impl CompletionQueue {
    pub(crate) fn new(device: Device, cqe: u32) -> Result<CompletionQueue, CreateCqError> {
        if cqe > MAX_CQE {
            return Err(CreateCqError::TooManyEntries {
                requested: cqe,
                max: MAX_CQE,
            });
        }
        let cqe = cqe.max(1);
        let notify = Arc::new(CqNotify::new().map_err(|e| CreateCqError::EventFd(e.kind()))?);
        let handle = device.inner().create_cq(cqe as usize, notify.clone());
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                device,
                handle,
                notify,
                cqe: cqe.into(),
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The CQ's id on its device: what [`AsyncEvent::CqOverrun`](crate::AsyncEvent) names.
    pub fn id(&self) -> u32 {
        self.inner.handle.0
    }

    /// Attaches the CQ to a completion channel (`ibv_create_cq`'s `channel` argument): once
    /// armed with [`req_notify`](Self::req_notify), the CQ's next completion writes one event
    /// carrying `token` to `channel`. A CQ reports to one channel for its whole life.
    pub fn attach_channel(
        &self,
        channel: &CompletionChannel,
        token: u64,
    ) -> Result<(), AttachChannelError> {
        self.inner
            .notify
            .channel
            .set((channel.pipe.clone(), token))
            .map_err(|_| AttachChannelError::AlreadyAttached)
    }

    /// Arms the CQ (`ibv_req_notify_cq`): its next completion produces one event on the
    /// attached channel. `solicited_only` asks for an event only on a solicited or error
    /// completion; softrdma does not yet record which completions were solicited, so it is
    /// treated like any completion (an extra wake-up, never a missed one).
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), AttachChannelError> {
        let _ = solicited_only;
        if self.inner.notify.channel.get().is_none() {
            return Err(AttachChannelError::NoChannel);
        }
        self.inner
            .notify
            .channel_armed
            .store(true, Ordering::Release);
        Ok(())
    }

    /// Capacity in completions (`cqe`).
    pub fn capacity(&self) -> u32 {
        self.inner.cqe.load(Ordering::Acquire)
    }

    /// Changes the capacity to `cqe` completions (`ibv_resize_cq`); completions waiting stay.
    /// Refused while more wait than `cqe` holds (poll them first), as rxe refuses.
    pub fn resize(&self, cqe: u32) -> Result<(), ResizeCqError> {
        if cqe > MAX_CQE {
            return Err(ResizeCqError::TooManyEntries {
                requested: cqe,
                max: MAX_CQE,
            });
        }
        let cqe = cqe.max(1);
        let handle = self.inner.handle;
        self.inner.device.inner().engine(Access::Query, |e, _| {
            let waiting = e.cq(handle).map_or(0, |q| q.len());
            match e.resize_cq(handle, cqe as usize) {
                Ok(()) => {}
                Err(softrdma_proto::EngineError::InvalidArgument(_)) => {
                    return Err(ResizeCqError::TooManyWaiting {
                        requested: cqe,
                        waiting,
                    })
                }
                // The CQ lives while this handle does: the engine knows it.
                Err(e) => unreachable!("resizing a live CQ: {e}"),
            }
            // Under the device lock, as the capacity's readers expect.
            self.inner.cqe.store(cqe, Ordering::Release);
            Ok(())
        })
    }

    /// Moves up to `max` completions, oldest first, to the end of `out`; returns how many
    /// (`ibv_poll_cq`). Never blocks on the network.
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let handle = self.inner.handle;
        self.inner.device.inner().engine(Access::Query, |e, _| {
            e.poll_cq(handle, max, out).unwrap_or(0)
        })
    }

    /// Like [`poll`](Self::poll), but when no completion waits, first runs one round of the
    /// device's progress on the calling thread (receive what has arrived, run due timers,
    /// transmit) without blocking. For applications that spin on a CQ — ibverbs'
    /// `ibv_poll_cq` loop — so that the spinning thread receives the datagram it waits for
    /// itself; while it keeps spinning, the progress thread leaves the socket to it.
    pub fn poll_progress(&self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let handle = self.inner.handle;
        self.poll_after(max, out, |out| {
            // Polled under the lock of the round, not after it with the lock taken again.
            self.inner.device.inner().engine(Access::Poll, |e, _| {
                e.poll_cq(handle, max, out).unwrap_or(0)
            })
        })
    }

    /// The oldest completion, if any.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        let mut v = Vec::with_capacity(1);
        self.poll(1, &mut v);
        v.pop()
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        let handle = self.inner.handle;
        self.inner
            .device
            .inner()
            .engine(Access::Query, |e, _| e.cq(handle).map_or(0, |c| c.len()))
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a completion was lost because the queue was full (ibverbs reports this as
    /// `IBV_EVENT_CQ_ERR`): size CQs for every outstanding work request.
    pub fn overrun(&self) -> bool {
        let handle = self.inner.handle;
        self.inner.device.inner().engine(Access::Query, |e, _| {
            e.cq(handle).is_some_and(|c| c.overrun)
        })
    }

    /// Blocks until at least one completion waits, at most `timeout` (`None`: forever).
    /// Returns whether one does.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        self.wait_inner(timeout, false)
    }

    /// Like [`wait`](Self::wait), but also returns as soon as the device received a datagram
    /// (true only if a completion waits on this CQ). For a thread that spins on more than this
    /// CQ — `ibv_poll_cq` on one CQ while watching memory for an RDMA WRITE, say — and wants
    /// to sleep while nothing at all happens instead of burning the core its peers need.
    pub fn wait_activity(&self, timeout: Option<Duration>) -> bool {
        self.wait_inner(timeout, true)
    }

    fn wait_inner(&self, timeout: Option<Duration>, until_activity: bool) -> bool {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let inner = self.inner.device.inner();
        // The waiting thread drives the device itself: a datagram that completes our work
        // wakes this thread directly rather than the progress thread, which would then have
        // to wake us — one context switch per hop instead of two.
        inner.start_polling();
        let rx_before = inner.datagrams_received();
        let notify = &self.inner.notify;
        let ready = loop {
            if !self.is_empty() {
                break true;
            }
            // Disarmed while this thread drives: completions it produces itself need no
            // wake-up call.
            let got = inner.drive();
            if !self.is_empty() {
                break true;
            }
            // Any datagram counts, whichever thread received it (the progress thread may
            // have been asleep on the socket too).
            if until_activity && inner.datagrams_received() != rx_before {
                break !self.is_empty();
            }
            if got {
                continue;
            }
            // Armed, then looked at once more: a completion another thread adds after this
            // check writes the CQ's event fd, and the sleep below returns at once.
            notify.armed.store(true, Ordering::Release);
            if !self.is_empty() {
                break true;
            }
            let Some(left) = time_left(deadline) else {
                break false;
            };
            if inner.busy_poll {
                std::hint::spin_loop();
                continue;
            }
            // Wait for a datagram, a completion another thread produced, or the engine's next
            // timer: while this thread waits, the device's timers are its job too.
            let sleep = match (left, inner.until_next_timer()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // A datagram the progress thread takes (it may still watch the socket when this
            // wait starts) wakes nobody here: look at the receive counter every millisecond.
            let sleep = if until_activity {
                Some(sleep.map_or(ACTIVITY_CHECK, |s| s.min(ACTIVITY_CHECK)))
            } else {
                sleep
            };
            inner.sleep_for_cq(&notify.fd, sleep);
        };
        notify.armed.store(false, Ordering::Release);
        inner.stop_polling();
        ready
    }

    /// Polls up to `max` completions into `out`, first waiting up to `timeout` for one to
    /// arrive. Returns how many were polled (0 on timeout).
    pub fn poll_blocking(
        &self,
        max: usize,
        out: &mut Vec<WorkCompletion>,
        timeout: Option<Duration>,
    ) -> usize {
        self.poll_after(max, out, |out| self.poll_if(self.wait(timeout), max, out))
    }

    /// Polls up to `max` completions into `out`; if there are none, returns what `otherwise`
    /// polls (after waiting or driving the device).
    fn poll_after(
        &self,
        max: usize,
        out: &mut Vec<WorkCompletion>,
        otherwise: impl FnOnce(&mut Vec<WorkCompletion>) -> usize,
    ) -> usize {
        let n = self.poll(max, out);
        if n > 0 || max == 0 {
            return n;
        }
        otherwise(out)
    }

    /// Polls after a wait that says whether a completion arrived.
    fn poll_if(&self, arrived: bool, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        if arrived {
            self.poll(max, out)
        } else {
            0
        }
    }

    /// Like [`poll_blocking`](Self::poll_blocking), but the waiting thread does not drive the
    /// device: it sleeps on this CQ's wake-up alone and leaves the socket to the progress
    /// thread (or to an application thread spinning on a CQ), which hands it the completions.
    /// For a thread that waits for rare completions, such as rdma_cm's, waiting for MADs: as
    /// a driving waiter it would be woken by every datagram the device receives, and the
    /// progress thread, which leaves the socket to waiters, would never spin for a busy
    /// responder. Two hand-offs per completion instead of one: not for a data path.
    pub fn poll_blocking_passive(
        &self,
        max: usize,
        out: &mut Vec<WorkCompletion>,
        timeout: Option<Duration>,
    ) -> usize {
        self.poll_after(max, out, |out| {
            self.poll_if(self.wait_passive(timeout), max, out)
        })
    }

    /// Sleeps on this CQ's wake-up until a completion waits or `timeout` passes (see
    /// [`poll_blocking_passive`](Self::poll_blocking_passive)); returns whether one waits.
    fn wait_passive(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let notify = &self.inner.notify;
        let ready = loop {
            // Armed, then looked at once more: a completion added after this look writes the
            // wake-up, and the sleep returns at once.
            notify.armed.store(true, Ordering::Release);
            if !self.is_empty() {
                break true;
            }
            let Some(left) = time_left(deadline) else {
                break false;
            };
            self.inner
                .device
                .inner()
                .sleep_for_cq_only(&notify.fd, left);
        };
        notify.armed.store(false, Ordering::Release);
        ready
    }

    /// A future that resolves once at least one completion waits to be polled. Works with any
    /// executor: the progress thread calls the task's waker.
    pub fn ready(&self) -> CqReady<'_> {
        CqReady { cq: self }
    }

    /// Waits (asynchronously) for completions, then polls up to `max` of them into `out`.
    pub async fn poll_async(&self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        loop {
            self.ready().await;
            let n = self.poll(max, out);
            if n > 0 || max == 0 {
                return n;
            }
        }
    }
}

/// Future returned by [`CompletionQueue::ready`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct CqReady<'a> {
    cq: &'a CompletionQueue,
}

impl Future for CqReady<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let inner = &self.cq.inner;
        // Check and register under the core lock: completions are added, and waiters woken,
        // under the same lock, so none can slip between the check and the registration.
        inner.device.inner().engine(Access::Query, |e, _| {
            if e.cq(inner.handle).is_some_and(|c| !c.is_empty()) {
                return Poll::Ready(());
            }
            let mut st = inner.notify.lock();
            if !st.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                st.wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

/// The time left until `deadline` (`Some(None)` without one); `None` once it has passed.
fn time_left(deadline: Option<Instant>) -> Option<Option<Duration>> {
    match deadline {
        None => Some(None),
        Some(d) => d
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .map(Some),
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        wr, AccessFlags, ConnectOptions, Device, DeviceConfig, QpInitAttr, WcOpcode, WcStatus,
    };
    use std::time::{Duration, Instant};

    /// A passive waiter (rdma_cm's, waiting for MADs) does not take the device's socket: the
    /// progress thread receives, and hands it the completion through the CQ's wake-up; with
    /// nothing to hand, it times out. A driving waiter counts as one of the device's pollers.
    #[test]
    fn a_passive_waiter_leaves_the_socket_to_the_progress_thread() {
        let open = |ip: &str| Device::open(DeviceConfig::new(ip.parse().unwrap())).unwrap();
        let (da, db) = (open("127.0.11.27"), open("127.0.11.28"));
        let (pa, pb) = (da.alloc_pd(), db.alloc_pd());
        let (ca, cb) = (da.create_cq(8).unwrap(), db.create_cq(8).unwrap());
        let qa = pa.create_qp(&QpInitAttr::rc(&ca)).unwrap();
        let qb = pb.create_qp(&QpInitAttr::rc(&cb)).unwrap();
        let opts = ConnectOptions::default();
        qa.connect(&qb.endpoint(), &opts).unwrap();
        qb.connect(&qa.endpoint(), &opts).unwrap();
        let (ma, mb) = (
            pa.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap(),
            pb.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap(),
        );
        qb.post_recv([wr::recv(7, vec![mb.sge(0, 64)])]).unwrap();

        let mut wcs = Vec::new();
        let asked = Instant::now();
        let none = cb.poll_blocking_passive(4, &mut wcs, Some(Duration::from_millis(30)));
        assert_eq!(none, 0);
        assert!(asked.elapsed() >= Duration::from_millis(30));

        let waiting = cb.clone();
        let waiter = std::thread::spawn(move || {
            let mut wcs = Vec::new();
            waiting.poll_blocking_passive(4, &mut wcs, Some(Duration::from_secs(10)));
            wcs
        });
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            db.inner().waiters_driving(),
            0,
            "the passive waiter took the socket"
        );
        ma.write(0, b"handed!!").unwrap();
        qa.post_send([wr::send(1, vec![ma.sge(0, 8)])]).unwrap();
        let wcs = waiter.join().unwrap();
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        assert_eq!(
            (wcs[0].wr_id, wcs[0].opcode, wcs[0].status),
            (7, WcOpcode::Recv, WcStatus::Success)
        );
        let mut got = [0u8; 8];
        mb.read(0, &mut got).unwrap();
        assert_eq!(&got, b"handed!!");

        // A driving waiter, for contrast, is one of the pollers while it waits.
        let waiting = cb.clone();
        let driving = std::thread::spawn(move || {
            let mut wcs = Vec::new();
            waiting.poll_blocking(4, &mut wcs, Some(Duration::from_millis(200)))
        });
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(db.inner().waiters_driving(), 1);
        assert_eq!(driving.join().unwrap(), 0);
    }
}
