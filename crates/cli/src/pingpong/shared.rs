//! What every pingpong program shares, the RC/UC/UD one (`pingpong`) and the `--srq` one
//! (`srq`) alike: the fatal error, the address lines, the `-c` page check, the peer's QP
//! endpoint, the waits, the QP attributes they connect with and the closing report. In a
//! module of its own so that `pingpong/mod.rs` holds the RC/UC/UD program alone; both
//! programs name these through `pingpong`'s re-exports.

use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

use softrdma::{
    AccessFlags, CompletionQueue, ConnectOptions, Gid, Mtu, QpEndpoint, WorkCompletion,
};
use softrdma_oob::pingpong::PingpongDest;

/// The page size rc_pingpong's `-c` pattern steps by (`sysconf(_SC_PAGESIZE)` on x86-64 and
/// the lab's guests).
pub(crate) const PAGE: usize = 4096;

/// How long the loop polls before it sleeps on the completion queue (rc_pingpong polls
/// without end; a millisecond covers any round trip worth spinning for).
const SPIN: Duration = Duration::from_millis(1);

/// A fatal error: the message rc_pingpong would print (to stderr), exit status 1.
pub(crate) struct Fail(pub(crate) String);

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Fail {
        Fail(e.to_string())
    }
}

pub(crate) fn fail<T>(msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail(msg.into()))
}

/// Pages (of the tools' `-c` page size) of `buf` holding a byte other than `pattern(offset)`,
/// in order: the tools check one byte per page, softrdma every byte, so a page is named
/// whichever of its bytes went wrong.
pub(crate) fn pages_unlike(buf: &[u8], pattern: impl Fn(usize) -> u8) -> Vec<usize> {
    buf.chunks(PAGE)
        .enumerate()
        .filter(|(page, chunk)| {
            chunk
                .iter()
                .enumerate()
                .any(|(j, &b)| b != pattern(page * PAGE + j))
        })
        .map(|(page, _)| page)
        .collect()
}

/// The `  local address:  LID 0x0000, QPN 0x000011, PSN 0x..., GID ...` line
/// (`ibv_ud_pingpong` prints `PSN 0x...: GID` in its local line).
pub(crate) fn address_line(label: &str, d: &PingpongDest, psn_gid_sep: char) -> String {
    format!(
        "  {label} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{psn_gid_sep} GID {}",
        d.lid, d.qpn, d.psn, d.gid
    )
}

/// The remote address line (the same in every program).
pub(crate) fn remote_line(d: &PingpongDest) -> String {
    address_line("remote address:", d, ',')
}

/// The QP endpoint of a peer: its GID, or the address of its TCP connection when it sent
/// the all-zero GID.
pub(crate) fn remote_endpoint(d: &PingpongDest, tcp_peer: IpAddr) -> QpEndpoint {
    let gid = if d.gid.is_zero() {
        Gid::from_ip(tcp_peer)
    } else {
        d.gid
    };
    QpEndpoint {
        gid,
        qpn: d.qpn,
        psn: d.psn,
    }
}

pub(crate) fn set_stream_timeout(s: &TcpStream, t: Option<Duration>) -> Result<(), Fail> {
    s.set_read_timeout(t)?;
    s.set_write_timeout(t)?;
    Ok(())
}

/// Polls `cq` for up to `max` completions into `wcs` until some come: without `events`
/// polling for a moment as the tools do, then (and with `events` at once) sleeping on the
/// CQ, so a peer that went away costs no CPU. Fails once `timeout` passed since
/// `last_progress`, saying where the run stood (`progress`).
pub(crate) fn wait_completions(
    cq: &CompletionQueue,
    max: usize,
    wcs: &mut Vec<WorkCompletion>,
    events: bool,
    timeout: Option<Duration>,
    last_progress: Instant,
    progress: impl Fn() -> String,
) -> Result<(), Fail> {
    let spin_from = Instant::now();
    while cq.poll(max, wcs) == 0 {
        let left = match timeout {
            Some(t) => {
                let idle = last_progress.elapsed();
                if idle >= t {
                    return fail(format!(
                        "no completion for {:.1} seconds ({}); giving up",
                        idle.as_secs_f64(),
                        progress()
                    ));
                }
                Some(t - idle)
            }
            None => None,
        };
        if events || spin_from.elapsed() >= SPIN {
            cq.wait(left);
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

/// The QP attributes every pingpong program connects with (`pp_connect_ctx`).
pub(crate) fn connect_options(mtu: Mtu) -> ConnectOptions {
    ConnectOptions {
        access: AccessFlags::empty(),
        path_mtu: Some(mtu),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..ConnectOptions::default()
    }
}

/// The closing lines every pingpong program prints (in float microseconds, as they compute).
pub(crate) fn report(size: u32, iters: u64, elapsed: Duration) {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = u64::from(size) * iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters as f64
    );
}
