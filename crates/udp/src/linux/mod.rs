//! Linux backend: `sendmmsg`/`recvmmsg`, `UDP_SEGMENT` (GSO), `UDP_GRO`, ECN and packet info
//! through control messages, `IP_PMTUDISC_DO` for DF packets with a known identification.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::{Config, OpenError, MAX_GSO_SEGMENTS};

mod mmsg;

pub(crate) use mmsg::{recv, recv_scattered, send, RecvScratch, SendScratch};

/// The sockets and what probing found.
pub(crate) struct Opened {
    pub(crate) socket: Socket,
    pub(crate) gso_segments: usize,
    pub(crate) gro_segments: usize,
}

/// Opens, configures and binds the main socket, and probes GSO and GRO.
pub(crate) fn open(config: &Config) -> Result<Opened, OpenError> {
    let addr = config.addr;
    let socket = new_socket(config, addr, config.recv_buffer_bytes)?;
    let fd = socket.as_raw_fd();
    set_recv_options(fd, addr)?;
    if config.reuse_port {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1).map_err(|source| {
            OpenError::SetOption {
                option: "SO_REUSEPORT",
                addr,
                source,
            }
        })?;
    }
    socket
        .bind(&addr.into())
        .map_err(|source| OpenError::Bind { addr, source })?;
    // GSO: the option exists since Linux 4.18; setting the per-socket default segment size to 0
    // (no segmentation unless a control message asks) is a harmless probe.
    let gso_segments =
        if config.gso && setsockopt_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0).is_ok() {
            MAX_GSO_SEGMENTS
        } else {
            1
        };
    // GRO: since Linux 5.0. Without it, a GSO super-packet arriving on loopback is split.
    let gro_segments = if config.gro && setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
    {
        MAX_GSO_SEGMENTS
    } else {
        1
    };
    Ok(Opened {
        socket,
        gso_segments,
        gro_segments,
    })
}

/// Opens a send-only socket bound to `addr` for the source-port pool. Its receive buffer is
/// the smallest possible: peers answer to port 4791, and anything sent here is dropped.
pub(crate) fn open_send_only(config: &Config, addr: SocketAddr) -> Result<Socket, OpenError> {
    let socket = new_socket(config, addr, 0)?;
    socket
        .bind(&addr.into())
        .map_err(|source| OpenError::Bind { addr, source })?;
    Ok(socket)
}

/// The control messages every received datagram must carry: TOS/traffic class (ECN), TTL /
/// hop limit, and the destination address.
fn set_recv_options(fd: RawFd, addr: SocketAddr) -> Result<(), OpenError> {
    let set = |option, level, name, value| {
        setsockopt_int(fd, level, name, value).map_err(|source| OpenError::SetOption {
            option,
            addr,
            source,
        })
    };
    if addr.is_ipv4() {
        set("IP_RECVTOS", libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        set("IP_RECVTTL", libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
        set("IP_PKTINFO", libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    } else {
        set(
            "IPV6_RECVTCLASS",
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVTCLASS,
            1,
        )?;
        set(
            "IPV6_RECVPKTINFO",
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVPKTINFO,
            1,
        )?;
        set(
            "IPV6_RECVHOPLIMIT",
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVHOPLIMIT,
            1,
        )?;
    }
    Ok(())
}

/// Opens a receive-only socket for multicast `group`, bound to `<group>:<local port>` with
/// address reuse (other devices of the host may join too) and joined on `local`'s interface.
pub(crate) fn open_group(config: &Config, local: SocketAddr, group: IpAddr) -> io::Result<Socket> {
    let addr = SocketAddr::new(group, local.port());
    let socket = new_socket(config, addr, config.recv_buffer_bytes).map_err(io::Error::other)?;
    socket.set_reuse_address(true)?;
    set_recv_options(socket.as_raw_fd(), addr).map_err(io::Error::other)?;
    socket.bind(&addr.into())?;
    match (group, local.ip()) {
        (IpAddr::V4(g), IpAddr::V4(l)) => socket.join_multicast_v4(&g, &l)?,
        (IpAddr::V6(g), IpAddr::V6(l)) => socket.join_multicast_v6(&g, interface_index(l)?)?,
        _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
    }
    Ok(socket)
}

/// Attaches the classic BPF `program` to the `SO_REUSEPORT` group of socket `fd`
/// (`SO_ATTACH_REUSEPORT_CBPF`, Linux 4.5; no privilege needed). It replaces the group's
/// program for every member.
pub(crate) fn attach_reuseport_cbpf(fd: RawFd, program: &[crate::SteeringInsn]) -> io::Result<()> {
    let insns: Vec<libc::sock_filter> = program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let len =
        u16::try_from(insns.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fprog = libc::sock_fprog {
        len,
        filter: insns.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `insns`, `len` instructions that live until the call returns
    // (the kernel copies the program); the length passed is exactly `sock_fprog`'s size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            ptr::addr_of!(fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The index of the interface that has address `ip`.
fn interface_index(ip: Ipv6Addr) -> io::Result<u32> {
    let mut list: *mut libc::ifaddrs = ptr::null_mut();
    // SAFETY: getifaddrs writes a list head pointer we own and free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        // SAFETY: a non-null ifa_addr points at a sockaddr of the family it names; for
        // AF_INET6 that is a sockaddr_in6.
        let is_ours = !ifa.ifa_addr.is_null()
            && unsafe { i32::from((*ifa.ifa_addr).sa_family) } == libc::AF_INET6
            && unsafe {
                (*ifa.ifa_addr.cast::<libc::sockaddr_in6>())
                    .sin6_addr
                    .s6_addr
            } == ip.octets();
        if is_ours {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let index = unsafe { libc::if_nametoindex(ifa.ifa_name) };
            if index != 0 {
                found = Some(index);
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found.ok_or_else(|| io::Error::from(io::ErrorKind::AddrNotAvailable))
}

/// An epoll set of a [`RoceSocket`](crate::RoceSocket)'s receiving sockets (the main one and
/// the multicast groups'): one descriptor that is readable when any of them is.
#[derive(Debug)]
pub(crate) struct Poller {
    epoll: OwnedFd,
}

impl Poller {
    pub(crate) fn new(main: &Socket) -> io::Result<Self> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let poller = Self {
            // SAFETY: `fd` is a new descriptor nobody else owns.
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
        };
        poller.add(main)?;
        Ok(poller)
    }

    pub(crate) fn add(&self, socket: &Socket) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: both descriptors are open; `event` lives across the call.
        let rc = unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                socket.as_raw_fd(),
                &mut event,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub(crate) fn remove(&self, socket: &Socket) {
        // SAFETY: both descriptors are open; DEL ignores the event argument.
        let _ = unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                socket.as_raw_fd(),
                ptr::null_mut(),
            )
        };
    }

    /// The descriptor to wait on.
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.epoll.as_fd())
    }
}

/// A non-blocking, close-on-exec UDP socket with the send-side options every RoCEv2 packet
/// depends on: DF (`IP_PMTUDISC_DO`), TTL, default TOS, buffer sizes. Not bound yet.
fn new_socket(config: &Config, addr: SocketAddr, recv_buffer: usize) -> Result<Socket, OpenError> {
    let domain = Domain::for_address(addr);
    let socket = Socket::new(
        domain,
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )
    .map_err(|source| OpenError::Socket { addr, source })?;
    let fd = socket.as_raw_fd();
    let set = |option, level, name, value| {
        setsockopt_int(fd, level, name, value).map_err(|source| OpenError::SetOption {
            option,
            addr,
            source,
        })
    };
    let tos = i32::from(config.dscp << 2);
    let ttl = i32::from(config.ttl);
    if addr.is_ipv4() {
        set(
            "IP_MTU_DISCOVER",
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
        set("IP_TTL", libc::IPPROTO_IP, libc::IP_TTL, ttl)?;
        set("IP_TOS", libc::IPPROTO_IP, libc::IP_TOS, tos)?;
        // Multicast leaves from this address's interface with the unicast TTL, and local
        // members get a copy. An interface without multicast refuses only the first.
        if let IpAddr::V4(ip) = addr.ip() {
            if !ip.is_unspecified() && !ip.is_multicast() {
                let _ = socket.set_multicast_if_v4(&ip);
            }
        }
        set(
            "IP_MULTICAST_TTL",
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_TTL,
            ttl,
        )?;
        set(
            "IP_MULTICAST_LOOP",
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_LOOP,
            1,
        )?;
    } else {
        set("IPV6_V6ONLY", libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        set(
            "IPV6_MTU_DISCOVER",
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )?;
        set("IPV6_DONTFRAG", libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 1)?;
        set(
            "IPV6_UNICAST_HOPS",
            libc::IPPROTO_IPV6,
            libc::IPV6_UNICAST_HOPS,
            ttl,
        )?;
        set("IPV6_TCLASS", libc::IPPROTO_IPV6, libc::IPV6_TCLASS, tos)?;
        if let IpAddr::V6(ip) = addr.ip() {
            if let Ok(index) = interface_index(ip) {
                let _ = socket.set_multicast_if_v6(index);
            }
        }
        set(
            "IPV6_MULTICAST_HOPS",
            libc::IPPROTO_IPV6,
            libc::IPV6_MULTICAST_HOPS,
            ttl,
        )?;
        set(
            "IPV6_MULTICAST_LOOP",
            libc::IPPROTO_IPV6,
            libc::IPV6_MULTICAST_LOOP,
            1,
        )?;
    }
    set_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, recv_buffer);
    set_buffer(
        fd,
        libc::SO_SNDBUFFORCE,
        libc::SO_SNDBUF,
        config.send_buffer_bytes,
    );
    Ok(socket)
}

/// Asks for a buffer of `bytes`: the `*FORCE` option first (root may exceed
/// `net.core.*mem_max`), then the plain one (capped by the sysctl). Failure only means a smaller
/// buffer, so it is ignored.
fn set_buffer(fd: RawFd, force: libc::c_int, plain: libc::c_int, bytes: usize) {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if setsockopt_int(fd, libc::SOL_SOCKET, force, value).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, value);
    }
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is exactly its size; `fd` is an
    // open socket owned by the caller for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            ptr::addr_of!(value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits with `ppoll(2)` (nanosecond timeout) for readability or writability.
pub(crate) fn wait(socket: &Socket, readable: bool, timeout: Option<Duration>) -> io::Result<bool> {
    wait_fd(socket.as_raw_fd(), readable, timeout)
}

/// Waits until any socket of `poller` is readable.
pub(crate) fn wait_any(
    poller: &Poller,
    _main: &Socket,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    wait_fd(poller.epoll.as_raw_fd(), true, timeout)
}

fn wait_fd(fd: RawFd, readable: bool, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: if readable {
            libc::POLLIN
        } else {
            libc::POLLOUT
        },
        revents: 0,
    };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let ts_ptr = ts.as_ref().map_or(ptr::null(), ptr::from_ref);
    // SAFETY: one valid pollfd, a timespec that lives across the call (or null), no sigmask.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, ptr::null()) };
    if rc < 0 {
        let error = io::Error::last_os_error();
        return if error.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(error)
        };
    }
    // POLLERR/POLLHUP also count as ready: the next call reports the condition.
    Ok(rc > 0 && pfd.revents != 0)
}

/// `EIO` (no checksum offload on the route's device) or `EINVAL` (segment size refused): the
/// kernel will not do GSO for this socket.
pub(crate) fn is_gso_refusal(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EIO | libc::EINVAL))
}

/// `EMSGSIZE`: larger than the path MTU with DF set.
pub(crate) fn is_message_too_long(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::EMSGSIZE)
}
