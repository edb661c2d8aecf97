//! `softrdma pingpong`: a drop-in peer for rdma-core's `ibv_rc_pingpong`, and with
//! `--transport UC` / `--transport UD` for `ibv_uc_pingpong` / `ibv_ud_pingpong` (rdma-core 44).
//!
//! Same out-of-band exchange (TCP 18515, `LID:QPN:PSN:GID`, via [`softrdma_oob::pingpong`]),
//! same flags where they make sense, same protocol on the wire and the same output lines, so
//! either side can be the real program on a Linux Soft-RoCE (rxe) host:
//!
//! - both sides post `rx_depth` receives of `size` bytes into their one buffer, and re-post
//!   when only one is left (`routs`);
//! - the client posts the first SEND right after connecting; then each side posts its next
//!   SEND only when both its previous SEND and a RECV have completed (the `pending` bits of
//!   `PINGPONG_SEND_WRID` = 2 and `PINGPONG_RECV_WRID` = 1), every SEND signaled, until it has
//!   sent `iters` messages and received `iters`;
//! - the server connects its QP (RTR, RTS) before it answers the client's address message, so
//!   the client may start sending the moment the answer arrives;
//! - QP attributes as rc_pingpong sets them: access flags 0, `max_dest_rd_atomic` 1,
//!   `min_rnr_timer` 12, timeout 14, `retry_cnt` 7, `rnr_retry` 7, `max_rd_atomic` 1, the
//!   path MTU from `-m`.
//!
//! UC (`ibv_uc_pingpong`) is the RC program on a UC QP: the same flags, defaults, output and
//! traffic; RTR sets only the path, MTU, remote QPN and PSN, RTS only the send PSN.
//!
//! UD (`ibv_ud_pingpong`) differs where the program does:
//! - `-s` (default 1024) is the payload; the buffer is `size + 40` bytes, receives take all of
//!   it (the first 40 bytes get the GRH area) and sends go from offset 40, so the payload of a
//!   received message lands where the next send reads it;
//! - a `-s` above the port's active MTU fails with `Requested size larger than port MTU (N)`;
//!   there is no `-m`;
//! - the Q_Key is the program's constant [`pingpong::UD_QKEY`], both on the QP and in every
//!   send; the peer is reached through an address handle made from its GID (when its GID has
//!   an interface ID, as rdma-core decides; otherwise from its TCP address, see below);
//! - the local address line reads `PSN 0x...: GID` (a colon where the others print a comma),
//!   as ud_pingpong prints it.
//!
//! Deliberate differences, all documented in `--help`:
//! - `-g` defaults to 1 (the IPv4-mapped GID, as on rxe) instead of none: RoCE needs a GID.
//!   `-g -1` sends the all-zero GID like rc_pingpong without `-g`; a softrdma peer then falls
//!   back to the address of the TCP connection.
//! - `--bind IP` picks the device's address. Without it, a client uses the address that routes
//!   to the server (see [`crate::route::device_ip`]) and a server the address the client's TCP
//!   connection arrived at (so a server without `--bind` prints its local address only after a
//!   client connected).
//! - `-c` fills and checks exactly like rc_pingpong (0x7b everywhere, 0 at the start of each
//!   4 KiB page of the client's buffer; the server reports `invalid data in page N`), but
//!   checks every byte of each page, on both sides, and exits 1 on a mismatch.
//! - `--timeout SECS` bounds every wait — for a client to connect, for each out-of-band step,
//!   for each completion (default: wait forever, like rc_pingpong). Waiting never spins a
//!   core: without `-e` the loop polls for a millisecond, as rc_pingpong polls, and then
//!   sleeps on the completion queue until a completion arrives.
//! - Out-of-range values (`-n 0`, `--timeout inf`, `-s` beyond the device's `max_msg_sz`)
//!   are usage errors, exit status 2, before anything starts.
//! - `-d` is accepted and ignored (a softrdma device is chosen by address), `-l` is accepted.

mod args;
mod shared;
pub(crate) mod srq;

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softrdma::{
    wr, AccessFlags, AddressHandle, AhAttr, CompletionQueue, Device, DeviceConfig, Gid,
    MemoryRegion, Mtu, QpCaps, QpEndpoint, QpInitAttr, QueuePair, WcStatus, WorkCompletion,
    GRH_LEN,
};
use softrdma_oob::pingpong::{self, PingpongDest};

pub(crate) use args::Args;
pub(crate) use shared::{
    address_line, connect_options, fail, pages_unlike, remote_endpoint, remote_line, report,
    set_stream_timeout, wait_completions, Fail, PAGE,
};

use crate::route;
use crate::transport::Transport;

/// `wr_id` of receives (rc_pingpong's `PINGPONG_RECV_WRID`).
const RECV_WRID: u64 = 1;
/// `wr_id` of sends (`PINGPONG_SEND_WRID`).
const SEND_WRID: u64 = 2;
/// The fill byte of rc_pingpong's buffer (`memset(ctx->buf, 0x7b, size)`).
const FILL: u8 = 0x7b;

/// Runs `softrdma pingpong`.
pub(crate) fn run(args: &Args) -> ExitCode {
    if args.transport == Transport::UD && args.mtu.is_some() {
        // ibv_ud_pingpong has no -m (getopt refuses it): a UD message is one packet.
        eprintln!(
            "softrdma pingpong: error: -m does not apply to UD (ibv_ud_pingpong has no -m): \
             a UD message is one packet of at most the port's active MTU"
        );
        return ExitCode::from(2);
    }
    match run_inner(args) {
        Ok(code) => code,
        Err(Fail(msg)) => {
            let _ = std::io::stdout().flush();
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

/// The rc_pingpong `-c` pattern byte at offset `i` of the client's buffer.
fn pattern_byte(i: usize) -> u8 {
    if i % PAGE == 0 {
        0
    } else {
        FILL
    }
}

/// Pages of `buf` that differ from rc_pingpong's pattern, in order.
fn invalid_pages(buf: &[u8]) -> Vec<usize> {
    pages_unlike(buf, pattern_byte)
}

/// The local address line of `transport`'s program.
fn local_line(d: &PingpongDest, transport: Transport) -> String {
    let sep = if transport == Transport::UD { ':' } else { ',' };
    address_line("local address: ", d, sep)
}

/// The device side of one run: everything rc_pingpong's `pp_init_ctx` creates.
struct Ctx {
    // Dropped in `pp_close_ctx`'s order, the QP before the region its receives point into
    // (see `srq_pingpong::Ctx`).
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
    device: Device,
    transport: Transport,
    /// The message size (`-s`; UD: the payload).
    size: u32,
    /// Where the payload starts in the buffer: 0, or the GRH area's 40 bytes with UD.
    grh: u32,
    rx_depth: u32,
    gid_idx: i32,
    /// UD: the peer's address handle and QPN, once connected.
    ud_peer: Option<(AddressHandle, u32)>,
}

impl Ctx {
    fn open(args: &Args, ip: IpAddr, size: u32) -> Result<Ctx, Fail> {
        let transport = args.transport;
        let mut config = DeviceConfig::new(ip).gso(!args.no_gso);
        if let Some(p) = &args.pcap {
            config = config.pcap(p);
        }
        let device = Device::open(config)
            .map_err(|e| Fail(format!("Couldn't get context for {ip}: {e}")))?;
        let grh = if transport == Transport::UD {
            let mtu = device
                .query_port(1)
                .map_err(|_| Fail("Unable to query port info for port 1".into()))?
                .active_mtu
                .bytes();
            if size > mtu {
                return fail(format!("Requested size larger than port MTU ({mtu})"));
            }
            GRH_LEN as u32
        } else {
            0
        };
        let pd = device.alloc_pd();
        let len = (size + grh).max(1) as usize;
        let mr = pd
            .reg_mr(len, AccessFlags::LOCAL_WRITE)
            .map_err(|e| Fail(format!("Couldn't register MR: {e}")))?;
        mr.fill(0, len, FILL)
            .map_err(|e| Fail(format!("Couldn't fill buffer: {e}")))?;
        let cq = device
            .create_cq(args.rx_depth + 1)
            .map_err(|e| Fail(format!("Couldn't create CQ: {e}")))?;
        let init = QpInitAttr {
            cap: QpCaps {
                max_send_wr: 1,
                max_recv_wr: args.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                ..QpCaps::default()
            },
            sq_sig_all: false,
            srq: None,
            ..QpInitAttr::new(transport.qp_type(), &cq)
        };
        let qp = pd
            .create_qp(&init)
            .map_err(|e| Fail(format!("Couldn't create QP: {e}")))?;
        // ud_pingpong moves its QP to INIT with the Q_Key here and on to RTS when it connects;
        // a softrdma UD QP goes to RTS at once (nothing reaches it before the peer knows its
        // QPN, and receives may be posted in any state from INIT on).
        match transport {
            Transport::UD => qp.ready_ud(pingpong::UD_QKEY),
            _ => qp.to_init(AccessFlags::empty()),
        }
        .map_err(|e| Fail(format!("Failed to modify QP to INIT: {e}")))?;
        Ok(Ctx {
            device,
            mr,
            cq,
            qp,
            transport,
            size,
            grh,
            rx_depth: args.rx_depth,
            gid_idx: args.gid_idx,
            ud_peer: None,
        })
    }

    /// Opens the device, posts the receives and prints the local address line, as every
    /// pingpong program does before it talks to its peer.
    fn prepare(args: &Args, ip: IpAddr, size: u32) -> Result<(Ctx, PingpongDest), Fail> {
        let ctx = Ctx::open(args, ip, size)?;
        let routs = ctx.post_recv(ctx.rx_depth);
        if routs < ctx.rx_depth {
            return fail(format!("Couldn't post receive ({routs})"));
        }
        let local = ctx.local_dest()?;
        println!("{}", local_line(&local, ctx.transport));
        Ok((ctx, local))
    }

    /// `pp_post_recv`: posts up to `n` receives (UD: room for the GRH area too), returns how
    /// many were posted.
    fn post_recv(&self, n: u32) -> u32 {
        let mut posted = 0;
        for _ in 0..n {
            let r = wr::recv(RECV_WRID, vec![self.mr.sge(0, self.grh + self.size)]);
            if self.qp.post_recv([r]).is_err() {
                break;
            }
            posted += 1;
        }
        posted
    }

    /// `pp_post_send`: one signaled SEND of the payload (UD: to the peer's QPN through its
    /// address handle, with the program's Q_Key).
    fn post_send(&self) -> Result<(), Fail> {
        let sge = self.mr.sge(self.grh as usize, self.size);
        let s = match &self.ud_peer {
            Some((ah, qpn)) => wr::ud_send(SEND_WRID, vec![sge], ah, *qpn, pingpong::UD_QKEY),
            None => {
                let mut s = wr::send(SEND_WRID, vec![sge]);
                s.flags = s.flags | softrdma::SendFlags::SIGNALED;
                s
            }
        };
        self.qp
            .post_send([s])
            .map_err(|e| Fail(format!("Couldn't post send: {e}")))
    }

    /// `pp_connect_ctx`: INIT → RTR → RTS towards `remote` (UD: the address handle).
    fn connect(&mut self, remote: &QpEndpoint, mtu: Mtu) -> Result<(), Fail> {
        if self.transport == Transport::UD {
            // The source GID: the advertised one, or the device's own without -g.
            let sgid = u32::try_from(self.gid_idx).unwrap_or(self.device.gid_index());
            let attr = AhAttr::new(remote.gid, sgid as u8);
            let ah = self
                .mr
                .pd()
                .create_ah(&attr)
                .map_err(|e| Fail(format!("Failed to create AH: {e}")))?;
            self.ud_peer = Some((ah, remote.qpn));
            return Ok(());
        }
        let opts = connect_options(mtu);
        self.qp
            .to_rtr(remote, &opts)
            .map_err(|e| Fail(format!("Failed to modify QP to RTR: {e}")))?;
        self.qp
            .to_rts(&opts)
            .map_err(|e| Fail(format!("Failed to modify QP to RTS: {e}")))
    }

    fn local_dest(&self) -> Result<PingpongDest, Fail> {
        let gid_idx = self.gid_idx;
        let gid = if gid_idx >= 0 {
            self.device
                .query_gid(1, gid_idx as u32)
                .map_err(|_| Fail(format!("can't read sgid of index {gid_idx}")))?
        } else {
            Gid::ZERO
        };
        Ok(PingpongDest {
            lid: 0,
            qpn: self.qp.qp_num(),
            psn: self.qp.local_psn(),
            gid,
        })
    }

    /// The payload part of the buffer (what `-c` checks).
    fn payload(&self) -> Result<Vec<u8>, Fail> {
        Ok(self.mr.read_vec(self.grh as usize, self.size as usize)?)
    }
}

fn run_inner(args: &Args) -> Result<ExitCode, Fail> {
    let mtu = args.mtu.unwrap_or(Mtu::Mtu1024);
    let size = args.size.unwrap_or(match args.transport {
        Transport::UD => 1024,
        Transport::RC | Transport::UC => 4096,
    });
    if args.ib_port != 1 {
        return fail("Couldn't get port info");
    }
    let timeout = crate::limits::limit(args.timeout);
    let _ = (&args.ib_dev, args.sl);

    let mut ctx;
    let remote;
    if let Some(host) = &args.server {
        let server = route::resolve(host, args.port)
            .map_err(|e| Fail(format!("{e} for {host}:{}", args.port)))?;
        let ip = route::device_ip(args.bind, server.ip())
            .map_err(|e| Fail(format!("no local address towards {server}: {e}")))?;
        let (c, local) = Ctx::prepare(args, ip, size)?;
        ctx = c;
        let mut stream = softrdma_oob::connect(server, timeout)
            .map_err(|_| Fail(format!("Couldn't connect to {host}:{}", args.port)))?;
        set_stream_timeout(&stream, timeout)?;
        let dest = pingpong::client_exchange(&mut stream, &local)
            .map_err(|e| Fail(format!("Couldn't read/write remote address: {e}")))?;
        drop(stream);
        println!("{}", remote_line(&dest));
        ctx.connect(&remote_endpoint(&dest, server.ip()), mtu)?;
        remote = dest;
        return pingpong_loop(args, &ctx, &remote, true, timeout);
    }

    // Server.
    let listen_addr: Option<SocketAddr> = args.bind.map(|ip| SocketAddr::new(ip, args.port));
    let mut early = None;
    if let Some(ip) = args.bind {
        // Like rc_pingpong: device, receives and the local address line before listening.
        early = Some(Ctx::prepare(args, ip, size)?);
        let _ = std::io::stdout().flush();
    }
    let listener = match listen_addr {
        Some(a) => TcpListener::bind(a),
        None => softrdma_oob::listen_any(args.port).map_err(|e| match e {
            softrdma_oob::Error::Io { source, .. } => source,
            other => std::io::Error::other(other.to_string()),
        }),
    }
    .map_err(|_| Fail(format!("Couldn't listen to port {}", args.port)))?;
    let (mut stream, peer) = crate::limits::accept_within(&listener, timeout).map_err(|e| {
        if e.kind() == std::io::ErrorKind::TimedOut {
            Fail(format!("accept() failed: {e} (--timeout)"))
        } else {
            Fail("accept() failed".to_string())
        }
    })?;
    drop(listener);
    stream.set_nodelay(true)?;
    set_stream_timeout(&stream, timeout)?;
    let (c, local) = match early {
        Some(e) => e,
        None => {
            let ip = stream.local_addr()?.ip().to_canonical();
            Ctx::prepare(args, ip, size)?
        }
    };
    ctx = c;
    let dest = pingpong::server_read_remote(&mut stream)
        .map_err(|e| Fail(format!("Couldn't read remote address: {e}")))?;
    ctx.connect(&remote_endpoint(&dest, peer.ip().to_canonical()), mtu)
        .map_err(|Fail(m)| Fail(format!("{m}\nCouldn't connect to remote QP")))?;
    pingpong::server_reply(&mut stream, &local)
        .and_then(|()| pingpong::server_wait_done(&mut stream))
        .map_err(|e| Fail(format!("Couldn't send/recv local address: {e}")))?;
    drop(stream);
    println!("{}", remote_line(&dest));
    remote = dest;
    pingpong_loop(args, &ctx, &remote, false, timeout)
}

/// The traffic phase (rc_pingpong's main loop and `parse_single_wc`), then the report.
fn pingpong_loop(
    args: &Args,
    ctx: &Ctx,
    _remote: &PingpongDest,
    client: bool,
    timeout: Option<Duration>,
) -> Result<ExitCode, Fail> {
    let iters = u64::from(args.iters);
    let mut pending = RECV_WRID;
    if client {
        if args.chk {
            for i in (0..ctx.size as usize).step_by(PAGE) {
                ctx.mr.write(ctx.grh as usize + i, &[0])?;
            }
        }
        ctx.post_send()?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let mut routs = ctx.rx_depth;
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(2);
    let mut last_progress = Instant::now();
    while rcnt < iters || scnt < iters {
        wcs.clear();
        wait_completions(
            &ctx.cq,
            2,
            &mut wcs,
            args.events,
            timeout,
            last_progress,
            || format!("sent {scnt}, received {rcnt} of {iters}"),
        )?;
        last_progress = Instant::now();
        if wcs.iter().any(|wc| wc.status != WcStatus::Success) {
            return Err(failed_completion(args, ctx, &wcs));
        }
        for wc in &wcs {
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += ctx.post_recv(ctx.rx_depth - routs);
                        if routs < ctx.rx_depth {
                            return fail(format!("Couldn't post receive ({routs})"));
                        }
                    }
                    rcnt += 1;
                }
                other => {
                    return fail(format!("Completion for unknown wr_id {other}"));
                }
            }
            pending &= !wc.wr_id;
            if scnt < iters && pending == 0 {
                ctx.post_send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    report(ctx.size, iters, start.elapsed());
    let mut code = ExitCode::SUCCESS;
    if args.chk {
        let bad = invalid_pages(&ctx.payload()?);
        for page in &bad {
            println!("invalid data in page {page}");
        }
        if !bad.is_empty() {
            code = ExitCode::FAILURE;
        }
    }
    if args.counters {
        crate::devinfo::print_counters(&mut std::io::stdout().lock(), &ctx.device.stats())?;
    }
    Ok(code)
}

/// The failure for a batch of completions holding an error: rc_pingpong's `Failed status`
/// line for the *cause* — a failing request completes after the requests it flushes, so the
/// other completions waiting are drained and the first error that is not a flush is named —
/// and, with `--counters`, the device's counters, which name the cause when every request was
/// merely flushed (a packet the QP received ended the connection).
fn failed_completion(args: &Args, ctx: &Ctx, seen: &[WorkCompletion]) -> Fail {
    let f = crate::completions::failure(&ctx.cq, seen);
    let cause = f.cause.or(f.first);
    let mut msg = match cause {
        Some(wc) => format!(
            "Failed status {} ({}) for wr_id {}\nparse WC failed {}",
            wc.status.as_str(),
            WcStatus::ibv_code(wc.status),
            wc.wr_id,
            seen.len()
        ),
        None => "parse WC failed".to_owned(),
    };
    if cause.is_some_and(|wc| wc.status == WcStatus::WrFlushErr) {
        msg.push_str(
            "\nevery request was flushed: the QP entered the error state without a failed request \
             of its own, so a packet it received ended the connection (--counters shows which)",
        );
    }
    if args.counters {
        let _ = std::io::stdout().flush();
        let _ = crate::devinfo::print_counters(&mut std::io::stdout().lock(), &ctx.device.stats());
    }
    Fail(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matches_rc_pingpong() {
        // 0x7b everywhere, 0 at each page start.
        let mut buf = vec![FILL; 10_000];
        for i in (0..buf.len()).step_by(PAGE) {
            buf[i] = 0;
        }
        assert!(invalid_pages(&buf).is_empty());
        buf[PAGE * 2 + 5] = 0;
        assert_eq!(invalid_pages(&buf), vec![2]);
        // A buffer nobody wrote (rc_pingpong's server check catches this one too).
        assert_eq!(invalid_pages(&[FILL; 64]), vec![0]);
    }

    #[test]
    fn address_lines_like_rc_pingpong() {
        let d = PingpongDest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabc,
            gid: Gid::from_ip("10.88.0.11".parse().unwrap()),
        };
        assert_eq!(
            local_line(&d, Transport::RC),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x000abc, GID ::ffff:10.88.0.11"
        );
        assert_eq!(local_line(&d, Transport::UC), local_line(&d, Transport::RC));
        // ud_pingpong's local line has a colon before the GID.
        assert_eq!(
            local_line(&d, Transport::UD),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x000abc: GID ::ffff:10.88.0.11"
        );
        assert_eq!(
            remote_line(&PingpongDest::default()),
            "  remote address: LID 0x0000, QPN 0x000000, PSN 0x000000, GID ::"
        );
    }
}
