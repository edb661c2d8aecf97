//! An open context: the `verbs_context` (with the `ibv_context` at its end) the program
//! holds, and softrdma's device behind it. Every verb that takes a handle reaches its context
//! through here.

use std::ffi::c_int;
use std::mem::offset_of;
use std::sync::Mutex;

use softrdma::{AsyncEvents, Device};

use crate::abi::*;
use crate::util::{is_live, Kind};

/// An open context: the `verbs_context` (with the `ibv_context` at its end) first, so the
/// `ibv_context` pointer the program holds converts back by a fixed offset.
#[repr(C)]
pub(crate) struct Context {
    pub vctx: verbs_context,
    pub device: Device,
    pub async_events: AsyncEvents,
    /// What `ibv_context.cmd_fd` names. rdma-core's is the kernel's uverbs descriptor; here
    /// nothing goes through it, but programs dup, poll or fcntl it, and pass a copy to
    /// `ibv_import_device`, which finds the context by it: an empty memory file of the
    /// context's own (a file no other context shares).
    pub cmd_fd: Option<std::fs::File>,
    /// The descriptors `ibv_import_device` opened this context again with, one closed per
    /// `ibv_close_device` before the last one closes the context (see `crate::import`).
    pub imports: Mutex<Vec<std::fs::File>>,
    /// CQ id → `ibv_cq` address, to name the CQ of an asynchronous event.
    pub cqs: Mutex<std::collections::HashMap<u32, usize>>,
    /// QP number → `ibv_qp` address, likewise.
    pub qps: Mutex<std::collections::HashMap<u32, usize>>,
    /// SRQ id → `ibv_srq` address, likewise.
    pub srqs: Mutex<std::collections::HashMap<u32, usize>>,
    /// The XRC domains opened through files (see `crate::xrc`).
    pub xrcd_files: crate::xrcd::XrcdFiles,
}

impl Context {
    /// Remembers (or, with `None`, forgets) the handle an asynchronous event names.
    pub(crate) fn name_object(
        map: &Mutex<std::collections::HashMap<u32, usize>>,
        id: u32,
        handle: Option<usize>,
    ) {
        let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
        match handle {
            Some(h) => {
                m.insert(id, h);
            }
            None => {
                m.remove(&id);
            }
        }
    }

    /// The handle `id` names in `map`, if still alive.
    pub(crate) fn named(
        map: &Mutex<std::collections::HashMap<u32, usize>>,
        id: u32,
    ) -> Option<usize> {
        map.lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .copied()
    }
}

impl Context {
    /// The context behind a live `ibv_context` handle, or `EINVAL`.
    pub(crate) fn from_handle<'a>(ctx: *mut ibv_context) -> Result<&'a Context, c_int> {
        if !is_live(ctx, Kind::Context) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live contexts are `Context`s allocated by ibv_open_device, whose
        // ibv_context sits at this fixed offset; it stays allocated until ibv_close_device.
        Ok(unsafe { &*Context::from_ptr(ctx) })
    }

    /// The context that contains `ctx`, without checking (for the hot path).
    pub(crate) fn from_ptr(ctx: *mut ibv_context) -> *mut Context {
        ctx.cast::<u8>()
            .wrapping_sub(offset_of!(Context, vctx) + offset_of!(verbs_context, context))
            .cast()
    }

    pub(crate) fn handle(&mut self) -> *mut ibv_context {
        &mut self.vctx.context
    }
}
