//! The out-of-band exchange of rdma-core's `ibv_rc_pingpong` (and `ibv_uc_pingpong`,
//! `ibv_ud_pingpong`, `ibv_srq_pingpong`, which share it), byte-compatible with rdma-core 44.
//!
//! One TCP connection to port 18515 (`-p`), three messages (verified in
//! `testdata/conformance/rc_send.pcap`):
//!
//! | # | direction | bytes | content |
//! |---|---|---|---|
//! | 1 | client → server | 52 | `"%04x:%06x:%06x:%s"` of LID, QPN, PSN, 32-hex-digit GID, + NUL |
//! | 2 | server → client | 52 | the same for the server |
//! | 3 | client → server | 5 | `done\0` |
//!
//! The server writes message 2 only after moving its QP to RTR/RTS with the client's values,
//! because the client may start RDMA traffic the moment it arrives. That is why the server
//! side here is split in steps: [`Listener::accept`] reads the client's message and hands back
//! a [`PendingServer`]; the caller connects its QP, then [`PendingServer::reply`] answers and
//! [`ServerConnection::wait_done`] reads the final `done`.
//!
//! `ibv_uc_pingpong` and `ibv_ud_pingpong` send the same three messages; for UD the PSN is the
//! QP's send PSN (no receiver checks it) and the Q_Key is a constant, [`UD_QKEY`].
//!
//! Each message is written with one `write` because rdma-core reads each with a single
//! `read(fd, msg, sizeof msg)` and gives up on a short count.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::{Error, FormatError, ParseError, Result};
use crate::net;
use crate::text::{c_str, parse_hex, put_hex};
use softrdma_wire::Gid;

/// Size of the address message: `"0000:000000:000000:" + 32 hex digits + NUL`
/// (`sizeof "0000:000000:000000:00000000000000000000000000000000"` in rdma-core).
pub const MSG_LEN: usize = 52;

/// The closing message, including its NUL (`sizeof "done"`).
pub const DONE: &[u8; 5] = b"done\0";

/// The Q_Key `ibv_ud_pingpong` gives its QP and presents in every send: a constant of the
/// program, not part of the exchange (a UD peer must use the same one).
pub const UD_QKEY: u32 = 0x1111_1111;

/// How long each step waits for the peer by default. Generous because the peer may be a
/// guest under software emulation, but bounded so a stuck peer does not hang a test run.
/// [`Listener::accept`] itself waits for a client without limit, like the real server.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// One side's connection parameters, as `ibv_rc_pingpong` exchanges them (`struct
/// pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PingpongDest {
    /// Port LID; 0 on RoCE.
    pub lid: u16,
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
    /// GID of the sender (all zero when the tool runs without `-g`).
    pub gid: Gid,
}

impl PingpongDest {
    /// Encodes the 52-byte message, e.g.
    /// `0000:000011:c2dac6:00000000000000000000ffff0a58000c\0`.
    ///
    /// Fails if the QPN or PSN exceed 24 bits: `printf` would print a wider field and the
    /// message would no longer be 52 bytes.
    pub fn format(&self) -> Result<[u8; MSG_LEN], FormatError> {
        let mut v = Vec::with_capacity(MSG_LEN);
        put_hex(&mut v, u64::from(self.lid), 4, "lid")?;
        v.push(b':');
        put_hex(&mut v, u64::from(self.qpn), 6, "qpn")?;
        v.push(b':');
        put_hex(&mut v, u64::from(self.psn), 6, "psn")?;
        v.push(b':');
        v.extend_from_slice(&self.gid.to_hex32());
        v.push(0);
        let mut out = [0u8; MSG_LEN];
        out.copy_from_slice(&v);
        Ok(out)
    }

    /// Decodes a 52-byte message.
    ///
    /// Accepts what rdma-core's `sscanf("%x:%x:%x:%s")` + `wire_gid_to_gid` accept for
    /// well-formed input (hex fields of any width, either case; the GID exactly 32 digits),
    /// and rejects anything else with a [`ParseError`] instead of reading garbage.
    pub fn parse(msg: &[u8]) -> Result<PingpongDest, ParseError> {
        if msg.len() != MSG_LEN {
            return Err(ParseError::Length {
                expected: MSG_LEN,
                got: msg.len(),
            });
        }
        let text = c_str(msg)?;
        let fields: Vec<&[u8]> = text.split(|&b| b == b':').collect();
        if fields.len() != 4 {
            return Err(ParseError::FieldCount {
                expected: 4,
                found: fields.len(),
            });
        }
        Ok(PingpongDest {
            lid: parse_hex(fields[0], 0xffff, "lid")? as u16,
            qpn: parse_hex(fields[1], 0xff_ffff, "qpn")? as u32,
            psn: parse_hex(fields[2], 0xff_ffff, "psn")? as u32,
            gid: Gid::from_hex32(fields[3]).map_err(|_| ParseError::BadGid)?,
        })
    }
}

/// Client side with the default port handling of `addr` and [`DEFAULT_TIMEOUT`]: connect,
/// send `local`, read the server's parameters, send `done`. The returned parameters are
/// final: the server has already moved its QP to RTR/RTS.
pub fn exchange_as_client(addr: impl ToSocketAddrs, local: &PingpongDest) -> Result<PingpongDest> {
    exchange_as_client_with_timeout(addr, local, Some(DEFAULT_TIMEOUT))
}

/// [`exchange_as_client`] with an explicit timeout for the connect and for each step
/// (`None`: wait forever, like `ibv_rc_pingpong`).
pub fn exchange_as_client_with_timeout(
    addr: impl ToSocketAddrs,
    local: &PingpongDest,
    timeout: Option<Duration>,
) -> Result<PingpongDest> {
    let mut s = net::connect(addr, timeout)?;
    net::set_timeout(&s, timeout)?;
    client_exchange(&mut s, local)
}

/// The client's three steps over an already connected stream (any `Read + Write`, so the
/// sequence can be tested without sockets).
pub fn client_exchange<S: Read + Write>(s: &mut S, local: &PingpongDest) -> Result<PingpongDest> {
    let msg = local.format()?;
    net::write_msg(s, &msg, "pingpong: send local address")?;
    let mut buf = [0u8; MSG_LEN];
    net::read_msg(s, &mut buf, "pingpong: read remote address")?;
    let remote = PingpongDest::parse(&buf).map_err(|source| Error::Malformed {
        step: "pingpong: remote address",
        source,
    })?;
    net::write_msg(s, DONE, "pingpong: send done")?;
    tracing::debug!(?local, ?remote, "pingpong exchange done (client)");
    Ok(remote)
}

/// A listening `ibv_rc_pingpong`-style server socket.
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    timeout: Option<Duration>,
}

impl Listener {
    /// Listens on `port` on all addresses, IPv6 and IPv4 (see [`crate::listen_any`]).
    pub fn bind_port(port: u16) -> Result<Listener> {
        Ok(Listener::from_std(net::listen_any(port)?))
    }

    /// Listens on a specific address (e.g. `"10.88.0.1:18515"`, `"[::1]:0"`).
    pub fn bind(addr: impl ToSocketAddrs) -> Result<Listener> {
        Ok(Listener::from_std(net::listen(addr)?))
    }

    /// Wraps an existing listener (per-step timeout: [`DEFAULT_TIMEOUT`]).
    pub fn from_std(inner: TcpListener) -> Listener {
        Listener {
            inner,
            timeout: Some(DEFAULT_TIMEOUT),
        }
    }

    /// Sets the per-step timeout used on accepted connections (`None`: none).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.inner
            .local_addr()
            .map_err(|e| Error::io("local_addr", e))
    }

    /// Waits for a client (without limit) and reads its parameters. The connection is then
    /// pending: connect the QP with [`PendingServer::remote`], then [`PendingServer::reply`].
    pub fn accept(&self) -> Result<PendingServer> {
        let (mut stream, peer_addr) = net::accept(&self.inner)?;
        net::set_timeout(&stream, self.timeout)?;
        let remote = server_read_remote(&mut stream)?;
        Ok(PendingServer {
            stream,
            peer_addr,
            remote,
        })
    }
}

/// A server connection whose client parameters have been read but not yet answered.
#[derive(Debug)]
pub struct PendingServer {
    stream: TcpStream,
    peer_addr: SocketAddr,
    remote: PingpongDest,
}

impl PendingServer {
    /// The client's parameters.
    pub fn remote(&self) -> &PingpongDest {
        &self.remote
    }

    /// The client's TCP address (IPv4-mapped addresses shown as IPv4): where a GID-less
    /// client is reachable.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// Sends our parameters. Call it only once the QP is in RTR/RTS: the client may start
    /// sending as soon as this arrives.
    pub fn reply(mut self, local: &PingpongDest) -> Result<ServerConnection> {
        server_reply(&mut self.stream, local)?;
        Ok(ServerConnection {
            stream: self.stream,
        })
    }
}

/// A server connection that has sent its parameters and waits for the client's `done`.
#[derive(Debug)]
pub struct ServerConnection {
    stream: TcpStream,
}

impl ServerConnection {
    /// Reads the client's `done\0` and closes the connection.
    pub fn wait_done(mut self) -> Result<()> {
        server_wait_done(&mut self.stream)
    }

    /// The underlying stream, for callers that want to keep it open.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }
}

/// Server step 1 over any stream: read and decode the client's message.
pub fn server_read_remote<S: Read>(s: &mut S) -> Result<PingpongDest> {
    let mut buf = [0u8; MSG_LEN];
    net::read_msg(s, &mut buf, "pingpong: read remote address")?;
    PingpongDest::parse(&buf).map_err(|source| Error::Malformed {
        step: "pingpong: remote address",
        source,
    })
}

/// Server step 2 over any stream: send our message.
pub fn server_reply<S: Write>(s: &mut S, local: &PingpongDest) -> Result<()> {
    let msg = local.format()?;
    net::write_msg(s, &msg, "pingpong: send local address")
}

/// Server step 3 over any stream: read `done\0` (rdma-core only checks the length; we also
/// check the bytes, since anything else means the peer is not speaking this protocol).
pub fn server_wait_done<S: Read>(s: &mut S) -> Result<()> {
    let mut buf = [0u8; 5];
    net::read_msg(s, &mut buf, "pingpong: read done")?;
    if &buf != DONE {
        return Err(Error::BadDone { got: buf });
    }
    Ok(())
}

/// QP addresses `ibv_srq_pingpong` sends each way, whatever its `-q` (`MAX_QP`): the entries
/// past the QPs in use are all zeros.
pub const SRQ_MAX_QP: usize = 256;

/// `ibv_srq_pingpong`'s client exchange over a connected stream: [`SRQ_MAX_QP`] messages of
/// ours (`locals`, then zeros), [`SRQ_MAX_QP`] of the server's, then `done`. Returns the
/// server's first `locals.len()` addresses.
pub fn srq_client_exchange<S: Read + Write>(
    s: &mut S,
    locals: &[PingpongDest],
) -> Result<Vec<PingpongDest>> {
    srq_write_all(s, locals)?;
    let remote = srq_read_all(s, locals.len())?;
    net::write_msg(s, DONE, "srq pingpong: send done")?;
    Ok(remote)
}

/// `ibv_srq_pingpong`'s server, step 1: the client's [`SRQ_MAX_QP`] addresses, of which the
/// first `n` are kept.
pub fn srq_server_read<S: Read>(s: &mut S, n: usize) -> Result<Vec<PingpongDest>> {
    srq_read_all(s, n)
}

/// `ibv_srq_pingpong`'s server, step 2 (after connecting its QPs): our addresses, then the
/// client's `done`.
pub fn srq_server_reply<S: Read + Write>(s: &mut S, locals: &[PingpongDest]) -> Result<()> {
    srq_write_all(s, locals)?;
    server_wait_done(s)
}

fn srq_write_all<S: Write>(s: &mut S, locals: &[PingpongDest]) -> Result<()> {
    if locals.len() > SRQ_MAX_QP {
        return Err(Error::Malformed {
            step: "srq pingpong: local addresses",
            source: ParseError::Length {
                expected: SRQ_MAX_QP,
                got: locals.len(),
            },
        });
    }
    let mut all = Vec::with_capacity(SRQ_MAX_QP * MSG_LEN);
    for i in 0..SRQ_MAX_QP {
        let d = locals.get(i).copied().unwrap_or_default();
        all.extend_from_slice(&d.format()?);
    }
    net::write_msg(s, &all, "srq pingpong: send local addresses")
}

fn srq_read_all<S: Read>(s: &mut S, keep: usize) -> Result<Vec<PingpongDest>> {
    let mut out = Vec::with_capacity(keep);
    for i in 0..SRQ_MAX_QP {
        let mut buf = [0u8; MSG_LEN];
        net::read_msg(s, &mut buf, "srq pingpong: read remote addresses")?;
        if i < keep {
            out.push(
                PingpongDest::parse(&buf).map_err(|source| Error::Malformed {
                    step: "srq pingpong: remote address",
                    source,
                })?,
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// ibv_srq_pingpong's exchange: 256 messages of 52 bytes whatever -q (zeros past the QPs
    /// in use), read back as the first -q addresses.
    #[test]
    fn srq_exchange_sends_256_addresses() {
        let locals: Vec<PingpongDest> = (0..3)
            .map(|i| PingpongDest {
                lid: 0,
                qpn: 0x11 + i,
                psn: 0xabc + i,
                gid: Gid::from_ipv4_mapped(Ipv4Addr::new(10, 0, 0, 1)),
            })
            .collect();
        let mut wire = Vec::new();
        srq_write_all(&mut wire, &locals).unwrap();
        assert_eq!(wire.len(), SRQ_MAX_QP * MSG_LEN);
        assert_eq!(&wire[..MSG_LEN], &locals[0].format().unwrap()[..]);
        assert_eq!(
            &wire[3 * MSG_LEN..4 * MSG_LEN],
            b"0000:000000:000000:00000000000000000000000000000000\0"
        );
        let back = srq_read_all(&mut &wire[..], 3).unwrap();
        assert_eq!(back, locals);
        // A peer that stops early is an error, not a short list.
        assert!(srq_read_all(&mut &wire[..100 * MSG_LEN], 3).is_err());
        // More than 256 QPs cannot be described.
        assert!(srq_write_all(&mut Vec::new(), &vec![locals[0]; 257]).is_err());
    }

    const CLIENT: &[u8; MSG_LEN] = b"0000:000011:d9d181:00000000000000000000ffff0a58000c\0";

    #[test]
    fn parse_format_captured_message() {
        let d = PingpongDest::parse(CLIENT).unwrap();
        assert_eq!(
            d,
            PingpongDest {
                lid: 0,
                qpn: 0x11,
                psn: 0xd9d181,
                gid: Gid::from_ipv4_mapped(Ipv4Addr::new(10, 88, 0, 12)),
            }
        );
        assert_eq!(&d.format().unwrap(), CLIENT);
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            PingpongDest::parse(b"short"),
            Err(ParseError::Length { .. })
        ));
        assert_eq!(
            PingpongDest::parse(&[b'a'; MSG_LEN]),
            Err(ParseError::MissingNul)
        );
        let mut m = *CLIENT;
        m[4] = b';';
        assert!(matches!(
            PingpongDest::parse(&m),
            Err(ParseError::FieldCount { .. })
        ));
        let mut m = *CLIENT;
        m[7] = b'z';
        assert_eq!(
            PingpongDest::parse(&m),
            Err(ParseError::BadHex { field: "qpn" })
        );
        let mut m = *CLIENT;
        m[50] = 0; // GID one digit short
        assert_eq!(PingpongDest::parse(&m), Err(ParseError::BadGid));
        let mut m = *CLIENT;
        m[0] = 0xff;
        assert_eq!(PingpongDest::parse(&m), Err(ParseError::NotAscii));
        // every single-byte corruption is either accepted or a typed error, never a panic
        for i in 0..MSG_LEN {
            for b in [0u8, b':', b'g', 0x80, b'F'] {
                let mut m = *CLIENT;
                m[i] = b;
                let _ = PingpongDest::parse(&m);
            }
        }
    }

    #[test]
    fn refuses_wide_fields() {
        let d = PingpongDest {
            qpn: 0x100_0000,
            ..Default::default()
        };
        assert_eq!(d.format().unwrap_err().field, "qpn");
    }
}
