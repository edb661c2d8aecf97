//! errno, the registry of live handles, and conversions shared by every verb.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot, valid for the thread's
    // lifetime.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno` (after a verb of this library failed).
pub(crate) fn last_errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot, valid for the thread's
    // lifetime.
    unsafe { *libc::__errno_location() }
}

/// Sets `errno` and returns a null pointer: how the creating verbs fail.
pub(crate) fn fail_null<T>(e: c_int) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// Sets `errno` and returns -1: how the `int`-returning verbs that document "-1 and errno"
/// fail.
pub(crate) fn fail_minus_one(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// Sets `errno` and returns it: how the verbs that return an errno value fail (rdma-core sets
/// `errno` too in most of them).
pub(crate) fn fail_errno(e: c_int) -> c_int {
    set_errno(e);
    e
}

/// What kind of object a handle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Context,
    Pd,
    /// A thread domain (`ibv_alloc_td`).
    Td,
    /// Device memory (`ibv_alloc_dm`).
    Dm,
    Mr,
    Cq,
    Channel,
    Qp,
    Ah,
    Srq,
    /// An XRC domain (`ibv_open_xrcd`).
    Xrcd,
    Mw,
    /// librdmacm's objects (`cm/`).
    CmId,
    CmChannel,
    CmEvent,
    AddrInfo,
}

/// Every handle this library has given out and not yet destroyed, by address. Non-hot-path
/// verbs (create, modify, query, destroy, events) check their handles here, so a NULL, a
/// destroyed or a foreign handle gets `EINVAL` instead of a crash or a double free. The hot
/// path (post, poll) is reached through the handle's own function table, so the program
/// already dereferenced it before softrdma sees it.
fn live() -> MutexGuard<'static, HashMap<usize, (Kind, usize)>> {
    static LIVE: OnceLock<Mutex<HashMap<usize, (Kind, usize)>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The lock that makes "check the handles an object will use, then count it as their user"
/// one step against "check an object has no users, then unregister it" (the kernel's uobject
/// locks do this for rdma-core). Without it, a QP created on a CQ that another thread was
/// destroying could pass its check before the destroy and count itself after: a QP on a freed
/// CQ. Creations that take users hold it shared, from their first handle check to their last
/// count; destructions that check for users hold it exclusively, from that check to
/// unregistering. No holder waits for another holder of this lock (nor takes it twice).
static USERS: RwLock<()> = RwLock::new(());

/// Held by a creation from the checks of the handles it will use until it counts itself.
pub(crate) fn creating_user() -> RwLockReadGuard<'static, ()> {
    USERS.read().unwrap_or_else(|e| e.into_inner())
}

/// Held by a destruction from its check for users until the handle is unregistered.
pub(crate) fn destroying_used() -> RwLockWriteGuard<'static, ()> {
    USERS.write().unwrap_or_else(|e| e.into_inner())
}

/// Takes back the boxed `T` behind `h`, a live handle of `kind`, unless `users` says objects
/// still use it: the box (to drop after any cleanup of its own), `EINVAL` for a handle that
/// is not live, `EBUSY` for one in use. The check and the unregistering hold
/// [`destroying_used`], so no creation that would count itself a user races them.
///
/// # Safety
/// Live handles of `kind` must be boxed `T`s, registered by their own address.
pub(crate) unsafe fn take_unused<H, T>(
    h: *mut H,
    kind: Kind,
    users: impl Fn(&T) -> usize,
) -> Result<Box<T>, c_int> {
    let _destroying = destroying_used();
    if !is_live(h, kind) {
        return Err(libc::EINVAL);
    }
    // SAFETY: live handles of `kind` are boxed `T`s (the caller's promise).
    if users(unsafe { &*h.cast::<T>() }) != 0 {
        return Err(libc::EBUSY);
    }
    if !unregister(h, kind) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the handle was live and is now unregistered: taken back once.
    Ok(unsafe { Box::from_raw(h.cast::<T>()) })
}

/// Records a new handle of the context `ctx` (a context is its own).
pub(crate) fn register<T, C>(p: *mut T, kind: Kind, ctx: *mut C) {
    live().insert(p as usize, (kind, ctx as usize));
}

/// The live handles of `kind` that belong to the context `ctx`.
pub(crate) fn owned_by<C>(ctx: *mut C, kind: Kind) -> Vec<usize> {
    live()
        .iter()
        .filter(|(_, &(k, c))| k == kind && c == ctx as usize)
        .map(|(&p, _)| p)
        .collect()
}

/// Every live handle of `kind`.
pub(crate) fn live_of(kind: Kind) -> Vec<usize> {
    live()
        .iter()
        .filter(|(_, &(k, _))| k == kind)
        .map(|(&p, _)| p)
        .collect()
}

/// Forgets a handle; false if it was not live as `kind` (then nothing changes).
pub(crate) fn unregister<T>(p: *mut T, kind: Kind) -> bool {
    let mut l = live();
    if l.get(&(p as usize)).is_some_and(|e| e.0 == kind) {
        l.remove(&(p as usize));
        true
    } else {
        false
    }
}

/// Whether `p` is a live handle of `kind`.
pub(crate) fn is_live<T>(p: *const T, kind: Kind) -> bool {
    !p.is_null() && live().get(&(p as usize)).is_some_and(|e| e.0 == kind)
}

/// Copies `s` into a fixed C string buffer, always NUL-terminated.
pub(crate) fn copy_c_str(dst: &mut [std::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as std::ffi::c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// Copies the first `len` bytes of `src` to `dst` (a caller's struct that may be older and
/// shorter than ours, or newer and longer: the extra tail is zeroed).
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes.
pub(crate) unsafe fn copy_prefix<T>(src: &T, dst: *mut u8, len: usize) {
    let n = len.min(std::mem::size_of::<T>());
    // SAFETY: `src` is a live T of at least `n` bytes; the caller guarantees `dst` holds
    // `len >= n` bytes; they cannot overlap (src is ours).
    unsafe {
        std::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst, n);
        std::ptr::write_bytes(dst.add(n), 0, len - n);
    }
}

/// Clock `id` (`CLOCK_MONOTONIC`, `CLOCK_REALTIME`) in nanoseconds.
pub(crate) fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; the clocks asked for exist on
    // every Linux, so it cannot fail.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// How many completion vectors a context has: one per CPU the system may run, as rxe counts
/// them. Programs pass a vector per thread or per CPU (UCX passes the CPU it runs on); every
/// vector of softrdma delivers through the CQ's own completion channel, so they differ in
/// name only.
pub(crate) fn comp_vectors() -> i32 {
    // SAFETY: sysconf reads a system value and takes no pointer.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    i32::try_from(n).unwrap_or(1).max(1)
}
