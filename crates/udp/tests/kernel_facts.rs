//! Checks, on the running kernel, the IPv4 header facts the crate documents and the RoCEv2 ICRC
//! depends on: DF set, TTL 64, identification 0 for single datagrams and `k` for GSO segment
//! `k` ([`ipv4_id_of_segment`]), ECN bits in the TOS byte.
//!
//! Each test runs in a private network namespace (`unshare(CLONE_NEWNET)` on its own thread),
//! so it can use port 4791 and create devices without touching the host. That needs root
//! (`CAP_SYS_ADMIN`, `CAP_NET_RAW`); without it the tests print why and pass.
#![cfg(all(target_os = "linux", not(softrdma_udp_fallback)))]

use std::ffi::CStr;
use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use softrdma_udp::{ipv4_id_of_segment, Ecn, RoceSocket, Transmit, DEFAULT_TTL};

/// One captured IPv4/UDP packet, reduced to what the ICRC depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ipv4Udp {
    tos: u8,
    total_len: u16,
    id: u16,
    dont_fragment: bool,
    fragment_offset: u16,
    ttl: u8,
    src: SocketAddr,
    dst: SocketAddr,
    payload: Vec<u8>,
}

fn parse_ipv4_udp(packet: &[u8]) -> Option<Ipv4Udp> {
    if packet.len() < 28 || packet[0] >> 4 != 4 || packet[9] != 17 {
        return None;
    }
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    let be16 = |at: usize| u16::from_be_bytes([packet[at], packet[at + 1]]);
    let udp = packet.get(ihl..)?;
    if udp.len() < 8 {
        return None;
    }
    let flags = be16(6);
    let ip = |at: usize| {
        IpAddr::V4(Ipv4Addr::new(
            packet[at],
            packet[at + 1],
            packet[at + 2],
            packet[at + 3],
        ))
    };
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    Some(Ipv4Udp {
        tos: packet[1],
        total_len: be16(2),
        id: be16(4),
        dont_fragment: flags & 0x4000 != 0,
        fragment_offset: flags & 0x1fff,
        ttl: packet[8],
        src: SocketAddr::new(ip(12), u16::from_be_bytes([udp[0], udp[1]])),
        dst: SocketAddr::new(ip(16), u16::from_be_bytes([udp[2], udp[3]])),
        payload: udp.get(8..udp_len)?.to_vec(),
    })
}

/// Runs `f` on a fresh thread inside a new network namespace; `None` (and a message) if the
/// namespace cannot be created (not root).
fn in_private_netns<T: Send>(f: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: unshare takes no pointers; CLONE_NEWNET moves only this thread into a
                // new network namespace, which ends when the thread and its sockets are gone.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                    eprintln!(
                        "skipped: cannot create a network namespace ({}); run as root",
                        io::Error::last_os_error()
                    );
                    return None;
                }
                Some(f())
            })
            .join()
            .expect("test thread panicked")
    })
}

/// As root (CI), a missing facility is a failure; otherwise the test is skipped with a message.
fn skip_or_fail(why: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        panic!("kernel facts test could not run as root: {why}");
    }
    eprintln!("skipped: {why}");
}

fn ifreq(name: &CStr) -> libc::ifreq {
    // SAFETY: ifreq is a plain C struct/union; all-zero bytes are valid.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.to_bytes()) {
        *dst = *src as libc::c_char;
    }
    req
}

fn ioctl(fd: &OwnedFd, request: libc::c_ulong, req: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: every request used here reads or writes one `struct ifreq`, which `req` is.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, std::ptr::from_mut(req)) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn control_socket() -> OwnedFd {
    // SAFETY: plain socket(2) call; the result is checked before it is owned.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
    // SAFETY: `fd` is a new, valid descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Brings `name` up, with IPv4 `addr`/24 if given.
fn configure_interface(name: &CStr, addr: Option<Ipv4Addr>) -> io::Result<()> {
    let ctl = control_socket();
    if let Some(addr) = addr {
        for (request, ip) in [
            (libc::SIOCSIFADDR, addr),
            (libc::SIOCSIFNETMASK, Ipv4Addr::new(255, 255, 255, 0)),
        ] {
            let mut req = ifreq(name);
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(ip.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: ifru_addr is a sockaddr, at least as large as sockaddr_in.
            unsafe {
                std::ptr::write(
                    std::ptr::addr_of_mut!(req.ifr_ifru.ifru_addr).cast::<libc::sockaddr_in>(),
                    sin,
                );
            }
            ioctl(&ctl, request as libc::c_ulong, &mut req)?;
        }
    }
    let mut req = ifreq(name);
    ioctl(&ctl, libc::SIOCGIFFLAGS as libc::c_ulong, &mut req)?;
    // SAFETY: SIOCGIFFLAGS filled ifru_flags.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    ioctl(&ctl, libc::SIOCSIFFLAGS as libc::c_ulong, &mut req)
}

/// Reads from `fd` until `want` IPv4/UDP packets to port `dport` arrived (or 2 s passed).
/// With `outgoing_only`, `fd` is an `AF_PACKET` socket and only packets leaving the interface
/// count (loopback shows each packet twice: outgoing, then incoming).
fn collect(fd: &OwnedFd, dport: u16, want: usize, outgoing_only: bool) -> Vec<Ipv4Udp> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 70_000];
    while out.len() < want {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis())
            .unwrap_or(2000)
            .max(1);
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
            continue;
        }
        // SAFETY: sockaddr_ll is plain C data; zero is valid.
        let mut from: libc::sockaddr_ll = unsafe { mem::zeroed() };
        let mut from_len = mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        let n = if outgoing_only {
            // SAFETY: `buf` is writable for its length; `from`/`from_len` describe a valid
            // address buffer.
            unsafe {
                libc::recvfrom(
                    fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    std::ptr::addr_of_mut!(from).cast(),
                    &mut from_len,
                )
            }
        } else {
            // SAFETY: `buf` is writable for its full length.
            unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
        };
        let Ok(n) = usize::try_from(n) else { continue };
        if outgoing_only && from.sll_pkttype != libc::PACKET_OUTGOING {
            continue;
        }
        if let Some(p) = parse_ipv4_udp(&buf[..n]) {
            if p.dst.port() == dport {
                out.push(p);
            }
        }
    }
    out
}

fn send(socket: &mut RoceSocket, t: Transmit<'_>) {
    assert_eq!(socket.send(&[t]).expect("send"), 1);
}

/// Capture on loopback (`AF_PACKET`, like tcpdump): single datagrams have ID 0, DF, TTL 64 and
/// the ECN bits asked for; a GSO super-packet crosses loopback whole, with ID 0.
#[test]
fn loopback_capture_ipv4_header() {
    let run = || -> Result<(), String> {
        configure_interface(c"lo", None).map_err(|e| format!("lo up: {e}"))?;
        // SAFETY: plain socket(2) call; checked below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                i32::from((libc::ETH_P_ALL as u16).to_be()),
            )
        };
        if raw < 0 {
            return Err(format!("AF_PACKET: {}", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a new descriptor nothing else owns.
        let capture = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain C data; zero is valid.
        let mut ll: libc::sockaddr_ll = unsafe { mem::zeroed() };
        ll.sll_family = libc::AF_PACKET as u16;
        ll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: the name is a valid C string.
        ll.sll_ifindex = unsafe { libc::if_nametoindex(c"lo".as_ptr()) } as i32;
        // SAFETY: `ll` is a valid sockaddr_ll of the length given.
        let rc = unsafe {
            libc::bind(
                capture.as_raw_fd(),
                std::ptr::addr_of!(ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(format!("bind AF_PACKET: {}", io::Error::last_os_error()));
        }

        let a_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
        let b_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let mut a = RoceSocket::bind(a_ip).map_err(|e| e.to_string())?;
        let b = RoceSocket::bind(b_ip).map_err(|e| e.to_string())?;
        let dst = b.local_addr();
        let single = [0x11u8; 100];
        send(
            &mut a,
            Transmit {
                dst,
                src_port: 0,
                ecn: Ecn::Ce,
                segment_size: None,
                contents: &single,
            },
        );
        send(
            &mut a,
            Transmit {
                dst,
                src_port: 0,
                ecn: Ecn::Ect0,
                segment_size: None,
                contents: &single,
            },
        );
        let gso = [0x22u8; 4000];
        let gso_on = a.max_gso_segments() >= 4;
        if gso_on {
            send(
                &mut a,
                Transmit {
                    dst,
                    src_port: 0,
                    ecn: Ecn::NotEct,
                    segment_size: Some(1000),
                    contents: &gso,
                },
            );
        }
        let want = if gso_on { 3 } else { 2 };
        let seen = collect(&capture, 4791, want, true);
        let summary: Vec<(u16, bool, u8, u8, u16)> = seen
            .iter()
            .map(|p| (p.id, p.dont_fragment, p.ttl, p.tos, p.total_len))
            .collect();
        eprintln!("captured on lo (id, DF, ttl, tos, total length): {summary:?}");
        assert!(seen.len() >= want, "captured {} packets", seen.len());
        for p in &seen {
            assert_eq!(p.id, 0, "IPv4 identification");
            assert!(p.dont_fragment, "DF");
            assert_eq!(p.fragment_offset, 0);
            assert_eq!(p.ttl, DEFAULT_TTL);
            assert_eq!(p.src, a.local_addr());
            assert_eq!(p.dst, dst);
        }
        assert_eq!(Ecn::from_tos(seen[0].tos), Ecn::Ce);
        assert_eq!(Ecn::from_tos(seen[1].tos), Ecn::Ect0);
        assert_eq!(seen[0].total_len, 20 + 8 + 100);
        if gso_on {
            // Loopback carries the super-packet unsegmented.
            assert_eq!(seen[2].total_len, 20 + 8 + 4000);
            assert_eq!(seen[2].payload, gso);
        }
        Ok(())
    };
    if let Some(Err(why)) = in_private_netns(run) {
        skip_or_fail(&why);
    }
}

/// Software GSO segmentation, observed on a tun device (no offloads, like a tap to a VM): the
/// segments of a super-packet get IDs 0, 1, 2, ... = `ipv4_id_of_segment(k)`, DF, TTL 64;
/// a following single datagram has ID 0 again.
#[test]
fn gso_segments_are_numbered_from_zero() {
    const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
    let run = || -> Result<(), String> {
        // SAFETY: open(2) on a constant C path; checked below.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if raw < 0 {
            return Err(format!("/dev/net/tun: {}", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a new descriptor nothing else owns.
        let tun = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = ifreq(c"srtun0");
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        ioctl(&tun, TUNSETIFF, &mut req).map_err(|e| format!("TUNSETIFF: {e}"))?;
        configure_interface(c"srtun0", Some(Ipv4Addr::new(10, 99, 0, 1)))
            .map_err(|e| format!("srtun0 up: {e}"))?;

        let mut a =
            RoceSocket::bind(IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1))).map_err(|e| e.to_string())?;
        if a.max_gso_segments() < 4 {
            return Err("no UDP GSO on this kernel".into());
        }
        let dst: SocketAddr = "10.99.0.2:4791".parse().expect("addr");
        let contents: Vec<u8> = (0..3500u32).map(|i| (i / 1000) as u8).collect();
        send(
            &mut a,
            Transmit {
                dst,
                src_port: 0,
                ecn: Ecn::Ect0,
                segment_size: Some(1000),
                contents: &contents,
            },
        );
        send(
            &mut a,
            Transmit {
                dst,
                src_port: 0,
                ecn: Ecn::NotEct,
                segment_size: None,
                contents: b"single",
            },
        );
        send(
            &mut a,
            Transmit {
                dst,
                src_port: 0,
                ecn: Ecn::Ce,
                segment_size: Some(1000),
                contents: &contents[..2000],
            },
        );
        let seen = collect(&tun, 4791, 7, false);
        let ids: Vec<u16> = seen.iter().map(|p| p.id).collect();
        eprintln!("IPv4 IDs seen on the tun device: {ids:?}");
        let expected: Vec<u16> = (0..4)
            .map(ipv4_id_of_segment)
            .chain([ipv4_id_of_segment(0)])
            .chain((0..2).map(ipv4_id_of_segment))
            .collect();
        assert_eq!(ids, expected);
        assert_eq!(ids, [0, 1, 2, 3, 0, 0, 1]);
        let lens: Vec<u16> = seen.iter().map(|p| p.total_len).collect();
        assert_eq!(lens, [1028, 1028, 1028, 528, 34, 1028, 1028]);
        for (k, p) in seen[..4].iter().enumerate() {
            assert!(
                p.payload.iter().all(|&b| usize::from(b) == k),
                "segment {k} payload"
            );
            assert_eq!(Ecn::from_tos(p.tos), Ecn::Ect0);
        }
        for p in &seen {
            assert!(p.dont_fragment);
            assert_eq!(p.fragment_offset, 0);
            assert_eq!(p.ttl, DEFAULT_TTL);
            assert_eq!(p.src, a.local_addr());
        }
        assert_eq!(Ecn::from_tos(seen[6].tos), Ecn::Ce);
        Ok(())
    };
    if let Some(Err(why)) = in_private_netns(run) {
        skip_or_fail(&why);
    }
}
