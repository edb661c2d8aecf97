//! Importing objects (`ibv_import_device`, `ibv_import_pd`, `ibv_import_mr`, `ibv_import_dm`
//! and their `unimport`s), as the kernel offers them: a context's command descriptor, passed
//! on (a `dup`, or through a Unix socket within the process), opens the same context again, and
//! a PD, MR or device memory of it is reached by its handle there.
//!
//! With the kernel, an imported object *is* the original (one kernel object; the import only
//! makes userspace memory for it): destroying either destroys it, and `ibv_unimport_*` frees
//! just that memory. softrdma's objects live in the process, so an import returns the very
//! handle the object already has, and an unimport leaves it alone. An imported context is the
//! same context with one more open: `ibv_close_device` closes the descriptor each import took
//! over (as rdma-core does), and the last close tears the context down.
//!
//! The command descriptor is what tells contexts apart: each context's is a memory file of
//! its own (see `device::open`), whose inode no other context shares. Another process's
//! descriptor names no context here (`EINVAL`): processes do not share softrdma objects.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd};

use crate::abi::*;
use crate::context::Context;
use crate::util::{fail_null, is_live, live_of, owned_by, Kind};

/// The (device, inode) of the file behind `fd`, or `EBADF`.
fn file_id(fd: c_int) -> Result<(u64, u64), c_int> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole `stat` into the buffer when it returns 0.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: fstat succeeded.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

/// `ibv_import_device`: the context whose command descriptor `cmd_fd` is a copy of. The
/// context takes `cmd_fd` over and closes it on the matching `ibv_close_device`.
pub(crate) unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    let id = match file_id(cmd_fd) {
        Ok(id) => id,
        Err(e) => return fail_null(e),
    };
    for p in live_of(Kind::Context) {
        let handle = p as *mut ibv_context;
        let Ok(ctx) = Context::from_handle(handle) else {
            continue;
        };
        let own = ctx.cmd_fd.as_ref().map(|f| file_id(f.as_raw_fd()));
        if own == Some(Ok(id)) {
            // SAFETY: the caller hands the descriptor over, as to rdma-core's import; it is
            // an open descriptor (fstat succeeded) that nothing else here owns.
            let taken = unsafe { std::fs::File::from_raw_fd(cmd_fd) };
            ctx.imports
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(taken);
            return handle;
        }
    }
    fail_null(libc::EINVAL)
}

/// The live handle of `kind` of context `context` whose `handle` field `handle_of` reads as
/// `handle`.
fn find<T>(
    context: *mut ibv_context,
    kind: Kind,
    handle: u32,
    handle_of: impl Fn(&T) -> u32,
) -> *mut T {
    if !is_live(context, Kind::Context) {
        return fail_null(libc::EINVAL);
    }
    owned_by(context, kind)
        .into_iter()
        .map(|p| p as *mut T)
        // SAFETY: live handles of `kind` are boxed objects whose C struct comes first, of
        // type T as the caller names it.
        .find(|&p| handle_of(unsafe { &*p }) == handle)
        .unwrap_or_else(|| fail_null(libc::EINVAL))
}

/// `ibv_import_pd`: the PD of `context` with this handle (`EINVAL` if none).
pub(crate) unsafe extern "C" fn ibv_import_pd(
    context: *mut ibv_context,
    handle: u32,
) -> *mut ibv_pd {
    find(context, Kind::Pd, handle, |p: &ibv_pd| p.handle)
}

/// `ibv_unimport_pd`: the handle stays the PD's own (see the module docs).
pub(crate) unsafe extern "C" fn ibv_unimport_pd(pd: *mut ibv_pd) {
    let _ = pd;
}

/// `ibv_import_mr`: the region of `pd` with this handle (`EINVAL` if none).
pub(crate) unsafe extern "C" fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr {
    if !is_live(pd, Kind::Pd) {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: a live PD handle.
    let context = unsafe { (*pd).context };
    let mr = find(context, Kind::Mr, handle, |m: &ibv_mr| m.handle);
    // SAFETY: a live MR handle, or null.
    if !mr.is_null() && unsafe { (*mr).pd } != pd {
        return fail_null(libc::EINVAL);
    }
    mr
}

/// `ibv_unimport_mr`: the handle stays the region's own.
pub(crate) unsafe extern "C" fn ibv_unimport_mr(mr: *mut ibv_mr) {
    let _ = mr;
}

/// `ibv_import_dm`: the device memory of `context` with this handle (`EINVAL` if none).
pub(crate) unsafe extern "C" fn ibv_import_dm(
    context: *mut ibv_context,
    handle: u32,
) -> *mut c_void {
    find(context, Kind::Dm, handle, |d: &ibv_dm| d.handle).cast()
}

/// `ibv_unimport_dm`: the handle stays the memory's own.
pub(crate) unsafe extern "C" fn ibv_unimport_dm(dm: *mut c_void) {
    let _ = dm;
}
