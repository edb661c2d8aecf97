//! One address for many processes: every softrdma device of one user on `<ip>:4791` is a
//! member of the address, as every process of a host shares rxe's one UDP socket.
//!
//! # How
//! Each member binds its own socket to the address with `SO_REUSEPORT`, which the kernel
//! allows only to sockets of the same user: another user's program cannot join (its bind fails
//! with `EADDRINUSE`), and no member ever sees another's memory. The kernel then runs the
//! group's classic BPF program ([`steer`]) on every arriving datagram to pick the socket: by
//! the slot in the destination QPN's top byte for data, by the slot in the receiving
//! communication ID, or the listener of the Service ID, for CM MADs to QP 1. No packet
//! crosses a process boundary it would not cross with rxe, and the data path pays nothing:
//! one more cBPF run per datagram in the kernel.
//!
//! # What it costs to keep right
//! The program returns an *index* into the kernel's array of the group's sockets, which the
//! kernel does not show: a socket that binds joins at the end, one that closes is replaced by
//! the last. The [`table`] (a file, under a lock) mirrors the array, and every change to it
//! attaches a new program:
//! - a device that opens takes a free slot and joins at the end, under the table's lock;
//! - a device that closes attaches the program without it and closes its socket, under the
//!   lock, so the kernel's move of the last socket and the table's happen together;
//! - a process that dies (`kill -9`) drops its liveness lock; within [`TICK`] another
//!   member removes it from the table as the kernel did, and attaches the new program. It
//!   also sends what the dead member's connection manager left to be said for it (the DREQs
//!   of its connections: see [`crate::farewell`]), as the kernel's CM does for a dead
//!   process.
//!
//! The kernel removes a socket only when its last descriptor closes, so no other process may
//! hold one: a child made by `fork` gets `/dev/null` in place of the member's socket and of
//! the table file with its liveness lock ([`softrdma_udp::fork`]). With a copy of them, the
//! socket of a member that left would stay in the array (the members the table moved into
//! its place unreachable), and a member that died would look alive while the child lived.
//!
//! Two deaths at once can leave the mirror wrong (the kernel's result depends on their
//! order), and so can a death whose socket the kernel removes only after a new member joined.
//! Either shows as datagrams that reach a member with another member's slot in their QPN:
//! the receive path notices, and the member asks everyone to check (the table's
//! `verify-epoch`). Each member then asks the kernel for its own index with probes —
//! datagrams to QP 0 that the program sends to the index they name — and puts its entry
//! right. Until then the packets of the member the mirror misplaced reach another one,
//! which drops them as packets of an unknown QP; RC retransmits them. A connection request
//! that reaches a member other than its service's listener is dropped too, not rejected, and
//! starts the same check (`Device::request_for_another`): the CM's retransmission connects. Probes are never sent
//! while the mirror holds, so captures of a healthy address show RoCE packets only.
//!
//! Each member also has 65 535 QPNs (`slot << 16 | n`) rather than 16 million, and at most
//! 255 members share an address. A lone process gets slot 0, so its QPNs are rxe's (0x11 on).

pub(crate) mod steer;
pub(crate) mod table;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use softrdma_udp::fork::Uninherited;
use softrdma_udp::{RoceSocket, SteeringHandle};

pub use table::ShareError;
use table::{Locked, Member, Table, TableFile};

/// The directory where softrdma keeps what the programs of this user on this host share: the
/// address tables, and the device descriptions `softrdma exec` writes. `$SOFTRDMA_RUN_DIR`,
/// else `$XDG_RUNTIME_DIR/softrdma`, else `/tmp/softrdma-<uid>`; made with mode 0700, and
/// refused unless it is this user's and nobody else may enter it.
pub fn run_directory() -> Result<std::path::PathBuf, ShareError> {
    table::directory()
}

/// How often a member looks for members that died.
pub(crate) const TICK: Duration = Duration::from_millis(50);
/// The least time between two requests of one member that everyone check their index.
const VERIFY_REQUEST_GAP: Duration = Duration::from_millis(500);
/// How long a member waits for its probe.
const PROBE_WAIT: Duration = Duration::from_millis(20);

/// What the receive path tells the maintenance thread: the probes received, (nonce, index)
/// pairs (probes never reach the engine), and the slot of the last datagram that came for
/// another slot (if that slot is a member's, a sign the mirror is wrong; if not, a peer
/// still sending to a process that is gone).
#[derive(Debug)]
pub(crate) struct ProbeMailbox {
    slot: u8,
    received: Mutex<Vec<(u32, u32)>>,
    /// The slot plus one; 0 for none.
    misdirected: AtomicU32,
}

impl ProbeMailbox {
    /// Looks at a received `datagram`: true if it is a probe, which it takes if it came from
    /// `local` (the address's own IP: nobody else can send one that counts).
    pub(crate) fn take(&self, src: IpAddr, local: IpAddr, datagram: &[u8]) -> bool {
        if let Some(qpn) = datagram.get(5..8) {
            // QP 0 (probes), QP 1 (MADs) and multicast are everyone's.
            let top = qpn[0];
            let everyones = qpn == [0, 0, 0] || qpn == [0, 0, 1] || qpn == [0xff; 3];
            if top != self.slot && !everyones {
                self.misdirected
                    .store(u32::from(top) + 1, Ordering::Relaxed);
            }
        }
        if datagram.len() != steer::PROBE_LEN {
            return false;
        }
        let Some((index, nonce)) = steer::parse_probe(datagram) else {
            return false;
        };
        if src == local {
            let mut r = lock(&self.received);
            if r.len() < 1024 {
                r.push((nonce, index));
            }
        }
        true
    }

    fn drain(&self, nonce: u32) -> Vec<u32> {
        let mut r = lock(&self.received);
        let mine = r
            .iter()
            .filter(|(n, _)| *n == nonce)
            .map(|&(_, i)| i)
            .collect();
        r.clear();
        mine
    }
}

/// What a member knows and does; shared with its maintenance thread.
#[derive(Debug)]
struct State {
    table: TableFile,
    slot: u8,
    addr: SocketAddr,
    /// The socket's membership; taken when the device leaves.
    handle: Mutex<Option<SteeringHandle>>,
    probes: Arc<ProbeMailbox>,
    probe_socket: Uninherited<UdpSocket>,
    /// Service IDs this member listens on, with how many listeners each.
    claims: Mutex<HashMap<u64, usize>>,
    /// The table's `verify_epoch` this member last checked its index for.
    verified: AtomicU64,
    /// When this member last asked everyone to check.
    last_request: Mutex<Option<Instant>>,
    members: AtomicU64,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// A device's membership of its shared address; leaving it (dropping) attaches the program
/// without this member and closes the socket's last descriptor, under the table's lock.
#[derive(Debug)]
pub(crate) struct SharedAddress {
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

/// What [`Device::shared_address`](crate::Device::shared_address) reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedAddressInfo {
    /// This device's slot: the top byte of its QPNs and communication IDs.
    pub slot: u8,
    /// Devices on the address, this one included, as of the last look (every 50 ms).
    pub members: usize,
    /// The table file (`cat` it to see the members).
    pub table: std::path::PathBuf,
}

impl SharedAddress {
    /// Joins `addr`: under the table's lock, removes members that died, takes a free slot,
    /// binds the socket with `open` (which must set `reuse_port`), and attaches the program
    /// with this member at the end of the array.
    pub(crate) fn join<E: From<ShareError>>(
        addr: SocketAddr,
        open: impl FnOnce() -> Result<RoceSocket, E>,
    ) -> Result<(SharedAddress, RoceSocket), E> {
        let table = TableFile::open(addr.ip(), addr.port())?;
        let locked = table.lock()?;
        let mut t = locked.read()?;
        let reaped = reap(&table, &mut t, None);
        if t.members.is_empty() {
            // Nobody left: a lone process gets slot 0, and so rxe's QPNs (0x11 on).
            t.next_slot = 0;
        }
        let mut slot = None;
        for _ in table::SLOTS {
            let free = t.free_slot().ok_or(ShareError::Full(t.members.len()))?;
            // A slot nobody lists may still be held by a member that lost its entry (a
            // table rewritten while it was being read): skip it, it will list itself again.
            if table.hold_slot(free).map_err(|e| table.error(e))? {
                slot = Some(free);
                break;
            }
        }
        let slot = slot.ok_or(ShareError::Full(t.members.len()))?;
        let socket = open()?;
        let handle = socket.steering_handle().map_err(ShareError::Attach)?;
        t.members.push(Member {
            slot,
            index: t.members.len() as u32,
            pid: std::process::id(),
        });
        t.generation += 1;
        attach(&handle, &t)?;
        locked.write(&t)?;
        drop(locked);
        tracing::debug!(%addr, slot, members = t.members.len(), "joined shared address");
        if reaped {
            crate::farewell::file::speak_for_the_dead(Some(addr.ip()));
        }
        let probe_socket = UdpSocket::bind((addr.ip(), 0)).map_err(|e| table.error(e))?;
        let state = Arc::new(State {
            table,
            slot,
            addr,
            handle: Mutex::new(Some(handle)),
            probes: Arc::new(ProbeMailbox {
                slot,
                received: Mutex::default(),
                misdirected: AtomicU32::new(0),
            }),
            probe_socket: Uninherited::new(probe_socket),
            claims: Mutex::default(),
            verified: AtomicU64::new(t.verify_epoch),
            members: AtomicU64::new(t.members.len() as u64),
            last_request: Mutex::new(None),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        Ok((
            SharedAddress {
                state,
                thread: None,
            },
            socket,
        ))
    }

    /// Starts the thread that keeps the table right (named after the device).
    pub(crate) fn start(&mut self, name: &str) -> std::io::Result<()> {
        let state = self.state.clone();
        let handle = std::thread::Builder::new()
            .name(format!("{name}-share"))
            .spawn(move || maintain(&state))?;
        self.thread = Some(handle);
        Ok(())
    }

    pub(crate) fn slot(&self) -> u8 {
        self.state.slot
    }

    /// Where the receive path puts probes.
    pub(crate) fn probes(&self) -> Arc<ProbeMailbox> {
        self.state.probes.clone()
    }

    pub(crate) fn info(&self) -> SharedAddressInfo {
        SharedAddressInfo {
            slot: self.state.slot,
            members: self.state.members.load(Ordering::Relaxed) as usize,
            table: self.state.table.path().to_path_buf(),
        }
    }

    /// Has the CM requests for `service_id` on the address come to this member.
    pub(crate) fn claim(&self, service_id: u64) -> Result<ServiceClaim, ShareError> {
        let s = &self.state;
        let mut claims = lock(&s.claims);
        if let Some(n) = claims.get_mut(&service_id) {
            *n += 1;
        } else {
            s.change(|_, t| {
                if s.other_listener(t, service_id).is_some() {
                    return Err(ShareError::ServiceInUse(service_id));
                }
                t.listeners.retain(|&(sid, _)| sid != service_id);
                t.listeners.push((service_id, s.slot));
                Ok(())
            })?;
            claims.insert(service_id, 1);
        }
        Ok(ServiceClaim {
            state: Arc::downgrade(&self.state),
            service_id,
        })
    }

    /// Whether another live member listens on `service_id`: a connection request for it that
    /// reached this member was steered by a table gone wrong. Then every member is asked to
    /// check its place, as for data packets of another member (at this member's next look).
    pub(crate) fn listened_elsewhere(&self, service_id: u64) -> bool {
        let s = &self.state;
        let Ok(locked) = s.table.lock() else {
            return false;
        };
        let Ok(t) = locked.read() else {
            return false;
        };
        drop(locked);
        let Some(slot) = s.other_listener(&t, service_id) else {
            return false;
        };
        s.probes
            .misdirected
            .store(u32::from(slot) + 1, Ordering::Relaxed);
        true
    }
}

impl Drop for SharedAddress {
    fn drop(&mut self) {
        let s = &self.state;
        *lock(&s.stop) = true;
        s.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let Ok(locked) = s.table.lock() else {
            return;
        };
        let Some(handle) = lock(&s.handle).take() else {
            return;
        };
        if let Ok(mut t) = locked.read() {
            t.remove(s.slot);
            t.generation += 1;
            let _ = attach(&handle, &t);
            // The device's own descriptor is closed by now: this is the socket's last, and
            // the kernel moves the last member into its place as the table says.
            drop(handle);
            let _ = locked.write(&t);
        }
        tracing::debug!(addr = %s.addr, slot = s.slot, "left shared address");
    }
}

/// Requests for a Service ID come to this member while the claim lives
/// ([`Device::claim_service_id`](crate::Device::claim_service_id)).
#[derive(Debug)]
pub struct ServiceClaim {
    state: Weak<State>,
    service_id: u64,
}

impl ServiceClaim {
    /// A claim that steers nothing: a device that does not share its address.
    pub(crate) fn unshared(service_id: u64) -> ServiceClaim {
        ServiceClaim {
            state: Weak::new(),
            service_id,
        }
    }

    /// The Service ID claimed.
    pub fn service_id(&self) -> u64 {
        self.service_id
    }
}

impl Drop for ServiceClaim {
    fn drop(&mut self) {
        let Some(s) = self.state.upgrade() else {
            return;
        };
        let mut claims = lock(&s.claims);
        let Some(n) = claims.get_mut(&self.service_id) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            claims.remove(&self.service_id);
            let (sid, slot) = (self.service_id, s.slot);
            let _ = s.change(|_, t| {
                t.listeners.retain(|&l| l != (sid, slot));
                Ok(())
            });
        }
    }
}

impl State {
    /// The live member other than this one that listens on `service_id` in `t`, if any (one
    /// whose liveness cannot be read counts as live).
    fn other_listener(&self, t: &Table, service_id: u64) -> Option<u8> {
        t.listeners
            .iter()
            .find(|&&(sid, slot)| {
                sid == service_id
                    && slot != self.slot
                    && self.table.slot_alive(slot).unwrap_or(true)
            })
            .map(|&(_, slot)| slot)
    }

    /// Changes the table under its lock with `f`, then attaches the program that follows.
    fn change(
        &self,
        f: impl FnOnce(&TableFile, &mut Table) -> Result<(), ShareError>,
    ) -> Result<(), ShareError> {
        let locked = self.table.lock()?;
        let mut t = locked.read()?;
        f(&self.table, &mut t)?;
        self.commit(&locked, &mut t)
    }

    fn commit(&self, locked: &Locked<'_>, t: &mut Table) -> Result<(), ShareError> {
        t.generation += 1;
        if let Some(h) = lock(&self.handle).as_ref() {
            attach(h, t)?;
        }
        locked.write(t)?;
        self.members
            .store(t.members.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// One look: removes members that died, puts this one back if the table lost it, asks
    /// everyone to check their index if datagrams for others arrived here, and checks this
    /// member's own when asked. True if members died.
    fn tick(&self) -> Result<bool, ShareError> {
        let locked = self.table.lock()?;
        let mut t = locked.read()?;
        let reaped = reap(&self.table, &mut t, Some(self.slot));
        let mut changed = reaped;
        if !t.members.iter().any(|m| m.slot == self.slot) {
            t.members.push(Member {
                slot: self.slot,
                index: t.members.len() as u32,
                pid: std::process::id(),
            });
            t.verify_epoch += 1;
            changed = true;
        }
        let stray = self.probes.misdirected.swap(0, Ordering::Relaxed);
        if stray != 0 && t.members.iter().any(|m| u32::from(m.slot) + 1 == stray) {
            let mut last = lock(&self.last_request);
            if !matches!(*last, Some(at) if at.elapsed() < VERIFY_REQUEST_GAP) {
                tracing::debug!(slot = self.slot, "datagrams for other members arrived here");
                *last = Some(Instant::now());
                t.verify_epoch += 1;
                changed = true;
            }
        }
        if changed {
            self.commit(&locked, &mut t)?;
        }
        self.members
            .store(t.members.len() as u64, Ordering::Relaxed);
        if t.verify_epoch == self.verified.load(Ordering::Relaxed) {
            return Ok(reaped);
        }
        let count = t.members.len() as u32;
        let Some(index) = self.probe(count) else {
            return Ok(reaped); // inconclusive: the next look tries again
        };
        let me = t
            .members
            .iter_mut()
            .find(|m| m.slot == self.slot)
            .expect("listed above");
        if me.index != index {
            tracing::debug!(
                slot = self.slot,
                was = me.index,
                index,
                "index corrected by probe"
            );
            // Whoever the table put at `index` is elsewhere: they find their own place.
            me.index = index;
            self.commit(&locked, &mut t)?;
        }
        self.verified.store(t.verify_epoch, Ordering::Relaxed);
        Ok(reaped)
    }

    /// Asks the kernel which of the `count` indices is this member's: one probe per index,
    /// and the one that arrives here names it. `None` unless exactly one arrived.
    fn probe(&self, count: u32) -> Option<u32> {
        // Only this member's own probes count; the nonce tells them from stale ones.
        let nonce = {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(Instant::now()) as u32 | 1
        };
        self.probes.drain(0);
        for index in 0..count {
            let _ = self
                .probe_socket
                .send_to(&steer::probe(index, nonce), self.addr);
        }
        let deadline = Instant::now() + PROBE_WAIT;
        let mut got = Vec::new();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(500));
            got.extend(self.probes.drain(nonce));
            if !got.is_empty() {
                // Give a second probe (a sign of a mirror gone wrong) a moment to show.
                std::thread::sleep(Duration::from_millis(1));
                got.extend(self.probes.drain(nonce));
                break;
            }
        }
        match got.as_slice() {
            [index] => Some(*index),
            _ => None,
        }
    }
}

/// Removes from `t` the members whose liveness byte nobody holds (but `me`). Several gone at
/// once may have left the kernel's array in an order the table cannot know: everyone checks.
fn reap(table: &TableFile, t: &mut Table, me: Option<u8>) -> bool {
    let dead: Vec<u8> = t
        .members
        .iter()
        .map(|m| m.slot)
        .filter(|&s| Some(s) != me && !table.slot_alive(s).unwrap_or(true))
        .collect();
    for &slot in &dead {
        tracing::debug!(slot, "removing a member that is gone");
        t.remove(slot);
    }
    if dead.len() > 1 && t.members.len() > 1 {
        t.verify_epoch += 1;
    }
    !dead.is_empty()
}

fn attach(handle: &SteeringHandle, t: &Table) -> Result<(), ShareError> {
    let (routes, listeners) = t.routes();
    handle
        .attach(&steer::program(&routes, &listeners))
        .map_err(ShareError::Attach)
}

/// The maintenance thread: a look every [`TICK`] until the device closes; the farewells of
/// members found dead are said after the table's lock is released.
fn maintain(state: &State) {
    loop {
        match state.tick() {
            Ok(true) => {
                crate::farewell::file::speak_for_the_dead(Some(state.addr.ip()));
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(addr = %state.addr, error = %e, "shared address upkeep failed")
            }
        }
        let stop = lock(&state.stop);
        let (stop, _) = state
            .wake
            .wait_timeout_while(stop, TICK, |s| !*s)
            .unwrap_or_else(|e| e.into_inner());
        if *stop {
            return;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
