//! The C handle of an XRC domain (`ibv_xrcd`): what the SRQs and QPs made through it point
//! back to, and the context's table of domains opened through files. The verbs themselves are
//! in `xrc.rs`.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use softrdma::XrcDomain;

use crate::abi::*;
use crate::util::{is_live, Kind};

/// A domain opened through a file: the file's (device, inode), for the context's table.
pub(crate) type FileKey = (u64, u64);

/// The domains a context has opened through files, and how many handles each has.
pub(crate) type XrcdFiles = Mutex<HashMap<FileKey, (XrcDomain, usize)>>;

/// An XRC domain handle: the C struct first.
#[repr(C)]
pub(crate) struct Xrcd {
    pub ibv: ibv_xrcd,
    pub xrcd: XrcDomain,
    /// The file it was opened through, if any.
    pub file: Option<FileKey>,
    /// SRQs and target QPs made, or target QPs opened, through this handle.
    pub users: AtomicUsize,
}

impl Xrcd {
    /// The domain behind a live handle, or `EINVAL`.
    pub(crate) fn from_handle<'a>(xrcd: *mut ibv_xrcd) -> Result<&'a Xrcd, c_int> {
        if !is_live(xrcd, Kind::Xrcd) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live XRCD handles are boxed `Xrcd`s (the ibv_xrcd first) until
        // ibv_close_xrcd.
        Ok(unsafe { &*xrcd.cast::<Xrcd>() })
    }
}
