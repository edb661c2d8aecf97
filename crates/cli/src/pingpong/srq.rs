//! `softrdma pingpong --srq`: a peer of rdma-core's `ibv_srq_pingpong` — `-q` RC QPs (16 by
//! default) whose receives all come from one shared receive queue of `-r` work requests.
//!
//! The out-of-band exchange is the tool's: the client sends 256 address messages (one per
//! possible QP, zeros past `-q`), the server answers with 256 once its QPs are connected, and
//! the client closes with `done`. Each QP sends its next message once its previous SEND
//! completed and a message arrived on it; `-n` counts the exchanges of all QPs together, as
//! the tool's loop does; the SRQ is refilled when no more than `-q` receives are left.
//!
//! `-c` is the tool's check: its client writes `i / page_size % sizeof(char)` — always 0 — at
//! the start of each page of a buffer it zeroed, so every message either way is all zeros, and
//! after the report its server prints `invalid data in page N` for each page whose first byte
//! is not 0. softrdma checks every byte of each page, on both sides, and exits 1 on a mismatch,
//! as `pingpong -c` does for rc_pingpong's pattern. Since a message that never came leaves the
//! zeros in place, the check catches a corrupted message, not a missing one; the completion
//! counts catch those.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softrdma::{
    wr, AccessFlags, CompletionQueue, Device, DeviceConfig, Gid, MemoryRegion, Mtu, QpCaps,
    QpInitAttr, QueuePair, SendFlags, SharedReceiveQueue, SrqAttr, WcStatus, WorkCompletion,
};
use softrdma_oob::pingpong::{self, PingpongDest};

use crate::pingpong::{
    address_line, connect_options, fail, pages_unlike, remote_endpoint, remote_line, report,
    set_stream_timeout, wait_completions, Args, Fail, PAGE,
};
use crate::route;
use crate::transport::Transport;

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// Runs `softrdma pingpong --srq`.
pub(crate) fn run(args: &Args) -> ExitCode {
    if args.transport != Transport::RC {
        eprintln!("softrdma pingpong: error: --srq is ibv_srq_pingpong: RC only");
        return ExitCode::from(2);
    }
    match run_inner(args) {
        Ok(code) => code,
        Err(Fail(msg)) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

/// `pp_init_ctx`: the device, one buffer, one CQ, the SRQ and its receives, `num_qp` QPs on it
/// in INIT, and their address lines.
///
/// The fields drop in `pp_close_ctx`'s order, QPs first and the region last: a peer's SEND
/// still in flight when this side is done then meets no QP and is dropped. Freed first, the
/// region left the SRQ's receives pointing at nothing, and such a SEND failed at the peer
/// with a remote operational error (1 run in 20 of the SRQ pingpong test).
struct Ctx {
    qps: Vec<QueuePair>,
    srq: SharedReceiveQueue,
    cq: CompletionQueue,
    mr: MemoryRegion,
    device: Device,
    size: u32,
    rx_depth: u32,
}

impl Ctx {
    fn prepare(
        args: &Args,
        ip: IpAddr,
        size: u32,
        num_qp: u32,
    ) -> Result<(Ctx, Vec<PingpongDest>), Fail> {
        let mut config = DeviceConfig::new(ip).gso(!args.no_gso);
        if let Some(p) = &args.pcap {
            config = config.pcap(p);
        }
        let device = Device::open(config)
            .map_err(|e| Fail(format!("Couldn't get context for {ip}: {e}")))?;
        let pd = device.alloc_pd();
        let mr = pd
            .reg_mr(size.max(1) as usize, AccessFlags::LOCAL_WRITE)
            .map_err(|e| Fail(format!("Couldn't register MR: {e}")))?;
        let cq = device
            .create_cq(args.rx_depth + num_qp)
            .map_err(|e| Fail(format!("Couldn't create CQ: {e}")))?;
        let srq = pd
            .create_srq(SrqAttr {
                max_wr: args.rx_depth,
                max_sge: 1,
                srq_limit: 0,
            })
            .map_err(|e| Fail(format!("Couldn't create SRQ: {e}")))?;
        let mut qps = Vec::with_capacity(num_qp as usize);
        for i in 0..num_qp {
            let init = QpInitAttr {
                cap: QpCaps {
                    max_send_wr: 1,
                    max_send_sge: 1,
                    ..QpCaps::default()
                },
                srq: Some(srq.clone()),
                ..QpInitAttr::rc(&cq)
            };
            let qp = pd
                .create_qp(&init)
                .map_err(|e| Fail(format!("Couldn't create QP[{i}]: {e}")))?;
            qp.to_init(AccessFlags::empty())
                .map_err(|e| Fail(format!("Failed to modify QP[{i}] to INIT: {e}")))?;
            qps.push(qp);
        }
        let ctx = Ctx {
            device,
            mr,
            cq,
            srq,
            qps,
            size,
            rx_depth: args.rx_depth,
        };
        let routs = ctx.post_recv(ctx.rx_depth);
        if routs < ctx.rx_depth {
            return fail(format!("Couldn't post receive ({routs})"));
        }
        let gid = if args.gid_idx >= 0 {
            ctx.device.query_gid(1, args.gid_idx as u32).map_err(|_| {
                Fail(format!(
                    "Could not get local gid for gid index {}",
                    args.gid_idx
                ))
            })?
        } else {
            Gid::ZERO
        };
        let locals: Vec<PingpongDest> = ctx
            .qps
            .iter()
            .map(|qp| PingpongDest {
                lid: 0,
                qpn: qp.qp_num(),
                psn: qp.local_psn(),
                gid,
            })
            .collect();
        for d in &locals {
            println!("{}", address_line("local address: ", d, ','));
        }
        Ok((ctx, locals))
    }

    /// `pp_post_recv`: up to `n` receives of the whole buffer to the SRQ; how many went.
    fn post_recv(&self, n: u32) -> u32 {
        let mut posted = 0;
        for _ in 0..n {
            let r = wr::recv(RECV_WRID, vec![self.mr.sge(0, self.size)]);
            if self.srq.post_recv([r]).is_err() {
                break;
            }
            posted += 1;
        }
        posted
    }

    /// `pp_post_send` on QP `i`.
    fn post_send(&self, i: usize) -> Result<(), Fail> {
        let mut s = wr::send(SEND_WRID, vec![self.mr.sge(0, self.size)]);
        s.flags = s.flags | SendFlags::SIGNALED;
        self.qps[i]
            .post_send([s])
            .map_err(|e| Fail(format!("Couldn't post send: {e}")))
    }

    /// `pp_connect_ctx`: every QP to RTR and RTS towards its peer QP.
    fn connect(&self, remotes: &[PingpongDest], tcp_peer: IpAddr, mtu: Mtu) -> Result<(), Fail> {
        let opts = connect_options(mtu);
        for (i, (qp, d)) in self.qps.iter().zip(remotes).enumerate() {
            let remote = remote_endpoint(d, tcp_peer);
            qp.to_rtr(&remote, &opts)
                .map_err(|e| Fail(format!("Failed to modify QP[{i}] to RTR: {e}")))?;
            qp.to_rts(&opts)
                .map_err(|e| Fail(format!("Failed to modify QP[{i}] to RTS: {e}")))?;
        }
        Ok(())
    }
}

fn run_inner(args: &Args) -> Result<ExitCode, Fail> {
    let mtu = args.mtu.unwrap_or(Mtu::Mtu1024);
    let size = args.size.unwrap_or(4096);
    let num_qp = args.num_qp.unwrap_or(16);
    if num_qp > args.rx_depth {
        return fail(format!(
            "rx_depth {} is too small for {num_qp} QPs -- must have at least one receive per QP.",
            args.rx_depth
        ));
    }
    if args.ib_port != 1 {
        return fail("Couldn't get port info");
    }
    let timeout = crate::limits::limit(args.timeout);
    let (ctx, remotes, client) = if let Some(host) = &args.server {
        let server = route::resolve(host, args.port)
            .map_err(|e| Fail(format!("{e} for {host}:{}", args.port)))?;
        let ip = route::device_ip(args.bind, server.ip())
            .map_err(|e| Fail(format!("no local address towards {server}: {e}")))?;
        let (ctx, locals) = Ctx::prepare(args, ip, size, num_qp)?;
        let mut stream = softrdma_oob::connect(server, timeout)
            .map_err(|_| Fail(format!("Couldn't connect to {host}:{}", args.port)))?;
        set_stream_timeout(&stream, timeout)?;
        let remotes = pingpong::srq_client_exchange(&mut stream, &locals)
            .map_err(|e| Fail(format!("Couldn't read/write remote address: {e}")))?;
        drop(stream);
        for d in &remotes {
            println!("{}", remote_line(d));
        }
        ctx.connect(&remotes, server.ip(), mtu)?;
        (ctx, remotes, true)
    } else {
        // Like ibv_srq_pingpong: the device, its receives and the address lines before
        // listening when the address is known; otherwise the one the client reached.
        let early = match args.bind {
            Some(ip) => Some(Ctx::prepare(args, ip, size, num_qp)?),
            None => None,
        };
        let listener = match args.bind {
            Some(ip) => TcpListener::bind(SocketAddr::new(ip, args.port)),
            None => softrdma_oob::listen_any(args.port)
                .map_err(|e| std::io::Error::other(e.to_string())),
        }
        .map_err(|_| Fail(format!("Couldn't listen to port {}", args.port)))?;
        let (mut stream, peer) = crate::limits::accept_within(&listener, timeout)
            .map_err(|e| Fail(format!("accept() failed: {e}")))?;
        drop(listener);
        let (ctx, locals) = match early {
            Some(e) => e,
            None => {
                let ip = stream.local_addr()?.ip().to_canonical();
                Ctx::prepare(args, ip, size, num_qp)?
            }
        };
        set_stream_timeout(&stream, timeout)?;
        let remotes = pingpong::srq_server_read(&mut stream, num_qp as usize)
            .map_err(|e| Fail(format!("Couldn't read remote address: {e}")))?;
        ctx.connect(&remotes, peer.ip().to_canonical(), mtu)
            .map_err(|Fail(m)| Fail(format!("{m}\nCouldn't connect to remote QP")))?;
        pingpong::srq_server_reply(&mut stream, &locals)
            .map_err(|e| Fail(format!("Couldn't send local address: {e}")))?;
        drop(stream);
        for d in &remotes {
            println!("{}", remote_line(d));
        }
        (ctx, remotes, false)
    };
    debug_assert_eq!(remotes.len(), ctx.qps.len());
    exchange(args, &ctx, client, timeout)
}

/// The tool's main loop: every QP sends once its SEND completed and a message arrived on it.
fn exchange(
    args: &Args,
    ctx: &Ctx,
    client: bool,
    timeout: Option<Duration>,
) -> Result<ExitCode, Fail> {
    let iters = u64::from(args.iters);
    let num_qp = ctx.qps.len();
    let mut pending = vec![RECV_WRID; num_qp];
    if client {
        if args.chk {
            // The tool's pattern byte, `i / page_size % sizeof(char)`, is 0 on every page.
            for i in (0..ctx.size as usize).step_by(PAGE) {
                ctx.mr.write(i, &[0])?;
            }
        }
        for (i, p) in pending.iter_mut().enumerate() {
            ctx.post_send(i)?;
            *p = RECV_WRID | SEND_WRID;
        }
    }
    let start = Instant::now();
    let mut routs = ctx.rx_depth;
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(num_qp + ctx.rx_depth as usize);
    let mut last_progress = Instant::now();
    while rcnt < iters || scnt < iters {
        wcs.clear();
        let max = num_qp + ctx.rx_depth as usize;
        wait_completions(
            &ctx.cq,
            max,
            &mut wcs,
            args.events,
            timeout,
            last_progress,
            || format!("sent {scnt}, received {rcnt} of {iters}"),
        )?;
        last_progress = Instant::now();
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return fail(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status.as_str(),
                    WcStatus::ibv_code(wc.status),
                    wc.wr_id
                ));
            }
            let Some(q) = ctx.qps.iter().position(|qp| qp.qp_num() == wc.qp_num) else {
                return fail(format!("Couldn't find QPN {:06x}", wc.qp_num));
            };
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= num_qp as u32 {
                        routs += ctx.post_recv(ctx.rx_depth - routs);
                        if routs < ctx.rx_depth {
                            return fail(format!("Couldn't post receive ({routs})"));
                        }
                    }
                    rcnt += 1;
                }
                other => return fail(format!("Completion for unknown wr_id {other}")),
            }
            pending[q] &= !wc.wr_id;
            if scnt < iters && pending[q] == 0 {
                ctx.post_send(q)?;
                pending[q] = RECV_WRID | SEND_WRID;
            }
        }
    }
    report(ctx.size, iters, start.elapsed());
    let mut code = ExitCode::SUCCESS;
    if args.chk {
        let bad = invalid_pages(&ctx.mr.read_vec(0, ctx.size as usize)?);
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

/// Pages of `buf` unlike srq_pingpong's `-c` buffer, which is zero throughout: the tool zeroes
/// its buffer and its pattern byte is 0.
fn invalid_pages(buf: &[u8]) -> Vec<usize> {
    pages_unlike(buf, |_| 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chk_pattern_is_srq_pingpongs_zeros() {
        let mut buf = vec![0u8; 3 * PAGE + 100];
        assert!(invalid_pages(&buf).is_empty());
        // Any non-zero byte names its page, not just a page's first byte (the tool's check).
        buf[PAGE + 7] = 1;
        buf[3 * PAGE] = 0x7b;
        assert_eq!(invalid_pages(&buf), vec![1, 3]);
        // rc_pingpong's fill is not srq_pingpong's.
        assert_eq!(invalid_pages(&[0x7b; 64]), vec![0]);
    }
}
