//! What a command brings (the command and its data) and what it produces (a status, result
//! dwords, data for the host), between a transport and the controller.

use crate::wire::cqe::Status;
use crate::wire::sqe::Sqe;

/// A command and the data the host sent with it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The command.
    pub sqe: &'a Sqe,
    /// Host-to-controller data (in the capsule, or pulled with RDMA READ); empty otherwise.
    pub data: &'a [u8],
    /// Bytes the command's SGL describes: what a read may return at most, and what the
    /// command must match.
    pub transfer_len: u32,
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status.
    pub status: Status,
    /// Dword 0 of the completion.
    pub dw0: u32,
    /// Dword 1.
    pub dw1: u32,
    /// Controller-to-host data (at most the transfer length).
    pub data: Vec<u8>,
    /// For the error log: where in the command the fault was (FFFFh: not known).
    pub param_loc: u16,
    /// For the error log: the LBA in error.
    pub lba: u64,
}

impl Response {
    /// Success, no data.
    pub fn ok() -> Response {
        Response::status(Status::SUCCESS)
    }

    /// A status, no data.
    pub fn status(status: Status) -> Response {
        Response {
            status,
            dw0: 0,
            dw1: 0,
            data: Vec::new(),
            param_loc: 0xffff,
            lba: 0,
        }
    }

    /// Success with data.
    pub fn data(data: Vec<u8>) -> Response {
        Response {
            data,
            ..Response::ok()
        }
    }

    /// Success with a result in dword 0.
    pub fn dw0(dw0: u32) -> Response {
        Response {
            dw0,
            ..Response::ok()
        }
    }

    /// A failure whose cause is the field at byte `at` of the command.
    pub fn invalid(status: Status, at: u16) -> Response {
        Response {
            param_loc: at,
            ..Response::status(status)
        }
    }
}

/// What became of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Completed: send the response.
    Complete(Response),
    /// Held (an Asynchronous Event Request): no response now.
    Held,
}
