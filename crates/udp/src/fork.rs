//! Descriptors that a child made by `fork` does not keep.
//!
//! A device's threads stay in the parent when a program forks (Python's `multiprocessing`, a
//! server that forks per client, rdma-core's own rdma_cm tests), but the child gets a copy of
//! every descriptor, and a copy keeps the kernel object alive for as long as the child lives:
//! - a socket of a shared address stays in the kernel's `SO_REUSEPORT` array after its device
//!   left it, so the members that the table says moved into its place are not where the
//!   kernel has them, and the datagrams steered to its index reach a socket nobody reads;
//! - a table or farewell file keeps the parent's liveness locks (open-file-description locks
//!   belong to the open file, not to a process), so a parent that dies still looks alive;
//! - a socket of an unshared device keeps the port bound after the parent exits.
//!
//! So every such descriptor is [`Uninherited`]: the child's copy is replaced by `/dev/null` in
//! a `pthread_atfork` child handler, before `fork` returns in the child. Replaced, not closed:
//! the number stays taken, so a later close of it (the child dropping what it inherited)
//! closes nothing that the child opened since. The handler only loads and swaps atomics and
//! calls `open`, `dup3` and `close`, all async-signal-safe as POSIX asks of code that runs
//! after a multithreaded program forks. A child that wants RDMA opens a device of its own, as
//! it would open the kernel's device again after `fork` (rdma-core's `ibv_fork_init` rules).

use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Once;

/// How many descriptors the registry holds at once: a device has a handful plus one per
/// source port and multicast group in use; past this, further descriptors are inherited as
/// before (counted in [`unregistered`]).
const CAPACITY: usize = 4096;

/// The registered descriptors, -1 where free.
static FDS: [AtomicI32; CAPACITY] = [const { AtomicI32::new(-1) }; CAPACITY];
/// Descriptors that found the registry full.
static UNREGISTERED: AtomicU64 = AtomicU64::new(0);
static HANDLER: Once = Once::new();

/// A descriptor-owning `T` whose descriptor a child made by `fork` does not keep (see the
/// module docs). Derefs to `T`. When dropped, the registration goes before `T` closes the
/// descriptor, so a fork in between cannot make a child replace a number reused meanwhile.
#[derive(Debug)]
pub struct Uninherited<T: AsRawFd> {
    _registration: Registration,
    inner: T,
}

impl<T: AsRawFd> Uninherited<T> {
    /// Registers `inner`'s descriptor.
    pub fn new(inner: T) -> Self {
        Uninherited {
            _registration: Registration::new(inner.as_raw_fd()),
            inner,
        }
    }
}

impl<T: AsRawFd> Deref for Uninherited<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsRawFd> DerefMut for Uninherited<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: AsRawFd> AsRawFd for Uninherited<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

impl<T: AsRawFd + AsFd> AsFd for Uninherited<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

/// How many descriptors were left to children because the registry was full.
#[must_use]
pub fn unregistered() -> u64 {
    UNREGISTERED.load(Ordering::Relaxed)
}

#[derive(Debug)]
struct Registration {
    /// Where in [`FDS`] the descriptor is, if it found room.
    index: Option<usize>,
    fd: RawFd,
}

impl Registration {
    fn new(fd: RawFd) -> Registration {
        HANDLER.call_once(|| {
            // SAFETY: `in_child` is an `extern "C"` function without arguments that stays
            // valid for the program's lifetime, as pthread_atfork requires.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
            if rc != 0 {
                tracing::warn!(
                    rc,
                    "pthread_atfork failed: forked children keep descriptors"
                );
            }
        });
        let index = FDS.iter().position(|slot| {
            slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if index.is_none() {
            UNREGISTERED.fetch_add(1, Ordering::Relaxed);
        }
        Registration { index, fd }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(i) = self.index {
            // In a child the handler has emptied the slot already (or a descriptor of the
            // child's own, with another number, holds it now): nothing to undo then.
            let _ = FDS[i].compare_exchange(self.fd, -1, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// The `pthread_atfork` child handler: every registered descriptor becomes `/dev/null`.
extern "C" fn in_child() {
    // SAFETY: open, dup3 and close are async-signal-safe; the path is a NUL-terminated
    // literal, and each descriptor replaced is one this process inherited from the parent.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        for slot in &FDS {
            let fd = slot.swap(-1, Ordering::AcqRel);
            if fd < 0 {
                continue;
            }
            if null < 0 || libc::dup3(null, fd, libc::O_CLOEXEC) < 0 {
                libc::close(fd);
            }
        }
        if null >= 0 {
            libc::close(null);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child's copy of a registered socket is `/dev/null`, the parent's is the socket:
    /// the child reports what its descriptor is through its exit status.
    #[test]
    fn a_forked_child_holds_dev_null_where_the_parent_holds_the_socket() {
        let socket = Uninherited::new(std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
        let fd = socket.as_fd().as_raw_fd();
        // SAFETY: the child only calls async-signal-safe functions (fstat, _exit) before it
        // exits; the parent waits for it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: as above; `st` is a plain C struct that fstat fills.
            unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                let code = if libc::fstat(fd, &mut st) != 0 {
                    3 // closed instead of replaced
                } else if st.st_mode & libc::S_IFMT == libc::S_IFCHR {
                    0 // /dev/null, a character device
                } else {
                    4 // still the socket
                };
                libc::_exit(code);
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child did not exit: {status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "3: closed, 4: still the socket"
        );
        // The parent's descriptor is the socket still.
        assert!(socket.local_addr().is_ok());
    }
}
