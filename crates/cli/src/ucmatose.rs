//! `softrdma ucmatose`: a peer of librdmacm's `ucmatose` (`cmatose`, rdma-core 44): RC
//! connections set up through rdma_cm (`softrdma_rdmacm`), messages exchanged on each, then
//! torn down — with the program's flags, defaults, protocol and output lines.
//!
//! As cmatose does:
//! - every connection has its own CQs, a QP (`sq_sig_all`) and one `-S`-byte buffer;
//!   `-C` receives are posted before connecting (client) or accepting (server);
//! - the client connects with responder resources and initiator depth 1, retry count 5, RNR
//!   retry count 0; the server accepts with the request's values;
//! - once every connection is established, the server SENDs `-C` messages on each and waits
//!   for their completions and for `-C` replies; the client waits for the messages, then
//!   SENDs its `-C` replies;
//! - the server disconnects every connection; each side answers the other's disconnect and
//!   waits until all are disconnected; `return status N` ends the output (exit status N).
//!
//! Differences: the server needs `-b ADDR` (a softrdma device needs an address; cmatose binds
//! to any address without it); only the TCP port space (`-P tcp`); `-f`, `-t`, `-m` and `-a`
//! are not offered.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use crate::cmatose_common::{self, error_event, finish, STEP};
use clap::Args as ClapArgs;
use softrdma::{wr, AccessFlags, CompletionQueue, MemoryRegion, QpInitAttr, QueuePair, WcStatus};
use softrdma_rdmacm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RdmaQpType};

/// Arguments of `softrdma ucmatose` (cmatose's flags).
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// Server address: run as the client and connect to it.
    #[arg(short = 's')]
    server: Option<IpAddr>,
    /// Bind address (the server's listening address, required for a server; the client's
    /// source).
    #[arg(short = 'b')]
    bind: Option<IpAddr>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    connections: u32,
    /// Messages each way on each connection.
    #[arg(short = 'C', default_value_t = 10)]
    count: u32,
    /// Message size.
    #[arg(short = 'S', default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(0..=(1 << 24)))]
    size: u32,
    /// Port.
    #[arg(short = 'p', default_value_t = 7471)]
    port: u16,
    /// Port space: tcp (ib is not offered).
    #[arg(short = 'P', default_value = "tcp", value_parser = ["tcp"])]
    port_space: String,
}

/// One connection (cmatose's `cmatest_node`).
struct Node {
    id: CmId,
    qp: QueuePair,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: Option<MemoryRegion>,
    connected: bool,
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let status = match &args.server {
        Some(server) => client(args, *server),
        None => server(args),
    };
    finish("cmatose", status, &[])
}

/// The message count in effect: 0 when messages are 0 bytes.
fn count(args: &Args) -> u32 {
    cmatose_common::count(args.size, args.count)
}

/// Creates the node's CQs, QP and buffer, and posts its receives (`init_node`,
/// `post_recvs`).
fn init_node(args: &Args, id: &CmId) -> Result<Node, String> {
    let pd = id.pd().ok_or("the id has no device")?;
    let device = id.device().ok_or("the id has no device")?;
    let n = count(args);
    let cqe = n.max(1);
    let cq = |_| device.create_cq(cqe).map_err(|e| e.to_string());
    let (send_cq, recv_cq) = (cq(0)?, cq(1)?);
    let mut init = QpInitAttr::rc(&send_cq);
    init.recv_cq = recv_cq.clone();
    init.cap.max_send_wr = cqe;
    init.cap.max_recv_wr = cqe;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.sq_sig_all = true;
    let qp = id.create_qp(&pd, &init).map_err(|e| e.to_string())?;
    let mr = if n > 0 {
        Some(
            pd.reg_mr(args.size as usize, AccessFlags::LOCAL_WRITE)
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };
    if let Some(mr) = &mr {
        let wrs = (0..n).map(|_| wr::recv(0, vec![mr.sge(0, args.size)]));
        qp.post_recv(wrs)
            .map_err(|e| format!("failed to post receives: {e}"))?;
    }
    Ok(Node {
        id: id.clone(),
        qp,
        send_cq,
        recv_cq,
        mr,
        connected: false,
    })
}

fn post_sends(args: &Args, node: &Node) -> Result<(), String> {
    let (Some(mr), true) = (&node.mr, node.connected) else {
        return Ok(());
    };
    let mut w = wr::send(0, vec![mr.sge(0, args.size)]);
    w.flags = softrdma::SendFlags::empty();
    node.qp
        .post_send((0..count(args)).map(|_| w.clone()))
        .map_err(|e| format!("failed to post sends: {e}"))
}

/// Waits for `-C` completions on every connected node's send or receive CQ (`poll_cqs`).
fn poll_cqs(args: &Args, nodes: &[Node], recv: bool) -> Result<(), String> {
    for node in nodes.iter().filter(|n| n.connected) {
        let cq = if recv { &node.recv_cq } else { &node.send_cq };
        let mut got = Vec::new();
        while got.len() < count(args) as usize {
            let before = got.len();
            cq.poll_blocking(8, &mut got, Some(STEP));
            if got.len() == before {
                return Err("failed polling CQ: no completion within 120 s".into());
            }
        }
        if let Some(w) = got.iter().find(|w| w.status != WcStatus::Success) {
            return Err(format!("failed polling CQ: status {}", w.status.as_str()));
        }
    }
    Ok(())
}

/// Handles events until every connection is set up (or failed): `connect_events`.
fn connect_events(
    args: &Args,
    ch: &EventChannel,
    nodes: &mut Vec<Node>,
    pending: &mut Vec<CmId>,
) -> Result<i32, String> {
    let mut connects_left = args.connections;
    while connects_left > 0 {
        let e = ch
            .get_event(Some(STEP))
            .ok_or("no rdma_cm event within 120 s")?;
        if let Some((name, status)) = error_event(&e.kind) {
            println!("cmatose: event: {name}, error: {status}");
            return Ok(status);
        }
        match e.kind {
            CmEventKind::AddrResolved => e.id.resolve_route().map_err(|e| e.to_string())?,
            CmEventKind::RouteResolved => {
                let node = init_node(args, &e.id)?;
                let param = ConnParam {
                    responder_resources: 1,
                    initiator_depth: 1,
                    retry_count: 5,
                    ..ConnParam::default()
                };
                e.id.connect(&param)
                    .map_err(|e| format!("failure connecting: {e}"))?;
                nodes.push(node);
                pending.retain(|p| *p != e.id);
            }
            CmEventKind::ConnectRequest { param, .. } => {
                if nodes.len() as u32 == args.connections {
                    println!("cmatose: failing connection request");
                    let _ = e.id.reject(&[]);
                    continue;
                }
                let node = init_node(args, &e.id)?;
                let accept = ConnParam {
                    private_data: Vec::new(),
                    ..param
                };
                e.id.accept(&accept)
                    .map_err(|e| format!("failure accepting: {e}"))?;
                nodes.push(node);
            }
            CmEventKind::Established { .. } => {
                if let Some(n) = nodes.iter_mut().find(|n| n.id == e.id) {
                    n.connected = true;
                }
                connects_left -= 1;
            }
            CmEventKind::Disconnected => {
                let _ = e.id.disconnect();
            }
            _ => {}
        }
    }
    Ok(0)
}

/// Handles events until every connection is disconnected (`disconnect_events`).
fn disconnect_events(ch: &EventChannel, mut left: usize) -> Result<(), String> {
    while left > 0 {
        let e = ch
            .get_event(Some(STEP))
            .ok_or("no rdma_cm event within 120 s")?;
        if e.kind == CmEventKind::Disconnected {
            let _ = e.id.disconnect();
            left -= 1;
        }
    }
    Ok(())
}

fn server(args: &Args) -> Result<i32, String> {
    println!("cmatose: starting server");
    let Some(bind) = args.bind else {
        return Err("a softrdma server needs -b ADDR".into());
    };
    let ch = EventChannel::new();
    let listen = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
    listen
        .bind_addr(SocketAddr::new(bind, args.port))
        .map_err(|e| format!("bind address failed: {e}"))?;
    listen
        .listen()
        .map_err(|e| format!("failure trying to listen: {e}"))?;
    let mut nodes = Vec::new();
    let status = connect_events(args, &ch, &mut nodes, &mut Vec::new())?;
    if status != 0 {
        return Ok(status);
    }
    if count(args) > 0 {
        println!("initiating data transfers");
        for n in &nodes {
            post_sends(args, n)?;
        }
        println!("completing sends");
        poll_cqs(args, &nodes, false)?;
        println!("receiving data transfers");
        poll_cqs(args, &nodes, true)?;
        println!("data transfers complete");
    }
    println!("cmatose: disconnecting");
    let mut left = 0;
    for n in nodes.iter_mut().filter(|n| n.connected) {
        n.connected = false;
        let _ = n.id.disconnect();
        left += 1;
    }
    disconnect_events(&ch, left)?;
    println!("disconnected");
    Ok(0)
}

fn client(args: &Args, server: IpAddr) -> Result<i32, String> {
    println!("cmatose: starting client");
    let ch = EventChannel::new();
    let dst = SocketAddr::new(server, args.port);
    let src = args.bind.map(|ip| SocketAddr::new(ip, 0));
    println!("cmatose: connecting");
    let mut pending = Vec::new();
    for _ in 0..args.connections {
        let id = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        id.resolve_addr(src, dst)
            .map_err(|e| format!("failure getting addr: {e}"))?;
        pending.push(id);
    }
    let mut nodes = Vec::new();
    let status = connect_events(args, &ch, &mut nodes, &mut pending)?;
    if status != 0 {
        return Ok(status);
    }
    if count(args) > 0 {
        println!("receiving data transfers");
        poll_cqs(args, &nodes, true)?;
        println!("sending replies");
        for n in &nodes {
            post_sends(args, n)?;
        }
        println!("data transfers complete");
    }
    let connected = nodes.iter().filter(|n| n.connected).count();
    disconnect_events(&ch, connected)?;
    Ok(0)
}
