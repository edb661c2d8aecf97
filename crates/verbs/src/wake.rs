//! The level-triggered wake-up descriptor threads sleep on: a CQ's completions, the progress
//! thread's posts, a [`LocalFabric`](crate::LocalFabric) port's arrivals.

use std::os::fd::RawFd;

/// A level-triggered wake-up file descriptor (eventfd).
#[derive(Debug)]
pub(crate) struct WakeFd(pub(crate) RawFd);

impl WakeFd {
    pub(crate) fn new() -> std::io::Result<WakeFd> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(WakeFd(fd))
    }

    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A full counter (EAGAIN)
        // still leaves the fd readable, which is all that matters.
        let _ = unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd.
        let _ = unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
    }
}

impl Drop for WakeFd {
    fn drop(&mut self) {
        // SAFETY: the fd is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}
