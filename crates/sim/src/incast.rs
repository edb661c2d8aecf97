//! Incast: `N` senders, each with one RC QP, SEND messages as fast as they may to one
//! receiver across switches ([`crate::switch`]); the receiver's port is the bottleneck. The
//! experiment reports what congestion control is about — how busy the bottleneck stays, how
//! fairly the senders share it, how deep its queue gets, what is dropped, paused, notified
//! and resent, how long messages take — and checks, as every simulation here does, that the
//! data still arrives exactly once and in order (each message carries its sender and sequence
//! number, its bytes a pattern of both).

use std::net::IpAddr;
use std::sync::Arc;

use softrdma_proto::cc::{CcAlgorithm, CcConfig, DcqcnParams, TimelyParams};
use softrdma_proto::{
    AccessFlags, CqHandle, Duration, EngineConfig, Instant, Mtu, RecvWr, SendOp, SendWr, Sge,
    VecMemory, WcOpcode, WcStatus, WorkCompletion,
};
use softrdma_wire::Psn;

use crate::fabric::{CapturePoint, Fabric, FabricConfig, NodeId, SimError};
use crate::setup::{connect_rc, node_resources, RcParams, SetupError};
use crate::switch::{Pfc, Red, SwitchConfig, Topology};

/// An incast experiment. [`IncastConfig::new`] has the defaults, in the spirit of the DCQCN
/// paper's: 40 Gb/s links with 1 µs of propagation each, a 4 MiB buffer per switch port,
/// `Kmin` 5 KB, `Kmax` 200 KB, `Pmax` 20 % (the paper's 1 % lets the queue of a 16-sender
/// incast settle just above `Kmax` in this model), eight 64 KiB messages posted per sender,
/// 4096-byte MTU, 40 ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IncastConfig {
    /// Senders (the receiver is one more node).
    pub senders: usize,
    /// The congestion control every node runs.
    pub cc: IncastCc,
    /// PFC at the switches (thresholds below).
    pub pfc: bool,
    /// How the hosts are wired.
    pub topology: Topology,
    /// How long the senders send.
    pub duration: Duration,
    /// Seed of the marking decisions and the PSNs.
    pub seed: u64,
    /// Line rate of every link, bits per second.
    pub link_bps: u64,
    /// Propagation delay of every link.
    pub delay: Duration,
    /// Buffer of every switch port, bytes.
    pub buffer_bytes: u64,
    /// ECN marking at switch ports.
    pub red: Red,
    /// PFC thresholds (used with `pfc`).
    pub pfc_thresholds: Pfc,
    /// Size of each message.
    pub message_bytes: u32,
    /// Messages each sender keeps posted.
    pub window: u32,
    /// Path MTU.
    pub mtu: Mtu,
    /// DCQCN's parameters (`None`: the paper's for the link rate).
    pub dcqcn_params: Option<DcqcnParams>,
    /// The notification point's interval between CNPs per QP.
    pub cnp_interval: Duration,
}

impl IncastConfig {
    /// `senders` senders with the defaults.
    pub fn new(senders: usize) -> IncastConfig {
        IncastConfig {
            senders,
            cc: IncastCc::Dcqcn,
            pfc: false,
            topology: Topology::Star,
            duration: Duration::from_millis(40),
            seed: 1,
            link_bps: 40_000_000_000,
            delay: Duration::from_micros(1),
            buffer_bytes: 4 << 20,
            red: Red {
                kmin: 5_000,
                kmax: 200_000,
                pmax: 0.2,
            },
            pfc_thresholds: Pfc {
                xoff: 96 << 10,
                xon: 64 << 10,
            },
            message_bytes: 64 << 10,
            window: 8,
            mtu: Mtu::Mtu4096,
            dcqcn_params: None,
            cnp_interval: CcConfig::OFF.cnp_interval,
        }
    }
}

/// Congestion control of an incast run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IncastCc {
    /// None: senders send at will, switches do not mark.
    None,
    /// DCQCN at every QP, CNPs from the receiver, ECN marking at the switches.
    Dcqcn,
    /// TIMELY at every QP (round trips only: switches do not mark).
    Timely,
}

/// One sample of the run, for plots.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Virtual time, µs.
    pub t_us: f64,
    /// Bytes queued at the bottleneck port.
    pub queue_bytes: u64,
    /// Each sender's rate, Gb/s: what DCQCN allows it, or (without DCQCN) what it delivered
    /// over the last sampling period.
    pub rates_gbps: Vec<f64>,
}

/// What an incast run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct IncastReport {
    /// Busy fraction of the bottleneck port over the second half of the run.
    pub utilization: f64,
    /// Jain's fairness index of the senders' throughput over the second half.
    pub jain: f64,
    /// 99th percentile of the bottleneck queue over the second half, sampled every
    /// microsecond.
    pub queue_p99_bytes: u64,
    /// The deepest the bottleneck queue got.
    pub queue_max_bytes: u64,
    /// Packets dropped at full switch ports.
    pub drops: u64,
    /// PFC PAUSE frames.
    pub pause_frames: u64,
    /// Packets marked Congestion Experienced.
    pub ecn_marks: u64,
    /// CNPs the receiver sent.
    pub cnps: u64,
    /// Request packets the senders sent again.
    pub retransmissions: u64,
    /// Messages completed.
    pub messages: u64,
    /// 99th percentile of message completion times (post to send completion), µs.
    pub fct_p99_us: f64,
    /// Goodput at the receiver over the whole run, Gb/s.
    pub goodput_gbps: f64,
    /// Data that did not arrive exactly once, in order and intact (must be 0).
    pub mismatches: u64,
    /// Samples every `duration / 200`, for plots.
    pub samples: Vec<Sample>,
}

/// Per-message header: magic, sender, sequence number.
const MAGIC: u32 = 0x01ca_5700;
const HEADER: usize = 16;
/// Receives the receiver keeps posted per sender.
const RECV_DEPTH: u32 = 16;
const BASE: u64 = 0x10_0000_0000;

/// Byte `i` of message `seq` of sender `s` (after the header).
fn pattern_byte(s: usize, seq: u64, i: usize) -> u8 {
    (s as u64 * 131 + seq * 7 + i as u64 * 13) as u8
}

fn message(s: usize, seq: u64, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len).map(|i| pattern_byte(s, seq, i)).collect();
    m[..4].copy_from_slice(&MAGIC.to_le_bytes());
    m[4..8].copy_from_slice(&(s as u32).to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    m
}

struct Sender {
    node: NodeId,
    qpn: u32,
    cq: CqHandle,
    key: u32,
    mem: Arc<VecMemory>,
    next_seq: u64,
    posted_at: Vec<Instant>,
    completed: u64,
}

struct Receiver {
    node: NodeId,
    qpns: Vec<u32>,
    cq: CqHandle,
    key: u32,
    mem: Arc<VecMemory>,
    expected: Vec<u64>,
    bytes: Vec<u64>,
    bytes_second_half: Vec<u64>,
}

/// Why an incast run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum IncastError {
    /// The fabric stopped.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// Setting up the QPs, memory or receives failed.
    #[error("setup: {0}")]
    Setup(String),
}

fn setup_err(e: SetupError) -> IncastError {
    match e {
        SetupError::Sim(e) => IncastError::Sim(e),
        SetupError::Engine { step, source } => IncastError::Setup(format!("{step}: {source}")),
    }
}

/// Runs one incast experiment.
pub fn run_incast(cfg: &IncastConfig) -> Result<IncastReport, IncastError> {
    run_incast_captured(cfg, None)
}

/// [`run_incast`], writing every datagram as it reaches its host — ECN marks and CNPs
/// included — to `capture` as pcap.
pub fn run_incast_captured(
    cfg: &IncastConfig,
    capture: Option<Box<dyn std::io::Write>>,
) -> Result<IncastReport, IncastError> {
    let n = cfg.senders.max(1);
    let mut fabric = Fabric::new(FabricConfig {
        capture_point: CapturePoint::Delivery,
        ..FabricConfig::new(cfg.seed)
    });
    if let Some(out) = capture {
        fabric.capture_to(out)?;
    }
    let engine_cfg = |i: usize| EngineConfig {
        port_mtu: cfg.mtu,
        cc: match cfg.cc {
            IncastCc::None => CcConfig::OFF,
            IncastCc::Dcqcn => CcConfig {
                algorithm: Some(CcAlgorithm::Dcqcn(
                    cfg.dcqcn_params
                        .unwrap_or_else(|| DcqcnParams::paper(cfg.link_bps)),
                )),
                cnp_interval: cfg.cnp_interval,
                ..CcConfig::dcqcn(cfg.link_bps)
            },
            // The base round trip: out and back over at most four links.
            IncastCc::Timely => CcConfig {
                algorithm: Some(CcAlgorithm::Timely(TimelyParams::paper(
                    cfg.link_bps,
                    cfg.delay * 8,
                ))),
                ..CcConfig::OFF
            },
        },
        // TIMELY learns from round trips: ask for an ACK every few packets, for samples.
        ack_req_every: if cfg.cc == IncastCc::Timely { 4 } else { 64 },
        key_seed: cfg.seed ^ i as u64,
        peers_use_small_ipv4_ids: true,
        ..EngineConfig::new(IpAddr::V4(Fabric::default_ip(i)))
    };
    for i in 0..=n {
        fabric.add_node_with(engine_cfg(i))?;
    }
    fabric.use_switches(
        SwitchConfig {
            link_bps: cfg.link_bps,
            delay: cfg.delay,
            buffer_bytes: cfg.buffer_bytes,
            red: (cfg.cc == IncastCc::Dcqcn).then_some(cfg.red),
            pfc: cfg.pfc.then_some(cfg.pfc_thresholds),
            topology: cfg.topology,
        },
        cfg.seed,
    );
    let msg = cfg.message_bytes.max(HEADER as u32) as usize;
    let window = cfg.window.max(1);
    let params = RcParams {
        mtu: cfg.mtu,
        caps: softrdma_proto::QpCaps {
            max_send_wr: window,
            max_recv_wr: RECV_DEPTH,
            ..Default::default()
        },
        ..RcParams::default()
    };
    let rx_node = NodeId(n);
    let rx_res = node_resources(&mut fabric, rx_node, (n as u32 * RECV_DEPTH * 2) as usize)
        .map_err(setup_err)?;
    let rx_len = n * RECV_DEPTH as usize * msg;
    let rx_mem = Arc::new(VecMemory::new(rx_len));
    let rx_key = fabric
        .engine_mut(rx_node)?
        .reg_mr(
            rx_res.pd,
            BASE,
            rx_len as u64,
            AccessFlags::LOCAL_WRITE,
            rx_mem.clone(),
        )
        .map_err(|e| IncastError::Setup(format!("reg_mr: {e}")))?;
    let mut senders = Vec::with_capacity(n);
    let mut rx_qpns = Vec::with_capacity(n);
    for s in 0..n {
        let node = NodeId(s);
        let res = node_resources(&mut fabric, node, (window * 2) as usize).map_err(setup_err)?;
        let psn = |k: u64| Psn::new(((cfg.seed.wrapping_mul(0x9e37) ^ k) & 0xff_ffff) as u32);
        let conn = connect_rc(
            &mut fabric,
            &res,
            &rx_res,
            &params,
            psn(s as u64),
            psn(s as u64 + 1000),
        )
        .map_err(setup_err)?;
        let mem = Arc::new(VecMemory::new(window as usize * msg));
        let key = fabric
            .engine_mut(node)?
            .reg_mr(
                res.pd,
                BASE,
                (window as usize * msg) as u64,
                AccessFlags::LOCAL_WRITE,
                mem.clone(),
            )
            .map_err(|e| IncastError::Setup(format!("reg_mr: {e}")))?;
        rx_qpns.push(conn.b.qpn);
        senders.push(Sender {
            node,
            qpn: conn.a.qpn,
            cq: res.send_cq,
            key,
            mem,
            next_seq: 0,
            posted_at: vec![Instant::ZERO; window as usize],
            completed: 0,
        });
    }
    let mut rx = Receiver {
        node: rx_node,
        qpns: rx_qpns,
        cq: rx_res.recv_cq,
        key: rx_key,
        mem: rx_mem,
        expected: vec![0; n],
        bytes: vec![0; n],
        bytes_second_half: vec![0; n],
    };
    for s in 0..n {
        for slot in 0..RECV_DEPTH {
            post_recv(&mut fabric, &rx, s, slot, msg)?;
        }
    }

    let end = Instant::ZERO + cfg.duration;
    let half = Instant::ZERO + cfg.duration / 2;
    let bottleneck = rx_node;
    let sample_every = Duration::from_micros(1);
    let plot_every = (cfg.duration / 200).max(Duration::from_micros(1));
    let mut next_sample = Instant::ZERO;
    let mut next_plot = Instant::ZERO + plot_every;
    let mut queue_samples = Vec::new();
    let mut samples = Vec::new();
    let mut last_plot_bytes = vec![0u64; n];
    let mut busy_at_half = None;
    let mut fcts = Vec::new();
    let mut mismatches = 0u64;
    let mut failure: Option<IncastError> = None;
    let mut wcs = Vec::new();
    fabric.run_until(end, |f| {
        let now = f.now();
        // Senders: completions, then keep the window full.
        for s in senders.iter_mut() {
            wcs.clear();
            let polled = f
                .engine_mut(s.node)
                .map(|e| e.poll_cq(s.cq, usize::MAX, &mut wcs).is_ok());
            if !matches!(polled, Ok(true)) {
                mismatches += 1;
            }
            for wc in &wcs {
                if wc.status != WcStatus::Success {
                    mismatches += 1;
                    continue;
                }
                s.completed += 1;
                let at = s.posted_at[(wc.wr_id % u64::from(window)) as usize];
                fcts.push(now.saturating_duration_since(at).as_nanos() as u64);
            }
            while now < end && s.next_seq < s.completed + u64::from(window) {
                let seq = s.next_seq;
                let slot = (seq % u64::from(window)) as usize;
                s.mem.write(slot * msg, &message(s.node.0, seq, msg));
                s.posted_at[slot] = now;
                let wr = SendWr::signaled(
                    seq,
                    SendOp::Send,
                    vec![Sge {
                        addr: BASE + (slot * msg) as u64,
                        length: msg as u32,
                        lkey: s.key,
                    }],
                );
                match f.engine_mut(s.node).map(|e| e.post_send(now, s.qpn, wr)) {
                    Ok(Ok(())) => s.next_seq += 1,
                    _ => {
                        mismatches += 1;
                        break;
                    }
                }
            }
        }
        // The receiver: check every message, post its receive again.
        wcs.clear();
        let polled = f
            .engine_mut(rx.node)
            .map(|e| e.poll_cq(rx.cq, usize::MAX, &mut wcs).is_ok());
        if !matches!(polled, Ok(true)) {
            mismatches += 1;
        }
        for wc in wcs.drain(..) {
            mismatches += check_message(&mut rx, &wc, msg, now >= half);
            let s = (wc.wr_id >> 32) as usize;
            let slot = (wc.wr_id & 0xffff_ffff) as u32;
            if let Err(e) = post_recv(f, &rx, s, slot, msg) {
                failure.get_or_insert(e);
            }
        }
        // Samples.
        if now >= next_sample {
            if let Some((q, _, _)) = f.switch_port_to(bottleneck).filter(|_| now >= half) {
                queue_samples.push(q);
            }
            next_sample = now + sample_every;
            f.wake_at(next_sample.min(end));
        }
        if busy_at_half.is_none() && now >= half {
            busy_at_half = f.switch_port_to(bottleneck).map(|p| (now, p.2));
        }
        if now >= next_plot {
            let q = f.switch_port_to(bottleneck).map_or(0, |p| p.0);
            let rates = (0..n)
                .map(|s| {
                    let qp = f.engine(NodeId(s)).ok().and_then(|e| e.qp(senders[s].qpn));
                    match qp.and_then(|qp| qp.cc_rate_bps()) {
                        Some(r) => r / 1e9,
                        None => {
                            let b = rx.bytes[s] - last_plot_bytes[s];
                            b as f64 * 8.0 / plot_every.as_secs_f64() / 1e9
                        }
                    }
                })
                .collect();
            last_plot_bytes.clone_from(&rx.bytes);
            samples.push(Sample {
                t_us: now.as_nanos() as f64 / 1e3,
                queue_bytes: q,
                rates_gbps: rates,
            });
            next_plot = now + plot_every;
            f.wake_at(next_plot.min(end));
        }
        failure.is_some()
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    fabric.finish_capture()?;
    let now = fabric.now();
    // Every message a sender saw completed arrived; none arrived that was not sent.
    for (s, snd) in senders.iter().enumerate() {
        if rx.expected[s] < snd.completed || rx.expected[s] > snd.next_seq {
            mismatches += 1;
        }
    }
    let (_, queue_max, busy_end) = fabric.switch_port_to(bottleneck).unwrap_or_default();
    let utilization = match busy_at_half {
        Some((t, busy)) if now > t => {
            (busy_end - busy) as f64 / now.saturating_duration_since(t).as_nanos() as f64
        }
        _ => 0.0,
    };
    let jain = jain_index(&rx.bytes_second_half);
    let sw = fabric.switch_stats().unwrap_or_default();
    let stats = |i: usize| fabric.engine(NodeId(i)).map(|e| e.stats().clone());
    let mut retransmissions = 0;
    for s in 0..n {
        retransmissions += stats(s)?.retransmitted_packets;
    }
    let cnps = stats(n)?.cnps_sent;
    let delivered: u64 = rx.bytes.iter().sum();
    Ok(IncastReport {
        utilization: utilization.min(1.0),
        jain,
        queue_p99_bytes: percentile(&mut queue_samples, 0.99),
        queue_max_bytes: queue_max,
        drops: sw.drops,
        pause_frames: sw.pause_frames,
        ecn_marks: sw.ecn_marks,
        cnps,
        retransmissions,
        messages: senders.iter().map(|s| s.completed).sum(),
        fct_p99_us: percentile(&mut fcts, 0.99) as f64 / 1e3,
        goodput_gbps: delivered as f64 * 8.0 / cfg.duration.as_secs_f64() / 1e9,
        mismatches,
        samples,
    })
}

fn post_recv(
    f: &mut Fabric,
    rx: &Receiver,
    s: usize,
    slot: u32,
    msg: usize,
) -> Result<(), IncastError> {
    let offset = (s * RECV_DEPTH as usize + slot as usize) * msg;
    let wr = RecvWr {
        wr_id: (s as u64) << 32 | u64::from(slot),
        sg_list: vec![Sge {
            addr: BASE + offset as u64,
            length: msg as u32,
            lkey: rx.key,
        }],
    };
    f.engine_mut(rx.node)?
        .post_recv(rx.qpns[s], wr)
        .map_err(|e| IncastError::Setup(format!("post_recv: {e}")))
}

/// Checks one received message: from the sender of its QP, the next in its sequence, whole,
/// its bytes the sender's (sampled every 251 bytes, and the last). Returns the mismatches.
fn check_message(rx: &mut Receiver, wc: &WorkCompletion, msg: usize, second_half: bool) -> u64 {
    let s = (wc.wr_id >> 32) as usize;
    let slot = (wc.wr_id & 0xffff_ffff) as usize;
    if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv || s >= rx.expected.len() {
        return 1;
    }
    if wc.byte_len as usize != msg || rx.qpns[s] != wc.qp_num {
        return 1;
    }
    let offset = (s * RECV_DEPTH as usize + slot) * msg;
    let mut head = [0u8; HEADER];
    rx.mem.read(offset, &mut head);
    let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let sender = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    let mut seq_b = [0u8; 8];
    seq_b.copy_from_slice(&head[8..16]);
    let seq = u64::from_le_bytes(seq_b);
    let mut bad = u64::from(magic != MAGIC || sender != s || seq != rx.expected[s]);
    let mut byte = [0u8; 1];
    for i in (HEADER..msg).step_by(251).chain([msg - 1]) {
        rx.mem.read(offset + i, &mut byte);
        if byte[0] != pattern_byte(s, seq, i) {
            bad += 1;
            break;
        }
    }
    rx.expected[s] = seq.max(rx.expected[s]) + 1;
    rx.bytes[s] += msg as u64;
    if second_half {
        rx.bytes_second_half[s] += msg as u64;
    }
    bad
}

/// Jain's fairness index: (Σx)² / (n Σx²); 1 when all are equal.
pub fn jain_index(x: &[u64]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let sq: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if sq == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * sq)
}

/// The `p` quantile of `v` (sorted in place; 0 when empty).
fn percentile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}
