//! Socket plumbing shared by both protocols: connect with a timeout over every resolved
//! address, dual-stack listen, and message I/O that maps failures to typed errors.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::{Error, Result};

/// The TCP port both `ibv_rc_pingpong` and perftest use unless `-p` says otherwise.
pub const DEFAULT_PORT: u16 = 18515;

/// Connects to the first address of `addr` that accepts, like the tools' `getaddrinfo` loop
/// (so a host name with both IPv6 and IPv4 addresses works), and disables Nagle: every step
/// of both protocols is a small lock-step message, so delaying one only adds latency.
///
/// `timeout` bounds each connection attempt; `None` uses the OS default.
pub fn connect(addr: impl ToSocketAddrs, timeout: Option<Duration>) -> Result<TcpStream> {
    let addrs = addr
        .to_socket_addrs()
        .map_err(|e| Error::io("resolve", e))?;
    let mut last = None;
    for a in addrs {
        let attempt = match timeout {
            Some(t) => TcpStream::connect_timeout(&a, t),
            None => TcpStream::connect(a),
        };
        match attempt {
            Ok(s) => {
                s.set_nodelay(true).map_err(|e| Error::io("connect", e))?;
                tracing::debug!(peer = %a, "out-of-band connection established");
                return Ok(s);
            }
            Err(e) => {
                tracing::debug!(peer = %a, error = %e, "connect attempt failed");
                last = Some(e);
            }
        }
    }
    Err(match last {
        Some(e) => Error::io("connect", e),
        None => Error::NoAddress,
    })
}

/// Binds a listener to `addr` (std sets `SO_REUSEADDR`, so a server restarted on 18515 does
/// not trip over the previous run's TIME_WAIT sockets).
pub fn listen(addr: impl ToSocketAddrs) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| Error::io("bind", e))
}

/// Listens on `port` on every address: dual-stack `[::]` first (IPv4 clients arrive as
/// IPv4-mapped), `0.0.0.0` if the host has no IPv6 — what the tools do when started without
/// a bind address.
pub fn listen_any(port: u16) -> Result<TcpListener> {
    match TcpListener::bind((Ipv6Addr::UNSPECIFIED, port)) {
        Ok(l) => Ok(l),
        Err(e6) => {
            tracing::debug!(error = %e6, "IPv6 listen failed, trying IPv4");
            listen((std::net::Ipv4Addr::UNSPECIFIED, port))
        }
    }
}

/// Accepts one connection, returning the peer address with IPv4-mapped addresses turned back
/// into IPv4 (what users expect to see for a client that connected over IPv4).
pub(crate) fn accept(listener: &TcpListener) -> Result<(TcpStream, SocketAddr)> {
    let (s, mut peer) = listener.accept().map_err(|e| Error::io("accept", e))?;
    s.set_nodelay(true).map_err(|e| Error::io("accept", e))?;
    peer.set_ip(peer.ip().to_canonical());
    tracing::debug!(%peer, "out-of-band connection accepted");
    Ok((s, peer))
}

/// Applies `timeout` to both directions of `s` (`None`: block forever, as the tools do).
pub(crate) fn set_timeout(s: &TcpStream, timeout: Option<Duration>) -> Result<()> {
    // A zero duration is rejected by std; treat it as "no timeout" rather than failing.
    let t = timeout.filter(|d| !d.is_zero());
    s.set_read_timeout(t)
        .and_then(|()| s.set_write_timeout(t))
        .map_err(|e| Error::io("set timeout", e))
}

/// Reads exactly `buf.len()` bytes for protocol step `step`, reporting how far it got if the
/// peer closes (the C tools expect each message whole; a short one is a dead peer).
pub(crate) fn read_msg<S: Read>(s: &mut S, buf: &mut [u8], step: &'static str) -> Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(Error::PeerClosed {
                    step,
                    got,
                    expected: buf.len(),
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(step, e)),
        }
    }
    Ok(())
}

/// Writes one whole message with a single `write_all` of one buffer: the C tools read each
/// message with a single `read(fd, buf, size)` and fail on a short count, so a message must
/// never be assembled from several writes.
pub(crate) fn write_msg<S: Write>(s: &mut S, msg: &[u8], step: &'static str) -> Result<()> {
    s.write_all(msg).map_err(|e| Error::io(step, e))?;
    s.flush().map_err(|e| Error::io(step, e))
}
