//! `rdma_create_event_channel`, `rdma_destroy_event_channel`, `rdma_get_cm_event`,
//! `rdma_ack_cm_event`.

use std::ffi::c_int;

use super::abi::*;
use super::channel::{destroy_private, Channel};
use crate::util::{fail_minus_one, fail_null, set_errno};

/// `rdma_create_event_channel`.
pub(crate) unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    super::dispatch::start();
    match Channel::create(false) {
        // SAFETY: just created.
        Ok(ch) => unsafe { (*ch).handle() },
        Err(e) => fail_null(e),
    }
}

/// `rdma_destroy_event_channel`: refused (`errno` `EBUSY`, the channel stays) while ids are
/// on it, where librdmacm would leave them pointing at a closed descriptor.
pub(crate) unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    let Ok(ch) = Channel::from_handle(channel) else {
        set_errno(libc::EINVAL);
        return;
    };
    if ch.private {
        // A synchronous id's: it goes with the id.
        set_errno(libc::EINVAL);
        return;
    }
    if super::id::ids_on(channel) != 0 {
        set_errno(libc::EBUSY);
        return;
    }
    destroy_private(channel);
}

/// `rdma_get_cm_event`: the next event, waiting for it unless the channel's descriptor was
/// made non-blocking (`EAGAIN`).
pub(crate) unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    let ch = match Channel::from_handle(channel) {
        Ok(c) => c,
        Err(e) => return fail_minus_one(e),
    };
    if event.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    match ch.next(true) {
        Ok(e) => {
            let p = super::id::hand_out(e);
            // SAFETY: the caller passes a writable pointer.
            unsafe { *event = p };
            0
        }
        Err(e) => fail_minus_one(e),
    }
}

/// `rdma_ack_cm_event`.
pub(crate) unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    // SAFETY: only a live event handle is touched.
    match unsafe { super::id::ack(event) } {
        Ok(()) => 0,
        Err(e) => fail_minus_one(e),
    }
}
