//! Interop probe: softrdma's rdma_cm ([`softrdma_cm::rdma`]) against Linux's on a real RoCEv2
//! path, without any RDMA traffic. It plays a GSI QP itself — MADs in UD SEND_ONLY packets to
//! QP 1 on UDP 4791, DETH Q_Key 0x80010000, the ICRC — and runs connection setup and teardown
//! against `ucmatose -C 0` (rdma-core's cmatose with no messages), which exits 0 only if every
//! connection was established and disconnected. Made-up QP numbers: the handshake is the test.
//!
//! ```text
//! rdma_cm_probe client LOCAL_IP SERVER_IP PORT N   # N connections to `ucmatose -C 0 -c N -p PORT`;
//!                                                  # waits for the server's DREQs, answers them
//! rdma_cm_probe server LOCAL_IP PORT N             # accepts N from `ucmatose -C 0 -c N -s LOCAL_IP`,
//!                                                  # then disconnects them
//! rdma_cm_probe reject LOCAL_IP SERVER_IP PORT     # connects where nobody listens: expects REJ 8
//! rdma_cm_probe none LOCAL_IP SECONDS              # no listener: answers whatever comes (REJ 8)
//! ```
//!
//! Prints each rdma_cm event and a last line `probe: PASS` or `probe: FAIL (why)`; exit 0 / 1.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use softrdma_cm::ib::CmConfig;
use softrdma_cm::rdma::{ConnParam, RdmaCm, RdmaEventKind, RdmaId, RdmaQpType, Route};
use softrdma_proto::Instant as CmInstant;
use softrdma_udp::{Config, Ecn, RecvArena, RoceSocket, Transmit};
use softrdma_wire::mad::cm::RejectReason;
use softrdma_wire::mad::cma::PortSpace;
use softrdma_wire::mad::{gsi_packet, GSI_QKEY, GSI_QPN};
use softrdma_wire::{Gid, IcrcContext, PacketRepr, Psn, ROCEV2_UDP_PORT};

/// The GSI QP of this probe: a UDP socket on 4791 and the MADs' PSN counter.
struct Gsi {
    socket: RoceSocket,
    arena: RecvArena,
    local: IpAddr,
    psn: Psn,
    epoch: Instant,
}

impl Gsi {
    fn now(&self) -> CmInstant {
        CmInstant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Sends every MAD the CM has queued, as rxe frames them (AckReq set, QP1's source port).
    fn flush(&mut self, cm: &mut RdmaCm) -> Result<(), Box<dyn std::error::Error>> {
        while let Some(out) = cm.poll_transmit() {
            let dst = out.dst.to_ip().ok_or("MAD for a GID without an IP")?;
            let mut packet = gsi_packet(out.dst_qpn, self.psn, &out.mad);
            packet.bth.ack_req = true;
            self.psn = self.psn.next();
            let mut buf = vec![0u8; packet.buffer_len()];
            packet.emit(&mut buf);
            let sport = self
                .socket
                .prepare_source_port(softrdma_proto::ud_source_port(GSI_QPN));
            IcrcContext::new(self.local, dst, sport, ROCEV2_UDP_PORT).fill(&mut buf)?;
            let t = Transmit {
                dst: SocketAddr::new(dst, ROCEV2_UDP_PORT),
                src_port: sport,
                ecn: Ecn::NotEct,
                segment_size: None,
                contents: &buf,
            };
            self.socket.send(&[t])?;
        }
        Ok(())
    }

    /// Waits up to `wait` for datagrams and hands the MADs among them to the CM.
    fn receive(
        &mut self,
        cm: &mut RdmaCm,
        wait: Duration,
    ) -> Result<(), Box<dyn std::error::Error>> {
        self.socket.recv_timeout(&mut self.arena, Some(wait))?;
        let now = self.now();
        for (meta, datagram) in self.arena.datagrams() {
            let Ok(packet) = PacketRepr::parse(datagram) else {
                continue;
            };
            let ctx =
                IcrcContext::new(meta.src.ip(), meta.dst_ip, meta.src.port(), ROCEV2_UDP_PORT);
            if ctx.verify_unknown_id(datagram).is_err() {
                eprintln!("probe: dropping a datagram with a bad ICRC");
                continue;
            }
            let Some(deth) = packet.ext.deth else {
                continue;
            };
            if packet.bth.dest_qpn != GSI_QPN || deth.qkey != GSI_QKEY {
                continue;
            }
            cm.handle_mad(
                now,
                Gid::from_ip(meta.src.ip()),
                deth.src_qpn,
                packet.payload,
            );
        }
        Ok(())
    }

    /// One turn: send, wait for MADs or the CM's next deadline (at most `max`), time out.
    fn turn(&mut self, cm: &mut RdmaCm, max: Duration) -> Result<(), Box<dyn std::error::Error>> {
        self.flush(cm)?;
        let now = self.now();
        let wait = cm
            .poll_timeout()
            .map_or(max, |t| (t - now).min(max))
            .max(Duration::from_millis(1));
        self.receive(cm, wait)?;
        let now = self.now();
        if cm.poll_timeout().is_some_and(|t| t <= now) {
            cm.handle_timeout(now);
        }
        self.flush(cm)
    }
}

/// One line per event, private data by its used length only.
fn show(id: RdmaId, kind: &RdmaEventKind) {
    let used = |d: &[u8]| d.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    match kind {
        RdmaEventKind::ConnectRequest {
            peer, local, param, ..
        } => println!(
            "probe: id {} CONNECT_REQUEST from {peer} to {local}, qpn {:#x}, pdata {}",
            id.raw(),
            param.qp_num,
            used(&param.private_data)
        ),
        RdmaEventKind::ConnectResponse { param } => println!(
            "probe: id {} CONNECT_RESPONSE qpn {:#x} rr {} id {} rnr {}",
            id.raw(),
            param.qp_num,
            param.responder_resources,
            param.initiator_depth,
            param.rnr_retry_count
        ),
        RdmaEventKind::Rejected {
            reason,
            private_data,
        } => println!(
            "probe: id {} REJECTED {reason}, pdata {}",
            id.raw(),
            used(private_data)
        ),
        other => println!("probe: id {} {other:?}", id.raw()),
    }
}

fn connect(cm: &mut RdmaCm, now: CmInstant, local: IpAddr, server: SocketAddr, qpn: u32) -> RdmaId {
    let id = cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
    cm.bind(id, SocketAddr::new(local, 0)).expect("bind");
    cm.connect(now, id, server, Route::default(), &ConnParam::rc(qpn))
        .expect("connect");
    id
}

fn run(args: &[String]) -> Result<String, Box<dyn std::error::Error>> {
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    let local: IpAddr = args.get(2).ok_or("missing LOCAL_IP")?.parse()?;
    let socket = RoceSocket::open(Config::new(local))?;
    let arena = RecvArena::for_socket(&socket, 64);
    let mut gsi = Gsi {
        socket,
        arena,
        local,
        psn: Psn::ZERO,
        epoch: Instant::now(),
    };
    let config = CmConfig {
        ca_guid: 0x0200_00ff_fe00_0001,
        rng_seed: std::process::id() as u64,
        ..CmConfig::default()
    };
    let mut cm = RdmaCm::new(config);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut established = 0usize;
    let mut disconnected = 0usize;
    match mode {
        "client" | "reject" => {
            let server = SocketAddr::new(
                args.get(3).ok_or("missing SERVER_IP")?.parse()?,
                args.get(4).ok_or("missing PORT")?.parse()?,
            );
            let n: usize = if mode == "client" {
                args.get(5).ok_or("missing N")?.parse()?
            } else {
                1
            };
            let mut ids: Vec<RdmaId> = (0..n)
                .map(|k| connect(&mut cm, gsi.now(), local, server, 0x100 + k as u32))
                .collect();
            while Instant::now() < deadline {
                gsi.turn(&mut cm, Duration::from_millis(200))?;
                while let Some(e) = cm.poll_event() {
                    show(e.id, &e.kind);
                    let now = gsi.now();
                    match e.kind {
                        RdmaEventKind::ConnectResponse { .. } => cm.complete_connect(now, e.id)?,
                        RdmaEventKind::Established { .. } => established += 1,
                        RdmaEventKind::Disconnected => {
                            disconnected += 1;
                            cm.disconnect(now, e.id)?; // the DREP, as cmatose does
                        }
                        RdmaEventKind::Rejected {
                            reason: RejectReason::InvalidServiceId,
                            ..
                        } if mode == "reject" => return Ok("REJECTED with reason 8".into()),
                        RdmaEventKind::Rejected {
                            reason: RejectReason::InvalidServiceId,
                            ..
                        } => {
                            // The guest's rxe is up but ucmatose does not listen yet: again.
                            cm.destroy(now, e.id)?;
                            let k = ids.iter().position(|&i| i == e.id).expect("ours");
                            std::thread::sleep(Duration::from_millis(300));
                            ids[k] = connect(&mut cm, gsi.now(), local, server, 0x100 + k as u32);
                        }
                        other => return Err(format!("unexpected {other:?}").into()),
                    }
                }
                if mode == "client" && disconnected == n && established == n {
                    // Let the DREPs go out and linger for retransmitted DREQs.
                    let end = Instant::now() + Duration::from_secs(1);
                    while Instant::now() < end {
                        gsi.turn(&mut cm, Duration::from_millis(100))?;
                    }
                    return Ok(format!(
                        "{n} connections established and disconnected by the peer"
                    ));
                }
            }
            Err(format!("timed out: {established} established, {disconnected} disconnected").into())
        }
        "server" => {
            let port: u16 = args.get(3).ok_or("missing PORT")?.parse()?;
            let n: usize = args.get(4).ok_or("missing N")?.parse()?;
            let listener = cm.create_id(PortSpace::Tcp, RdmaQpType::Rc);
            cm.bind(listener, SocketAddr::new(local, port))?;
            cm.listen(listener)?;
            let mut conns = Vec::new();
            let mut sent_dreqs = false;
            while Instant::now() < deadline {
                gsi.turn(&mut cm, Duration::from_millis(200))?;
                while let Some(e) = cm.poll_event() {
                    show(e.id, &e.kind);
                    let now = gsi.now();
                    match e.kind {
                        RdmaEventKind::ConnectRequest { param: p, .. } => {
                            let reply = ConnParam {
                                responder_resources: p.responder_resources,
                                initiator_depth: p.initiator_depth,
                                ..ConnParam::rc(0x200 + conns.len() as u32)
                            };
                            cm.accept(now, e.id, &reply)?;
                            conns.push(e.id);
                        }
                        RdmaEventKind::Established { .. } => established += 1,
                        RdmaEventKind::Disconnected => disconnected += 1,
                        RdmaEventKind::TimewaitExit => {}
                        other => return Err(format!("unexpected {other:?}").into()),
                    }
                }
                if established == n && !sent_dreqs {
                    let now = gsi.now();
                    for &id in &conns {
                        cm.disconnect(now, id)?;
                    }
                    sent_dreqs = true;
                }
                if sent_dreqs && disconnected == n {
                    return Ok(format!(
                        "{n} connections accepted, established and disconnected"
                    ));
                }
            }
            Err(format!("timed out: {established} established, {disconnected} disconnected").into())
        }
        "none" => {
            let secs: u64 = args.get(3).ok_or("missing SECONDS")?.parse()?;
            let end = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < end {
                gsi.turn(&mut cm, Duration::from_millis(200))?;
            }
            let tx = cm.stats().tx.get(softrdma_wire::mad::cm::attr::REJ);
            if tx == 0 {
                return Err("no REQ came in to reject".into());
            }
            Ok(format!("{tx} REQs answered with REJ 8"))
        }
        _ => Err(
            "usage: rdma_cm_probe client|server|reject|none LOCAL_IP ... (see the source)".into(),
        ),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(what) => {
            println!("probe: PASS ({what})");
        }
        Err(e) => {
            println!("probe: FAIL ({e})");
            std::process::exit(1);
        }
    }
}
