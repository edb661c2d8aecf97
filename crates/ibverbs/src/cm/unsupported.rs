//! What softrdma's librdmacm does not do yet — rsockets (the `r*` socket calls) and ECE — fails at once with `ENOSYS` or `EOPNOTSUPP` and says so on stderr, once
//! per call, instead of crashing or hanging the program.

use std::collections::HashSet;
use std::ffi::{c_int, c_long};
use std::sync::Mutex;

use crate::util::set_errno;

/// One line on stderr, the first time `what` is called.
pub(crate) fn say(what: &'static str) {
    static SAID: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.get_or_insert_with(HashSet::new).insert(what) {
        eprintln!("softrdma: {what} is not supported by softrdma's librdmacm");
    }
}

/// An rsockets call: -1 (of the call's return type, which every caller reads as -1) with
/// `ENOSYS`.
pub(crate) fn rsocket_call(name: &'static str) -> c_long {
    say(name);
    set_errno(libc::ENOSYS);
    -1
}

/// An ECE call: -1 with `EOPNOTSUPP`.
pub(crate) fn unsupported(name: &'static str) -> c_int {
    say(name);
    set_errno(libc::EOPNOTSUPP);
    -1
}
