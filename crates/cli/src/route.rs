//! Choosing the local address a softrdma device binds to (shared by `pingpong`, `perf` and
//! `devinfo`).
//!
//! A device must bind a specific IP address — the ICRC covers the source address, so a
//! wildcard cannot work. Without `--bind`, a client uses the address the kernel would send
//! from towards the server (a connected UDP socket's `getsockname`, no packet is sent).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};

/// The local address the kernel's routing table picks for traffic to `dest`.
pub(crate) fn local_ip_towards(dest: IpAddr) -> io::Result<IpAddr> {
    let bind: SocketAddr = match dest {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(bind)?;
    s.connect((dest, 9))?;
    Ok(s.local_addr()?.ip().to_canonical())
}

/// Resolves `host:port` to its first address (IPv4-mapped IPv6 shown as IPv4).
pub(crate) fn resolve(host: &str, port: u16) -> io::Result<SocketAddr> {
    let mut a = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
    a.set_ip(a.ip().to_canonical());
    Ok(a)
}

/// The address a device should bind when talking to `peer`: `bind` if given, else the
/// routed source address towards `peer`. A peer on this host is reached from itself, and two
/// devices cannot share an address (each binds UDP 4791), so for an IPv4 loopback peer the
/// answer is another loopback address: 127.0.0.2 for 127.0.0.1, else 127.0.0.1.
pub(crate) fn device_ip(bind: Option<IpAddr>, peer: IpAddr) -> io::Result<IpAddr> {
    if let Some(ip) = bind {
        return Ok(ip);
    }
    let ip = local_ip_towards(peer)?;
    if ip == peer {
        if let IpAddr::V4(v4) = peer {
            if v4.is_loopback() {
                let other = if v4 == Ipv4Addr::LOCALHOST {
                    Ipv4Addr::new(127, 0, 0, 2)
                } else {
                    Ipv4Addr::LOCALHOST
                };
                return Ok(IpAddr::V4(other));
            }
        }
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_routes_to_itself() {
        let ip = local_ip_towards("127.0.0.7".parse().unwrap()).unwrap();
        assert!(ip.is_loopback(), "{ip}");
        let v4 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(device_ip(Some(v4("10.1.2.3")), ip).unwrap(), v4("10.1.2.3"));
        assert_eq!(device_ip(None, v4("127.0.0.1")).unwrap(), v4("127.0.0.2"));
        assert_eq!(device_ip(None, v4("127.0.0.9")).unwrap(), v4("127.0.0.1"));
        assert_eq!(resolve("127.0.0.1", 5).unwrap().port(), 5);
    }
}
