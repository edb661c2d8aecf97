//! Admin commands: Property Get/Set, Identify, Get Log Page, Get/Set Features, Keep Alive,
//! Asynchronous Event Request and Abort, for I/O and discovery controllers alike (a
//! discovery controller offers the subset the NVMe-oF specification names for it).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::registry::Registry;
use super::request::{Outcome, Request, Response};
use super::state::{Controller, ERROR_LOG_ENTRIES, MAX_AERS};
use super::subsystem::{ADMIN_QUEUE_SIZE, MAX_QUEUE_SIZE};
use crate::wire::cqe::Status;
use crate::wire::fabrics::{property, Property};
use crate::wire::identify::{
    cns, cntrltype, emit_ns_descriptors, emit_ns_list, IdentifyController, IdentifyNamespace,
    LbaFormat, NsId, IDENTIFY_LEN,
};
use crate::wire::log::{
    lid, subtype, DiscoveryEntry, DiscoveryLog, RdmaTsas, SmartLog, ADRFAM_IPV4, ADRFAM_IPV6,
    TREQ_DISABLE_SQFLOW, TRTYPE_RDMA,
};
use crate::wire::sqe::{admin, fctype, offset, Sqe};

/// NVMe version 1.3.0, what nvmet reports: enough for the Linux host to use the
/// namespace identification descriptors and the active namespace list.
pub(crate) const VERSION: u32 = 0x0001_0300;
/// Keep alive granularity, in 100 ms units (1 s, as nvmet).
const KAS: u16 = 10;
/// Features.
mod fid {
    pub(super) const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub(super) const NUMBER_OF_QUEUES: u8 = 0x07;
    pub(super) const ASYNC_EVENT_CONFIG: u8 = 0x0b;
    pub(super) const KEEP_ALIVE_TIMER: u8 = 0x0f;
    pub(super) const HOST_IDENTIFIER: u8 = 0x81;
}

pub(super) fn execute(
    registry: &Registry,
    ctrl: &Controller,
    req: &Request<'_>,
    now: Instant,
) -> Outcome {
    let sqe = req.sqe;
    if sqe.is_fabrics() {
        return Outcome::Complete(match sqe.fctype() {
            fctype::PROPERTY_GET => property_get(ctrl, sqe),
            fctype::PROPERTY_SET => property_set(ctrl, sqe),
            _ => Response::invalid(Status::INVALID_OPCODE.dnr(), offset::NSID),
        });
    }
    let discovery = ctrl.subsys.is_discovery();
    let known = matches!(
        sqe.opcode,
        admin::IDENTIFY
            | admin::GET_LOG_PAGE
            | admin::SET_FEATURES
            | admin::GET_FEATURES
            | admin::KEEP_ALIVE
            | admin::ASYNC_EVENT
    ) || (sqe.opcode == admin::ABORT && !discovery);
    if !known {
        return Outcome::Complete(Response::invalid(Status::INVALID_OPCODE.dnr(), 0));
    }
    if !ctrl.is_ready() {
        return Outcome::Complete(Response::status(Status::COMMAND_SEQUENCE_ERROR.dnr()));
    }
    Outcome::Complete(match sqe.opcode {
        admin::IDENTIFY => identify(registry, ctrl, req),
        admin::GET_LOG_PAGE => get_log_page(registry, ctrl, req, now),
        admin::SET_FEATURES => set_features(ctrl, sqe, now),
        admin::GET_FEATURES => get_features(ctrl, req),
        admin::KEEP_ALIVE => Response::ok(),
        // Abort: "command not aborted" (DW0 bit 0), as nvmet answers.
        admin::ABORT => Response::dw0(1),
        _ => {
            if ctrl.hold_aer(sqe.cid) {
                return Outcome::Held;
            }
            Response::status(Status::AER_LIMIT_EXCEEDED.dnr())
        }
    })
}

/// CAP: MQES 127, CQR, timeout 7.5 s, NVM command set, 4 KiB pages.
fn cap() -> u64 {
    u64::from(MAX_QUEUE_SIZE - 1) | 1 << 16 | 15 << 24 | 1 << 37
}

fn property_get(ctrl: &Controller, sqe: &Sqe) -> Response {
    let p = Property::from_sqe(sqe);
    let value = match (p.offset, p.eight_bytes) {
        (property::CAP, true) => cap(),
        (property::VS, false) => u64::from(VERSION),
        (property::CC, false) => u64::from(ctrl.cc()),
        (property::CSTS, false) => u64::from(ctrl.csts()),
        _ => return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10 + 4),
    };
    Response {
        dw0: value as u32,
        dw1: (value >> 32) as u32,
        ..Response::ok()
    }
}

fn property_set(ctrl: &Controller, sqe: &Sqe) -> Response {
    let p = Property::from_sqe(sqe);
    if p.offset != property::CC || p.eight_bytes {
        return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10 + 4);
    }
    ctrl.write_cc(p.value as u32);
    Response::ok()
}

/// Data of exactly `expected` bytes, or Data SGL Length Invalid (nvmet checks the SGL's
/// length against what the command moves, both ways).
fn exact(req: &Request<'_>, expected: usize, data: Vec<u8>) -> Response {
    if req.transfer_len as usize != expected {
        return Response::invalid(Status::SGL_DATA_LENGTH_INVALID.dnr(), offset::DPTR);
    }
    Response::data(data)
}

fn identify(registry: &Registry, ctrl: &Controller, req: &Request<'_>) -> Response {
    let sqe = req.sqe;
    let cns_value = sqe.cdw(10) as u8;
    let subsys = &ctrl.subsys;
    let nsid = sqe.nsid;
    let data = match cns_value {
        cns::CONTROLLER => identify_controller(registry, ctrl).emit(),
        _ if subsys.is_discovery() => {
            return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10)
        }
        cns::NAMESPACE => {
            if nsid == 0 || nsid == u32::MAX || nsid > subsys.max_nsid() {
                return Response::invalid(Status::INVALID_NAMESPACE.dnr(), offset::NSID);
            }
            // An inactive namespace id reads as zeros.
            subsys.namespace(nsid).map_or_else(
                || vec![0u8; IDENTIFY_LEN],
                |ns| {
                    let blocks = ns.blocks();
                    IdentifyNamespace {
                        nsze: blocks,
                        ncap: blocks,
                        nuse: blocks,
                        nsfeat: 0,
                        nlbaf: 0,
                        flbas: 0,
                        nmic: 1,
                        dlfeat: 0b1001,
                        nguid: ns.nguid,
                        eui64: [0; 8],
                        lbaf0: LbaFormat {
                            ms: 0,
                            lbads: ns.block_shift,
                            rp: 0,
                        },
                    }
                    .emit()
                },
            )
        }
        cns::ACTIVE_NS_LIST => {
            if nsid >= 0xffff_fffe {
                return Response::invalid(Status::INVALID_NAMESPACE.dnr(), offset::NSID);
            }
            let ids: Vec<u32> = subsys
                .namespaces
                .iter()
                .map(|n| n.nsid)
                .filter(|&id| id > nsid)
                .collect();
            emit_ns_list(&ids)
        }
        cns::NS_DESCRIPTORS => {
            let Some(ns) = subsys.namespace(nsid) else {
                return Response::invalid(Status::INVALID_NAMESPACE.dnr(), offset::NSID);
            };
            emit_ns_descriptors(&[NsId::Nguid(ns.nguid), NsId::Uuid(ns.nguid), NsId::Csi(0)])
        }
        // The NVM command set's controller structure: no limits beyond MDTS.
        cns::CSI_CONTROLLER if sqe.cdw(11) >> 24 == 0 => vec![0u8; IDENTIFY_LEN],
        _ => return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10),
    };
    exact(req, IDENTIFY_LEN, data)
}

/// Identify Controller, as nvmet-rdma fills it where it matters to Linux's host: keyed
/// SGLs and in-capsule offsets (SGLS), the capsule sizes, traffic based keep alive, several
/// controllers per subsystem (CMIC bit 1, so one host kernel may connect twice).
pub(crate) fn identify_controller(registry: &Registry, ctrl: &Controller) -> IdentifyController {
    let subsys = &ctrl.subsys;
    let limits = registry.limits;
    let discovery = subsys.is_discovery();
    IdentifyController {
        sn: subsys.serial.clone(),
        mn: subsys.model.clone(),
        fr: env!("CARGO_PKG_VERSION").into(),
        rab: 6,
        cmic: if discovery { 0 } else { 1 << 1 },
        mdts: limits.mdts,
        cntlid: ctrl.cntlid,
        ver: VERSION,
        // Namespace attribute notices (I/O) and discovery log changes (discovery), as
        // nvmet: Linux's host then configures them and keeps an AER outstanding. None is
        // ever raised: the namespaces and the log do not change while the target runs.
        oaes: if discovery { 1 << 31 } else { 1 << 8 },
        ctratt: 1 | 1 << 6,
        cntrltype: if discovery {
            cntrltype::DISCOVERY
        } else {
            cntrltype::IO
        },
        acl: 3,
        aerl: (MAX_AERS - 1) as u8,
        frmw: 0,
        lpa: 1 << 2,
        elpe: (ERROR_LOG_ENTRIES - 1) as u8,
        kas: KAS,
        sqes: 0x66,
        cqes: 0x44,
        maxcmd: MAX_QUEUE_SIZE,
        nn: subsys.max_nsid(),
        oncs: if discovery { 0 } else { 1 << 2 | 1 << 3 },
        vwc: if discovery { 0 } else { 0b111 },
        sgls: 1 | 1 << 2 | 1 << 20,
        mnan: subsys.max_nsid(),
        subnqn: subsys.nqn.clone(),
        ioccsz: (64 + limits.in_capsule_data) / 16,
        iorcsz: 1,
        icdoff: 0,
        msdbd: 1,
    }
}

fn get_log_page(
    registry: &Registry,
    ctrl: &Controller,
    req: &Request<'_>,
    now: Instant,
) -> Response {
    let sqe = req.sqe;
    let (c10, c11) = (sqe.cdw(10), sqe.cdw(11));
    let log_id = c10 as u8;
    let numd = u64::from(c10 >> 16 | (c11 & 0xffff) << 16) + 1;
    let len = numd * 4;
    let offset_bytes = u64::from(sqe.cdw(12)) | u64::from(sqe.cdw(13)) << 32;
    if len != u64::from(req.transfer_len) {
        return Response::invalid(Status::SGL_DATA_LENGTH_INVALID.dnr(), offset::DPTR);
    }
    if offset_bytes % 4 != 0 {
        return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10 + 8);
    }
    let discovery = ctrl.subsys.is_discovery();
    let log = match log_id {
        lid::DISCOVERY if discovery => discovery_log(registry, ctrl).emit(),
        lid::ERROR => {
            let (entries, _) = ctrl.errors();
            entries.iter().flat_map(|e| e.emit()).collect()
        }
        lid::SMART if !discovery => {
            if sqe.nsid != 0 && sqe.nsid != u32::MAX {
                return Response::invalid(Status::INVALID_FIELD.dnr(), offset::NSID);
            }
            smart_log(registry, ctrl, now).emit()
        }
        _ => return Response::invalid(Status::INVALID_LOG_PAGE.dnr(), offset::CDW10),
    };
    if offset_bytes > log.len() as u64 {
        return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10 + 8);
    }
    // The part asked for; past the log's end, zeros.
    let mut out = vec![0u8; len as usize];
    let from = &log[offset_bytes as usize..];
    let n = from.len().min(out.len());
    out[..n].copy_from_slice(&from[..n]);
    Response::data(out)
}

/// The discovery log a host sees: the NVM subsystems it may connect to, then the discovery
/// subsystem itself, on the port the target listens on (nvmet lists the same two kinds).
pub(crate) fn discovery_log(registry: &Registry, ctrl: &Controller) -> DiscoveryLog {
    let port: SocketAddr = registry.port;
    let adrfam = if port.is_ipv4() {
        ADRFAM_IPV4
    } else {
        ADRFAM_IPV6
    };
    let entry = |nqn: &str, kind| DiscoveryEntry {
        trtype: TRTYPE_RDMA,
        adrfam,
        subtype: kind,
        treq: TREQ_DISABLE_SQFLOW,
        portid: 1,
        cntlid: 0xffff,
        asqsz: ADMIN_QUEUE_SIZE,
        trsvcid: port.port().to_string(),
        subnqn: nqn.into(),
        traddr: port.ip().to_string(),
        tsas: RdmaTsas::RC_RDMA_CM,
    };
    let mut entries: Vec<DiscoveryEntry> = registry
        .subsystems()
        .iter()
        .filter(|s| s.allows(&ctrl.hostnqn))
        .map(|s| entry(&s.nqn, subtype::NVM))
        .collect();
    entries.push(entry(&ctrl.subsys.nqn, subtype::CURRENT_DISCOVERY));
    DiscoveryLog { genctr: 1, entries }
}

fn smart_log(registry: &Registry, ctrl: &Controller, now: Instant) -> SmartLog {
    let c = &ctrl.subsys.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    SmartLog {
        critical_warning: 0,
        temperature: 0,
        avail_spare: 100,
        spare_thresh: 10,
        percent_used: 0,
        data_units_read: SmartLog::data_units(get(&c.bytes_read)),
        data_units_written: SmartLog::data_units(get(&c.bytes_written)),
        host_reads: u128::from(get(&c.reads)),
        host_writes: u128::from(get(&c.writes)),
        power_cycles: 1,
        power_on_hours: u128::from(registry.power_on_hours(now)),
        unsafe_shutdowns: u128::from(get(&c.unsafe_shutdowns)),
        media_errors: u128::from(get(&c.media_errors)),
        num_err_log_entries: u128::from(ctrl.errors().1),
    }
}

fn set_features(ctrl: &Controller, sqe: &Sqe, now: Instant) -> Response {
    let (c10, c11) = (sqe.cdw(10), sqe.cdw(11));
    if c10 & 1 << 31 != 0 {
        return Response::invalid(Status::FEATURE_NOT_SAVEABLE.dnr(), offset::CDW10 + 3);
    }
    let discovery = ctrl.subsys.is_discovery();
    match c10 as u8 {
        fid::NUMBER_OF_QUEUES if !discovery => {
            let (nsqr, ncqr) = (c11 & 0xffff, c11 >> 16);
            if nsqr == 0xffff || ncqr == 0xffff {
                return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10 + 4);
            }
            let max = u32::from(ctrl.limits.max_io_queues);
            let granted = (nsqr.min(ncqr) + 1).min(max);
            ctrl.set_io_queues(granted as u16);
            Response::dw0((granted - 1) | (granted - 1) << 16)
        }
        fid::ASYNC_EVENT_CONFIG => {
            ctrl.set_async_event_config(c11);
            Response::ok()
        }
        fid::KEEP_ALIVE_TIMER => {
            ctrl.set_kato(c11, now);
            Response::ok()
        }
        fid::VOLATILE_WRITE_CACHE if !discovery => {
            if c11 & 1 == 0 {
                // The cache cannot be turned off: writes land in the page cache (or memory)
                // until a flush.
                return Response::status(Status::FEATURE_NOT_CHANGEABLE.dnr());
            }
            Response::ok()
        }
        // Over fabrics the host identifier comes with Connect.
        fid::HOST_IDENTIFIER => Response::status(Status::COMMAND_SEQUENCE_ERROR.dnr()),
        _ => Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10),
    }
}

fn get_features(ctrl: &Controller, req: &Request<'_>) -> Response {
    let sqe = req.sqe;
    let (c10, c11) = (sqe.cdw(10), sqe.cdw(11));
    if (c10 >> 8) & 7 != 0 {
        // Only the current value (SEL 0) is offered.
        return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10 + 1);
    }
    let discovery = ctrl.subsys.is_discovery();
    match c10 as u8 {
        fid::NUMBER_OF_QUEUES if !discovery => {
            let n = u32::from(ctrl.io_queues().max(1)) - 1;
            Response::dw0(n | n << 16)
        }
        fid::ASYNC_EVENT_CONFIG => Response::dw0(ctrl.async_event_config()),
        fid::KEEP_ALIVE_TIMER => Response::dw0(ctrl.kato_ms()),
        fid::VOLATILE_WRITE_CACHE if !discovery => Response::dw0(1),
        fid::HOST_IDENTIFIER => {
            if c11 & 1 == 0 {
                // The 128-bit identifier only (CTRATT bit 0): EXHID must be set.
                return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10 + 4);
            }
            exact(req, 16, ctrl.hostid.to_vec())
        }
        _ => Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10),
    }
}
