//! Portable backend for platforms other than Linux: one datagram per system call through
//! `socket2`, no GSO, GRO, ECN or packet info. Correct but slow; the IPv4 header facts of the
//! crate docs are not guaranteed here.

use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::{Config, OpenError, RecvArena, RecvMeta, Transmit};

/// The sockets and what probing found.
pub(crate) struct Opened {
    pub(crate) socket: Socket,
    pub(crate) gso_segments: usize,
    pub(crate) gro_segments: usize,
}

pub(crate) fn open(config: &Config) -> Result<Opened, OpenError> {
    if config.reuse_port {
        // Sharing needs a steering program, which only the Linux backend attaches.
        return Err(OpenError::SetOption {
            option: "SO_REUSEPORT",
            addr: config.addr,
            source: io::Error::from(io::ErrorKind::Unsupported),
        });
    }
    let socket = new_socket(config, config.addr, config.recv_buffer_bytes)?;
    socket
        .bind(&config.addr.into())
        .map_err(|source| OpenError::Bind {
            addr: config.addr,
            source,
        })?;
    Ok(Opened {
        socket,
        gso_segments: 1,
        gro_segments: 1,
    })
}

pub(crate) fn open_send_only(config: &Config, addr: SocketAddr) -> Result<Socket, OpenError> {
    let socket = new_socket(config, addr, 0)?;
    socket
        .bind(&addr.into())
        .map_err(|source| OpenError::Bind { addr, source })?;
    Ok(socket)
}

fn new_socket(config: &Config, addr: SocketAddr, recv_buffer: usize) -> Result<Socket, OpenError> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|source| OpenError::Socket { addr, source })?;
    let set = |option, result: io::Result<()>| {
        result.map_err(|source| OpenError::SetOption {
            option,
            addr,
            source,
        })
    };
    set("O_NONBLOCK", socket.set_nonblocking(true))?;
    if addr.is_ipv4() {
        set("IP_TTL", socket.set_ttl_v4(u32::from(config.ttl)))?;
    } else {
        set("IPV6_V6ONLY", socket.set_only_v6(true))?;
        set(
            "IPV6_UNICAST_HOPS",
            socket.set_unicast_hops_v6(u32::from(config.ttl)),
        )?;
    }
    if recv_buffer > 0 {
        let _ = socket.set_recv_buffer_size(recv_buffer);
    }
    let _ = socket.set_send_buffer_size(config.send_buffer_bytes);
    Ok(socket)
}

/// No scratch is needed: datagrams go one by one.
#[derive(Debug)]
pub(crate) struct SendScratch;

impl SendScratch {
    pub(crate) fn new() -> Self {
        Self
    }
}

pub(crate) fn send(
    socket: &Socket,
    _config: &Config,
    run: &[Transmit<'_>],
    _gso: bool,
    _scratch: &mut SendScratch,
) -> io::Result<usize> {
    for (i, t) in run.iter().enumerate() {
        // GSO is never offered here, so every transmit is one datagram (checked by the caller).
        match socket.send_to(t.contents, &SockAddr::from(t.dst)) {
            Ok(_) => {}
            Err(error) if i > 0 => {
                let _ = error;
                return Ok(i);
            }
            Err(error) => return Err(error),
        }
    }
    Ok(run.len())
}

/// No scratch is needed: datagrams come one by one.
#[derive(Clone, Copy)]
pub(crate) struct RecvScratch;

impl RecvScratch {
    pub(crate) fn new(_buf: &mut [u8], _slot_len: usize) -> Self {
        Self
    }
}

pub(crate) fn recv(socket: &Socket, local: SocketAddr, arena: &mut RecvArena) -> io::Result<usize> {
    let RecvScratch = arena.scratch;
    let slot_len = arena.slot_len;
    let mut n = 0;
    for (i, slot) in arena
        .buf
        .chunks_exact_mut(slot_len)
        .take(arena.limit)
        .enumerate()
    {
        // SAFETY: `recv_from` only writes initialised bytes into the buffer and never
        // uninitialises any; u8 and MaybeUninit<u8> have the same layout.
        let uninit = unsafe { &mut *(std::ptr::from_mut::<[u8]>(slot) as *mut [MaybeUninit<u8>]) };
        match socket.recv_from(uninit) {
            Ok((len, from)) => {
                let len = len.min(slot_len);
                arena.meta[i] = RecvMeta {
                    src: from.as_socket().unwrap_or(local),
                    dst_ip: local.ip(),
                    len,
                    stride: len,
                    ..RecvMeta::default()
                };
                n += 1;
            }
            Err(error) if n == 0 => return Err(error),
            Err(_) => break,
        }
    }
    Ok(n)
}

/// A scattered receive: one datagram into a buffer, then copied over the pieces in order.
///
/// # Safety
/// Each piece must be valid for writes of its length during the call.
pub(crate) unsafe fn recv_scattered(
    socket: &Socket,
    local: SocketAddr,
    pieces: &[crate::RecvPiece],
) -> io::Result<Option<RecvMeta>> {
    let mut buf = vec![0u8; crate::MAX_UDP_PAYLOAD];
    // SAFETY: `recv_from` only writes initialised bytes; u8 and MaybeUninit<u8> agree.
    let uninit = unsafe { &mut *(std::ptr::from_mut::<[u8]>(&mut buf) as *mut [MaybeUninit<u8>]) };
    let (len, from) = match socket.recv_from(uninit) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut at = 0;
    for p in pieces {
        let n = p.len.min(len - at);
        // SAFETY: the caller vouches for the piece; `buf[at..at + n]` is in bounds.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(at), p.addr, n) };
        at += n;
    }
    Ok(Some(RecvMeta {
        src: from.as_socket().unwrap_or(local),
        dst_ip: local.ip(),
        len: at,
        stride: at,
        truncated: at < len,
        ..RecvMeta::default()
    }))
}

/// Multicast needs `IP_PKTINFO` and friends: not here.
pub(crate) fn open_group(
    _config: &Config,
    _local: SocketAddr,
    _group: std::net::IpAddr,
) -> io::Result<Socket> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// No readiness set here: waiting peeks at the main socket.
#[derive(Debug)]
pub(crate) struct Poller;

impl Poller {
    pub(crate) fn new(_main: &Socket) -> io::Result<Self> {
        Ok(Self)
    }

    pub(crate) fn add(&self, _socket: &Socket) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    pub(crate) fn remove(&self, _socket: &Socket) {}

    pub(crate) fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

/// Waits for the main socket (the only receiving one here).
pub(crate) fn wait_any(
    _poller: &Poller,
    main: &Socket,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    wait(main, true, timeout)
}

/// Waits by peeking with a read timeout (writability is assumed: UDP sends rarely block).
pub(crate) fn wait(socket: &Socket, readable: bool, timeout: Option<Duration>) -> io::Result<bool> {
    if !readable {
        return Ok(true);
    }
    let timeout = match timeout {
        Some(t) if t.is_zero() => Duration::from_nanos(1),
        Some(t) => t,
        None => Duration::from_secs(3600),
    };
    socket.set_nonblocking(false)?;
    socket.set_read_timeout(Some(timeout))?;
    let mut byte = [MaybeUninit::<u8>::uninit(); 1];
    let result = socket.peek_from(&mut byte);
    socket.set_nonblocking(true)?;
    match result {
        Ok(_) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(false)
        }
        // A truncated peek (Windows reports WSAEMSGSIZE) still means a datagram is there.
        Err(_) => Ok(true),
    }
}

pub(crate) fn is_gso_refusal(_error: &io::Error) -> bool {
    false
}

pub(crate) fn is_message_too_long(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::InvalidInput
}

pub(crate) fn attach_reuseport_cbpf(
    _fd: std::os::fd::RawFd,
    _program: &[crate::SteeringInsn],
) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
