//! What `softrdma ucmatose` and `softrdma udaddy` share, as librdmacm's `cmatose.c` and
//! `udaddy.c` share it: which rdma_cm events end a run in error and with what status, how a run
//! ends (`return status N`, the low byte as the exit status), and the message count in effect.

use std::process::ExitCode;
use std::time::Duration;

use softrdma_rdmacm::CmEventKind;

/// How long any wait may take before the run fails (Linux's rdma_cm gives up on an
/// unanswered REQ after about a minute: 15 retries of a 4.3 s response timeout).
pub(crate) const STEP: Duration = Duration::from_secs(120);

/// An event the tools report as an error: its name and status (`rdma_event_str`,
/// `event->status`).
pub(crate) fn error_event(kind: &CmEventKind) -> Option<(&'static str, i32)> {
    match kind {
        CmEventKind::Rejected { reason, .. } => {
            Some(("RDMA_CM_EVENT_REJECTED", i32::from(reason.code())))
        }
        CmEventKind::Unreachable => Some(("RDMA_CM_EVENT_UNREACHABLE", -110)),
        CmEventKind::ConnectError => Some(("RDMA_CM_EVENT_CONNECT_ERROR", -1)),
        _ => None,
    }
}

/// The message count in effect: 0 when messages are 0 bytes (as both tools).
pub(crate) fn count(size: u32, count: u32) -> u32 {
    if size == 0 {
        0
    } else {
        count
    }
}

/// Ends a run as the tools' `main` does: an error printed after `tool: `, status 1; the lines
/// `before` (udaddy's `test complete`), then `return status N`; the exit status is the low
/// byte of N, as C's `return ret` from main gives it (-110 exits 146).
pub(crate) fn finish(tool: &str, status: Result<i32, String>, before: &[&str]) -> ExitCode {
    let status = status.unwrap_or_else(|e| {
        println!("{tool}: {e}");
        1
    });
    for line in before {
        println!("{line}");
    }
    println!("return status {status}");
    ExitCode::from((status & 0xff) as u8)
}
