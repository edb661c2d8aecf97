//! Batches of datagrams through one system call: `sendmmsg` with per-datagram destination,
//! TOS and GSO segment size, `recvmmsg` with packet info, TOS, TTL and the GRO stride read
//! back from control messages.

use std::io;
use std::mem::{self, size_of};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::ptr;

use socket2::Socket;

use crate::{Config, RecvArena, RecvMeta, Transmit, BATCH_MAX};

/// Control-message space per datagram. Sending needs TOS + UDP_SEGMENT (2 x 16 bytes);
/// receiving needs packet info (up to 40) + TOS/TCLASS (24) + TTL/hop limit (24) + UDP_GRO (24).
const CMSG_BUF_LEN: usize = 160;

/// An aligned control-message buffer (`cmsghdr` needs `size_t` alignment).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_BUF_LEN]);
/// Per-socket scratch for `sendmmsg`: headers, vectors, addresses and control buffers for
/// [`BATCH_MAX`] datagrams, allocated once.
pub(crate) struct SendScratch {
    hdrs: Box<[libc::mmsghdr]>,
    iovs: Box<[libc::iovec]>,
    names: Box<[libc::sockaddr_storage]>,
    ctrl: Box<[CmsgBuf]>,
}

// SAFETY: the raw pointers inside `hdrs`/`iovs` are rewritten before every `sendmmsg` and only
// dereferenced by the kernel during that call, which holds `&mut SendScratch`; between calls
// they are stale values that nothing reads.
unsafe impl Send for SendScratch {}
// SAFETY: as above; `&SendScratch` gives no access to the pointers.
unsafe impl Sync for SendScratch {}

impl std::fmt::Debug for SendScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendScratch").finish_non_exhaustive()
    }
}

impl SendScratch {
    pub(crate) fn new() -> Self {
        // SAFETY: mmsghdr, iovec and sockaddr_storage are plain C structs for which all-zero
        // bytes are a valid value (null pointers, zero lengths).
        let (hdr, iov, name) = unsafe {
            (
                mem::zeroed::<libc::mmsghdr>(),
                mem::zeroed::<libc::iovec>(),
                mem::zeroed::<libc::sockaddr_storage>(),
            )
        };
        Self {
            hdrs: vec![hdr; BATCH_MAX].into_boxed_slice(),
            iovs: vec![iov; BATCH_MAX].into_boxed_slice(),
            names: vec![name; BATCH_MAX].into_boxed_slice(),
            ctrl: vec![CmsgBuf([0; CMSG_BUF_LEN]); BATCH_MAX].into_boxed_slice(),
        }
    }
}

/// Sends `run` (at most [`BATCH_MAX`] transmits, validated by the caller) with one `sendmmsg`.
/// Returns how many were sent; an error concerns `run[0]`.
pub(crate) fn send(
    socket: &Socket,
    config: &Config,
    run: &[Transmit<'_>],
    gso: bool,
    scratch: &mut SendScratch,
) -> io::Result<usize> {
    let n = run.len().min(BATCH_MAX);
    for (i, t) in run[..n].iter().enumerate() {
        let namelen = write_sockaddr(&t.dst, &mut scratch.names[i]);
        scratch.iovs[i] = libc::iovec {
            // The kernel only reads through this pointer (sendmsg).
            iov_base: t.contents.as_ptr().cast_mut().cast(),
            iov_len: t.contents.len(),
        };
        let tos = libc::c_int::from(config.dscp << 2 | t.ecn.bits());
        let ctrl = &mut scratch.ctrl[i].0;
        // The caller checked that the destination's family is the socket's.
        let mut ctrl_len = if t.dst.is_ipv4() {
            put_cmsg(ctrl, 0, libc::IPPROTO_IP, libc::IP_TOS, &tos.to_ne_bytes())
        } else {
            put_cmsg(
                ctrl,
                0,
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                &tos.to_ne_bytes(),
            )
        };
        if let Some(size) = t.segment_size {
            if gso && t.contents.len() > size {
                // Validated by the caller: 0 < size < contents.len() <= 65535.
                let size = u16::try_from(size).unwrap_or(u16::MAX);
                ctrl_len = put_cmsg(
                    ctrl,
                    ctrl_len,
                    libc::SOL_UDP,
                    libc::UDP_SEGMENT,
                    &size.to_ne_bytes(),
                );
            }
        }
        let hdr = &mut scratch.hdrs[i].msg_hdr;
        hdr.msg_name = ptr::addr_of_mut!(scratch.names[i]).cast();
        hdr.msg_namelen = namelen;
        hdr.msg_iov = ptr::addr_of_mut!(scratch.iovs[i]);
        hdr.msg_iovlen = 1;
        hdr.msg_control = scratch.ctrl[i].0.as_mut_ptr().cast();
        hdr.msg_controllen = ctrl_len as _;
        hdr.msg_flags = 0;
        scratch.hdrs[i].msg_len = 0;
    }
    loop {
        // The system call itself, not glibc's cancellation-point wrapper (see `recv`).
        // SAFETY: the first `n` headers point at live buffers: addresses, iovecs and control
        // buffers in `scratch` (borrowed mutably for this call) and the transmits' contents
        // (borrowed for this call); all lengths were written just above. `n <= BATCH_MAX`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sendmmsg,
                libc::c_long::from(socket.as_raw_fd()),
                scratch.hdrs.as_mut_ptr(),
                n as libc::c_long,
                0 as libc::c_long,
            )
        };
        if rc >= 0 {
            return Ok(usize::try_from(rc).unwrap_or(0));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Appends one control message at byte `offset` of `buf` and returns the new used length.
/// `buf` is large enough for every combination this module writes (checked in debug builds).
fn put_cmsg(
    buf: &mut [u8],
    offset: usize,
    level: libc::c_int,
    ty: libc::c_int,
    data: &[u8],
) -> usize {
    // SAFETY: CMSG_SPACE and CMSG_LEN are pure arithmetic on their argument.
    let (space, len, data_offset) = unsafe {
        (
            libc::CMSG_SPACE(data.len() as u32) as usize,
            libc::CMSG_LEN(data.len() as u32) as usize,
            libc::CMSG_LEN(0) as usize,
        )
    };
    debug_assert!(offset + space <= buf.len());
    if offset + space > buf.len() {
        return offset;
    }
    buf[offset..offset + space].fill(0);
    // SAFETY: a zeroed cmsghdr is valid.
    let mut header: libc::cmsghdr = unsafe { mem::zeroed() };
    header.cmsg_len = len as _;
    header.cmsg_level = level;
    header.cmsg_type = ty;
    // SAFETY: `offset + size_of::<cmsghdr>() <= offset + space <= buf.len()`, so the write stays
    // inside `buf`; write_unaligned needs no alignment.
    unsafe { ptr::write_unaligned(buf.as_mut_ptr().add(offset).cast::<libc::cmsghdr>(), header) };
    buf[offset + data_offset..offset + data_offset + data.len()].copy_from_slice(data);
    offset + space
}

/// Writes `addr` as a C socket address into `storage` and returns its length.
fn write_sockaddr(addr: &SocketAddr, storage: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
            unsafe { ptr::write(ptr::from_mut(storage).cast::<libc::sockaddr_in>(), sin) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
            unsafe { ptr::write(ptr::from_mut(storage).cast::<libc::sockaddr_in6>(), sin6) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads a C socket address written by the kernel; `None` for families other than IP.
fn read_sockaddr(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and it is large and
            // aligned enough for one.
            let sin = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6, and it is large and
            // aligned enough for one.
            let sin6 = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Per-arena scratch for `recvmmsg`: headers whose vectors point at the arena's slots, built
/// once (the arena's buffer is a boxed slice, so the pointers stay valid when the arena moves).
pub(crate) struct RecvScratch {
    hdrs: Box<[libc::mmsghdr]>,
    iovs: Box<[libc::iovec]>,
    names: Box<[libc::sockaddr_storage]>,
    ctrl: Box<[CmsgBuf]>,
}

// SAFETY: the pointers point into heap allocations owned by the same `RecvArena` (its buffer)
// or by this scratch; they are only used by `recvmmsg` while the arena is borrowed mutably.
unsafe impl Send for RecvScratch {}
// SAFETY: `&RecvScratch` gives no access to the pointers.
unsafe impl Sync for RecvScratch {}

impl RecvScratch {
    pub(crate) fn new(buf: &mut [u8], slot_len: usize) -> Self {
        let slots = buf.len() / slot_len.max(1);
        // SAFETY: all-zero bytes are valid for these plain C structs.
        let (hdr, iov, name) = unsafe {
            (
                mem::zeroed::<libc::mmsghdr>(),
                mem::zeroed::<libc::iovec>(),
                mem::zeroed::<libc::sockaddr_storage>(),
            )
        };
        let mut scratch = Self {
            hdrs: vec![hdr; slots].into_boxed_slice(),
            iovs: vec![iov; slots].into_boxed_slice(),
            names: vec![name; slots].into_boxed_slice(),
            ctrl: vec![CmsgBuf([0; CMSG_BUF_LEN]); slots].into_boxed_slice(),
        };
        for (i, slot) in buf.chunks_exact_mut(slot_len).enumerate() {
            scratch.iovs[i] = libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot_len,
            };
            let hdr = &mut scratch.hdrs[i].msg_hdr;
            hdr.msg_name = ptr::addr_of_mut!(scratch.names[i]).cast();
            hdr.msg_iov = ptr::addr_of_mut!(scratch.iovs[i]);
            hdr.msg_iovlen = 1;
            hdr.msg_control = scratch.ctrl[i].0.as_mut_ptr().cast();
        }
        scratch
    }
}

/// Receives up to `arena.slots()` messages with one `recvmmsg` and fills their metadata.
pub(crate) fn recv(socket: &Socket, local: SocketAddr, arena: &mut RecvArena) -> io::Result<usize> {
    let slots = arena
        .meta
        .len()
        .min(arena.scratch.hdrs.len())
        .min(arena.limit);
    for hdr in &mut arena.scratch.hdrs[..slots] {
        hdr.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        hdr.msg_hdr.msg_controllen = CMSG_BUF_LEN as _;
        hdr.msg_hdr.msg_flags = 0;
        hdr.msg_len = 0;
    }
    // The system call itself (every argument a full register), not glibc's wrapper: the
    // wrapper is a thread-cancellation point, and switching cancellation on and off around
    // every call (softrdma never cancels threads) was 4 % of a spinning poller's loop, which
    // mostly finds nothing.
    // SAFETY: every header points at a live slot of `arena.buf` (slot_len bytes), an address
    // buffer and a control buffer of the lengths just set, all owned by `arena`, which is
    // borrowed mutably for the call. `slots` does not exceed the number of headers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_recvmmsg,
            libc::c_long::from(socket.as_raw_fd()),
            arena.scratch.hdrs.as_mut_ptr(),
            slots as libc::c_long,
            libc::c_long::from(libc::MSG_DONTWAIT),
            ptr::null_mut::<libc::timespec>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = usize::try_from(rc).unwrap_or(0).min(slots);
    for i in 0..n {
        let hdr = &arena.scratch.hdrs[i];
        let len = (hdr.msg_len as usize).min(arena.slot_len);
        let mut meta = RecvMeta {
            src: read_sockaddr(&arena.scratch.names[i], hdr.msg_hdr.msg_namelen)
                .unwrap_or_else(|| SocketAddr::new(unspecified(local.ip()), 0)),
            dst_ip: local.ip(),
            len,
            stride: len,
            truncated: hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            ..RecvMeta::default()
        };
        decode_cmsgs(&hdr.msg_hdr, &mut meta);
        if meta.stride == 0 {
            meta.stride = len;
        }
        arena.meta[i] = meta;
    }
    Ok(n)
}

/// Receives one message (a datagram or a GRO batch) with `recvmsg(2)`, scattered over
/// `pieces` in order; `Ok(None)` when nothing is queued.
///
/// # Safety
/// Each piece must be valid for writes of its length during the call.
pub(crate) unsafe fn recv_scattered(
    socket: &Socket,
    local: SocketAddr,
    pieces: &[crate::RecvPiece],
) -> io::Result<Option<RecvMeta>> {
    if pieces.len() > crate::RECV_PIECES_MAX {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: all-zero bytes are valid for these plain C structs.
    let (mut hdr, mut name) = unsafe {
        (
            mem::zeroed::<libc::msghdr>(),
            mem::zeroed::<libc::sockaddr_storage>(),
        )
    };
    // Only the vectors in use are written (zeroing all of them cost more than the call's
    // own work for a datagram of a few segments).
    let mut iovs = [const { mem::MaybeUninit::<libc::iovec>::uninit() }; crate::RECV_PIECES_MAX];
    for (iov, p) in iovs.iter_mut().zip(pieces) {
        iov.write(libc::iovec {
            iov_base: p.addr.cast(),
            iov_len: p.len,
        });
    }
    let mut ctrl = CmsgBuf([0; CMSG_BUF_LEN]);
    hdr.msg_name = ptr::addr_of_mut!(name).cast();
    hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // The kernel reads the first `pieces.len()` vectors, written just above.
    hdr.msg_iov = iovs.as_mut_ptr().cast();
    hdr.msg_iovlen = pieces.len() as _;
    hdr.msg_control = ctrl.0.as_mut_ptr().cast();
    hdr.msg_controllen = CMSG_BUF_LEN as _;
    // The system call itself, as in `recv`.
    // SAFETY: the header points at live locals of the lengths just set; the caller vouches
    // for the pieces.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_recvmsg,
            libc::c_long::from(socket.as_raw_fd()),
            ptr::addr_of_mut!(hdr),
            libc::c_long::from(libc::MSG_DONTWAIT),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let len = usize::try_from(rc).unwrap_or(0);
    let mut meta = RecvMeta {
        src: read_sockaddr(&name, hdr.msg_namelen)
            .unwrap_or_else(|| SocketAddr::new(unspecified(local.ip()), 0)),
        dst_ip: local.ip(),
        len,
        stride: len,
        truncated: hdr.msg_flags & libc::MSG_TRUNC != 0,
        ..RecvMeta::default()
    };
    decode_cmsgs(&hdr, &mut meta);
    if meta.stride == 0 {
        meta.stride = len;
    }
    Ok(Some(meta))
}

fn unspecified(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Reads the control messages the kernel attached: TOS/TCLASS (ECN), packet info (destination
/// address) and the GRO segment size.
fn decode_cmsgs(hdr: &libc::msghdr, meta: &mut RecvMeta) {
    // SAFETY: `hdr` was filled by recvmmsg: msg_control points at our control buffer and
    // msg_controllen is the length the kernel wrote, so the CMSG_* walk stays inside it.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(hdr) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR return only headers that lie inside the buffer;
        // read_unaligned needs no alignment.
        let header = unsafe { ptr::read_unaligned(cmsg) };
        // SAFETY: CMSG_DATA points just after a header inside the buffer.
        let data = unsafe { libc::CMSG_DATA(cmsg) };
        // SAFETY: CMSG_LEN(0) is pure arithmetic.
        let data_len =
            (header.cmsg_len as usize).saturating_sub(unsafe { libc::CMSG_LEN(0) } as usize);
        match (header.cmsg_level, header.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_TOS) if data_len >= 1 => {
                // SAFETY: at least one data byte is present.
                meta.tos = unsafe { *data };
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if data_len >= size_of::<libc::c_int>() => {
                // SAFETY: a c_int of data is present; read_unaligned needs no alignment.
                let tclass = unsafe { ptr::read_unaligned(data.cast::<libc::c_int>()) };
                meta.tos = (tclass & 0xff) as u8;
            }
            (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT)
                if data_len >= size_of::<libc::c_int>() =>
            {
                // SAFETY: a c_int of data is present (the kernel writes TTL and hop limit as
                // ints); read_unaligned needs no alignment.
                let ttl = unsafe { ptr::read_unaligned(data.cast::<libc::c_int>()) };
                meta.ttl = u8::try_from(ttl).unwrap_or(u8::MAX);
            }
            (libc::IPPROTO_IP, libc::IP_PKTINFO) if data_len >= size_of::<libc::in_pktinfo>() => {
                // SAFETY: an in_pktinfo of data is present.
                let info = unsafe { ptr::read_unaligned(data.cast::<libc::in_pktinfo>()) };
                meta.dst_ip = IpAddr::V4(Ipv4Addr::from(info.ipi_addr.s_addr.to_ne_bytes()));
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)
                if data_len >= size_of::<libc::in6_pktinfo>() =>
            {
                // SAFETY: an in6_pktinfo of data is present.
                let info = unsafe { ptr::read_unaligned(data.cast::<libc::in6_pktinfo>()) };
                meta.dst_ip = IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr));
            }
            (libc::SOL_UDP, libc::UDP_GRO) if data_len >= size_of::<u16>() => {
                // The kernel writes an int (`udp_cmsg_recv`); accept a u16 too, reading the
                // width it says it wrote.
                let stride = if data_len >= size_of::<libc::c_int>() {
                    // SAFETY: a c_int of data is present.
                    let v = unsafe { ptr::read_unaligned(data.cast::<libc::c_int>()) };
                    usize::try_from(v).unwrap_or(0)
                } else {
                    // SAFETY: a u16 of data is present.
                    usize::from(unsafe { ptr::read_unaligned(data.cast::<u16>()) })
                };
                meta.stride = stride;
            }
            _ => {}
        }
        // SAFETY: as for CMSG_FIRSTHDR; returns null past the end.
        cmsg = unsafe { libc::CMSG_NXTHDR(hdr, cmsg) };
    }
}
