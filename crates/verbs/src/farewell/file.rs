//! The farewell file: its format, the writer a device's connection manager keeps
//! ([`Farewells`]), and the reader that says a dead process's farewells
//! ([`speak_for_the_dead`]). See the [module](super) for what it is for.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::hash::Hash;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use softrdma_udp::fork::Uninherited;
use softrdma_udp::{Config, Ecn, RoceSocket, Transmit, ROCEV2_UDP_PORT};
use softrdma_wire::mad::{gsi_packet, MAD_LEN};
use softrdma_wire::{IcrcContext, Psn};

/// One MAD to send on a dead process's behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Farewell {
    /// The peer's address (where its QP 1 listens, UDP 4791).
    pub dst: IpAddr,
    /// The peer's QP (1: its CM).
    pub dst_qpn: u32,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

const MAGIC: &str = "softrdma-farewells 1";
const PREFIX: &str = "farewell-";
/// Width of an address in a line (the longest IPv6 text).
const IP_WIDTH: usize = 39;
const HEADER_LEN: usize = 160;
/// `mad ` + address + ` ` + 6 hex digits + ` ` + 512 hex digits + newline.
const LINE_LEN: usize = 4 + IP_WIDTH + 1 + 6 + 1 + 2 * MAD_LEN + 1;

/// A device's farewell file, kept under keys of the caller's (its CM's connections).
#[derive(Debug)]
pub struct Farewells<K> {
    file: Uninherited<File>,
    path: PathBuf,
    lines: HashMap<K, usize>,
    free: Vec<usize>,
    used: usize,
}

impl<K: Hash + Eq> Farewells<K> {
    /// Starts the file of the device at `ip`, locked for this process's lifetime.
    pub fn create(ip: IpAddr) -> io::Result<Farewells<K>> {
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        let dir = crate::share::table::directory().map_err(io::Error::other)?;
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{ip}-{}-{n}", std::process::id());
        let path = dir.join(&name);
        // Made under another name and renamed once locked: a file under the final name
        // whose lock nobody holds is a dead process's.
        let tmp = dir.join(format!(".{name}.tmp"));
        let fail = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&tmp)
            .map(Uninherited::new)
            .map_err(fail)?;
        let header = header(ip);
        file.write_all_at(header.as_bytes(), 0).map_err(fail)?;
        if !try_lock(&file).map_err(fail)? {
            return Err(fail(io::Error::from(io::ErrorKind::WouldBlock)));
        }
        std::fs::rename(&tmp, &path).map_err(fail)?;
        Ok(Farewells {
            file,
            path,
            lines: HashMap::new(),
            free: Vec::new(),
            used: 0,
        })
    }

    /// Sets (or, with `None`, clears) what is said for `key`.
    pub fn set(&mut self, key: K, said: Option<&Farewell>) -> io::Result<()> {
        let line = match (said, self.lines.get(&key)) {
            (None, None) => return Ok(()),
            (None, Some(&line)) => {
                self.lines.remove(&key);
                self.free.push(line);
                return self.write_line(line, &free_line());
            }
            (Some(_), Some(&line)) => line,
            (Some(_), None) => {
                let line = self.free.pop().unwrap_or_else(|| {
                    self.used += 1;
                    self.used - 1
                });
                self.lines.insert(key, line);
                line
            }
        };
        let text = said.map(farewell_line).unwrap_or_else(free_line);
        self.write_line(line, &text)
    }

    /// Connections with something to say.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether nothing would be said.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write_line(&self, line: usize, text: &str) -> io::Result<()> {
        debug_assert_eq!(text.len(), LINE_LEN);
        let at = (HEADER_LEN + line * LINE_LEN) as u64;
        self.file.write_all_at(text.as_bytes(), at)
    }
}

impl<K> Drop for Farewells<K> {
    /// A device that closes has destroyed its connections itself: nothing is left to say.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn header(ip: IpAddr) -> String {
    let mut h = format!(
        "{MAGIC} ip {ip:<IP_WIDTH$} net {:<20} boot {} pid {}",
        netns(),
        boot_id(),
        std::process::id()
    );
    h.truncate(HEADER_LEN - 1);
    while h.len() < HEADER_LEN - 1 {
        h.push(' ');
    }
    h.push('\n');
    h
}

fn farewell_line(f: &Farewell) -> String {
    let mut s = String::with_capacity(LINE_LEN);
    let _ = write!(
        s,
        "mad {:<IP_WIDTH$} {:06x} ",
        f.dst.to_string(),
        f.dst_qpn & 0xff_ffff
    );
    for b in &f.mad {
        let _ = write!(s, "{b:02x}");
    }
    s.push('\n');
    s
}

fn free_line() -> String {
    format!("{:<width$}\n", "---", width = LINE_LEN - 1)
}

/// This process's network namespace (its inode): a farewell is said from the namespace it
/// was made in.
fn netns() -> u64 {
    std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
}

/// This boot's id: farewells of an earlier boot name connections long gone.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Takes the lock on byte 0 if nobody holds it.
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: an all-zero flock is a valid value of the plain C struct.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = 0;
    l.l_len = 1;
    loop {
        // SAFETY: the fd is this open file's; `l` is a live flock the call may write.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut l) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN | libc::EACCES) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// A dead process's file, parsed.
struct Will {
    ip: IpAddr,
    netns: u64,
    boot: String,
    farewells: Vec<Farewell>,
}

fn parse(text: &str) -> Option<Will> {
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next()?.split_whitespace().collect();
    let [m0, m1, "ip", ip, "net", net, "boot", boot, "pid", _pid] = head.as_slice() else {
        return None;
    };
    if format!("{m0} {m1}") != MAGIC {
        return None;
    }
    let mut farewells = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        let ["mad", dst, qpn, hex] = f.as_slice() else {
            continue;
        };
        let (Ok(dst), Ok(dst_qpn)) = (dst.parse(), u32::from_str_radix(qpn, 16)) else {
            continue;
        };
        let Some(mad) = unhex(hex) else { continue };
        farewells.push(Farewell { dst, dst_qpn, mad });
    }
    Some(Will {
        ip: ip.parse().ok()?,
        netns: net.parse().ok()?,
        boot: (*boot).to_string(),
        farewells,
    })
}

fn unhex(hex: &str) -> Option<[u8; MAD_LEN]> {
    if hex.len() != 2 * MAD_LEN {
        return None;
    }
    let mut out = [0u8; MAD_LEN];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Says the farewells of every process that died with some left in this network namespace
/// (only those of devices at `only`, if given), and removes their files; returns how many
/// MADs went out. Failures are logged and skipped: a file that cannot be said is kept.
pub fn speak_for_the_dead(only: Option<IpAddr>) -> usize {
    let Ok(dir) = crate::share::table::directory() else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let (here, boot) = (netns(), boot_id());
    let mut sent = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(PREFIX) {
            continue;
        }
        if let Some(ip) = only {
            if !name.starts_with(&format!("{PREFIX}{ip}-")) {
                continue;
            }
        }
        match speak_for(&entry.path(), only, here, &boot) {
            Ok(n) => sent += n,
            Err(e) => tracing::debug!(file = %entry.path().display(), error = %e,
                "cannot say a dead process's farewells"),
        }
    }
    sent
}

/// Says one file's farewells if its process is dead: `Ok(0)` if it lives (or another
/// process took the file first, or it is not this namespace's).
fn speak_for(path: &Path, only: Option<IpAddr>, here: u64, boot: &str) -> io::Result<usize> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)?;
    if !try_lock(&file)? {
        return Ok(0); // alive
    }
    if file.metadata()?.nlink() == 0 {
        return Ok(0); // said by whoever held the lock before us
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let Some(will) = parse(&text) else {
        // Not one of ours (or torn beyond reading): nobody can say it.
        std::fs::remove_file(path)?;
        return Ok(0);
    };
    if will.netns != here || only.is_some_and(|ip| ip != will.ip) {
        return Ok(0);
    }
    if will.boot != boot {
        std::fs::remove_file(path)?;
        return Ok(0);
    }
    let n = if will.farewells.is_empty() {
        0
    } else {
        send(will.ip, &will.farewells)?
    };
    tracing::debug!(ip = %will.ip, mads = n, "said a dead process's farewells");
    std::fs::remove_file(path)?;
    Ok(n)
}

/// Sends `farewells` as UD SENDs from QP 1 at `ip` (an ephemeral UDP port: peers answer to
/// 4791, and the answers are not needed).
fn send(ip: IpAddr, farewells: &[Farewell]) -> io::Result<usize> {
    let mut config = Config::new(ip).port(0);
    config.gso = false;
    config.gro = false;
    let mut socket = RoceSocket::open(config).map_err(io::Error::other)?;
    let sport = socket.local_addr().port();
    let mut sent = 0;
    for f in farewells {
        let packet = gsi_packet(f.dst_qpn, Psn::ZERO, &f.mad);
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.emit(&mut buf);
        IcrcContext::new(ip, f.dst, sport, ROCEV2_UDP_PORT)
            .fill(&mut buf)
            .map_err(io::Error::other)?;
        let t = Transmit {
            dst: SocketAddr::new(f.dst, ROCEV2_UDP_PORT),
            src_port: 0,
            ecn: Ecn::NotEct,
            segment_size: None,
            contents: &buf,
        };
        match socket.send(&[t]) {
            Ok(1) => sent += 1,
            Ok(_) => {}
            Err(e) => tracing::debug!(dst = %f.dst, error = %e, "a farewell was not sent"),
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn farewell(last: u8, fill: u8) -> Farewell {
        Farewell {
            dst: IpAddr::from([127, 0, 0, last]),
            dst_qpn: 1,
            mad: [fill; MAD_LEN],
        }
    }

    #[test]
    fn lines_are_fixed_width_and_the_file_reads_back() {
        assert_eq!(header("::ffff:10.0.0.1".parse().unwrap()).len(), HEADER_LEN);
        assert_eq!(free_line().len(), LINE_LEN);
        assert_eq!(farewell_line(&farewell(2, 0xab)).len(), LINE_LEN);
        let mut f: Farewells<u32> = Farewells::create("127.0.71.1".parse().unwrap()).unwrap();
        f.set(1, Some(&farewell(2, 1))).unwrap();
        f.set(2, Some(&farewell(3, 2))).unwrap();
        f.set(1, None).unwrap();
        f.set(3, Some(&farewell(4, 3))).unwrap(); // takes line 0 again
        f.set(2, Some(&farewell(5, 4))).unwrap();
        let text = std::fs::read_to_string(f.path()).unwrap();
        let will = parse(&text).expect("readable");
        assert_eq!(will.ip, "127.0.71.1".parse::<IpAddr>().unwrap());
        assert_eq!(will.netns, netns());
        assert_eq!(will.farewells, vec![farewell(4, 3), farewell(5, 4)]);
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn a_living_process_is_not_spoken_for_and_a_closed_one_leaves_nothing() {
        let ip: IpAddr = "127.0.71.2".parse().unwrap();
        let mut f: Farewells<u32> = Farewells::create(ip).unwrap();
        f.set(7, Some(&farewell(9, 7))).unwrap();
        let path = f.path().to_path_buf();
        assert_eq!(speak_for_the_dead(Some(ip)), 0);
        assert!(path.exists(), "the lock says its process lives");
        drop(f);
        assert!(!path.exists());
    }
}
