//! Finding why a run failed from its completions, for every subcommand that reports one.

use softrdma::{CompletionQueue, WcStatus, WorkCompletion};

/// What the error completions of a failed batch say.
pub(crate) struct Failure {
    /// The first error that is not a flush: what went wrong, if a request of ours failed.
    pub cause: Option<WorkCompletion>,
    /// The first error of any kind.
    pub first: Option<WorkCompletion>,
    /// Requests flushed (`WR_FLUSH_ERR`).
    pub flushed: usize,
}

/// Collects the errors of `seen` and of every completion still waiting on `cq`: a failing
/// request completes *after* the older requests it flushes, so the first error polled is
/// usually a flush, not the cause.
pub(crate) fn failure(cq: &CompletionQueue, seen: &[WorkCompletion]) -> Failure {
    let mut all = seen.to_vec();
    while cq.poll(256, &mut all) > 0 {}
    let mut errors = all.into_iter().filter(|w| w.status != WcStatus::Success);
    let first = errors.next();
    let mut cause = first.filter(|w| w.status != WcStatus::WrFlushErr);
    let mut flushed = usize::from(first.is_some_and(|w| w.status == WcStatus::WrFlushErr));
    for w in errors {
        if w.status == WcStatus::WrFlushErr {
            flushed += 1;
        } else if cause.is_none() {
            cause = Some(w);
        }
    }
    Failure {
        cause,
        first,
        flushed,
    }
}
