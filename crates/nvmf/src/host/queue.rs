//! One host queue (admin or I/O) over RDMA: the rdma_cm connection with the transport's
//! private data, command capsules SENT from a registered ring, 16-byte responses received
//! into another, and per-command data buffers the target reaches with its keyed SGL. With
//! `remote_invalidate` each command's data is exposed through a type 2 memory window bound
//! for that command and invalidated by the target's SEND with Invalidate, as Linux's host
//! does with its per-I/O memory registrations.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use softrdma::{
    wr, AccessFlags, CompletionQueue, MemoryRegion, MemoryWindow, MwBindInfo, MwType,
    ProtectionDomain, QpInitAttr, QueuePair, SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use softrdma_rdmacm::{
    CmEventKind, CmId, CmService, ConnParam, EventChannel, PortSpace, RdmaQpType,
};

use super::config::HostConfig;
use super::error::HostError;
use crate::wire::cqe::{Cqe, CQE_LEN};
use crate::wire::rdma_cm::{CmReject, CmReply, CmRequest};
use crate::wire::sgl::{SglDescriptor, KEYED_MAX_LEN};
use crate::wire::sqe::{Sqe, SQE_LEN};

const KIND_SHIFT: u32 = 60;
const RECV: u64 = 1 << KIND_SHIFT;
const SEND: u64 = 2 << KIND_SHIFT;
const BIND: u64 = 3 << KIND_SHIFT;
const KIND_MASK: u64 = 0xf << KIND_SHIFT;

/// Data a command moves.
#[derive(Debug, Clone, Copy)]
pub enum Data<'a> {
    /// None.
    None,
    /// These bytes to the controller (in the capsule when they fit and in-capsule data is
    /// on, else through the keyed SGL).
    Out(&'a [u8]),
    /// This many bytes from the controller.
    In(usize),
}

/// A completed command.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The response.
    pub cqe: Cqe,
    /// The data read (for [`Data::In`]).
    pub data: Vec<u8>,
    /// The key the target invalidated with its response, if it did.
    pub invalidated: Option<u32>,
}

struct Slot {
    /// The data buffer (grown as needed).
    buf: Option<MemoryRegion>,
    /// The window exposing it, with `remote_invalidate`.
    mw: Option<MemoryWindow>,
    /// In use: bytes to read back after the response (`Data::In`), and the key the target
    /// should invalidate.
    busy: Option<(usize, Option<u32>)>,
    /// Bound and not invalidated by the target: a local invalidation is due before reuse.
    mw_stale: bool,
}

/// A connected host queue.
pub struct HostQueue {
    id: CmId,
    ch: EventChannel,
    qp: QueuePair,
    cq: CompletionQueue,
    pd: ProtectionDomain,
    qid: u16,
    entries: u16,
    cmd_mr: MemoryRegion,
    rsp_mr: MemoryRegion,
    capsule_len: usize,
    slots: Vec<Slot>,
    free: Vec<u16>,
    /// In-capsule data the controller takes (0 on the admin queue).
    in_capsule: usize,
    remote_invalidate: bool,
    timeout: Duration,
    done: Vec<(u16, Completion)>,
    _service: Option<CmService>,
}

impl std::fmt::Debug for HostQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostQueue")
            .field("qid", &self.qid)
            .field("entries", &self.entries)
            .finish()
    }
}

fn wait_event(
    ch: &EventChannel,
    deadline: Instant,
    what: &'static str,
) -> Result<CmEventKind, HostError> {
    let left = deadline.saturating_duration_since(Instant::now());
    ch.get_event(Some(left))
        .map(|e| e.kind)
        .ok_or(HostError::Timeout(what))
}

impl HostQueue {
    /// Connects queue `qid` of `entries` commands to the target: address and route
    /// resolution, the QP, the rdma_cm connection with the NVMe-oF request. The Fabrics
    /// Connect command is the caller's next step.
    pub(crate) fn connect(
        config: &HostConfig,
        qid: u16,
        entries: u16,
        in_capsule: usize,
    ) -> Result<HostQueue, HostError> {
        let deadline = Instant::now() + config.timeout;
        let ch = EventChannel::new();
        let id = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        let service = match &config.device {
            Some(d) => Some(CmService::start(d)?),
            None => None,
        };
        let src = config
            .device
            .as_ref()
            .map(|d| d.ip())
            .or(config.source)
            .map(|ip| SocketAddr::new(ip, 0));
        id.resolve_addr(src, config.target)?;
        expect(
            &ch,
            deadline,
            CmEventKind::AddrResolved,
            "address resolution",
        )?;
        id.resolve_route()?;
        expect(
            &ch,
            deadline,
            CmEventKind::RouteResolved,
            "route resolution",
        )?;
        let transport = |e: String| HostError::Transport(e);
        let pd = id.pd().ok_or_else(|| transport("no device".into()))?;
        let device = id.device().ok_or_else(|| transport("no device".into()))?;
        let n = u32::from(entries);
        let cq = device
            .create_cq(6 * n + 16)
            .map_err(|e| transport(e.to_string()))?;
        let mut init = QpInitAttr::rc(&cq);
        init.cap.max_send_wr = 4 * n + 8;
        init.cap.max_recv_wr = n;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = 0;
        let qp = id.create_qp(&pd, &init)?;
        let capsule_len = SQE_LEN + in_capsule;
        let reg = |len, access| pd.reg_mr(len, access).map_err(|e| transport(e.to_string()));
        let cmd_mr = reg(usize::from(entries) * capsule_len, AccessFlags::LOCAL_WRITE)?;
        let rsp_mr = reg(usize::from(entries) * CQE_LEN, AccessFlags::LOCAL_WRITE)?;
        let q = HostQueue {
            id,
            ch,
            qp,
            cq,
            pd,
            qid,
            entries,
            cmd_mr,
            rsp_mr,
            capsule_len,
            slots: (0..entries)
                .map(|_| Slot {
                    buf: None,
                    mw: None,
                    busy: None,
                    mw_stale: false,
                })
                .collect(),
            free: (0..entries).rev().collect(),
            in_capsule,
            remote_invalidate: config.remote_invalidate,
            timeout: config.timeout,
            done: Vec::new(),
            _service: service,
        };
        for i in 0..usize::from(entries) {
            q.post_recv(i)?;
        }
        let req = CmRequest {
            recfmt: 0,
            qid,
            hrqsize: entries,
            hsqsize: entries - 1,
        };
        let rd = device.query_device().max_qp_rd_atom.min(128) as u8;
        q.id.connect(&ConnParam {
            private_data: req.emit().to_vec(),
            responder_resources: rd,
            initiator_depth: 0,
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        })?;
        match wait_event(&q.ch, deadline, "connection")? {
            CmEventKind::Established { .. } => {}
            CmEventKind::Rejected {
                reason,
                private_data,
            } => {
                return Err(match CmReject::parse(&private_data) {
                    Ok(rej) if reason == softrdma_rdmacm::RejectReason::ConsumerDefined => {
                        HostError::Rejected(rej.status)
                    }
                    _ => HostError::CmRejected(reason),
                })
            }
            CmEventKind::Unreachable | CmEventKind::ConnectError => {
                return Err(HostError::Timeout("connection"))
            }
            other => return Err(transport(format!("unexpected {}", other.name()))),
        }
        let reply =
            q.id.peer_param()
                .map(|p| p.private_data)
                .unwrap_or_default();
        let reply = CmReply::parse(&reply)?;
        if reply.crqsize < entries {
            return Err(transport(format!(
                "the controller takes {} commands, {entries} asked",
                reply.crqsize
            )));
        }
        Ok(q)
    }

    fn post_recv(&self, i: usize) -> Result<(), HostError> {
        let sge = self.rsp_mr.sge(i * CQE_LEN, CQE_LEN as u32);
        self.qp
            .post_recv([wr::recv(RECV | i as u64, vec![sge])])
            .map_err(|e| HostError::Transport(format!("post_recv: {e}")))
    }

    /// The queue id.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Commands in flight at most.
    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// Commands in flight now.
    pub fn in_flight(&self) -> usize {
        usize::from(self.entries) - self.free.len()
    }

    /// Sends `sqe` (its cid replaced by a free one, its data pointer set for `data`);
    /// returns the cid.
    pub fn submit(&mut self, mut sqe: Sqe, data: Data<'_>) -> Result<u16, HostError> {
        let Some(cid) = self.free.pop() else {
            return Err(HostError::Invalid("the queue is full".into()));
        };
        sqe.cid = cid;
        let mut wrs = match self.prepare(cid, &mut sqe, data) {
            Ok(wrs) => wrs,
            Err(e) => {
                self.free.push(cid);
                return Err(e);
            }
        };
        let at = usize::from(cid) * self.capsule_len;
        let mut capsule = sqe.emit().to_vec();
        if let (Data::Out(bytes), SglDescriptor::DataBlock { .. }) = (data, sqe.dptr) {
            capsule.extend_from_slice(bytes);
        }
        self.cmd_mr
            .write(at, &capsule)
            .map_err(|e| HostError::Transport(e.to_string()))?;
        let sge = self.cmd_mr.sge(at, capsule.len() as u32);
        wrs.push(wr::send(SEND | u64::from(cid), vec![sge]));
        self.qp
            .post_send(wrs)
            .map_err(|e| HostError::Transport(format!("post_send: {e}")))?;
        Ok(cid)
    }

    /// Sends `sqe` exactly as given (only its cid replaced by a free one) followed by
    /// `extra` bytes of in-capsule data, whatever its data pointer says: for probing how a
    /// target answers commands a well-behaved host would not send. Returns the cid.
    pub fn submit_capsule(&mut self, mut sqe: Sqe, extra: &[u8]) -> Result<u16, HostError> {
        if SQE_LEN + extra.len() > self.capsule_len {
            return Err(HostError::Invalid(format!(
                "{} bytes of in-capsule data",
                extra.len()
            )));
        }
        let Some(cid) = self.free.pop() else {
            return Err(HostError::Invalid("the queue is full".into()));
        };
        sqe.cid = cid;
        self.slots[usize::from(cid)].busy = Some((0, None));
        let mut capsule = sqe.emit().to_vec();
        capsule.extend_from_slice(extra);
        self.send_bytes(usize::from(cid), &capsule)?;
        Ok(cid)
    }

    /// SENDs `bytes` as a capsule from ring slot `slot` (no command is tracked).
    fn send_bytes(&mut self, slot: usize, bytes: &[u8]) -> Result<(), HostError> {
        let at = slot * self.capsule_len;
        self.cmd_mr
            .write(at, bytes)
            .map_err(|e| HostError::Transport(e.to_string()))?;
        let sge = self.cmd_mr.sge(at, bytes.len() as u32);
        self.qp
            .post_send([wr::send(SEND | slot as u64, vec![sge])])
            .map_err(|e| HostError::Transport(format!("post_send: {e}")))
    }

    /// SENDs a capsule of `bytes` that is not a whole command (shorter than 64 bytes, say):
    /// a target drops the queue, as nvmet-rdma does.
    pub fn send_runt(&mut self, bytes: &[u8]) -> Result<(), HostError> {
        let slot = self.free.last().copied().unwrap_or(0);
        self.send_bytes(
            usize::from(slot),
            &bytes[..bytes.len().min(self.capsule_len)],
        )
    }

    /// Points `sqe` at its data: none, in the capsule, or the slot's buffer under its key
    /// (a window bound now, with `remote_invalidate`). Returns the work requests that must
    /// go before the command's SEND.
    fn prepare(
        &mut self,
        cid: u16,
        sqe: &mut Sqe,
        data: Data<'_>,
    ) -> Result<Vec<SendWr>, HostError> {
        let slot = usize::from(cid);
        let (len, out) = match data {
            Data::None => (0, None),
            Data::Out(bytes) if !bytes.is_empty() && bytes.len() <= self.in_capsule => {
                sqe.dptr = SglDescriptor::in_capsule(0, bytes.len() as u32);
                self.slots[slot].busy = Some((0, None));
                return Ok(Vec::new());
            }
            Data::Out(bytes) => (bytes.len(), Some(bytes)),
            Data::In(len) => (len, None),
        };
        if len == 0 {
            sqe.dptr = SglDescriptor::NONE;
            self.slots[slot].busy = Some((0, None));
            return Ok(Vec::new());
        }
        if len > KEYED_MAX_LEN as usize {
            return Err(HostError::Invalid(format!("{len} bytes in one command")));
        }
        let transport = |e: String| HostError::Transport(e);
        let s = &mut self.slots[slot];
        if !s.buf.as_ref().is_some_and(|b| b.len() >= len) {
            let access = AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::MW_BIND;
            // A window bound to the old buffer goes with it.
            s.mw = None;
            s.mw_stale = false;
            let size = len.max(4096).next_power_of_two();
            s.buf = Some(
                self.pd
                    .reg_mr(size, access)
                    .map_err(|e| transport(e.to_string()))?,
            );
        }
        let Some(buf) = &s.buf else {
            return Err(transport("no buffer".into()));
        };
        if let Some(out) = out {
            buf.write(0, out).map_err(|e| transport(e.to_string()))?;
        }
        let read_back = if matches!(data, Data::In(_)) { len } else { 0 };
        let mut wrs = Vec::new();
        if !self.remote_invalidate {
            sqe.dptr = SglDescriptor::keyed(buf.addr(), len as u32, buf.rkey(), false);
            s.busy = Some((read_back, None));
            return Ok(wrs);
        }
        if s.mw.is_none() {
            s.mw = Some(
                self.pd
                    .alloc_mw(MwType::Type2)
                    .map_err(|e| transport(e.to_string()))?,
            );
        }
        let Some(mw) = &s.mw else {
            return Err(transport("no window".into()));
        };
        if s.mw_stale {
            // The target did not invalidate it last time: invalidate here before binding.
            let mut inv = wr::local_inv(BIND | u64::from(cid), mw.rkey());
            inv.flags = SendFlags::SIGNALED;
            wrs.push(inv);
        }
        let info = MwBindInfo {
            mr: buf,
            offset: 0,
            len,
            access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        };
        wrs.push(mw.bind_wr(BIND | u64::from(cid), &info));
        let key = mw.rkey();
        s.mw_stale = true;
        sqe.dptr = SglDescriptor::keyed(buf.addr(), len as u32, key, true);
        s.busy = Some((read_back, Some(key)));
        Ok(wrs)
    }

    /// Waits up to `timeout` for completions; returns the commands that completed, in the
    /// order their responses came.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<Vec<(u16, Completion)>, HostError> {
        let mut wcs = Vec::with_capacity(64);
        self.cq.poll_blocking(64, &mut wcs, timeout);
        let mut out = std::mem::take(&mut self.done);
        for wc in &wcs {
            if let Some(c) = self.on_completion(wc)? {
                out.push(c);
            }
        }
        Ok(out)
    }

    fn on_completion(
        &mut self,
        wc: &WorkCompletion,
    ) -> Result<Option<(u16, Completion)>, HostError> {
        if wc.status == WcStatus::WrFlushErr {
            return Err(HostError::Transport("the queue was disconnected".into()));
        }
        if wc.status != WcStatus::Success {
            return Err(HostError::Transport(format!(
                "{:?} completion: {}",
                wc.opcode,
                wc.status.as_str()
            )));
        }
        if wc.wr_id & KIND_MASK != RECV {
            return Ok(None);
        }
        let idx = (wc.wr_id & !KIND_MASK) as usize;
        let bytes = self
            .rsp_mr
            .read_vec(idx * CQE_LEN, CQE_LEN)
            .map_err(|e| HostError::Transport(e.to_string()))?;
        self.post_recv(idx)?;
        if wc.byte_len as usize != CQE_LEN {
            return Err(HostError::Transport(format!(
                "a {}-byte response capsule",
                wc.byte_len
            )));
        }
        let cqe = Cqe::parse(&bytes)?;
        let bad = |what: String| Err(HostError::Transport(what));
        let Some(slot) = self.slots.get_mut(usize::from(cqe.cid)) else {
            return bad(format!("a response for command {} never sent", cqe.cid));
        };
        let Some((read_back, key)) = slot.busy.take() else {
            return bad(format!("a response for command {} never sent", cqe.cid));
        };
        let invalidated = match wc.opcode {
            WcOpcode::Recv => wc.invalidated_rkey,
            _ => None,
        };
        match (key, invalidated) {
            (Some(k), Some(i)) if k == i => slot.mw_stale = false,
            (_, Some(i)) => return bad(format!("the target invalidated key {i:#x}, not asked")),
            _ => {}
        }
        let data = match (&slot.buf, read_back) {
            (Some(buf), n) if n > 0 && cqe.status.is_success() => buf
                .read_vec(0, n)
                .map_err(|e| HostError::Transport(e.to_string()))?,
            _ => Vec::new(),
        };
        self.free.push(cqe.cid);
        Ok(Some((
            cqe.cid,
            Completion {
                cqe,
                data,
                invalidated,
            },
        )))
    }

    /// Waits for command `cid`'s completion (others that come meanwhile are kept for the
    /// next [`HostQueue::poll`]).
    pub fn wait(&mut self, cid: u16) -> Result<Completion, HostError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(i) = self.done.iter().position(|(c, _)| *c == cid) {
                return Ok(self.done.remove(i).1);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(HostError::Timeout("a command's response"));
            }
            let got = self.poll(Some(left.min(Duration::from_millis(100))))?;
            self.done.extend(got);
        }
    }

    /// Sends a command and waits for it; a status other than success is an error naming
    /// `command`.
    pub fn execute(
        &mut self,
        command: &'static str,
        sqe: Sqe,
        data: Data<'_>,
    ) -> Result<Completion, HostError> {
        let cid = self.submit(sqe, data)?;
        let c = self.wait(cid)?;
        if !c.cqe.status.is_success() {
            return Err(HostError::Status {
                command,
                status: c.cqe.status,
                dw0: c.cqe.dw0,
            });
        }
        Ok(c)
    }

    /// Disconnects and waits (briefly) for the target's answer.
    pub fn disconnect(&self) {
        if self.id.disconnect().is_ok() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while let Ok(kind) = wait_event(&self.ch, deadline, "disconnect") {
                if kind == CmEventKind::Disconnected {
                    break;
                }
            }
        }
    }
}

fn expect(
    ch: &EventChannel,
    deadline: Instant,
    want: CmEventKind,
    what: &'static str,
) -> Result<(), HostError> {
    match wait_event(ch, deadline, what)? {
        k if k == want => Ok(()),
        CmEventKind::Rejected { reason, .. } => Err(HostError::CmRejected(reason)),
        _ => Err(HostError::Timeout(what)),
    }
}
