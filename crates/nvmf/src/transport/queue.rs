//! One queue of the target: an RC QP whose receives hold command capsules, run on a thread
//! of its own. Per command: parse, check ([`Session::precheck`], [`map_sgl`]), pull keyed
//! data with RDMA READ, execute, push data with RDMA WRITE, send the response (with
//! Invalidate when the host asked). A completion in error other than a flush is a transport
//! error: the controller ends (fatal status), as nvmet-rdma's `nvmet_rdma_error_comp`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softrdma::{
    wr, AccessFlags, CompletionQueue, MemoryRegion, QpInitAttr, QueuePair, SendFlags, SendOp,
    SendWr, WcStatus, WorkCompletion,
};
use softrdma_rdmacm::CmId;

use super::pool::BufferPool;
use super::sgl::{map_sgl, DataPlan};
use super::stats::StatsInner;
use crate::controller::{Outcome, QueueHandle, Registry, Request, Response, Session};
use crate::wire::cqe::Status;
use crate::wire::sqe::{offset, DataDirection, Sqe, SQE_LEN};

const KIND_SHIFT: u32 = 60;
const RECV: u64 = 1 << KIND_SHIFT;
const READ: u64 = 2 << KIND_SHIFT;
const SEND: u64 = 3 << KIND_SHIFT;
const WRITE: u64 = 4 << KIND_SHIFT;
const KIND_MASK: u64 = 0xf << KIND_SHIFT;
/// How long a queue thread sleeps between checks of its stop flag.
const TICK: Duration = Duration::from_millis(50);

/// What the listener and the controller share with a queue's thread.
#[derive(Debug, Default)]
pub(crate) struct QueueShared {
    stop: AtomicBool,
}

impl QueueShared {
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

impl QueueHandle for QueueShared {
    fn shut_down(&self) {
        self.stop();
    }
}

/// Why a queue's loop ends.
enum End {
    /// Work flushed: the QP went to the error state (a disconnect).
    Flushed,
    /// A transport error.
    Fatal(String),
}

/// A command being served.
struct Slot {
    sqe: Sqe,
    plan: DataPlan,
    buf: Option<MemoryRegion>,
}

pub(crate) struct Queue {
    id: CmId,
    qp: QueuePair,
    cq: CompletionQueue,
    recv_mr: MemoryRegion,
    capsule_len: usize,
    in_capsule_max: usize,
    max_transfer: u32,
    remote_invalidate: bool,
    session: Session,
    pool: BufferPool,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<usize>,
    waiting: VecDeque<usize>,
    shared: Arc<QueueShared>,
    stats: Arc<StatsInner>,
}

impl Queue {
    /// A queue `qid` of `entries` commands on the connect request's `id`: CQ, QP (to INIT),
    /// receive buffers posted, ready for `accept`.
    pub(crate) fn new(
        id: &CmId,
        registry: &Arc<Registry>,
        qid: u16,
        entries: u16,
        budget: usize,
        stats: Arc<StatsInner>,
    ) -> Result<(Queue, Arc<QueueShared>), String> {
        let pd = id.pd().ok_or("the id has no device")?;
        let device = id.device().ok_or("the id has no device")?;
        let n = u32::from(entries);
        let cq = device.create_cq(3 * n + 16).map_err(|e| e.to_string())?;
        let mut init = QpInitAttr::rc(&cq);
        init.sq_sig_all = false;
        init.cap.max_send_wr = 2 * n + 8;
        init.cap.max_recv_wr = n;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = 64;
        let qp = id.create_qp(&pd, &init).map_err(|e| e.to_string())?;
        let limits = registry.limits;
        let in_capsule_max = limits.in_capsule_data as usize;
        let capsule_len = SQE_LEN + in_capsule_max;
        let recv_mr = pd
            .reg_mr(usize::from(entries) * capsule_len, AccessFlags::LOCAL_WRITE)
            .map_err(|e| e.to_string())?;
        let shared = Arc::new(QueueShared::default());
        let queue = Queue {
            id: id.clone(),
            qp,
            cq,
            recv_mr,
            capsule_len,
            in_capsule_max,
            max_transfer: limits.max_transfer(),
            remote_invalidate: limits.remote_invalidate,
            session: Session::new(registry.clone(), qid, entries, shared.clone()),
            pool: BufferPool::new(pd, budget),
            slots: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            shared: shared.clone(),
            stats,
        };
        for i in 0..usize::from(entries) {
            queue.post_recv(i).map_err(|e| match e {
                End::Fatal(s) => s,
                End::Flushed => "the QP is not ready".into(),
            })?;
        }
        Ok((queue, shared))
    }

    fn post_recv(&self, i: usize) -> Result<(), End> {
        let sge = self
            .recv_mr
            .sge(i * self.capsule_len, self.capsule_len as u32);
        self.qp
            .post_recv([wr::recv(RECV | i as u64, vec![sge])])
            .map_err(|e| End::Fatal(format!("post_recv: {e}")))
    }

    /// Serves the queue until it is disconnected, stopped, or fails.
    pub(crate) fn run(mut self) {
        let qid = self.session.qid();
        let mut wcs = Vec::with_capacity(64);
        let end = 'serve: loop {
            if self.shared.stopped() {
                break None;
            }
            wcs.clear();
            self.cq.poll_blocking(64, &mut wcs, Some(TICK));
            for wc in &wcs {
                if let Err(end) = self.on_completion(wc) {
                    break 'serve Some(end);
                }
            }
        };
        let fatal = match end {
            Some(End::Fatal(why)) => {
                tracing::warn!("queue {qid}: transport error: {why}");
                self.stats.fatal_errors.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => false,
        };
        self.session.close(fatal);
        let _ = self.id.disconnect();
        self.stats.queues_closed.fetch_add(1, Ordering::Relaxed);
    }

    fn on_completion(&mut self, wc: &WorkCompletion) -> Result<(), End> {
        let tag = (wc.wr_id & !KIND_MASK) as usize;
        let kind = wc.wr_id & KIND_MASK;
        if wc.status == WcStatus::WrFlushErr {
            return Err(End::Flushed);
        }
        if wc.status != WcStatus::Success {
            let what = match kind {
                RECV => "receive",
                READ => "RDMA READ",
                SEND => "response SEND",
                _ => "RDMA WRITE",
            };
            return Err(End::Fatal(format!("{what} failed: {}", wc.status.as_str())));
        }
        match kind {
            RECV => {
                let len = wc.byte_len as usize;
                if len < SQE_LEN {
                    self.stats.short_capsules.fetch_add(1, Ordering::Relaxed);
                    return Err(End::Fatal(format!("a {len}-byte capsule (less than 64)")));
                }
                let at = tag * self.capsule_len;
                let bytes = self
                    .recv_mr
                    .read_vec(at, len.min(self.capsule_len))
                    .map_err(|e| End::Fatal(e.to_string()))?;
                self.post_recv(tag)?;
                self.on_capsule(&bytes)
            }
            READ => {
                let Some(slot) = self.slots.get(tag).and_then(Option::as_ref) else {
                    return Ok(());
                };
                let len = slot.plan.len() as usize;
                let data = match &slot.buf {
                    Some(buf) => buf
                        .read_vec(0, len)
                        .map_err(|e| End::Fatal(e.to_string()))?,
                    None => Vec::new(),
                };
                self.execute(tag, &data)
            }
            SEND => {
                self.release(tag);
                self.start_waiting()
            }
            _ => Ok(()),
        }
    }

    fn new_slot(&mut self, sqe: Sqe, plan: DataPlan) -> usize {
        let slot = Some(Slot {
            sqe,
            plan,
            buf: None,
        });
        match self.free_slots.pop() {
            Some(t) => {
                self.slots[t] = slot;
                t
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }
    }

    fn release(&mut self, tag: usize) {
        if let Some(slot) = self.slots.get_mut(tag).and_then(Option::take) {
            if let Some(buf) = slot.buf {
                self.pool.put(buf);
            }
            self.free_slots.push(tag);
        }
    }

    fn on_capsule(&mut self, bytes: &[u8]) -> Result<(), End> {
        let Ok(sqe) = Sqe::parse(bytes) else {
            return Err(End::Fatal("unparsable command".into()));
        };
        self.stats.capsules.fetch_add(1, Ordering::Relaxed);
        let icd = &bytes[SQE_LEN..];
        if let Err(r) = self.session.precheck(&sqe) {
            let tag = self.new_slot(sqe, DataPlan::None);
            return self.respond(tag, r);
        }
        let plan = match map_sgl(&sqe, icd.len(), self.in_capsule_max) {
            Ok(plan) if plan.len() > self.max_transfer.max(4096) => {
                // More than MDTS allows: refused before any buffer is registered for it.
                let r = Response::invalid(Status::INVALID_FIELD.dnr(), offset::DPTR);
                let tag = self.new_slot(sqe, plan);
                let r = self.session.failed(&sqe, r);
                return self.respond(tag, r);
            }
            Ok(plan) => plan,
            Err(r) => {
                let r = self.session.failed(&sqe, r);
                let tag = self.new_slot(sqe, DataPlan::None);
                return self.respond(tag, r);
            }
        };
        let tag = self.new_slot(sqe, plan);
        match (plan, sqe.direction()) {
            (
                DataPlan::Keyed { .. },
                DataDirection::HostToController | DataDirection::ControllerToHost,
            ) => {
                if self.waiting.is_empty() {
                    self.start_transfer(tag)
                } else {
                    self.waiting.push_back(tag);
                    Ok(())
                }
            }
            (DataPlan::InCapsule { offset, len }, _) => {
                let data = icd.get(offset..offset + len).unwrap_or(&[]).to_vec();
                self.execute(tag, &data)
            }
            _ => self.execute(tag, &[]),
        }
    }

    /// Gets the command's buffer (or leaves it waiting for one), then READs its data or
    /// executes it.
    fn start_transfer(&mut self, tag: usize) -> Result<(), End> {
        let Some(slot) = self.slots.get(tag).and_then(Option::as_ref) else {
            return Ok(());
        };
        let (plan, direction) = (slot.plan, slot.sqe.direction());
        let buf = match self.pool.get(plan.len() as usize) {
            Ok(Some(buf)) => buf,
            Ok(None) => {
                self.waiting.push_back(tag);
                return Ok(());
            }
            Err(e) => {
                tracing::warn!("no buffer of {} bytes: {e}", plan.len());
                return self.respond(tag, Response::status(Status::INTERNAL));
            }
        };
        let sge = buf.sge(0, plan.len());
        if let Some(slot) = self.slots.get_mut(tag).and_then(Option::as_mut) {
            slot.buf = Some(buf);
        }
        match (direction, plan) {
            (DataDirection::HostToController, DataPlan::Keyed { addr, key, .. }) => {
                let mut read = wr::read(READ | tag as u64, vec![sge], addr, key);
                read.flags = SendFlags::SIGNALED;
                self.qp
                    .post_send([read])
                    .map_err(|e| End::Fatal(format!("post RDMA READ: {e}")))
            }
            _ => self.execute(tag, &[]),
        }
    }

    fn start_waiting(&mut self) -> Result<(), End> {
        while let Some(tag) = self.waiting.pop_front() {
            let before = self.waiting.len();
            self.start_transfer(tag)?;
            if self.waiting.len() > before {
                // Went back to waiting (at the end): put it first again and stop.
                if let Some(t) = self.waiting.pop_back() {
                    self.waiting.push_front(t);
                }
                break;
            }
        }
        Ok(())
    }

    fn execute(&mut self, tag: usize, data: &[u8]) -> Result<(), End> {
        let Some(slot) = self.slots.get(tag).and_then(Option::as_ref) else {
            return Ok(());
        };
        let sqe = slot.sqe;
        let req = Request {
            sqe: &sqe,
            data,
            transfer_len: slot.plan.len(),
        };
        match self.session.execute(&req, Instant::now()) {
            Outcome::Complete(r) => self.respond(tag, r),
            Outcome::Held => {
                self.release(tag);
                Ok(())
            }
        }
    }

    /// Sends the response (after the data, for a successful read into a keyed buffer).
    fn respond(&mut self, tag: usize, r: Response) -> Result<(), End> {
        let Some(slot) = self.slots.get(tag).and_then(Option::as_ref) else {
            return Ok(());
        };
        if !r.status.is_success() {
            self.stats.errors_answered.fetch_add(1, Ordering::Relaxed);
        }
        let cqe = self.session.cqe(slot.sqe.cid, &r).emit();
        let mut wrs = Vec::with_capacity(2);
        if let (DataPlan::Keyed { addr, len, key, .. }, Some(buf), true) = (
            slot.plan,
            &slot.buf,
            r.status.is_success() && !r.data.is_empty(),
        ) {
            let n = r.data.len().min(len as usize);
            buf.write(0, &r.data[..n])
                .map_err(|e| End::Fatal(e.to_string()))?;
            wrs.push(SendWr {
                flags: SendFlags::empty(),
                ..wr::write(WRITE | tag as u64, vec![buf.sge(0, n as u32)], addr, key)
            });
        }
        let op = match slot.plan.invalidate().filter(|_| self.remote_invalidate) {
            Some(rkey) => SendOp::SendWithInv { rkey },
            None => SendOp::Send,
        };
        wrs.push(SendWr {
            op,
            ..wr::send_inline(SEND | tag as u64, &cqe)
        });
        self.qp
            .post_send(wrs)
            .map_err(|e| End::Fatal(format!("post response: {e}")))
    }
}
