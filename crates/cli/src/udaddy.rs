//! `softrdma udaddy`: a peer of librdmacm's `udaddy` (rdma-core 44): UD "connections" through
//! rdma_cm's SIDR (`softrdma_rdmacm` in the UDP port space), datagrams exchanged on each —
//! with the program's flags, defaults, protocol and output lines.
//!
//! As udaddy does:
//! - every connection has one CQ, a UD QP (in RTS at creation, rdma_cm's Q_Key) and one
//!   buffer of `-S` bytes plus the 40-byte GRH area; `-C` receives are posted first;
//! - the client resolves the server and sends a SIDR_REQ; the SIDR_REP gives it the server's
//!   QP number and Q_Key, and it SENDs `-C` datagrams with immediate data (its own QPN);
//! - the server accepts each request at once (SIDR_REP with its QPN), receives the
//!   datagrams, answers the first sender from the completion (an address handle from the
//!   GRH, the QPN from the immediate, its own Q_Key) with `-C` signaled replies;
//! - `test complete` and `return status N` end the output (exit status N).
//!
//! The port is udaddy's fixed 7174 (its `-p` names the port space, 0x111 for UDP).
//! Differences: the server needs `-b ADDR`; only the UDP port space; `-f` and `-t` are not
//! offered.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use crate::cmatose_common::{self, error_event, finish, STEP};
use clap::Args as ClapArgs;
use softrdma::{
    wr, AccessFlags, AddressHandle, AhAttr, CompletionQueue, MemoryRegion, ProtectionDomain,
    QpInitAttr, QpType, QueuePair, SendFlags, SendOp, WcStatus, GRH_LEN,
};
use softrdma_rdmacm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RdmaQpType};

/// Arguments of `softrdma udaddy` (udaddy's flags).
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// Server address: run as the client and connect to it.
    #[arg(short = 's')]
    server: Option<IpAddr>,
    /// Bind address (required for a server; the client's source).
    #[arg(short = 'b')]
    bind: Option<IpAddr>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    connections: u32,
    /// Datagrams each way on each connection.
    #[arg(short = 'C', default_value_t = 10)]
    count: u32,
    /// Datagram size (at most the port's active MTU).
    #[arg(short = 'S', default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(0..=4096))]
    size: u32,
    /// Port space as a number, as udaddy's `-p` (kept there for backwards compatibility):
    /// 0x111, UDP (IPoIB's 0x2 is not offered).
    #[arg(short = 'p', default_value = "0x111", value_parser = ["0x111", "273"])]
    port_space_number: String,
    /// Port space: udp (ipoib is not offered).
    #[arg(short = 'P', default_value = "udp", value_parser = ["udp"])]
    port_space: String,
}

/// udaddy's port, fixed (`port = "7174"`; its `-p` is the port space).
const PORT: u16 = 7174;

/// One UD "connection" (udaddy's `cmatest_node`).
struct Node {
    id: CmId,
    pd: ProtectionDomain,
    qp: QueuePair,
    cq: CompletionQueue,
    mr: Option<MemoryRegion>,
    /// Where datagrams go: address handle, QPN, Q_Key.
    dest: Option<(AddressHandle, u32, u32)>,
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let status = match &args.server {
        Some(server) => client(args, *server),
        None => server(args),
    };
    finish("udaddy", status, &["test complete"])
}

/// The message count in effect: 0 when messages are 0 bytes.
fn count(args: &Args) -> u32 {
    cmatose_common::count(args.size, args.count)
}

/// Checks the size against the port MTU, creates the node's CQ, QP and buffer and posts its
/// receives (`verify_test_params`, `init_node`, `post_recvs`).
fn init_node(args: &Args, id: &CmId) -> Result<Node, String> {
    let device = id.device().ok_or("the id has no device")?;
    let mtu = device
        .query_port(1)
        .map_err(|e| e.to_string())?
        .active_mtu
        .bytes();
    if count(args) > 0 && args.size > mtu {
        return Err(format!(
            "message_size {} is larger than active mtu {mtu}",
            args.size
        ));
    }
    let pd = id.pd().ok_or("the id has no device")?;
    let n = count(args);
    let cq = device
        .create_cq(if n > 0 { 2 * n } else { 2 })
        .map_err(|e| e.to_string())?;
    let mut init = QpInitAttr::new(QpType::Ud, &cq);
    init.cap.max_send_wr = n.max(1);
    init.cap.max_recv_wr = n.max(1);
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    let qp = id.create_qp(&pd, &init).map_err(|e| e.to_string())?;
    let mr = if n > 0 {
        let mr = pd
            .reg_mr(args.size as usize + GRH_LEN, AccessFlags::LOCAL_WRITE)
            .map_err(|e| e.to_string())?;
        let len = args.size + GRH_LEN as u32;
        qp.post_recv((0..n).map(|_| wr::recv(0, vec![mr.sge(0, len)])))
            .map_err(|e| format!("failed to post receives: {e}"))?;
        Some(mr)
    } else {
        None
    };
    Ok(Node {
        id: id.clone(),
        pd,
        qp,
        cq,
        mr,
        dest: None,
    })
}

fn post_sends(args: &Args, node: &Node, signaled: bool) -> Result<(), String> {
    let (Some(mr), Some((ah, qpn, qkey))) = (&node.mr, &node.dest) else {
        return Ok(());
    };
    let mut w = wr::ud_send(0, vec![mr.sge(0, args.size)], ah, *qpn, *qkey);
    w.op = SendOp::SendWithImm {
        imm: node.qp.qp_num(),
    };
    w.flags = if signaled {
        SendFlags::SIGNALED
    } else {
        SendFlags::empty()
    };
    node.qp
        .post_send((0..count(args)).map(|_| w.clone()))
        .map_err(|e| format!("failed to post sends: {e}"))
}

/// Waits for `-C` completions on every node's CQ; a node without a destination answers the
/// first sender (`poll_cqs`, `create_reply_ah`).
fn poll_cqs(args: &Args, nodes: &mut [Node]) -> Result<(), String> {
    for node in nodes.iter_mut() {
        let mut got = Vec::new();
        while got.len() < count(args) as usize {
            let before = got.len();
            node.cq.poll_blocking(8, &mut got, Some(STEP));
            if got.len() == before {
                return Err("failed polling CQ: no completion within 120 s".into());
            }
            if node.dest.is_none() {
                let wc = got[0];
                if wc.status != WcStatus::Success {
                    return Err(format!("failed polling CQ: status {}", wc.status.as_str()));
                }
                let mr = node.mr.as_ref().ok_or("no buffer")?;
                let grh = mr.read_vec(0, GRH_LEN).map_err(|e| e.to_string())?;
                let device = node.id.device().ok_or("no device")?;
                let attr = AhAttr::from_wc(&wc, &grh, device.gid_index() as u8)
                    .ok_or("failed to create reply AH")?;
                let ah = node.pd.create_ah(&attr).map_err(|e| e.to_string())?;
                let qkey = node.qp.query().config.qkey;
                node.dest = Some((ah, wc.imm_data.unwrap_or(0), qkey));
            }
        }
        if let Some(w) = got.iter().find(|w| w.status != WcStatus::Success) {
            return Err(format!("failed polling CQ: status {}", w.status.as_str()));
        }
    }
    Ok(())
}

/// Handles events until every connection is resolved (or failed): `connect_events`.
fn connect_events(args: &Args, ch: &EventChannel, nodes: &mut Vec<Node>) -> Result<i32, String> {
    let mut connects_left = args.connections;
    while connects_left > 0 {
        let e = ch
            .get_event(Some(STEP))
            .ok_or("no rdma_cm event within 120 s")?;
        if let Some((name, status)) = error_event(&e.kind) {
            println!("udaddy: event: {name}, error: {status}");
            return Ok(status);
        }
        match e.kind {
            CmEventKind::AddrResolved => e.id.resolve_route().map_err(|e| e.to_string())?,
            CmEventKind::RouteResolved => {
                let node = init_node(args, &e.id)?;
                e.id.connect(&ConnParam::default())
                    .map_err(|e| format!("failure connecting: {e}"))?;
                nodes.push(node);
            }
            CmEventKind::ConnectRequest { .. } => {
                if nodes.len() as u32 == args.connections {
                    println!("udaddy: failing connection request");
                    let _ = e.id.reject(&[]);
                    continue;
                }
                let node = init_node(args, &e.id)?;
                let param = ConnParam {
                    qp_num: node.qp.qp_num(),
                    ..ConnParam::default()
                };
                e.id.accept(&param)
                    .map_err(|e| format!("failure accepting: {e}"))?;
                nodes.push(node);
                connects_left -= 1;
            }
            CmEventKind::Established { ud: Some(ud) } => {
                let Some(node) = nodes.iter_mut().find(|n| n.id == e.id) else {
                    continue;
                };
                let peer = ud.peer.ok_or("the SIDR_REP named no address")?;
                let device = node.id.device().ok_or("no device")?;
                let attr = AhAttr::new(softrdma::Gid::from_ip(peer), device.gid_index() as u8);
                let ah = node
                    .pd
                    .create_ah(&attr)
                    .map_err(|_| "failure creating address handle".to_string())?;
                node.dest = Some((ah, ud.qp_num, ud.qkey));
                connects_left -= 1;
            }
            _ => {}
        }
    }
    Ok(0)
}

fn server(args: &Args) -> Result<i32, String> {
    println!("udaddy: starting server");
    let Some(bind) = args.bind else {
        return Err("a softrdma server needs -b ADDR".into());
    };
    let ch = EventChannel::new();
    let listen = CmId::new(&ch, PortSpace::Udp, RdmaQpType::Ud);
    listen
        .bind_addr(SocketAddr::new(bind, PORT))
        .map_err(|e| format!("bind address failed: {e}"))?;
    listen
        .listen()
        .map_err(|e| format!("failure trying to listen: {e}"))?;
    let mut nodes = Vec::new();
    let status = connect_events(args, &ch, &mut nodes)?;
    if status != 0 {
        return Ok(status);
    }
    if count(args) > 0 {
        println!("receiving data transfers");
        poll_cqs(args, &mut nodes)?;
        println!("sending replies");
        for n in &nodes {
            post_sends(args, n, true)?;
        }
        poll_cqs(args, &mut nodes)?;
        println!("data transfers complete");
    }
    Ok(0)
}

fn client(args: &Args, server: IpAddr) -> Result<i32, String> {
    println!("udaddy: starting client");
    let ch = EventChannel::new();
    let dst = SocketAddr::new(server, PORT);
    let src = args.bind.map(|ip| SocketAddr::new(ip, 0));
    println!("udaddy: connecting");
    let mut ids = Vec::new();
    for _ in 0..args.connections {
        let id = CmId::new(&ch, PortSpace::Udp, RdmaQpType::Ud);
        id.resolve_addr(src, dst)
            .map_err(|e| format!("failure getting addr: {e}"))?;
        ids.push(id);
    }
    let mut nodes = Vec::new();
    let status = connect_events(args, &ch, &mut nodes)?;
    if status != 0 {
        return Ok(status);
    }
    if count(args) > 0 {
        println!("initiating data transfers");
        for n in &nodes {
            post_sends(args, n, false)?;
        }
        println!("receiving data transfers");
        poll_cqs(args, &mut nodes)?;
        println!("data transfers complete");
    }
    Ok(0)
}
