//! A network inside the process: devices attached to one [`LocalFabric`] exchange their
//! datagrams through memory instead of the kernel's UDP stack.
//!
//! It is the verbs layer's simulated fabric: no socket, no port to bind, no address that must
//! be local, so any number of devices on any addresses run side by side in one test binary
//! (and no other program on the host can disturb them, or be disturbed). With
//! [`DeviceConfig::faults`](crate::DeviceConfig::faults) on each device it loses, duplicates,
//! reorders, delays and corrupts datagrams from a seed, as a faulty wire would; the protocol
//! code above sees the same datagrams, GSO batches and metadata a loopback socket gives it.
//!
//! What it models of UDP: every datagram is delivered whole or not at all; a GSO transmit
//! arrives as one message whose stride is its segment size (what GRO does on loopback, which
//! the receiver's ICRC check depends on: segment `k` carries IPv4 identification `k`); a
//! datagram to an address nobody is attached to is lost silently; a receiver whose queue holds
//! [`LocalFabric::QUEUE_BYTES`] loses what comes on top (a full socket buffer); a datagram to a
//! multicast group reaches every port that joined it, the sender's too. What it does not: IP
//! fragmentation, ICMP, TTL expiry — and it cannot receive straight into registered memory
//! (only the kernel's copy may write there while Rust reads it, see
//! `progress/core/placed.rs`), so its devices receive through their buffers.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use softrdma_udp::{
    MulticastError, RecvArena, RecvError, RecvMeta, RecvPiece, SendError, Transmit, DEFAULT_TTL,
    MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD,
};

use super::network::Backend;
use crate::wake::WakeFd;

/// The kernel's ephemeral port range, which port 0 picks from.
const EPHEMERAL_FIRST: u16 = 49152;
const EPHEMERAL_PORTS: u16 = 16384;

/// Why a port could not be attached.
#[derive(Debug)]
pub(crate) enum AttachError {
    /// Another port is attached at the address.
    InUse(SocketAddr),
    /// Port 0 was asked for and every ephemeral port of the address is taken.
    NoEphemeralPort(IpAddr),
    /// The port's readiness descriptor could not be made.
    Wake(std::io::Error),
}

/// An in-process network for devices (see the module docs). Clones are handles to the same
/// network; attach a device with [`DeviceConfig::fabric`](crate::DeviceConfig::fabric).
#[derive(Clone, Default)]
pub struct LocalFabric {
    shared: Arc<Mutex<FabricState>>,
}

/// What a [`LocalFabric`] carried and lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Datagrams queued at a receiver (a GSO transmit counts each segment).
    pub delivered: u64,
    /// Datagrams lost because the receiver's queue was full.
    pub overflowed: u64,
    /// Datagrams to an address no port is attached to.
    pub unroutable: u64,
}

#[derive(Default)]
struct FabricState {
    ports: HashMap<SocketAddr, Arc<PortQueue>>,
    groups: HashMap<IpAddr, Vec<SocketAddr>>,
    next_ephemeral: u16,
    stats: FabricStats,
}

/// The datagrams waiting at one port, and the descriptor that is readable while any wait.
#[derive(Debug)]
struct PortQueue {
    queue: Mutex<Waiting>,
    ready: WakeFd,
}

#[derive(Debug, Default)]
struct Waiting {
    messages: VecDeque<(RecvMeta, Vec<u8>)>,
    bytes: usize,
}

impl PortQueue {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for LocalFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("LocalFabric")
            .field("ports", &s.ports.len())
            .field("stats", &s.stats)
            .finish()
    }
}

/// Two handles are equal when they are the same network.
impl PartialEq for LocalFabric {
    fn eq(&self, other: &LocalFabric) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl LocalFabric {
    /// Bytes a port's queue holds before arrivals are lost: a socket's default buffer.
    pub const QUEUE_BYTES: usize = softrdma_udp::DEFAULT_SOCKET_BUFFER_BYTES;

    /// A new, empty network.
    pub fn new() -> LocalFabric {
        LocalFabric::default()
    }

    /// What the network carried and lost so far.
    pub fn stats(&self) -> FabricStats {
        self.lock().stats
    }

    /// Sends `bytes` as one datagram from `src`, which needs no port attached: a host that
    /// is not a device (a test forging packets, as a raw UDP socket would on a real network).
    /// Returns whether it was queued at a receiver.
    pub fn send_from(&self, src: SocketAddr, dst: SocketAddr, bytes: &[u8]) -> bool {
        self.deliver(src, dst, 0, None, bytes) > 0
    }

    fn lock(&self) -> MutexGuard<'_, FabricState> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A port on `addr` (port 0: one the fabric picks from the kernel's ephemeral range).
    pub(crate) fn attach(&self, addr: SocketAddr) -> Result<FabricPort, AttachError> {
        let mut s = self.lock();
        let mut addr = addr;
        if addr.port() == 0 {
            let free = (0..EPHEMERAL_PORTS).find_map(|_| {
                s.next_ephemeral = s.next_ephemeral.wrapping_add(1);
                let port = EPHEMERAL_FIRST + s.next_ephemeral % EPHEMERAL_PORTS;
                let at = SocketAddr::new(addr.ip(), port);
                (!s.ports.contains_key(&at)).then_some(at)
            });
            addr = free.ok_or(AttachError::NoEphemeralPort(addr.ip()))?;
        }
        if s.ports.contains_key(&addr) {
            return Err(AttachError::InUse(addr));
        }
        let queue = Arc::new(PortQueue {
            queue: Mutex::new(Waiting::default()),
            ready: WakeFd::new().map_err(AttachError::Wake)?,
        });
        s.ports.insert(addr, queue.clone());
        Ok(FabricPort {
            fabric: self.clone(),
            local: addr,
            queue,
            groups: Vec::new(),
        })
    }

    /// Queues `contents` (a GSO batch when `stride` is some) at every port `dst` names;
    /// returns at how many.
    fn deliver(
        &self,
        src: SocketAddr,
        dst: SocketAddr,
        tos: u8,
        stride: Option<usize>,
        contents: &[u8],
    ) -> usize {
        let segments = stride.map_or(1, |n| contents.len().div_ceil(n.max(1))) as u64;
        let mut s = self.lock();
        let receivers: Vec<Arc<PortQueue>> = if dst.ip().is_multicast() {
            s.groups
                .get(&dst.ip())
                .into_iter()
                .flatten()
                .filter(|m| m.port() == dst.port())
                .filter_map(|m| s.ports.get(m).cloned())
                .collect()
        } else {
            s.ports.get(&dst).cloned().into_iter().collect()
        };
        if receivers.is_empty() {
            s.stats.unroutable += segments;
            return 0;
        }
        let meta = RecvMeta {
            src,
            dst_ip: dst.ip(),
            len: contents.len(),
            stride: stride.unwrap_or(contents.len()),
            tos,
            ttl: DEFAULT_TTL,
            truncated: false,
        };
        let mut queued = 0;
        for r in receivers {
            let mut q = r.lock();
            if q.bytes + contents.len() > LocalFabric::QUEUE_BYTES {
                s.stats.overflowed += segments;
                continue;
            }
            if q.messages.is_empty() {
                r.ready.signal();
            }
            q.bytes += contents.len();
            q.messages.push_back((meta, contents.to_vec()));
            s.stats.delivered += segments;
            queued += 1;
        }
        queued
    }
}

/// A device's place on a [`LocalFabric`]: its address, its queue, its groups. Dropping it
/// detaches it.
#[derive(Debug)]
pub(crate) struct FabricPort {
    fabric: LocalFabric,
    local: SocketAddr,
    queue: Arc<PortQueue>,
    groups: Vec<IpAddr>,
}

impl Drop for FabricPort {
    fn drop(&mut self) {
        let mut s = self.fabric.lock();
        if s.ports
            .get(&self.local)
            .is_some_and(|q| Arc::ptr_eq(q, &self.queue))
        {
            s.ports.remove(&self.local);
        }
        for g in &self.groups {
            if let Some(members) = s.groups.get_mut(g) {
                members.retain(|m| *m != self.local);
            }
        }
    }
}

impl Backend for FabricPort {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn max_gso_segments(&self) -> usize {
        MAX_GSO_SEGMENTS
    }

    fn readiness_fd(&self) -> RawFd {
        self.queue.ready.0
    }

    fn try_recv(&mut self, arena: &mut RecvArena) -> Result<usize, RecvError> {
        arena.clear();
        let mut q = self.queue.lock();
        while let Some((meta, bytes)) = q.messages.front() {
            if !arena.push(*meta, bytes) {
                break;
            }
            q.bytes -= bytes.len();
            q.messages.pop_front();
        }
        if q.messages.is_empty() {
            self.queue.ready.drain();
        }
        Ok(arena.len())
    }

    fn scatters(&self) -> bool {
        false
    }

    unsafe fn try_recv_scattered(
        &mut self,
        _pieces: &[RecvPiece],
    ) -> Result<Option<RecvMeta>, RecvError> {
        Err(RecvError::Io {
            local: self.local,
            source: std::io::ErrorKind::Unsupported.into(),
        })
    }

    fn send(&mut self, transmits: &[Transmit<'_>]) -> Result<usize, SendError> {
        for (i, t) in transmits.iter().enumerate() {
            let invalid = |reason| SendError::InvalidTransmit { dst: t.dst, reason };
            let refusal = if t.dst.is_ipv4() != self.local.is_ipv4() {
                Some(SendError::AddressFamily {
                    dst: t.dst,
                    local: self.local,
                })
            } else if t.contents.is_empty() || t.contents.len() > MAX_UDP_PAYLOAD {
                Some(invalid("empty or larger than a UDP datagram"))
            } else if t.segment_size == Some(0) || t.segments() > MAX_GSO_SEGMENTS {
                Some(invalid("bad GSO segmentation"))
            } else {
                None
            };
            if let Some(e) = refusal {
                // As a socket reports it: the transmits before it went.
                return if i == 0 { Err(e) } else { Ok(i) };
            }
            let sport = if t.src_port == 0 {
                self.local.port()
            } else {
                t.src_port
            };
            let src = SocketAddr::new(self.local.ip(), sport);
            let stride = t.segment_size.filter(|_| t.segments() > 1);
            self.fabric
                .deliver(src, t.dst, t.ecn.bits(), stride, t.contents);
        }
        Ok(transmits.len())
    }

    fn wait_writable(
        &mut self,
        _src_port: u16,
        _timeout: Option<Duration>,
    ) -> Result<bool, SendError> {
        // Sending never blocks: a full receiver loses the datagram, as UDP does.
        Ok(true)
    }

    fn prepare_source_port(&mut self, sport: u16) -> u16 {
        // Every source port is free: nothing else lives on the fabric's addresses.
        sport
    }

    fn release_source_port(&mut self, _sport: u16) {}

    #[cfg(test)]
    fn source_ports(&self) -> usize {
        0
    }

    fn join_multicast(&mut self, group: IpAddr) -> Result<(), MulticastError> {
        if !group.is_multicast() || group.is_ipv4() != self.local.is_ipv4() {
            return Err(MulticastError::NotAGroup {
                group,
                local: self.local,
            });
        }
        if !self.groups.contains(&group) {
            self.groups.push(group);
            self.fabric
                .lock()
                .groups
                .entry(group)
                .or_default()
                .push(self.local);
        }
        Ok(())
    }

    fn leave_multicast(&mut self, group: IpAddr) {
        if let Some(i) = self.groups.iter().position(|g| *g == group) {
            self.groups.swap_remove(i);
            if let Some(members) = self.fabric.lock().groups.get_mut(&group) {
                members.retain(|m| *m != self.local);
            }
        }
    }

    fn has_multicast_groups(&self) -> bool {
        !self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_udp::Ecn;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    fn transmit(dst: SocketAddr, segment_size: Option<usize>, contents: &[u8]) -> Transmit<'_> {
        Transmit {
            dst,
            src_port: 0,
            ecn: Ecn::Ect0,
            segment_size,
            contents,
        }
    }

    #[test]
    fn a_gso_transmit_arrives_as_one_message_cut_at_its_segments_and_wakes_the_receiver() {
        let fabric = LocalFabric::new();
        let mut a = fabric.attach(addr("10.0.0.1:4791")).unwrap();
        let mut b = fabric.attach(addr("10.0.0.2:4791")).unwrap();
        assert!(!readable(b.readiness_fd()));
        let bytes: Vec<u8> = (0..250).map(|i| i as u8).collect();
        let sent = a.send(&[
            transmit(b.local_addr(), Some(100), &bytes),
            transmit(b.local_addr(), None, b"lone"),
        ]);
        assert_eq!(sent.unwrap(), 2);
        assert!(readable(b.readiness_fd()));
        let mut arena = RecvArena::new(4, MAX_UDP_PAYLOAD);
        assert_eq!(b.try_recv(&mut arena).unwrap(), 2);
        assert!(!readable(b.readiness_fd()), "drained");
        let (meta, got) = arena.get(0).unwrap();
        assert_eq!(
            (got, meta.stride, meta.src),
            (&bytes[..], 100, a.local_addr())
        );
        assert_eq!(meta.tos, Ecn::Ect0.bits());
        assert_eq!(arena.datagrams().count(), 4);
        assert_eq!(fabric.stats().delivered, 4);
        assert_eq!(b.try_recv(&mut arena).unwrap(), 0);
    }

    #[test]
    fn an_address_is_taken_once_and_freed_when_its_port_drops() {
        let fabric = LocalFabric::new();
        let a = fabric.attach(addr("10.0.0.1:4791")).unwrap();
        assert!(matches!(
            fabric.attach(addr("10.0.0.1:4791")),
            Err(AttachError::InUse(a)) if a == addr("10.0.0.1:4791")
        ));
        let eph = fabric.attach(addr("10.0.0.1:0")).unwrap();
        assert!(eph.local_addr().port() >= 49152);
        drop(a);
        let mut again = fabric.attach(addr("10.0.0.1:4791")).unwrap();
        // Nobody at the destination, or the wrong family: lost, or refused as a socket would.
        assert_eq!(
            again
                .send(&[transmit(addr("10.0.0.9:4791"), None, b"x")])
                .unwrap(),
            1
        );
        assert_eq!(fabric.stats().unroutable, 1);
        let v6 = transmit(addr("[::1]:4791"), None, b"x");
        assert!(matches!(
            again.send(&[v6]),
            Err(SendError::AddressFamily { .. })
        ));
    }

    #[test]
    fn a_full_queue_loses_what_comes_on_top_and_a_group_reaches_every_member() {
        let fabric = LocalFabric::new();
        let mut a = fabric.attach(addr("10.0.0.1:4791")).unwrap();
        let mut b = fabric.attach(addr("10.0.0.2:4791")).unwrap();
        let big = vec![7u8; 60_000];
        let fits = LocalFabric::QUEUE_BYTES / big.len();
        for _ in 0..fits + 3 {
            a.send(&[transmit(b.local_addr(), None, &big)]).unwrap();
        }
        assert_eq!(fabric.stats().overflowed, 3);
        let mut arena = RecvArena::new(64, MAX_UDP_PAYLOAD);
        while b.try_recv(&mut arena).unwrap() > 0 {}
        let group: IpAddr = "239.1.2.3".parse().unwrap();
        assert!(b.join_multicast("10.0.0.5".parse().unwrap()).is_err());
        a.join_multicast(group).unwrap();
        b.join_multicast(group).unwrap();
        a.send(&[transmit(SocketAddr::new(group, 4791), None, b"all")])
            .unwrap();
        for port in [&mut a, &mut b] {
            assert_eq!(port.try_recv(&mut arena).unwrap(), 1);
            assert_eq!(arena.get(0).unwrap().0.dst_ip, group);
        }
        b.leave_multicast(group);
        a.send(&[transmit(SocketAddr::new(group, 4791), None, b"one")])
            .unwrap();
        assert_eq!(b.try_recv(&mut arena).unwrap(), 0);
        assert_eq!(a.try_recv(&mut arena).unwrap(), 1);
    }
}
