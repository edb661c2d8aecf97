//! The table of a shared address: one small file per address, port and network namespace, in
//! a directory only its user can enter, guarded by open-file-description locks
//! (`F_OFD_SETLK`).
//!
//! - Byte 0 of the file is the table's mutex: whoever changes the membership or the
//!   listeners (and attaches the program that follows from them) holds it.
//! - Byte `slot + 1` (1..=255) is held by the member in that slot for as long as its device
//!   is open. The kernel drops the lock when the process dies, however it dies, so a member that
//!   is gone is one whose byte nobody holds.
//!
//! The contents are text (`cat` it to see who shares the address):
//!
//! ```text
//! softrdma-shared-address 1
//! generation 12
//! verify-epoch 1
//! next-slot 4
//! member 1 0 4711        (slot, index in the kernel's array, pid)
//! member 3 1 4713
//! listen 0000000001064e20 3
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use softrdma_udp::fork::Uninherited;

use super::steer::Route;

/// The slots a member may have: 255 would hold the multicast QPN (slot 0's QPNs leave out
/// QP 0 and QP 1).
pub(crate) const SLOTS: std::ops::RangeInclusive<u8> = 0..=254;

const HEADER: &str = "softrdma-shared-address 1";

/// A member of the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) slot: u8,
    /// Its socket's index in the kernel's `SO_REUSEPORT` array, as last known.
    pub(crate) index: u32,
    pub(crate) pid: u32,
}

/// The shared state of an address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Table {
    pub(crate) generation: u64,
    /// Bumped when the mirror of the kernel's array may be wrong: every member then checks
    /// its own index with probes.
    pub(crate) verify_epoch: u64,
    /// Where the search for a free slot starts, so that a slot is not reused at once (a peer
    /// of a process that just died may still send to its QPNs).
    pub(crate) next_slot: u8,
    pub(crate) members: Vec<Member>,
    /// Service IDs and the slot listening on each.
    pub(crate) listeners: Vec<(u64, u8)>,
}

impl Table {
    /// Removes `slot`'s member as the kernel removes a socket from the array: the last one
    /// takes its place. Returns whether it was there. Its listeners go too.
    pub(crate) fn remove(&mut self, slot: u8) -> bool {
        let Some(at) = self.members.iter().position(|m| m.slot == slot) else {
            return false;
        };
        let gone = self.members.remove(at);
        let last = self.members.len() as u32;
        if let Some(m) = self.members.iter_mut().find(|m| m.index == last) {
            m.index = gone.index;
        }
        self.listeners.retain(|&(_, s)| s != slot);
        true
    }

    /// A free slot, searching from `next_slot` on.
    pub(crate) fn free_slot(&mut self) -> Option<u8> {
        let (first, last) = (*SLOTS.start(), *SLOTS.end());
        let start = self.next_slot.clamp(first, last);
        let slot = (start..=last)
            .chain(first..start)
            .find(|s| !self.members.iter().any(|m| m.slot == *s))?;
        self.next_slot = if slot == last { first } else { slot + 1 };
        Some(slot)
    }

    /// The routes the steering program needs.
    pub(crate) fn routes(&self) -> (Vec<Route>, Vec<(u64, u32)>) {
        let routes: Vec<Route> = self
            .members
            .iter()
            .map(|m| Route {
                slot: m.slot,
                index: m.index,
            })
            .collect();
        let listeners = self
            .listeners
            .iter()
            .filter_map(|&(sid, slot)| {
                let m = self.members.iter().find(|m| m.slot == slot)?;
                Some((sid, m.index))
            })
            .collect();
        (routes, listeners)
    }

    fn parse(text: &str) -> Table {
        let mut t = Table::default();
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return t;
        }
        for line in lines {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["generation", g] => t.generation = g.parse().unwrap_or(0),
                ["verify-epoch", g] => t.verify_epoch = g.parse().unwrap_or(0),
                ["next-slot", s] => t.next_slot = s.parse().unwrap_or(0),
                ["member", s, i, p] => {
                    if let (Ok(slot), Ok(index), Ok(pid)) = (s.parse(), i.parse(), p.parse()) {
                        t.members.push(Member { slot, index, pid });
                    }
                }
                ["listen", sid, s] => {
                    if let (Ok(sid), Ok(slot)) = (u64::from_str_radix(sid, 16), s.parse()) {
                        t.listeners.push((sid, slot));
                    }
                }
                _ => {}
            }
        }
        t
    }

    fn format(&self) -> String {
        let mut s = format!(
            "{HEADER}\ngeneration {}\nverify-epoch {}\nnext-slot {}\n",
            self.generation, self.verify_epoch, self.next_slot
        );
        for m in &self.members {
            s += &format!("member {} {} {}\n", m.slot, m.index, m.pid);
        }
        for (sid, slot) in &self.listeners {
            s += &format!("listen {sid:016x} {slot}\n");
        }
        s
    }
}

/// Why an address cannot be shared.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// The directory for the tables cannot be made or is not the user's alone.
    #[error("cannot use {path} for shared-address tables: {reason}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The table file cannot be opened, read, written or locked.
    #[error("shared-address table {path}: {source}")]
    Table {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Every slot is taken.
    #[error("{0} programs already share this address (the most there can be)")]
    Full(usize),
    /// Another program on the address listens on this service.
    #[error("another program on this address listens on service ID {0:#018x}")]
    ServiceInUse(u64),
    /// The kernel refused the steering program.
    #[error("cannot attach the steering program to the address's sockets: {0}")]
    Attach(io::Error),
}

/// The directory of the tables: `$SOFTRDMA_RUN_DIR`, else `$XDG_RUNTIME_DIR/softrdma`, else
/// `/tmp/softrdma-<uid>`; made with mode 0700 and refused unless it is a directory of this
/// user that nobody else may enter (else another user could forge the table).
pub(crate) fn directory() -> Result<PathBuf, ShareError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let path = match (
        std::env::var_os("SOFTRDMA_RUN_DIR"),
        std::env::var_os("XDG_RUNTIME_DIR"),
    ) {
        (Some(d), _) => PathBuf::from(d),
        (None, Some(x)) if Path::new(&x).is_dir() => Path::new(&x).join("softrdma"),
        _ => PathBuf::from(format!("/tmp/softrdma-{uid}")),
    };
    let fail = |reason: String| ShareError::Directory {
        path: path.clone(),
        reason,
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail(e.to_string())),
    }
    let meta = std::fs::symlink_metadata(&path).map_err(|e| fail(e.to_string()))?;
    if !meta.is_dir() {
        return Err(fail("not a directory".into()));
    }
    if meta.uid() != uid {
        return Err(fail(format!("owned by uid {}, not {uid}", meta.uid())));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(fail(format!(
            "mode {:o}: others may enter it",
            meta.permissions().mode() & 0o777
        )));
    }
    Ok(path)
}

/// The open table file of one address.
#[derive(Debug)]
pub(crate) struct TableFile {
    file: Uninherited<File>,
    path: PathBuf,
}

impl TableFile {
    pub(crate) fn open(ip: IpAddr, port: u16) -> Result<TableFile, ShareError> {
        // The kernel's group is per network namespace, and two namespaces (containers) may
        // have the same address: the table is the namespace's too.
        let netns = std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino());
        let path = directory()?.join(format!("{ip}_{port}_net{netns}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| ShareError::Table {
                path: path.clone(),
                source,
            })?;
        Ok(TableFile {
            file: Uninherited::new(file),
            path,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn error(&self, source: io::Error) -> ShareError {
        ShareError::Table {
            path: self.path.clone(),
            source,
        }
    }

    /// Takes the table's mutex (waiting for it).
    pub(crate) fn lock(&self) -> Result<Locked<'_>, ShareError> {
        self.byte_lock(0, libc::F_WRLCK, libc::F_OFD_SETLKW)
            .map_err(|e| self.error(e))?;
        Ok(Locked { file: self })
    }

    /// Holds `slot`'s liveness byte; `false` if someone else holds it.
    pub(crate) fn hold_slot(&self, slot: u8) -> io::Result<bool> {
        match self.byte_lock(i64::from(slot) + 1, libc::F_WRLCK, libc::F_OFD_SETLK) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether some other open file holds `slot`'s liveness byte (its member lives).
    pub(crate) fn slot_alive(&self, slot: u8) -> io::Result<bool> {
        let l = self.byte_lock(i64::from(slot) + 1, libc::F_WRLCK, libc::F_OFD_GETLK)?;
        Ok(l.l_type != libc::F_UNLCK as libc::c_short)
    }

    fn byte_lock(&self, byte: i64, kind: i32, cmd: i32) -> io::Result<libc::flock> {
        // SAFETY: an all-zero flock is a valid value of the plain C struct.
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = kind as libc::c_short;
        l.l_whence = libc::SEEK_SET as libc::c_short;
        l.l_start = byte;
        l.l_len = 1;
        // l_pid stays 0, as open-file-description locks require.
        loop {
            // SAFETY: the fd is this open file's; `l` is a live flock the call may write.
            let rc = unsafe { libc::fcntl(self.file.as_raw_fd(), cmd, &mut l) };
            if rc == 0 {
                return Ok(l);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// The table's mutex, held; released when dropped.
pub(crate) struct Locked<'a> {
    file: &'a TableFile,
}

impl Locked<'_> {
    pub(crate) fn read(&self) -> Result<Table, ShareError> {
        let mut text = String::new();
        let mut f = &*self.file.file;
        f.seek(SeekFrom::Start(0))
            .and_then(|_| f.read_to_string(&mut text))
            .map_err(|e| self.file.error(e))?;
        Ok(Table::parse(&text))
    }

    pub(crate) fn write(&self, table: &Table) -> Result<(), ShareError> {
        let text = table.format();
        let mut f = &*self.file.file;
        f.set_len(0)
            .and_then(|()| f.seek(SeekFrom::Start(0)))
            .and_then(|_| f.write_all(text.as_bytes()))
            .map_err(|e| self.file.error(e))
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = self.file.byte_lock(0, libc::F_UNLCK, libc::F_OFD_SETLK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(slot: u8, index: u32) -> Member {
        Member {
            slot,
            index,
            pid: 100 + u32::from(slot),
        }
    }

    #[test]
    fn removal_moves_the_last_member_into_the_gap_as_the_kernel_does() {
        let mut t = Table {
            members: vec![member(1, 0), member(2, 1), member(3, 2), member(4, 3)],
            listeners: vec![(0x106_0001, 2), (0x106_0002, 4)],
            ..Table::default()
        };
        assert!(t.remove(2));
        assert!(!t.remove(2));
        let indices: Vec<(u8, u32)> = t.members.iter().map(|m| (m.slot, m.index)).collect();
        assert_eq!(indices, [(1, 0), (3, 2), (4, 1)]);
        assert_eq!(t.listeners, [(0x106_0002, 4)]);
        // Removing the last one moves nobody.
        assert!(t.remove(3));
        let indices: Vec<(u8, u32)> = t.members.iter().map(|m| (m.slot, m.index)).collect();
        assert_eq!(indices, [(1, 0), (4, 1)]);
        assert_eq!(t.routes().1, [(0x106_0002, 1)]);
    }

    #[test]
    fn slots_are_not_reused_at_once_and_run_out() {
        let mut t = Table::default();
        let a = t.free_slot().expect("free");
        t.members.push(member(a, 0));
        let b = t.free_slot().expect("free");
        assert_eq!((a, b), (0, 1));
        t.members.push(member(b, 1));
        t.remove(a);
        assert_eq!(
            t.free_slot(),
            Some(2),
            "slot 0 waits until the others were used"
        );
        let mut full = Table::default();
        for s in SLOTS {
            full.members.push(member(s, u32::from(s)));
        }
        assert_eq!(full.free_slot(), None);
    }

    #[test]
    fn the_text_round_trips_and_junk_reads_as_empty() {
        let t = Table {
            generation: 9,
            verify_epoch: 2,
            next_slot: 3,
            members: vec![member(1, 1), member(2, 0)],
            listeners: vec![(0x0000_0000_0106_4e20, 2)],
        };
        assert_eq!(Table::parse(&t.format()), t);
        assert_eq!(Table::parse("garbage\nmember 1 2 3\n"), Table::default());
    }
}
