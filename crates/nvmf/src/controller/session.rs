//! One queue's view of the controller: the Connect that ties the queue to a controller,
//! then every command on it, admin or I/O, with the checks that come before any command
//! (flags, connected state) and the bookkeeping after (SQ head, error log).

use std::sync::Arc;
use std::time::Instant;

use super::admin;
use super::io;
use super::registry::Registry;
use super::request::{Outcome, Request, Response};
use super::state::{Controller, QueueHandle, TeardownReason};
use super::subsystem::{ADMIN_QUEUE_SIZE, DISCOVERY_KATO_MS, MAX_QUEUE_SIZE};
use crate::wire::cqe::{Cqe, Status};
use crate::wire::fabrics::{
    data_offset, invalid_parameter, Connect, ConnectData, CATTR_DISABLE_SQ_FLOW, CNTLID_DYNAMIC,
    CONNECT_DATA_LEN,
};
use crate::wire::log::ErrorEntry;
use crate::wire::sqe::{fctype, offset, Sqe, FUSE_MASK, PSDT_MASK, PSDT_SGL};

/// A queue's state: which queue it is (from the rdma_cm request), its controller once the
/// Connect succeeded, and its submission queue head.
pub struct Session {
    registry: Arc<Registry>,
    /// The queue id the transport's connect request named.
    qid: u16,
    /// Entries of the host's submission queue (HSQSIZE + 1).
    entries: u16,
    ctrl: Option<Arc<Controller>>,
    handle: Arc<dyn QueueHandle>,
    sqhd: u16,
    sqhd_disabled: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("qid", &self.qid)
            .field("entries", &self.entries)
            .field("cntlid", &self.ctrl.as_ref().map(|c| c.cntlid))
            .finish()
    }
}

impl Session {
    /// A queue `qid` of `entries` entries, not yet connected; `handle` lets its controller
    /// close it.
    pub fn new(
        registry: Arc<Registry>,
        qid: u16,
        entries: u16,
        handle: Arc<dyn QueueHandle>,
    ) -> Session {
        Session {
            registry,
            qid,
            entries: entries.max(1),
            ctrl: None,
            handle,
            sqhd: 0,
            sqhd_disabled: false,
        }
    }

    /// The queue id.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// The controller, once connected.
    pub fn controller(&self) -> Option<&Arc<Controller>> {
        self.ctrl.as_ref()
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The checks before a command's data is fetched: reserved flags, and a first command
    /// that is not a Connect. `Err` is the response to send.
    pub fn precheck(&mut self, sqe: &Sqe) -> Result<(), Response> {
        self.advance_head();
        if let Some(c) = &self.ctrl {
            c.touch();
        }
        if sqe.flags & FUSE_MASK != 0 || sqe.flags & PSDT_MASK != PSDT_SGL {
            return Err(self.failed(
                sqe,
                Response::invalid(Status::INVALID_FIELD.dnr(), offset::FLAGS),
            ));
        }
        let is_connect = sqe.is_fabrics() && sqe.fctype() == fctype::CONNECT;
        if self.ctrl.is_none() && !is_connect {
            // NVMe-oF: a queue's first command is a Connect; anything else before it is out
            // of sequence.
            return Err(self.failed(sqe, Response::status(Status::COMMAND_SEQUENCE_ERROR.dnr())));
        }
        Ok(())
    }

    /// Records a failure that never reached [`Session::execute`] (a bad SGL, a failed data
    /// transfer) and returns it.
    pub fn failed(&self, sqe: &Sqe, r: Response) -> Response {
        self.record(sqe, &r);
        r
    }

    fn advance_head(&mut self) {
        if !self.sqhd_disabled {
            self.sqhd = (self.sqhd + 1) % self.entries;
        }
    }

    /// Runs a command that passed [`Session::precheck`].
    pub fn execute(&mut self, req: &Request<'_>, now: Instant) -> Outcome {
        let sqe = req.sqe;
        let outcome = if sqe.is_fabrics() && sqe.fctype() == fctype::CONNECT {
            Outcome::Complete(self.connect(req, now))
        } else if let Some(ctrl) = self.ctrl.clone() {
            if self.qid == 0 {
                admin::execute(&self.registry, &ctrl, req, now)
            } else {
                Outcome::Complete(io::execute(&ctrl, req))
            }
        } else {
            Outcome::Complete(Response::status(Status::COMMAND_SEQUENCE_ERROR.dnr()))
        };
        if let Outcome::Complete(r) = &outcome {
            self.record(sqe, r);
        }
        outcome
    }

    fn record(&self, sqe: &Sqe, r: &Response) {
        if let (Some(c), false) = (&self.ctrl, r.status.is_success()) {
            c.record_error(ErrorEntry {
                error_count: 0,
                sqid: self.qid,
                cid: sqe.cid,
                status: r.status,
                param_loc: r.param_loc,
                lba: r.lba,
                nsid: if sqe.is_fabrics() { 0 } else { sqe.nsid },
            });
        }
    }

    /// The completion entry for command `cid` with `r`.
    pub fn cqe(&self, cid: u16, r: &Response) -> Cqe {
        Cqe {
            dw0: r.dw0,
            dw1: r.dw1,
            sqhd: self.sqhd,
            sqid: self.qid,
            cid,
            status: r.status,
        }
    }

    /// Fabrics Connect (NVMe-oF 1.1 section 3.3): checks in the order nvmet checks them;
    /// a bad field answers Connect Invalid Parameters with the field's offset in DW0.
    fn connect(&mut self, req: &Request<'_>, now: Instant) -> Response {
        let bad = |in_data, at| Response {
            dw0: invalid_parameter(in_data, at),
            ..Response::invalid(Status::CONNECT_INVALID_PARAMETERS.dnr(), at)
        };
        if self.ctrl.is_some() {
            return Response::status(Status::CONNECT_CONTROLLER_BUSY.dnr());
        }
        let c = Connect::from_sqe(req.sqe);
        if c.recfmt != 0 {
            return Response::invalid(Status::CONNECT_INCOMPATIBLE_FORMAT.dnr(), offset::CDW10);
        }
        if req.transfer_len as usize != CONNECT_DATA_LEN || req.data.len() < CONNECT_DATA_LEN {
            return Response::invalid(Status::SGL_DATA_LENGTH_INVALID.dnr(), offset::DPTR);
        }
        let d = match ConnectData::parse(req.data) {
            Ok(d) => d,
            Err(_) => {
                // Which NQN lacks its terminator.
                let sub_ok = req.data[256..512].contains(&0);
                let at = if sub_ok {
                    data_offset::HOSTNQN
                } else {
                    data_offset::SUBNQN
                };
                return bad(true, at);
            }
        };
        if c.qid != self.qid {
            return bad(false, offset::CONNECT_QID);
        }
        let max_entries = if c.qid == 0 {
            ADMIN_QUEUE_SIZE
        } else {
            MAX_QUEUE_SIZE
        };
        if c.sqsize == 0 || c.sqsize >= max_entries || c.sqsize >= self.entries {
            return bad(false, offset::CONNECT_SQSIZE);
        }
        let Some(subsys) = self.registry.subsystem(&d.subnqn).cloned() else {
            return bad(true, data_offset::SUBNQN);
        };
        if !subsys.allows(&d.hostnqn) {
            return Response {
                dw0: invalid_parameter(true, data_offset::HOSTNQN),
                ..Response::invalid(Status::CONNECT_INVALID_HOST.dnr(), data_offset::HOSTNQN)
            };
        }
        let ctrl = if c.qid == 0 {
            if d.cntlid != CNTLID_DYNAMIC {
                return bad(true, data_offset::CNTLID);
            }
            let kato = match (c.kato, subsys.is_discovery()) {
                (0, true) => DISCOVERY_KATO_MS,
                (k, _) => k,
            };
            let Some(ctrl) = self
                .registry
                .add_controller(&subsys, &d.hostnqn, d.hostid, kato, now)
            else {
                return Response::status(Status::CONNECT_CONTROLLER_BUSY);
            };
            ctrl
        } else {
            let found = self.registry.controller(d.cntlid).filter(|ctrl| {
                Arc::ptr_eq(&ctrl.subsys, &subsys)
                    && ctrl.hostnqn == d.hostnqn
                    && ctrl.torn_down().is_none()
            });
            let Some(ctrl) = found else {
                return bad(true, data_offset::CNTLID);
            };
            if subsys.is_discovery() || c.qid > ctrl.io_queues() {
                return bad(false, offset::CONNECT_QID);
            }
            if !ctrl.is_ready() {
                return Response::status(Status::COMMAND_SEQUENCE_ERROR.dnr());
            }
            ctrl
        };
        if let Err(status) = ctrl.attach(c.qid, self.handle.clone()) {
            return Response::status(status);
        }
        tracing::info!(
            "queue {} of controller {} ({}) connected for {}",
            c.qid,
            ctrl.cntlid,
            subsys.nqn,
            d.hostnqn
        );
        self.sqhd_disabled = c.cattr & CATTR_DISABLE_SQ_FLOW != 0;
        if self.sqhd_disabled {
            self.sqhd = 0;
        }
        let cntlid = ctrl.cntlid;
        self.ctrl = Some(ctrl);
        Response::dw0(u32::from(cntlid))
    }

    /// The queue is gone (disconnected, or its transport failed): an admin queue takes its
    /// controller with it; an I/O queue leaves it. `fatal` marks a transport error, which
    /// ends the whole controller (controller fatal status), as nvmet-rdma does.
    pub fn close(&mut self, fatal: bool) {
        let Some(ctrl) = self.ctrl.take() else {
            return;
        };
        ctrl.detach(self.qid);
        if fatal {
            self.registry.remove(&ctrl, TeardownReason::Fatal);
        } else if self.qid == 0 {
            self.registry
                .remove(&ctrl, TeardownReason::AdminQueueClosed);
        }
    }
}
