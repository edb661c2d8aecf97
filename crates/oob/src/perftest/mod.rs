//! The out-of-band exchange of perftest 4.5 (`ib_write_bw`, `ib_read_lat`, ...; internal
//! version `"6.06"`), byte-compatible with the real tools.
//!
//! One TCP connection to port 18515 (`-p`). Every step is symmetric — both sides send a
//! message of the same size — and lock-step: the **client** (the side given a server name)
//! writes first and then reads, the **server** reads first and then writes
//! (`ctx_xchg_data`, `ctx_hand_shake`). Sizes, in order (verified in the captures, see
//! [`Test::schedule`] for how many key exchanges each test makes and when):
//!
//! | step | bytes each way | content | method |
//! |---|---|---|---|
//! | version | 16 | `"6.06"` NUL-padded | [`PerftestSession::exchange_versions`] |
//! | sys data (remote ≥ 5.32) | 4 + 4 | page size, cache-line size, `u32` BE, two exchanges | [`PerftestSession::exchange_sys_data`] |
//! | MTU (remote ≥ 5.1) | 2 | `enum ibv_mtu` in decimal + NUL (`"3\0"`) | [`PerftestSession::exchange_mtu`] |
//! | keys (n times) | 108 | [`PerftestDest`] text | [`PerftestSession::exchange_keys`] |
//! | bw report (RDMA `*_bw`; with `-b` every `*_bw`, after each size) | 5 × 8 | size, iters `u64` BE; bw_peak, bw_avg, msgRate `f64` BE | [`PerftestSession::exchange_bw_report`] |
//! | close | 108, then 5 | a last key exchange, then `done\0` (nobody reads it first) | [`PerftestSession::finish`] |
//!
//! Each message goes out in one `write`: perftest reads each with a single
//! `read(fd, buf, size)` and fails on a short count.
//!
//! In rdma_cm mode (`-R`, and `-z`) the same steps run over an RC QP connected through
//! rdma_cm instead of TCP: each message is one SEND into the single receive of 56 bytes the
//! peer keeps posted, the keys travel as `struct pingpong_dest` in network byte order
//! ([`PerftestDest::to_rdma_cm_bytes`]), and the close sends no `done`. A session over such
//! a stream is made with [`PerftestSession::over_rdma_cm`]; the stream must deliver each
//! message whole (see the CLI's control channel).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::{Error, FormatError, ParseError, Result};
use crate::net;

mod dest;
pub use dest::{PerftestDest, KEY_MSG_LEN, RDMA_CM_KEY_LEN};

/// perftest's internal protocol version (`VERSION` in perftest 4.5-0.17).
pub const VERSION: &str = "6.06";

/// Size of the version message (`char version[MAX_VERSION]`).
pub const VERSION_LEN: usize = 16;

/// Size of the MTU message for peers ≥ 5.31 (`sizeof(char[2])`).
pub const MTU_MSG_LEN: usize = 2;

/// The closing message, including its NUL.
pub const DONE: &[u8; 5] = b"done\0";

/// The Q_Key of perftest's UD QPs (`DEF_QKEY`), on the QP and in every send: the key message
/// carries only the QPN, both sides use this constant.
pub const DEF_QKEY: u32 = 0x1111_1111;

/// Which end of the TCP connection this is; it decides who writes first at every step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The side that was given the server's name: writes first, then reads.
    Client,
    /// The listening side: reads first, then writes.
    Server,
}

/// A perftest version string as exchanged: 16 bytes, normally ASCII digits NUL-padded.
///
/// perftest compares versions with `atof`, so this keeps the raw bytes (to echo them
/// exactly) and a fixed-point value for the feature checks (sys data from 5.32, 2-byte MTU
/// from 5.31, 8-byte iteration counts from 5.33).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerftestVersion {
    raw: [u8; VERSION_LEN],
}

impl PerftestVersion {
    /// `"6.06"`, what perftest 4.5-0.17 sends.
    pub const CURRENT: PerftestVersion = PerftestVersion::from_str_const(VERSION);

    const fn from_str_const(s: &str) -> PerftestVersion {
        let b = s.as_bytes();
        let mut raw = [0u8; VERSION_LEN];
        let mut i = 0;
        while i < b.len() && i < VERSION_LEN - 1 {
            raw[i] = b[i];
            i += 1;
        }
        PerftestVersion { raw }
    }

    /// Wraps 16 received bytes; any content is accepted (an unparsable version counts as
    /// 0.0, as with `atof`).
    pub fn from_bytes(raw: [u8; VERSION_LEN]) -> PerftestVersion {
        PerftestVersion { raw }
    }

    /// The 16 bytes as sent.
    pub fn as_bytes(&self) -> &[u8; VERSION_LEN] {
        &self.raw
    }

    /// The text before the first NUL, lossily decoded, for messages and logs.
    pub fn text(&self) -> String {
        let end = self.raw.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
        String::from_utf8_lossy(&self.raw[..end]).into_owned()
    }

    /// The version in thousandths (`"6.06"` → 6060, `"5.1"` → 5100), parsed like `atof`
    /// would read its leading digits; 0 if there are none.
    pub fn milli(&self) -> u32 {
        let mut it = self.raw.iter().copied().peekable();
        let mut whole: u32 = 0;
        while let Some(c @ b'0'..=b'9') = it.peek().copied() {
            whole = whole.saturating_mul(10).saturating_add(u32::from(c - b'0'));
            it.next();
        }
        let mut frac = 0u32;
        if it.peek() == Some(&b'.') {
            it.next();
            let mut scale = 100;
            while let Some(c @ b'0'..=b'9') = it.peek().copied() {
                frac += u32::from(c - b'0') * scale;
                scale /= 10;
                it.next();
            }
        }
        whole.saturating_mul(1000).saturating_add(frac)
    }

    /// True if this version is at least `milli` thousandths (e.g. `5320` for 5.32).
    pub fn at_least(&self, milli: u32) -> bool {
        self.milli() >= milli
    }
}

impl std::fmt::Debug for PerftestVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PerftestVersion({:?})", self.text())
    }
}

impl std::fmt::Display for PerftestVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// `check_sys_data`: the sizes each side uses for its buffers; both adopt the larger value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SysData {
    /// `cycle_buffer`, by default the page size.
    pub cycle_buffer: u32,
    /// `cache_line_size`.
    pub cache_line_size: u32,
}

impl Default for SysData {
    /// 4096 and 64: what perftest sends on x86-64 Linux (as captured).
    fn default() -> SysData {
        SysData {
            cycle_buffer: 4096,
            cache_line_size: 64,
        }
    }
}

impl SysData {
    /// The negotiated values: field-wise maximum, as `check_sys_data` computes.
    pub fn max(self, other: SysData) -> SysData {
        SysData {
            cycle_buffer: self.cycle_buffer.max(other.cycle_buffer),
            cache_line_size: self.cache_line_size.max(other.cache_line_size),
        }
    }
}

/// The bandwidth report a `*_bw` client sends after the run (`struct bw_report_data`).
///
/// The server of a unidirectional RDMA test does not measure, so what it sends is
/// uninitialised stack memory (e.g. `0x00007ffc26a034c4` as size); it prints the client's.
/// Comparisons are bit-for-bit on the floats so such garbage round-trips exactly.
#[derive(Debug, Clone, Copy, Default)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations run.
    pub iters: u64,
    /// Peak bandwidth, MB/s (or Gb/s with `--report_gbits`).
    pub bw_peak: f64,
    /// Average bandwidth, same unit.
    pub bw_avg: f64,
    /// Average message rate, Mpps.
    pub msg_rate_avg: f64,
}

impl PartialEq for BwReport {
    fn eq(&self, o: &BwReport) -> bool {
        self.size == o.size
            && self.iters == o.iters
            && self.bw_peak.to_bits() == o.bw_peak.to_bits()
            && self.bw_avg.to_bits() == o.bw_avg.to_bits()
            && self.msg_rate_avg.to_bits() == o.msg_rate_avg.to_bits()
    }
}

/// Which perftest program the peer runs; decides the sequence of steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Test {
    /// `ib_send_bw`.
    SendBw,
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_atomic_bw`.
    AtomicBw,
    /// `ib_send_lat`.
    SendLat,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_atomic_lat`.
    AtomicLat,
}

/// How many key exchanges a test makes and where.
///
/// The sequence is: versions, sys data, MTU, then `setup_keys` key exchanges; then, for each
/// message size (one size, or every power of two 2..=2^23 with `-a`), `keys_before_size`
/// exchanges, the traffic, `keys_after_size` exchanges, then — if `size_report` (`-b`) — the
/// report exchange and `keys_after_report` exchanges; then, if `bw_report`, one key exchange
/// and the report exchange; then, if `close`, [`PerftestSession::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeySchedule {
    /// Key exchanges after the MTU step and before the first size.
    pub setup_keys: usize,
    /// Key exchanges before each size's traffic.
    pub keys_before_size: usize,
    /// Key exchanges after each size's traffic.
    pub keys_after_size: usize,
    /// Bidirectional runs (`-b`): each size ends with a report exchange, after
    /// `keys_after_size`; both sides then print the sum of both reports.
    pub size_report: bool,
    /// Key exchanges after each size's report exchange (`size_report` only).
    pub keys_after_report: usize,
    /// After all traffic: one key exchange, then [`PerftestSession::exchange_bw_report`].
    pub bw_report: bool,
    /// The test ends with [`PerftestSession::finish`] (key exchange + `done`); if false the
    /// peer just closes the socket (`ib_write_lat`).
    pub close: bool,
}

impl KeySchedule {
    /// Total key exchanges before the first byte of RDMA traffic.
    pub fn keys_before_traffic(&self) -> usize {
        self.setup_keys + self.keys_before_size
    }
}

impl Test {
    /// The exchange schedule of perftest 4.5-0.17 for `num_qps` QPs (`-q`), with `run_all`
    /// for `-a`.
    ///
    /// Verified in captures of rxe-to-rxe runs (`tests/data/perftest_oob.pcap` and
    /// `testdata/conformance/rc_*.pcap`, see the crate's tests): RDMA `*_bw` (any
    /// `-q`, with and without `-a`): `2q+1` keys, traffic, key + report, close;
    /// `ib_send_bw`: `2q+1` keys, then one before each size and (with `-a`) one after each
    /// size, close, no report; `ib_send_lat`: 3 keys, one before each size, close;
    /// `ib_write_lat`: 4 keys, traffic, no close at all; `ib_read_lat` and `ib_atomic_lat`:
    /// 4 keys, close. The latency tests use one QP.
    pub fn schedule(self, num_qps: usize, run_all: bool) -> KeySchedule {
        let per_qp = 2 * num_qps.max(1) + 1;
        match self {
            Test::WriteBw | Test::ReadBw | Test::AtomicBw => KeySchedule {
                setup_keys: per_qp,
                keys_before_size: 0,
                keys_after_size: 0,
                size_report: false,
                keys_after_report: 0,
                bw_report: true,
                close: true,
            },
            Test::SendBw => KeySchedule {
                setup_keys: per_qp,
                keys_before_size: 1,
                keys_after_size: usize::from(run_all),
                size_report: false,
                keys_after_report: 0,
                bw_report: false,
                close: true,
            },
            Test::SendLat => KeySchedule {
                setup_keys: 3,
                keys_before_size: 1,
                keys_after_size: 0,
                size_report: false,
                keys_after_report: 0,
                bw_report: false,
                close: true,
            },
            Test::WriteLat => KeySchedule {
                setup_keys: 4,
                keys_before_size: 0,
                keys_after_size: 0,
                size_report: false,
                keys_after_report: 0,
                bw_report: false,
                close: false,
            },
            Test::ReadLat | Test::AtomicLat => KeySchedule {
                setup_keys: 4,
                keys_before_size: 0,
                keys_after_size: 0,
                size_report: false,
                keys_after_report: 0,
                bw_report: false,
                close: true,
            },
        }
    }

    /// The exchange schedule of a bidirectional run (`-b`, bandwidth tests only; `None` for a
    /// latency test, which perftest refuses `-b` for), `timed` for `-D`.
    ///
    /// From perftest 4.5's `*_bw.c`: the setup is the unidirectional one; each size then
    /// starts with a key exchange (after `ib_write_bw`'s, `ib_read_bw`'s and
    /// `ib_atomic_bw`'s warm-up) and ends with a report exchange whose sum each side prints —
    /// RDMA tests add a key exchange before the report with `-a`, `ib_send_bw` one after it
    /// (as it does unidirectionally), and `ib_send_bw -D` exchanges no report (each side's
    /// count already holds both directions). No report follows the traffic.
    pub fn schedule_bidirectional(
        self,
        num_qps: usize,
        run_all: bool,
        timed: bool,
    ) -> Option<KeySchedule> {
        let uni = self.schedule(num_qps, run_all);
        match self {
            Test::WriteBw | Test::ReadBw | Test::AtomicBw => Some(KeySchedule {
                keys_before_size: 1,
                keys_after_size: usize::from(run_all),
                size_report: true,
                keys_after_report: 0,
                bw_report: false,
                ..uni
            }),
            Test::SendBw => Some(KeySchedule {
                keys_before_size: 1,
                keys_after_size: 0,
                size_report: !timed,
                keys_after_report: usize::from(run_all),
                bw_report: false,
                ..uni
            }),
            Test::SendLat | Test::WriteLat | Test::ReadLat | Test::AtomicLat => None,
        }
    }
}

/// Default per-step timeout of [`PerftestSession::connect`] and
/// [`PerftestSession::accept`]. Set `None` with [`PerftestSession::set_timeout`] before a
/// step that waits for the peer's traffic to end (e.g. `-D 60` runs).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What carries a session: how keys are encoded and how the session closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// perftest's TCP socket: text keys, `done` at the close.
    Socket,
    /// An RC QP connected through rdma_cm (`-R`): binary keys carrying the sender's GID
    /// index, no `done`.
    RdmaCm {
        /// GID index written into our keys.
        gid_index: u32,
    },
}

/// One perftest out-of-band connection, driven step by step by the benchmark.
///
/// Generic over the stream so the exact byte sequence can be tested without sockets;
/// [`connect`](PerftestSession::connect) and [`accept`](PerftestSession::accept) give a
/// `TcpStream` session.
#[derive(Debug)]
pub struct PerftestSession<S = TcpStream> {
    stream: S,
    role: Role,
    channel: Channel,
    remote_version: Option<PerftestVersion>,
    remote_sys: Option<SysData>,
    keys_exchanged: usize,
}

impl PerftestSession<TcpStream> {
    /// Connects to a perftest server (`ib_*` run without a host name) as the client, with
    /// [`DEFAULT_TIMEOUT`] for the connect and each step.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Self> {
        let s = net::connect(addr, Some(DEFAULT_TIMEOUT))?;
        net::set_timeout(&s, Some(DEFAULT_TIMEOUT))?;
        Ok(PerftestSession::from_stream(s, Role::Client))
    }

    /// Accepts one perftest client (waiting without limit) as the server; each step then has
    /// [`DEFAULT_TIMEOUT`].
    pub fn accept(listener: &TcpListener) -> Result<Self> {
        let (s, _peer) = net::accept(listener)?;
        net::set_timeout(&s, Some(DEFAULT_TIMEOUT))?;
        Ok(PerftestSession::from_stream(s, Role::Server))
    }

    /// Sets the timeout of each following step (`None`: wait forever, as perftest does).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<()> {
        net::set_timeout(&self.stream, timeout)
    }

    /// The peer's TCP address (IPv4-mapped addresses shown as IPv4).
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        let mut a = self
            .stream
            .peer_addr()
            .map_err(|e| Error::io("peer_addr", e))?;
        a.set_ip(a.ip().to_canonical());
        Ok(a)
    }
}

impl<S: Read + Write> PerftestSession<S> {
    /// Wraps a connected stream; `role` says whether we write first (client) or read first.
    pub fn from_stream(stream: S, role: Role) -> Self {
        PerftestSession {
            stream,
            role,
            channel: Channel::Socket,
            remote_version: None,
            remote_sys: None,
            keys_exchanged: 0,
        }
    }

    /// Wraps a stream over an rdma_cm-connected QP (perftest's `-R`): binary keys with
    /// `gid_index`, no `done` at the close.
    pub fn over_rdma_cm(stream: S, role: Role, gid_index: u32) -> Self {
        PerftestSession {
            channel: Channel::RdmaCm { gid_index },
            ..PerftestSession::from_stream(stream, role)
        }
    }

    /// What carries the session.
    pub fn channel(&self) -> Channel {
        self.channel
    }

    /// The stream (e.g. to set its timeouts).
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The peer's version, once [`exchange_versions`](Self::exchange_versions) ran.
    pub fn remote_version(&self) -> Option<PerftestVersion> {
        self.remote_version
    }

    /// The peer's sys data, once [`exchange_sys_data`](Self::exchange_sys_data) exchanged it.
    pub fn remote_sys_data(&self) -> Option<SysData> {
        self.remote_sys
    }

    /// How many key exchanges have completed (to check a driver against [`Test::schedule`]).
    pub fn keys_exchanged(&self) -> usize {
        self.keys_exchanged
    }

    /// The stream back (e.g. to close it without [`finish`](Self::finish), as
    /// `ib_write_lat` does).
    pub fn into_inner(self) -> S {
        self.stream
    }

    /// The peer's version for the feature checks; before the exchange, assume a peer like us.
    fn peer_at_least(&self, milli: u32) -> bool {
        self.remote_version
            .unwrap_or(PerftestVersion::CURRENT)
            .at_least(milli)
    }

    /// One symmetric step: the client writes then reads, the server reads then writes.
    fn xchg(&mut self, mine: &[u8], theirs: &mut [u8], step: &'static str) -> Result<()> {
        match self.role {
            Role::Client => {
                net::write_msg(&mut self.stream, mine, step)?;
                net::read_msg(&mut self.stream, theirs, step)
            }
            Role::Server => {
                net::read_msg(&mut self.stream, theirs, step)?;
                net::write_msg(&mut self.stream, mine, step)
            }
        }
    }

    /// Step 1: exchange 16-byte versions (`"6.06"`). Returns the peer's; later steps adapt
    /// to it as perftest does.
    pub fn exchange_versions(&mut self) -> Result<PerftestVersion> {
        let mut theirs = [0u8; VERSION_LEN];
        self.xchg(
            PerftestVersion::CURRENT.as_bytes(),
            &mut theirs,
            "perftest: version",
        )?;
        let v = PerftestVersion::from_bytes(theirs);
        tracing::debug!(remote = %v, "perftest versions exchanged");
        self.remote_version = Some(v);
        Ok(v)
    }

    /// Step 2 (`check_sys_data`): two 4-byte big-endian exchanges, page size then cache-line
    /// size, skipped for peers older than 5.32. Returns the negotiated values (the maximum
    /// of both sides; `local` if skipped). `SysData::default()` is what perftest sends on
    /// x86-64 Linux.
    pub fn exchange_sys_data(&mut self, local: SysData) -> Result<SysData> {
        if !self.peer_at_least(5320) {
            return Ok(local);
        }
        let mut a = [0u8; 4];
        self.xchg(
            &local.cycle_buffer.to_be_bytes(),
            &mut a,
            "perftest: sys data (cycle buffer)",
        )?;
        let mut b = [0u8; 4];
        self.xchg(
            &local.cache_line_size.to_be_bytes(),
            &mut b,
            "perftest: sys data (cache line)",
        )?;
        let remote = SysData {
            cycle_buffer: u32::from_be_bytes(a),
            cache_line_size: u32::from_be_bytes(b),
        };
        self.remote_sys = Some(remote);
        Ok(local.max(remote))
    }

    /// Step 3 (`check_mtu`): exchange the active MTU as `enum ibv_mtu` (1 = 256 ... 5 = 4096)
    /// in decimal + NUL; returns the smaller of the two, which both sides then use. The
    /// message is 2 bytes for peers ≥ 5.31, 4 for older ones, and skipped before 5.1.
    pub fn exchange_mtu(&mut self, local_mtu: u8) -> Result<u8> {
        if !(1..=5).contains(&local_mtu) {
            return Err(FormatError {
                field: "mtu",
                value: u64::from(local_mtu),
                max: 5,
            }
            .into());
        }
        if !self.peer_at_least(5100) {
            return Ok(local_mtu);
        }
        let len = if self.peer_at_least(5310) {
            MTU_MSG_LEN
        } else {
            4
        };
        let mine = [b'0' + local_mtu, 0, 0, 0];
        let mut theirs = [0u8; 4];
        self.xchg(&mine[..len], &mut theirs[..len], "perftest: mtu")?;
        let remote = parse_mtu(&theirs[..len]).map_err(|source| Error::Malformed {
            step: "perftest: mtu",
            source,
        })?;
        Ok(local_mtu.min(remote))
    }

    /// A key exchange (`ctx_hand_shake`): send ours, return the peer's. perftest uses the
    /// same call as a barrier, so it happens several times per test; see [`Test::schedule`].
    pub fn exchange_keys(&mut self, local: &PerftestDest) -> Result<PerftestDest> {
        let step = "perftest: keys";
        let malformed = |source| Error::Malformed { step, source };
        let remote = match self.channel {
            Channel::Socket => {
                let mine = local.format()?;
                let mut theirs = [0u8; KEY_MSG_LEN];
                self.xchg(&mine, &mut theirs, step)?;
                PerftestDest::parse(&theirs).map_err(malformed)?
            }
            Channel::RdmaCm { gid_index } => {
                let mine = local.to_rdma_cm_bytes(gid_index);
                let mut theirs = [0u8; RDMA_CM_KEY_LEN];
                self.xchg(&mine, &mut theirs, step)?;
                PerftestDest::from_rdma_cm_bytes(&theirs).map_err(malformed)?
            }
        };
        self.keys_exchanged += 1;
        Ok(remote)
    }

    /// `xchg_bw_reports`: five separate exchanges (size, iters, bw_peak, bw_avg,
    /// msgRate_avg), all big-endian; iters is 4 bytes for peers older than 5.33 (and then
    /// truncated to 32 bits). Returns the peer's report.
    pub fn exchange_bw_report(&mut self, local: &BwReport) -> Result<BwReport> {
        let step = "perftest: bw report";
        let mut b = [0u8; 8];
        self.xchg(&local.size.to_be_bytes(), &mut b, step)?;
        let size = u64::from_be_bytes(b);
        let iters = if self.peer_at_least(5330) {
            self.xchg(&local.iters.to_be_bytes(), &mut b, step)?;
            u64::from_be_bytes(b)
        } else {
            let mut b4 = [0u8; 4];
            self.xchg(&(local.iters as u32).to_be_bytes(), &mut b4, step)?;
            u64::from(u32::from_be_bytes(b4))
        };
        let f = |v: f64, s: &mut Self| -> Result<f64> {
            let mut b = [0u8; 8];
            s.xchg(&v.to_bits().to_be_bytes(), &mut b, step)?;
            Ok(f64::from_bits(u64::from_be_bytes(b)))
        };
        let bw_peak = f(local.bw_peak, self)?;
        let bw_avg = f(local.bw_avg, self)?;
        let msg_rate_avg = f(local.msg_rate_avg, self)?;
        Ok(BwReport {
            size,
            iters,
            bw_peak,
            bw_avg,
            msg_rate_avg,
        })
    }

    /// `ctx_close_connection`: a last key exchange, then `done\0` — which perftest writes
    /// and never reads, closing right away. We write ours, then read the peer's so a
    /// softrdma peer's `done` is consumed, but accept the peer closing without sending it
    /// (perftest could not tell either); anything other than `done\0` is an error.
    pub fn finish(mut self, local: &PerftestDest) -> Result<()> {
        self.exchange_keys(local)?;
        if self.channel != Channel::Socket {
            // perftest's `ctx_close_connection` writes `done` only on a socket.
            return Ok(());
        }
        net::write_msg(&mut self.stream, DONE, "perftest: done")?;
        let mut buf = [0u8; 5];
        match net::read_msg(&mut self.stream, &mut buf, "perftest: done") {
            Ok(()) if &buf == DONE => Ok(()),
            Ok(()) => Err(Error::BadDone { got: buf }),
            Err(Error::PeerClosed { got: 0, .. }) => {
                tracing::debug!("perftest peer closed without done");
                Ok(())
            }
            Err(e @ Error::PeerClosed { .. }) => Err(e),
            Err(e) if e.is_peer_gone() => {
                tracing::debug!(error = %e, "perftest peer gone after the last key exchange");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Parses the MTU message: decimal digits up to the first NUL (or the end), value 1..=5.
pub fn parse_mtu(msg: &[u8]) -> Result<u8, ParseError> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let digits = &msg[..end];
    if digits.is_empty() || digits.len() > 3 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ParseError::BadMtu);
    }
    let v = digits
        .iter()
        .fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0'));
    match v {
        1..=5 => Ok(v as u8),
        _ => Err(ParseError::BadMtu),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::Gid;
    use std::net::Ipv4Addr;

    const READ_CLIENT: &[u8; KEY_MSG_LEN] = b"0000:0080:000011:928761:00000202:000055fa6b64b000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:58:00:0c:00000000:\0";

    #[test]
    fn key_message_roundtrip() {
        let d = PerftestDest::parse(READ_CLIENT).unwrap();
        assert_eq!(
            d,
            PerftestDest {
                lid: 0,
                out_reads: 0x80,
                qpn: 0x11,
                psn: 0x928761,
                rkey: 0x202,
                vaddr: 0x55fa_6b64_b000,
                gid: Gid::from_ipv4_mapped(Ipv4Addr::new(10, 88, 0, 12)),
                srqn: 0,
            }
        );
        assert_eq!(&d.format().unwrap(), READ_CLIENT);
        let max = PerftestDest {
            lid: u16::MAX,
            out_reads: u16::MAX,
            qpn: 0xff_ffff,
            psn: 0xff_ffff,
            rkey: u32::MAX,
            vaddr: u64::MAX,
            gid: Gid([0xff; 16]),
            srqn: u32::MAX,
        };
        assert_eq!(PerftestDest::parse(&max.format().unwrap()).unwrap(), max);
    }

    #[test]
    fn key_message_garbage_is_typed() {
        assert!(matches!(
            PerftestDest::parse(&READ_CLIENT[..107]),
            Err(ParseError::Length { .. })
        ));
        let mut m = *READ_CLIENT;
        m[106] = b'0'; // trailing ':' replaced: last field runs into the NUL
        assert!(matches!(
            PerftestDest::parse(&m),
            Err(ParseError::FieldCount { .. })
        ));
        let mut m = *READ_CLIENT;
        m[60] = b'x';
        assert_eq!(
            PerftestDest::parse(&m),
            Err(ParseError::BadHex { field: "gid" })
        );
        for i in 0..KEY_MSG_LEN {
            for b in [0u8, b':', b'g', 0xc3, b'A'] {
                let mut m = *READ_CLIENT;
                m[i] = b;
                let _ = PerftestDest::parse(&m);
            }
        }
    }

    #[test]
    fn wide_psn_refused() {
        let d = PerftestDest {
            psn: 0x100_0000,
            ..Default::default()
        };
        assert_eq!(d.format().unwrap_err().field, "psn");
    }

    #[test]
    fn versions() {
        let v = PerftestVersion::CURRENT;
        assert_eq!(v.as_bytes(), b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(v.milli(), 6060);
        assert!(v.at_least(5320));
        let mut raw = [0u8; 16];
        raw[..3].copy_from_slice(b"5.1");
        let old = PerftestVersion::from_bytes(raw);
        assert_eq!(old.milli(), 5100);
        assert!(old.at_least(5100) && !old.at_least(5310));
        assert_eq!(PerftestVersion::from_bytes([0xff; 16]).milli(), 0);
        assert_eq!(PerftestVersion::from_bytes([b'9'; 16]).milli(), u32::MAX);
    }

    #[test]
    fn mtu_parse() {
        assert_eq!(parse_mtu(b"3\0"), Ok(3));
        assert_eq!(parse_mtu(b"5\0\0\0"), Ok(5));
        assert_eq!(parse_mtu(b"0\0"), Err(ParseError::BadMtu));
        assert_eq!(parse_mtu(b"\0\0"), Err(ParseError::BadMtu));
        assert_eq!(parse_mtu(b"x\0"), Err(ParseError::BadMtu));
        assert_eq!(parse_mtu(b"99"), Err(ParseError::BadMtu));
    }

    #[test]
    fn schedules_match_captures() {
        let s = Test::WriteBw.schedule(1, false);
        assert_eq!(s.keys_before_traffic(), 3);
        assert_eq!(Test::WriteBw.schedule(2, false).keys_before_traffic(), 5);
        assert_eq!(Test::SendBw.schedule(1, false).keys_before_traffic(), 4);
        for t in [
            Test::SendLat,
            Test::WriteLat,
            Test::ReadLat,
            Test::AtomicLat,
        ] {
            assert_eq!(t.schedule(1, false).keys_before_traffic(), 4);
        }
        assert!(!Test::WriteLat.schedule(1, false).close);
    }

    #[test]
    fn bidirectional_schedules() {
        let w = Test::WriteBw
            .schedule_bidirectional(2, false, false)
            .unwrap();
        assert_eq!(w.setup_keys, 5);
        assert_eq!((w.keys_before_size, w.keys_after_size), (1, 0));
        assert!(w.size_report && !w.bw_report && w.close);
        let wa = Test::ReadBw.schedule_bidirectional(1, true, false).unwrap();
        assert_eq!((wa.keys_after_size, wa.keys_after_report), (1, 0));
        let sa = Test::SendBw.schedule_bidirectional(1, true, false).unwrap();
        assert_eq!((sa.keys_before_size, sa.keys_after_size), (1, 0));
        assert_eq!(sa.keys_after_report, 1);
        assert!(
            !Test::SendBw
                .schedule_bidirectional(1, false, true)
                .unwrap()
                .size_report
        );
        assert!(
            Test::WriteBw
                .schedule_bidirectional(1, false, true)
                .unwrap()
                .size_report
        );
        assert_eq!(Test::SendLat.schedule_bidirectional(1, false, false), None);
    }
}
