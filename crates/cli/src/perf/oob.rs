//! The out-of-band side of a run, driven through `softrdma_oob::perftest`: connecting or
//! accepting, the version/sys-data/MTU steps, creating the verbs resources, and the key
//! exchanges in the order perftest makes them (checked against captures: RDMA `*_bw` send
//! every QP's keys twice and then sync; `ib_send_bw` syncs between the two rounds).

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::Sender;
use std::time::Duration;

use softrdma::{
    AccessFlags, AhAttr, CcConfig, CompletionQueue, ConnectOptions, Device, DeviceConfig,
    MemoryRegion, Mtu, QpAttr, QpCaps, QpEndpoint, QpInitAttr, QueuePair, SharedReceiveQueue,
    SrqAttr, UdDest, GRH_LEN, MAX_CQE,
};
use softrdma_oob::perftest::{
    KeySchedule, PerftestDest, PerftestSession, Role, SysData, DEFAULT_TIMEOUT, DEF_QKEY,
    RDMA_CM_KEY_LEN,
};

use super::args::{Config, TestName, Verb};
use super::check::{self, CheckMemory, VADDR_TAG};
use super::cmlink::{self, DataLinks};
use super::control::{CmControl, Control};
use super::layout::{pattern, stride};
use super::output::{PerfError, Printer};
use super::report;
use crate::transport::Transport;

/// How this side meets its peer.
pub(crate) enum Conn {
    /// Connect to a server (`host`, port).
    Connect(String, u16),
    /// Wait for a client on a bound listener.
    Listen(TcpListener),
    /// `-R`: connect through rdma_cm to a server (`host`, port).
    CmConnect(String, u16),
    /// `-R`: wait for a client's rdma_cm connection on this device address and port; `ready`
    /// is told once the listener is up.
    CmListen(IpAddr, u16, Option<Sender<()>>),
}

impl Conn {
    /// Whether this side is the server.
    pub(crate) fn is_server(&self) -> bool {
        matches!(self, Conn::Listen(_) | Conn::CmListen(..))
    }
}

/// No completion for this long means the peer or the path is gone (unless `--timeout` says
/// otherwise: see [`Ctx::stall`]).
pub(crate) const STALL: Duration = Duration::from_secs(30);

/// Everything a side holds once connected: the device, the resources and both sides' keys.
///
/// Memory layout of the one registered region, per QP `i` of `q`, each slot `buf` bytes:
/// the *local* slot `i` (what this side sends or WRITEs from, and where READ and atomic
/// results land) and the *target* slot `q + i`, whose address the peer gets (the target of
/// its WRITEs, SENDs and atomics, the source of its READs) — perftest's layout, starting
/// [`VADDR_TAG`] bytes into the region (see [`check`] for why).
pub(crate) struct Ctx {
    pub cfg: Config,
    pub device: Device,
    /// Ends the run when the peer goes silent (`--timeout`).
    pub watchdog: Option<super::watch::Watchdog>,
    pub role: Role,
    /// The out-of-band session (taken at the end to close it).
    pub sess: Option<PerftestSession<Control>>,
    /// A second handle on the control channel, to notice the peer moving on (timed runs).
    pub peek: Control,
    /// `-R`: the test QPs' rdma_cm connections (closed at the end).
    pub links: Option<DataLinks>,
    pub mr: MemoryRegion,
    pub buf: u64,
    pub cycle_buffer: u64,
    pub cache_line: u64,
    pub send_cq: CompletionQueue,
    pub recv_cq: CompletionQueue,
    pub qps: Vec<QueuePair>,
    /// The shared receive queue of `--use-srq`.
    pub srq: Option<SharedReceiveQueue>,
    pub my: Vec<PerftestDest>,
    pub rem: Vec<PerftestDest>,
    pub mtu: Mtu,
    pub schedule: KeySchedule,
    /// The peer's keys carry softrdma's marks (see [`check`]).
    pub peer_softrdma: bool,
    /// The data check's own memory (stamps, READ landing slots).
    pub check_mem: CheckMemory,
    /// Messages each QP posted in the last size (the data-check counts).
    pub sent: Vec<u64>,
    /// Messages each QP received in the last size (SEND tests' receiving side).
    pub received: Vec<u64>,
    /// Warm-up messages each QP posted (`--perform_warm_up`), all sizes together: atomics
    /// among them change the targets as much as measured ones.
    pub warmed: Vec<u64>,
    /// Sampled READs verified on arrival.
    pub reads_verified: u64,
    /// UD: where each QP's SENDs go (the peer QP's address, QPN and [`DEF_QKEY`]).
    pub ud: Vec<UdDest>,
    /// Bytes before each received message: the GRH area on UD, else 0.
    pub grh: u64,
}

impl Ctx {
    /// Where message `seq` goes in a slot: perftest walks the first `cycle_buffer` bytes in
    /// cache-line-aligned strides when messages are at most half of it, else always offset 0.
    pub(crate) fn cycle_off(&self, size: u64, seq: u64) -> u64 {
        let inc = stride(size, self.cache_line);
        if size <= self.cycle_buffer / 2 {
            let slots = (self.cycle_buffer / inc).max(1);
            (seq % slots) * inc
        } else {
            0
        }
    }

    /// Distinct target positions of messages of `size` in a slot (perftest's cycle).
    pub(crate) fn positions(&self, size: u64) -> u64 {
        if size <= self.cycle_buffer / 2 && self.cfg.test.is_bw() {
            (self.cycle_buffer / stride(size, self.cache_line)).max(1)
        } else {
            1
        }
    }

    /// Offset in the region of QP `i`'s local slot.
    pub(crate) fn local_off(&self, i: usize) -> u64 {
        VADDR_TAG + i as u64 * self.buf
    }

    /// Offset in the region of QP `i`'s target slot.
    pub(crate) fn target_off(&self, i: usize) -> u64 {
        VADDR_TAG + (self.qps.len() + i) as u64 * self.buf
    }

    /// Both sides are softrdma and `--check` is on: the stamped check runs.
    pub(crate) fn softrdma_check(&self) -> bool {
        self.cfg.check && self.peer_softrdma
    }

    /// Messages of this run carry stamps (WRITE and SEND tests, bar write-lat, whose last
    /// byte is the ping-pong counter).
    pub(crate) fn stamped(&self) -> bool {
        self.softrdma_check()
            && matches!(self.cfg.test.verb(), Verb::Write | Verb::Send)
            && self.cfg.test != TestName::WriteLat
    }

    /// The open out-of-band session.
    pub(crate) fn sess(&mut self) -> Result<&mut PerftestSession<Control>, PerfError> {
        self.sess
            .as_mut()
            .ok_or_else(|| PerfError::new("the out-of-band connection is closed"))
    }

    /// A key exchange with QP 0's keys: perftest's barrier.
    pub(crate) fn sync(&mut self) -> Result<(), PerfError> {
        let my = self.my[0];
        self.sess()?.exchange_keys(&my)?;
        self.beat();
        Ok(())
    }

    /// How long to wait for a completion before calling the peer gone.
    pub(crate) fn stall(&self) -> Duration {
        self.cfg.timeout.unwrap_or(STALL)
    }

    /// This side made progress: tells the watchdog, if any.
    pub(crate) fn beat(&self) {
        if let Some(w) = &self.watchdog {
            w.beat();
        }
    }

    /// Whether the peer has sent something on the out-of-band connection (it finished its
    /// part of the traffic and moved on), without consuming it.
    pub(crate) fn peer_moved_on(&self) -> bool {
        self.peek.peer_moved_on()
    }
}

/// Where the test QPs of a `-R` run connect.
#[derive(Clone, Copy)]
enum CmSide {
    /// The server's address and port.
    Client(SocketAddr),
    /// The port to listen on.
    Server(u16),
}

/// `host`'s IPv4 address (perftest's rdma_cm mode is IPv4 only: `AF_INET` hints).
fn resolve_ipv4(host: &str, port: u16) -> Result<SocketAddr, PerfError> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(SocketAddr::is_ipv4))
        .ok_or_else(|| PerfError::new(format!("cannot resolve {host} to an IPv4 address")))
}

/// The device of a run on `ip`, as the flags ask.
fn open_device(cfg: &Config, ip: IpAddr) -> Result<Device, PerfError> {
    let mut dcfg = DeviceConfig::new(ip).busy_poll(cfg.busy_poll).gso(cfg.gso);
    if let Some(line) = cfg.cc_line_bps {
        // A burst of a whole GSO batch (64 packets of 4 KiB): the device sends in batches,
        // and a smaller bucket would make it wait for a timer inside every batch.
        dcfg = dcfg.congestion_control(CcConfig {
            pace_burst_bytes: 256 << 10,
            ..CcConfig::dcqcn(line)
        });
    }
    if let Some(path) = &cfg.pcap {
        dcfg = dcfg.pcap(path);
    }
    Device::open(dcfg)
        .map_err(|e| PerfError::new(format!("cannot open a softrdma device on {ip}: {e}")))
}

/// The largest message on an rdma_cm control QP: perftest's 56-byte keys, or the data
/// check's counts between softrdma peers (see `check::send_counts`).
fn control_slot(qps: u32) -> usize {
    RDMA_CM_KEY_LEN.max(check::counts_len(qps as usize))
}

/// The control channel, the device and this side's role.
fn meet(
    cfg: &Config,
    conn: Conn,
    p: &mut Printer,
) -> Result<(PerftestSession<Control>, Control, Device, Role), PerfError> {
    let tcp = |stream: TcpStream, role| -> Result<_, PerfError> {
        let local: SocketAddr = stream.local_addr()?;
        let control = Control::Tcp(stream);
        control.set_timeout(Some(DEFAULT_TIMEOUT))?;
        let ip = cfg.bind.unwrap_or(local.ip().to_canonical());
        let peek = control.try_clone()?;
        let device = open_device(cfg, ip)?;
        Ok((
            PerftestSession::from_stream(control, role),
            peek,
            device,
            role,
        ))
    };
    let over_cm = |c: CmControl, device: Device, role: Role| -> Result<_, PerfError> {
        let control = Control::Cm(std::sync::Arc::new(c));
        let peek = control.try_clone()?;
        let sess = PerftestSession::over_rdma_cm(control, role, cfg.gid_index);
        Ok((sess, peek, device, role))
    };
    match conn {
        Conn::Connect(host, port) => {
            let s = softrdma_oob::connect((host.as_str(), port), Some(DEFAULT_TIMEOUT))
                .map_err(|e| PerfError::new(format!("cannot connect to {host}:{port}: {e}")))?;
            tcp(s, Role::Client)
        }
        Conn::Listen(l) => {
            p.line(report::WAITING);
            let (s, _) = crate::limits::accept_within(&l, cfg.timeout)
                .map_err(|e| PerfError::new(format!("waiting for a client: {e}")))?;
            s.set_nodelay(true)?;
            tcp(s, Role::Server)
        }
        Conn::CmConnect(host, port) => {
            let dst = resolve_ipv4(&host, port)?;
            let ip = match cfg.bind {
                Some(ip) => ip,
                None => crate::route::local_ip_towards(dst.ip())
                    .map_err(|e| PerfError::new(format!("no route to {}: {e}", dst.ip())))?,
            };
            let device = open_device(cfg, ip)?;
            let c = cmlink::control_client(&device, dst, control_slot(cfg.qps))?;
            over_cm(c, device, Role::Client)
        }
        Conn::CmListen(ip, port, ready) => {
            let device = open_device(cfg, ip)?;
            p.line(report::WAITING);
            let slot = control_slot(cfg.qps);
            let c = cmlink::control_server(&device, port, slot, ready, cfg.timeout)?;
            over_cm(c, device, Role::Server)
        }
    }
}

/// Connects or accepts, opens the device, runs versions, sys data and MTU, prints the banner,
/// creates the resources and exchanges the keys up to the first byte of traffic.
pub(crate) fn setup(cfg: &Config, conn: Conn, p: &mut Printer) -> Result<Ctx, PerfError> {
    let cm = match &conn {
        Conn::CmConnect(host, port) => Some(CmSide::Client(resolve_ipv4(host, *port)?)),
        Conn::CmListen(_, port, _) => Some(CmSide::Server(*port)),
        _ => None,
    };
    let (mut sess, peek, device, role) = meet(cfg, conn, p)?;
    let ip = device.ip();
    let gid = device.query_gid(1, cfg.gid_index).map_err(|e| {
        PerfError::new(format!(
            "GID index {} does not exist on {} ({e}); use -x 1",
            cfg.gid_index,
            device.name()
        ))
    })?;

    sess.exchange_versions()?;
    let sys = sess.exchange_sys_data(SysData::default())?;
    let active = device.query_port(1)?.active_mtu;
    let local_mtu = match cfg.mtu {
        Some(m) if m.bytes() > active.bytes() => {
            eprintln!(
                " Requested mtu is higher than active mtu \n Changing to active mtu - {}",
                active.ibv_enum()
            );
            active
        }
        Some(m) => m,
        None => active,
    };
    let mtu = sess.exchange_mtu(local_mtu.ibv_enum())?;
    let mtu = Mtu::from_ibv_enum(mtu).unwrap_or(local_mtu);
    let (cfg, note) = cfg
        .for_path_mtu(u64::from(mtu.bytes()))
        .map_err(PerfError::new)?;
    let cfg = &cfg;
    if let Some(note) = note {
        eprintln!("{note}");
    }
    p.line(&report::banner(cfg, role, device.name(), mtu.bytes()));

    // Resources, sized for the largest message (perftest's BUFF_SIZE per QP, two halves).
    let q = cfg.qps as usize;
    let cycle_buffer = u64::from(sys.cycle_buffer.max(64));
    let cache_line = u64::from(sys.cache_line_size.clamp(1, 4096));
    // A UD receive takes the 40-byte GRH area before the message (perftest's UD_ADDITION).
    let grh = if cfg.transport == Transport::UD {
        GRH_LEN as u64
    } else {
        0
    };
    let buf = (cfg.max_size() + grh)
        .max(cycle_buffer)
        .div_ceil(cycle_buffer)
        * cycle_buffer;
    let total = usize::try_from(buf * 2 * q as u64 + VADDR_TAG)
        .map_err(|_| PerfError::new("buffers too large for this machine"))?;
    let pd = device.alloc_pd();
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = pd
        .reg_mr(total, access)
        .map_err(|e| PerfError::new(format!("cannot register {total} bytes: {e}")))?;
    // Sources hold the pattern, targets start zeroed (see `Ctx`).
    let verb = cfg.test.verb();
    let fill_local = matches!(verb, Verb::Write | Verb::Send);
    for i in 0..q {
        let (local, target) = (VADDR_TAG + i as u64 * buf, VADDR_TAG + (q + i) as u64 * buf);
        let slot = usize::try_from(buf).unwrap_or(usize::MAX);
        if fill_local {
            mr.write(local as usize, &pattern(0, slot))?;
        }
        if verb == Verb::Read {
            mr.write(target as usize, &pattern(0, slot))?;
        }
    }
    let bw = cfg.test.is_bw();
    let tx = if bw {
        cfg.tx_depth
    } else {
        cfg.tx_depth.max(64)
    };
    let rx = if verb == Verb::Send {
        report::rx_depth(cfg)
    } else {
        1
    };
    let cqe = |per_qp: u32| (per_qp.saturating_mul(cfg.qps)).clamp(1, MAX_CQE);
    let send_cq = device.create_cq(cqe(tx))?;
    let recv_cq = device.create_cq(cqe(rx))?;
    // --use-srq: every QP receives from one SRQ, holding what the QPs' queues would have.
    let srq = if cfg.use_srq {
        Some(pd.create_srq(SrqAttr {
            max_wr: rx.saturating_mul(cfg.qps).max(1),
            max_sge: 1,
            srq_limit: 0,
        })?)
    } else {
        None
    };
    let init = QpInitAttr {
        send_cq: send_cq.clone(),
        recv_cq: recv_cq.clone(),
        qp_type: cfg.transport.qp_type(),
        cap: QpCaps {
            max_send_wr: tx,
            max_recv_wr: rx,
            // A stamped message gathers its stamp first (see `check`).
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: cfg.inline,
        },
        sq_sig_all: false,
        srq: srq.clone(),
    };
    let (qps, links) = match cm {
        None => {
            let qps = (0..q)
                .map(|_| pd.create_qp(&init))
                .collect::<Result<Vec<_>, _>>()?;
            (qps, None)
        }
        Some(side) => {
            // perftest's barriers around the rdma_cm connections (its `my_dest` is still
            // all zeros then).
            sess.exchange_keys(&PerftestDest::default())?;
            let reads = matches!(verb, Verb::Read | Verb::Atomic).then_some(cfg.out_reads);
            let param = cmlink::data_param(reads);
            let (links, qps) = match side {
                CmSide::Client(dst) => cmlink::data_client(&device, &pd, dst, q, &init, &param)?,
                CmSide::Server(port) => cmlink::data_server(&device, &pd, port, q, &init, &param)?,
            };
            sess.exchange_keys(&PerftestDest::default())?;
            (qps, Some(links))
        }
    };
    let mut my = Vec::with_capacity(q);
    for (i, qp) in qps.iter().enumerate() {
        my.push(PerftestDest {
            lid: 0,
            out_reads: cfg.out_reads,
            qpn: qp.qp_num(),
            psn: check::marked_psn(qp.local_psn()),
            // perftest sends no rkey in SEND tests.
            rkey: if verb == Verb::Send { 0 } else { mr.rkey() },
            vaddr: mr.addr() + VADDR_TAG + (q + i) as u64 * buf,
            gid,
            srqn: 0,
        });
    }
    for d in &my {
        p.line(&report::address("local", verb, d));
    }

    // Keys, in perftest's order.
    let schedule = if cfg.duplex {
        cfg.test
            .cm_test()
            .schedule_bidirectional(q, cfg.run_all, cfg.duration.is_some())
            .ok_or_else(|| PerfError::new("-b applies to bandwidth tests only"))?
    } else {
        cfg.test.cm_test().schedule(q, cfg.run_all)
    };
    let mut rem = Vec::with_capacity(q);
    for d in &my {
        rem.push(sess.exchange_keys(d)?);
    }
    let opts = |r: &PerftestDest| ConnectOptions {
        path_mtu: Some(mtu),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: cfg
            .out_reads
            .min(r.out_reads)
            .clamp(1, super::args::MAX_OUT_READS) as u8,
        max_dest_rd_atomic: cfg.out_reads.clamp(1, super::args::MAX_OUT_READS) as u8,
        ..ConnectOptions::default()
    };
    let mut ud = Vec::new();
    // With -R the QPs are connected already (rdma_cm applied the peer's QPN and PSN).
    let to_connect = if links.is_none() { qps.len() } else { 0 };
    for ((qp, r), d) in qps.iter().zip(&rem).zip(&my).take(to_connect) {
        if !matches!(r.gid.to_ip(), Some(rip) if rip.is_ipv4() == ip.is_ipv4()) {
            return Err(PerfError::new(format!(
                "the peer's GID {} is not reachable from {ip} (is it using the IPv4-mapped GID? perftest needs -x 1 on rxe)",
                r.gid
            )));
        }
        let ep = QpEndpoint {
            gid: r.gid,
            qpn: r.qpn,
            psn: r.psn,
        };
        // connect() with the PSN advertised (softrdma's mark, see `check`).
        let o = opts(r);
        let psn = softrdma::Psn::new(d.psn);
        let connected = match cfg.transport {
            Transport::RC => qp
                .to_init(o.access)
                .and_then(|()| qp.to_rtr(&ep, &o))
                .and_then(|()| {
                    qp.modify(&QpAttr::rc_rts(
                        psn,
                        o.timeout,
                        o.retry_cnt,
                        o.rnr_retry,
                        o.max_rd_atomic,
                    ))
                }),
            // to_rtr sets only what UC has (path, MTU, remote QPN and PSN).
            Transport::UC => qp
                .to_init(o.access)
                .and_then(|()| qp.to_rtr(&ep, &o))
                .and_then(|()| qp.modify(&QpAttr::unreliable_rts(psn))),
            Transport::UD => qp
                .modify(&QpAttr::ud_init(DEF_QKEY))
                .and_then(|()| qp.modify(&QpAttr::ud_rtr()))
                .and_then(|()| qp.modify(&QpAttr::unreliable_rts(psn))),
        };
        connected
            .map_err(|e| PerfError::new(format!("cannot connect QP {:#x}: {e}", qp.qp_num())))?;
        if cfg.transport == Transport::UD {
            // perftest's AH: the peer's GID from our GID index, hop limit 0xff.
            let attr = AhAttr {
                hop_limit: 0xff,
                ..AhAttr::new(r.gid, cfg.gid_index as u8)
            };
            let ah = pd
                .create_ah(&attr)
                .map_err(|e| PerfError::new(format!("Failed to create AH: {e}")))?;
            ud.push(ah.dest(r.qpn, DEF_QKEY));
        }
    }
    for r in &rem {
        p.line(&report::address("remote", verb, r));
    }
    let rest = schedule.setup_keys.saturating_sub(q);
    if cfg.test.is_bw() && verb == Verb::Send {
        // ib_send_bw: sync, then every QP's keys again.
        sess.exchange_keys(&my[0])?;
        for d in my.iter().take(rest.saturating_sub(1)) {
            sess.exchange_keys(d)?;
        }
    } else if cfg.test.is_bw() {
        // RDMA *_bw: every QP's keys again, then sync.
        for d in my.iter().take(rest.saturating_sub(1)) {
            sess.exchange_keys(d)?;
        }
        sess.exchange_keys(&my[0])?;
    } else {
        for _ in 0..rest {
            sess.exchange_keys(&my[0])?;
        }
    }
    let barriers = if links.is_some() { 2 } else { 0 };
    debug_assert_eq!(sess.keys_exchanged(), schedule.setup_keys + barriers);
    // From here on the peer may be busy with traffic for as long as the run lasts: wait for
    // it without limit, as perftest does (the traffic loops have their own stall checks).
    sess.get_ref().set_timeout(None)?;
    let _ = std::io::stdout().flush();
    let peer_softrdma = check::is_softrdma(&rem);
    let mut check_mem = CheckMemory::none();
    if cfg.check && peer_softrdma {
        // With -b both sides send (and receive, and READ) as a client does.
        let sends = matches!(verb, Verb::Write | Verb::Send)
            && cfg.test != TestName::WriteLat
            && (role == Role::Client || !bw || cfg.duplex);
        if sends {
            let depth = u64::from(tx);
            let len = q as u64 * depth * check::STAMP_LEN as u64;
            let stamps = pd
                .reg_mr(len as usize, AccessFlags::LOCAL_WRITE)
                .map_err(|e| PerfError::new(format!("cannot register the check's stamps: {e}")))?;
            check_mem = check_mem.with_stamps(stamps, depth);
        }
        let receives = verb == Verb::Send && (role == Role::Server || !bw || cfg.duplex);
        if receives {
            let slot = cfg.max_size() + grh;
            let ring = check::landing_ring(q as u64, u64::from(rx), slot);
            let len = usize::try_from(q as u64 * ring * slot)
                .map_err(|_| PerfError::new("receive slots too large for this machine"))?;
            let recv = pd.reg_mr(len, AccessFlags::LOCAL_WRITE).map_err(|e| {
                PerfError::new(format!("cannot register the check's receive slots: {e}"))
            })?;
            check_mem = check_mem.with_recv(recv, ring, slot);
        }
        if verb == Verb::Read && (role == Role::Client || cfg.duplex) {
            let slot = cfg.max_size();
            let ring = check::landing_ring(q as u64, u64::from(tx), slot);
            let len = usize::try_from(q as u64 * ring * slot)
                .map_err(|_| PerfError::new("READ landing slots too large for this machine"))?;
            let landing = pd.reg_mr(len, AccessFlags::LOCAL_WRITE).map_err(|e| {
                PerfError::new(format!(
                    "cannot register the check's READ landing slots: {e}"
                ))
            })?;
            check_mem = check_mem.with_landing(landing, ring, slot);
        }
    }
    let watchdog = match cfg.timeout {
        Some(limit) => Some(super::watch::Watchdog::start(
            limit,
            device.clone(),
            peek.try_clone()?,
        )?),
        None => None,
    };
    Ok(Ctx {
        cfg: cfg.clone(),
        device,
        watchdog,
        role,
        sess: Some(sess),
        peek,
        links,
        mr,
        buf,
        cycle_buffer,
        cache_line,
        send_cq,
        recv_cq,
        qps,
        srq,
        my,
        rem,
        mtu,
        schedule,
        peer_softrdma,
        check_mem,
        sent: vec![0; q],
        received: vec![0; q],
        warmed: vec![0; q],
        reads_verified: 0,
        ud,
        grh,
    })
}
