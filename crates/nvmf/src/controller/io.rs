//! The NVM command set's I/O commands: Read, Write (with FUA), Flush, Write Zeroes (with
//! deallocate) and Dataset Management (deallocate), against a namespace's backend, with
//! the range and length checks the specification names statuses for.

use std::sync::Arc;

use super::request::{Request, Response};
use super::state::Controller;
use super::subsystem::{IoCounters, Namespace};
use crate::wire::cqe::Status;
use crate::wire::sqe::{io, offset, Sqe};

/// CDW12 bit 30: Force Unit Access.
const FUA: u32 = 1 << 30;
/// CDW12 bit 25 of Write Zeroes: deallocate.
const DEAC: u32 = 1 << 25;
/// CDW11 bit 2 of Dataset Management: deallocate the ranges.
const DSM_AD: u32 = 1 << 2;
/// Bytes of a Dataset Management range.
const DSM_RANGE_LEN: usize = 16;

pub(super) fn execute(ctrl: &Controller, req: &Request<'_>) -> Response {
    let sqe = req.sqe;
    if sqe.is_fabrics() {
        // Connect is handled before; no other fabrics command belongs on an I/O queue.
        return Response::invalid(Status::INVALID_OPCODE.dnr(), offset::NSID);
    }
    if !ctrl.is_ready() {
        return Response::status(Status::COMMAND_SEQUENCE_ERROR.dnr());
    }
    match sqe.opcode {
        io::READ | io::WRITE => read_write(ctrl, req),
        io::FLUSH => flush(ctrl, sqe),
        io::WRITE_ZEROES => write_zeroes(ctrl, sqe),
        io::DSM => dsm(ctrl, req),
        _ => Response::invalid(Status::INVALID_OPCODE.dnr(), 0),
    }
}

fn namespace(ctrl: &Controller, nsid: u32) -> Result<&Arc<Namespace>, Response> {
    ctrl.subsys
        .namespace(nsid)
        .ok_or_else(|| Response::invalid(Status::INVALID_NAMESPACE.dnr(), offset::NSID))
}

/// The byte range of `nlb` blocks from `slba`, or LBA Out of Range.
fn byte_range(ns: &Namespace, slba: u64, nlb: u64) -> Result<(u64, u64), Response> {
    match slba.checked_add(nlb) {
        Some(end) if end <= ns.blocks() => Ok((slba << ns.block_shift, nlb << ns.block_shift)),
        _ => Err(Response {
            lba: slba,
            ..Response::invalid(Status::LBA_OUT_OF_RANGE.dnr(), offset::CDW10)
        }),
    }
}

fn media_error(ctrl: &Controller, status: Status, slba: u64, e: &std::io::Error) -> Response {
    tracing::warn!("{}: I/O error at LBA {slba}: {e}", ctrl.subsys.nqn);
    IoCounters::add(&ctrl.subsys.counters.media_errors, 1);
    Response {
        lba: slba,
        ..Response::status(status)
    }
}

/// The blocks a Read, Write or Write Zeroes names (SLBA in dwords 10-11, NLB 0's based in
/// dword 12), as a namespace and a byte range of it.
struct Blocks<'a> {
    ns: &'a Arc<Namespace>,
    slba: u64,
    at: u64,
    len: u64,
}

fn blocks<'a>(ctrl: &'a Controller, sqe: &Sqe) -> Result<Blocks<'a>, Response> {
    let ns = namespace(ctrl, sqe.nsid)?;
    let slba = u64::from(sqe.cdw(10)) | u64::from(sqe.cdw(11)) << 32;
    let nlb = u64::from(sqe.cdw(12) & 0xffff) + 1;
    let (at, len) = byte_range(ns, slba, nlb)?;
    Ok(Blocks { ns, slba, at, len })
}

fn read_write(ctrl: &Controller, req: &Request<'_>) -> Response {
    let sqe = req.sqe;
    let Blocks { ns, slba, at, len } = match blocks(ctrl, sqe) {
        Ok(b) => b,
        Err(r) => return r,
    };
    if len > u64::from(ctrl.limits.max_transfer()) {
        return Response::invalid(Status::INVALID_FIELD.dnr(), offset::CDW10 + 8);
    }
    if u64::from(req.transfer_len) != len {
        return Response::invalid(Status::SGL_DATA_LENGTH_INVALID.dnr(), offset::DPTR);
    }
    let counters = &ctrl.subsys.counters;
    if sqe.opcode == io::READ {
        let mut data = vec![0u8; len as usize];
        if let Err(e) = ns.backend.read_at(at, &mut data) {
            return media_error(ctrl, Status::UNRECOVERED_READ_ERROR, slba, &e);
        }
        IoCounters::add(&counters.bytes_read, len);
        IoCounters::add(&counters.reads, 1);
        return Response::data(data);
    }
    let Some(data) = req.data.get(..len as usize) else {
        return Response::invalid(Status::SGL_DATA_LENGTH_INVALID.dnr(), offset::DPTR);
    };
    let written = ns.backend.write_at(at, data).and_then(|()| {
        if sqe.cdw(12) & FUA != 0 {
            ns.backend.flush()
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        return media_error(ctrl, Status::WRITE_FAULT, slba, &e);
    }
    IoCounters::add(&counters.bytes_written, len);
    IoCounters::add(&counters.writes, 1);
    Response::ok()
}

/// Flush: one namespace, or every namespace for NSID FFFFFFFFh (VWC bits 2:1 = 11b).
fn flush(ctrl: &Controller, sqe: &Sqe) -> Response {
    let targets: Vec<&Arc<Namespace>> = if sqe.nsid == u32::MAX {
        ctrl.subsys.namespaces.iter().collect()
    } else {
        match namespace(ctrl, sqe.nsid) {
            Ok(ns) => vec![ns],
            Err(r) => return r,
        }
    };
    for ns in targets {
        if let Err(e) = ns.backend.flush() {
            return media_error(ctrl, Status::WRITE_FAULT, 0, &e);
        }
    }
    Response::ok()
}

fn write_zeroes(ctrl: &Controller, sqe: &Sqe) -> Response {
    let Blocks { ns, slba, at, len } = match blocks(ctrl, sqe) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let done = if sqe.cdw(12) & DEAC != 0 {
        ns.backend.deallocate(at, len)
    } else {
        ns.backend.write_zeroes(at, len)
    };
    match done {
        Ok(()) => {
            IoCounters::add(&ctrl.subsys.counters.writes, 1);
            Response::ok()
        }
        Err(e) => media_error(ctrl, Status::WRITE_FAULT, slba, &e),
    }
}

/// Dataset Management: the ranges come as data (16 bytes each: attributes, block count,
/// first block); with AD set they are deallocated (read back as zeros), otherwise the
/// command is only a hint and succeeds.
fn dsm(ctrl: &Controller, req: &Request<'_>) -> Response {
    let sqe = req.sqe;
    let ns = match namespace(ctrl, sqe.nsid) {
        Ok(ns) => ns,
        Err(r) => return r,
    };
    let ranges = (sqe.cdw(10) & 0xff) as usize + 1;
    let Some(list) = req.data.get(..ranges * DSM_RANGE_LEN) else {
        return Response::invalid(Status::SGL_DATA_LENGTH_INVALID.dnr(), offset::DPTR);
    };
    let mut parsed = Vec::with_capacity(ranges);
    for r in list.chunks_exact(DSM_RANGE_LEN) {
        let nlb = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
        let slba = u64::from_le_bytes([r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]]);
        match byte_range(ns, slba, nlb) {
            Ok(range) => parsed.push((slba, range)),
            Err(r) => return r,
        }
    }
    if sqe.cdw(11) & DSM_AD != 0 {
        for (slba, (at, len)) in parsed {
            if let Err(e) = ns.backend.deallocate(at, len) {
                return media_error(ctrl, Status::WRITE_FAULT, slba, &e);
            }
        }
    }
    Response::ok()
}
