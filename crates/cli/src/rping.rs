//! `softrdma rping`: a peer of librdmacm's `rping` (rdma-core 44), connected through rdma_cm
//! (`softrdma_rdmacm`), with rping's protocol, buffers and output, so either side can be the
//! real program on a Linux Soft-RoCE host.
//!
//! Per ping, as rping does:
//! - the client fills its `start` buffer with `rdma-ping-N: ` and then the letters `A`..`z`
//!   cycling from a start letter that moves on by one each ping, NUL-terminated, and SENDs
//!   its address, rkey and size (`struct rping_rdma_info`: be64 addr, be32 rkey, be32 size);
//! - the server RDMA READs that buffer into its own, SENDs a "go ahead" (16 bytes), receives
//!   the client's `rdma` buffer advertisement, RDMA WRITEs what it read (`strlen + 1` bytes)
//!   there, and SENDs a second "go ahead";
//! - the client (`-V`) compares the two buffers, and (`-v`) prints `ping data: ...`; the
//!   server (`-v`) prints `server ping data: ...`.
//!
//! The connection is rping's: port 7174 by default, RC, responder resources and initiator
//! depth 1, retries 7, no private data; the client disconnects after `-C` pings, the server
//! disconnects when the client has, and both exit 0.
//!
//! Differences: a softrdma device needs an address, so the server's `-a` is required (rping
//! binds to any address without it); `-P` (persistent server) and `-q` are not offered.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use softrdma::{
    wr, AccessFlags, CompletionQueue, MemoryRegion, QpInitAttr, QueuePair, WcOpcode, WcStatus,
    WorkCompletion,
};
use softrdma_rdmacm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RdmaQpType};

/// rping's `RPING_SQ_DEPTH`.
const SQ_DEPTH: u32 = 16;
/// `sizeof(struct rping_rdma_info)`.
const INFO_LEN: usize = 16;
/// rping's limits on `-S`: `RPING_MIN_BUFSIZE` and `RPING_BUFSIZE - 1`.
const MIN_SIZE: usize = 26;
const MAX_SIZE: usize = 64 * 1024 - 1;
/// How long any step may take before the run is declared failed.
const STEP: Duration = Duration::from_secs(30);

/// Arguments of `softrdma rping` (rping's flags).
#[derive(Debug, ClapArgs)]
#[command(disable_version_flag = true)]
pub(crate) struct Args {
    /// Server side.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Client side.
    #[arg(short = 'c')]
    client: bool,
    /// Address: the server's to bind to (required), the client's to connect to.
    #[arg(short = 'a')]
    addr: Option<IpAddr>,
    /// Source address to bind to (client).
    #[arg(short = 'I')]
    source: Option<IpAddr>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Ping count (client; 0: forever).
    #[arg(short = 'C', default_value_t = 0)]
    count: u32,
    /// Ping data size (26 to 65535).
    #[arg(short = 'S', default_value_t = 64)]
    size: usize,
    /// Display ping data to stdout.
    #[arg(short = 'v')]
    verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    validate: bool,
    /// Debug output (accepted; softrdma logs with RUST_LOG).
    #[arg(short = 'd')]
    debug: bool,
}

pub(crate) fn run(args: &Args) -> ExitCode {
    if !(MIN_SIZE..=MAX_SIZE).contains(&args.size) {
        eprintln!(
            "Invalid size {} (valid range is {MIN_SIZE} to {})",
            args.size,
            MAX_SIZE + 1
        );
        return ExitCode::from(2);
    }
    if args.server == args.client {
        eprintln!("softrdma rping: one of -s (server) or -c (client)");
        return ExitCode::from(2);
    }
    let Some(addr) = args.addr else {
        eprintln!("softrdma rping: -a ADDR is required (a softrdma device needs an address)");
        return ExitCode::from(2);
    };
    let at = SocketAddr::new(addr, args.port);
    let result = if args.server {
        server(args, at)
    } else {
        client(args, at)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rping: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One side's resources (rping's `rping_cb`).
struct Side {
    id: CmId,
    ch: EventChannel,
    qp: QueuePair,
    cq: CompletionQueue,
    recv_mr: MemoryRegion,
    send_mr: MemoryRegion,
    rdma_mr: MemoryRegion,
    start_mr: Option<MemoryRegion>,
}

const RECV_WR: u64 = 1;
const SEND_WR: u64 = 2;
const RDMA_WR: u64 = 3;

impl Side {
    fn new(id: CmId, ch: EventChannel, size: usize, client: bool) -> Result<Side, String> {
        let pd = id.pd().ok_or("the id has no device")?;
        let device = id.device().ok_or("the id has no device")?;
        let cq = device.create_cq(SQ_DEPTH * 2).map_err(|e| e.to_string())?;
        let mut init = QpInitAttr::rc(&cq);
        init.cap.max_send_wr = SQ_DEPTH;
        init.cap.max_recv_wr = 2;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        let qp = id.create_qp(&pd, &init).map_err(|e| e.to_string())?;
        let remote =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let reg = |len, access| pd.reg_mr(len, access).map_err(|e| e.to_string());
        let side = Side {
            recv_mr: reg(INFO_LEN, AccessFlags::LOCAL_WRITE)?,
            send_mr: reg(INFO_LEN, AccessFlags::empty())?,
            rdma_mr: reg(size, remote)?,
            start_mr: if client {
                Some(reg(size, remote)?)
            } else {
                None
            },
            id,
            ch,
            qp,
            cq,
        };
        side.post_recv()?;
        Ok(side)
    }

    fn post_recv(&self) -> Result<(), String> {
        self.qp
            .post_recv([wr::recv(
                RECV_WR,
                vec![self.recv_mr.sge(0, INFO_LEN as u32)],
            )])
            .map_err(|e| e.to_string())
    }

    /// SENDs `send_mr` (an advertisement, or the server's go-ahead).
    fn send(&self) -> Result<(), String> {
        self.qp
            .post_send([wr::send(
                SEND_WR,
                vec![self.send_mr.sge(0, INFO_LEN as u32)],
            )])
            .map_err(|e| e.to_string())
    }

    /// Writes `mr`'s address, rkey and `size` into the send buffer (`rping_format_send`).
    fn format_send(&self, mr: &MemoryRegion, size: usize) -> Result<(), String> {
        let mut info = [0u8; INFO_LEN];
        info[..8].copy_from_slice(&mr.addr().to_be_bytes());
        info[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
        info[12..].copy_from_slice(&(size as u32).to_be_bytes());
        self.send_mr.write(0, &info).map_err(|e| e.to_string())
    }

    /// Waits for the next completion of `opcode` (others — SEND completions — pass by),
    /// reposting the receive as rping's CQ handler does; `None` when the peer disconnected.
    fn wait(&self, opcode: WcOpcode) -> Result<Option<WorkCompletion>, String> {
        let deadline = std::time::Instant::now() + STEP;
        let mut out = Vec::new();
        loop {
            if let Some(e) = self.ch.try_get_event() {
                match e.kind {
                    CmEventKind::Disconnected => return Ok(None),
                    other => return Err(unexpected(&other)),
                }
            }
            out.clear();
            self.cq
                .poll_blocking(1, &mut out, Some(Duration::from_millis(10)));
            if let Some(wc) = out.first() {
                if wc.status == WcStatus::WrFlushErr {
                    // The QP went to ERR: a disconnect is under way (rping skips flushes and
                    // learns of it from the CM).
                    return match next_event(&self.ch)?.kind {
                        CmEventKind::Disconnected => Ok(None),
                        other => Err(unexpected(&other)),
                    };
                }
                if wc.status != WcStatus::Success {
                    return Err(format!(
                        "cq completion failed status {} ({})",
                        wc.status.ibv_code(),
                        wc.status.as_str()
                    ));
                }
                if wc.opcode == WcOpcode::Recv {
                    if wc.byte_len as usize != INFO_LEN {
                        return Err(format!("Received bogus data, size {}", wc.byte_len));
                    }
                    self.post_recv()?;
                }
                if wc.opcode == opcode {
                    return Ok(Some(*wc));
                }
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("no {opcode:?} completion within {STEP:?}"));
            }
        }
    }

    /// The peer's advertisement in the receive buffer: (addr, rkey, len).
    fn remote_info(&self) -> Result<(u64, u32, u32), String> {
        let b = self
            .recv_mr
            .read_vec(0, INFO_LEN)
            .map_err(|e| e.to_string())?;
        let be = |r: std::ops::Range<usize>| b[r].iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
        Ok((be(0..8), be(8..12) as u32, be(12..16) as u32))
    }
}

/// An event as rping reports one it did not expect: `cma event NAME, error STATUS`
/// (`rdma_event_str` and `event->status`: the REJ's reason, or ETIMEDOUT).
fn unexpected(kind: &CmEventKind) -> String {
    let status = match kind {
        CmEventKind::Rejected { reason, .. } => i32::from(reason.code()),
        CmEventKind::Unreachable => -ETIMEDOUT,
        _ => 0,
    };
    let name = kind.name();
    format!("cma event {name}, error {status}")
}

/// `ETIMEDOUT` on Linux (rdma_cm reports an unanswered REQ as `-ETIMEDOUT`).
const ETIMEDOUT: i32 = 110;

fn next_event(ch: &EventChannel) -> Result<CmEvent, String> {
    ch.get_event(Some(STEP))
        .ok_or_else(|| format!("no rdma_cm event within {STEP:?}"))
}

fn server(args: &Args, at: SocketAddr) -> Result<(), String> {
    let ch = EventChannel::new();
    let listen = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
    listen.bind_addr(at).map_err(|e| e.to_string())?;
    listen.listen().map_err(|e| e.to_string())?;
    let req = loop {
        let e = ch.get_event(None).ok_or("the event channel closed")?;
        if let CmEventKind::ConnectRequest { .. } = e.kind {
            break e;
        }
    };
    let side = Side::new(req.id.clone(), ch.clone(), args.size, false)?;
    side.id
        .accept(&ConnParam::rc(0))
        .map_err(|e| e.to_string())?;
    match next_event(&ch)?.kind {
        CmEventKind::Established { .. } => {}
        other => return Err(unexpected(&other)),
    }
    let result = server_loop(args, &side);
    // The client disconnected (or the run failed): answer its DREQ, or send ours.
    let _ = side.id.disconnect();
    drop(listen);
    result
}

fn server_loop(args: &Args, side: &Side) -> Result<(), String> {
    loop {
        // The client's start buffer: READ it.
        if side.wait(WcOpcode::Recv)?.is_none() {
            return Ok(());
        }
        let (addr, rkey, len) = side.remote_info()?;
        let len = len.min(args.size as u32);
        side.qp
            .post_send([wr::read(
                RDMA_WR,
                vec![side.rdma_mr.sge(0, len)],
                addr,
                rkey,
            )])
            .map_err(|e| e.to_string())?;
        if side.wait(WcOpcode::RdmaRead)?.is_none() {
            return Ok(());
        }
        let data = side.rdma_mr.to_vec().map_err(|e| e.to_string())?;
        let text_len = data.iter().position(|&b| b == 0).unwrap_or(data.len());
        if args.verbose {
            println!(
                "server ping data: {}",
                String::from_utf8_lossy(&data[..text_len])
            );
        }
        side.send()?;
        // The client's rdma buffer: WRITE the ping back (strlen + 1 bytes).
        if side.wait(WcOpcode::Recv)?.is_none() {
            return Ok(());
        }
        let (addr, rkey, _) = side.remote_info()?;
        let n = (text_len + 1).min(args.size) as u32;
        side.qp
            .post_send([wr::write(RDMA_WR, vec![side.rdma_mr.sge(0, n)], addr, rkey)])
            .map_err(|e| e.to_string())?;
        if side.wait(WcOpcode::RdmaWrite)?.is_none() {
            return Ok(());
        }
        side.send()?;
    }
}

fn client(args: &Args, at: SocketAddr) -> Result<(), String> {
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
    let src = args.source.map(|ip| SocketAddr::new(ip, 0));
    id.resolve_addr(src, at).map_err(|e| e.to_string())?;
    expect(&ch, CmEventKind::AddrResolved)?;
    id.resolve_route().map_err(|e| e.to_string())?;
    expect(&ch, CmEventKind::RouteResolved)?;
    let side = Side::new(id, ch.clone(), args.size, true)?;
    side.id
        .connect(&ConnParam::rc(0))
        .map_err(|e| e.to_string())?;
    match next_event(&ch)?.kind {
        CmEventKind::Established { .. } => {}
        other => return Err(unexpected(&other)),
    }
    let result = client_loop(args, &side);
    let _ = side.id.disconnect();
    // Hear the DREP (or its absence) before the device closes.
    let _ = ch.get_event(Some(Duration::from_secs(2)));
    result
}

fn expect(ch: &EventChannel, want: CmEventKind) -> Result<(), String> {
    let e = next_event(ch)?;
    if e.kind == want {
        Ok(())
    } else {
        Err(unexpected(&e.kind))
    }
}

/// The client's start buffer for ping `ping`, whose letters begin at `start`.
fn ping_data(ping: u32, start: u8, size: usize) -> Vec<u8> {
    let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
    buf.truncate(size - 1);
    let mut c = start;
    while buf.len() < size {
        buf.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    buf[size - 1] = 0;
    buf
}

fn client_loop(args: &Args, side: &Side) -> Result<(), String> {
    let start_mr = side.start_mr.as_ref().ok_or("no start buffer")?;
    let mut start = 65u8;
    let mut ping = 0u32;
    while args.count == 0 || ping < args.count {
        let data = ping_data(ping, start, args.size);
        start = if start >= 122 { 65 } else { start + 1 };
        start_mr.write(0, &data).map_err(|e| e.to_string())?;
        side.format_send(start_mr, args.size)?;
        side.send()?;
        if side.wait(WcOpcode::Recv)?.is_none() {
            return Err("the server disconnected".into());
        }
        side.format_send(&side.rdma_mr, args.size)?;
        side.send()?;
        if side.wait(WcOpcode::Recv)?.is_none() {
            return Err("the server disconnected".into());
        }
        let got = side.rdma_mr.to_vec().map_err(|e| e.to_string())?;
        if args.validate && got != data {
            return Err("data mismatch!".into());
        }
        if args.verbose {
            let n = got.iter().position(|&b| b == 0).unwrap_or(got.len());
            println!("ping data: {}", String::from_utf8_lossy(&got[..n]));
        }
        ping += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_ping_data_as_rping_fills_it() {
        // rping -S 30, ping 0: "rdma-ping-0: " (13 bytes), then A.. from 'A', NUL last.
        let d = ping_data(0, 65, 30);
        assert_eq!(&d[..13], b"rdma-ping-0: ");
        assert_eq!(&d[13..29], b"ABCDEFGHIJKLMNOP");
        assert_eq!(d[29], 0);
        // The letters wrap from 'z' to 'A'.
        let d = ping_data(7, 121, 20);
        assert_eq!(&d[..13], b"rdma-ping-7: ");
        assert_eq!(&d[13..19], b"yzABCD");
    }
}
