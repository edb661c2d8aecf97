//! UD and UC traffic beside the RC workload, checked against what unreliable transports may
//! and may not do.
//!
//! # What runs
//! Every pair of nodes is joined by a UC connection, both ends sending SEND, SEND with
//! immediate and RDMA WRITE with immediate; every node has a UD QP that sends SENDs (with and
//! without immediate) to every other node's UD QP; with three or more nodes and
//! [`DatagramConfig::multicast`], node 0 also sends to a multicast group every other node's
//! UD QP has joined. Each flow of messages from one sender to its destination(s) is a
//! *stream*.
//!
//! # The model
//! UD and UC may lose any message, and the fabric also duplicates and reorders packets. What
//! they must never do is deliver something that was not sent whole, or deliver it twice:
//! - every message is self-describing (a 16-byte header: magic, stream, sequence number,
//!   length) and its bytes are a function of the seed, the stream and the sequence number, so
//!   the receiver recomputes them: a corrupt or partial delivery cannot match;
//! - a delivery must come from the stream's sender (UD: the DETH's source QP and the GRH
//!   area's source address; UC: the connection), to one of the stream's destinations, with the
//!   immediate the message was sent with;
//! - UC delivers each message at most once and in order: a stream's deliveries on one
//!   connection have increasing sequence numbers (a late packet behind the expected PSN is a
//!   duplicate to UC, never a message);
//! - UD checks no PSNs (IBTA 9.8; rxe neither), so a datagram the network duplicated is
//!   delivered again — intact; the report counts such copies apart.
//!
//! Senders complete every work request successfully (neither transport reports losses). The
//! report counts what was sent, delivered and lost per transport.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use softrdma_proto::{
    AccessFlags, AddressVector, Instant, Mtu, QpCaps, RecvWr, RegionMemory, SendOp, SendWr, Sge,
    UdDest, VecMemory, WorkCompletion, MULTICAST_QPN,
};
use softrdma_wire::{Psn, GRH_LEN};

use crate::fabric::{Fabric, NodeId};
use crate::rng::SimRng;
use crate::setup::{connect_uc, node_resources, ud_qp, NodeResources, SetupError};
use crate::workload::Divergence;

mod check;

/// The Q_Key of every UD QP of the workload.
pub const QKEY: u32 = 0x1111_1111;
/// The multicast group node 0 sends to.
pub const GROUP: [u8; 4] = [239, 1, 0, 1];
/// Bytes of the header every message starts with (so no message is shorter).
pub const HEADER_LEN: usize = 16;
const MAGIC: u32 = 0x5544_5543; // "UDUC"

/// Shape of the UD/UC traffic. Everything random is drawn from `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramConfig {
    /// Seed of sizes, op choices, data and PSNs.
    pub seed: u64,
    /// Nodes.
    pub nodes: usize,
    /// UD SENDs to post in total (unicast and multicast).
    pub ud_ops: u64,
    /// UC operations to post in total.
    pub uc_ops: u64,
    /// Path MTU of the UC connections; UD messages are at most the port MTU and at most
    /// [`DatagramConfig::max_len`].
    pub mtu: Mtu,
    /// Largest message.
    pub max_len: u32,
    /// Send WRs each stream keeps outstanding.
    pub window: usize,
    /// Receives each QP keeps posted.
    pub recv_depth: usize,
    /// Node 0 also sends to a group every other node joined (needs three nodes).
    pub multicast: bool,
}

impl DatagramConfig {
    /// `ud_ops` UD and `uc_ops` UC operations between `nodes` nodes, MTU 1024, messages up to
    /// 3000 bytes (UD: up to the MTU), window 4, 8 receives per QP, multicast on.
    pub fn new(seed: u64, nodes: usize, ud_ops: u64, uc_ops: u64) -> DatagramConfig {
        DatagramConfig {
            seed,
            nodes,
            ud_ops,
            uc_ops,
            mtu: Mtu::Mtu1024,
            max_len: 3000,
            window: 4,
            recv_depth: 8,
            multicast: true,
        }
    }
}

/// What was sent, what arrived, and the verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatagramReport {
    /// UD SENDs to one QP, completed.
    pub ud_sent: u64,
    /// UD deliveries of a message already delivered: UD has no PSN checks (IBTA 9.8, rxe),
    /// so a datagram the network duplicated arrives twice, intact. Not a failure.
    pub ud_duplicates: u64,
    /// Of those, delivered (intact, once).
    pub ud_delivered: u64,
    /// UD SENDs to the multicast group, completed.
    pub mcast_sent: u64,
    /// Deliveries they should have made (sent × members).
    pub mcast_expected: u64,
    /// Deliveries made (intact, once per member).
    pub mcast_delivered: u64,
    /// UC operations completed.
    pub uc_sent: u64,
    /// Of those, delivered (intact, once, in order).
    pub uc_delivered: u64,
    /// Deliveries that broke the model (each counts once).
    pub mismatches: u64,
    /// The first of them.
    pub first_divergence: Option<Divergence>,
}

impl DatagramReport {
    /// Whether nothing broke the model (losses are allowed).
    pub fn passed(&self) -> bool {
        self.mismatches == 0 && self.first_divergence.is_none()
    }

    /// Successful completions: every send, and every delivery (a receive completion).
    pub fn successes(&self) -> u64 {
        self.ud_sent
            + self.mcast_sent
            + self.uc_sent
            + self.ud_delivered
            + self.ud_duplicates
            + self.mcast_delivered
            + self.uc_delivered
    }

    /// UD unicast messages lost.
    pub fn ud_lost(&self) -> u64 {
        self.ud_sent.saturating_sub(self.ud_delivered)
    }

    /// UC messages lost.
    pub fn uc_lost(&self) -> u64 {
        self.uc_sent.saturating_sub(self.uc_delivered)
    }

    /// Multicast deliveries lost.
    pub fn mcast_lost(&self) -> u64 {
        self.mcast_expected.saturating_sub(self.mcast_delivered)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ud,
    Mcast,
    Uc,
}

/// A registered buffer on one node.
#[derive(Clone)]
struct Region {
    mem: Arc<VecMemory>,
    key: u32,
    iova: u64,
}

impl Region {
    fn new(
        fabric: &mut Fabric,
        r: &NodeResources,
        iova: u64,
        len: u64,
    ) -> Result<Region, SetupError> {
        let mem = Arc::new(VecMemory::new(len as usize));
        let key = fabric
            .engine_mut(r.node)?
            .reg_mr(r.pd, iova, len, AccessFlags::all(), mem.clone())
            .map_err(|source| SetupError::Engine {
                step: "reg_mr",
                source,
            })?;
        Ok(Region { mem, key, iova })
    }

    /// `len` bytes at `off`, or an error if that is outside the region (a completion that
    /// claims more than its buffer holds).
    fn read(&self, off: u64, len: usize) -> Result<Vec<u8>, String> {
        let end = usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_add(len))
            .filter(|&end| end <= self.mem.len())
            .ok_or_else(|| {
                format!(
                    "{len} bytes at {off} are outside the {}-byte buffer",
                    self.mem.len()
                )
            })?;
        let mut out = vec![0u8; len];
        self.mem.read(end - len, &mut out);
        Ok(out)
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.iova + off,
            length: len,
            lkey: self.key,
        }
    }
}

/// One flow of messages from a sender QP to its destination(s).
struct Stream {
    kind: Kind,
    /// Its longest message (also the stride of its staging slots).
    max_len: u32,
    sender: NodeId,
    sender_qpn: u32,
    /// (node, QP) of every destination.
    dests: Vec<(NodeId, u32)>,
    /// Where UD sends go (unicast: the node's address; multicast: the group).
    ud_dest: Option<UdDest>,
    /// Send staging area, `window` slots of `max_len`.
    staging: Region,
    /// UC: the peer's WRITE target region and its rkey, one unique slot per message.
    write_target: Option<Region>,
    ops_left: u64,
    next_seq: u32,
    outstanding: usize,
    /// UC WRITEs with immediate: where message `seq` was written (offset, length).
    writes: BTreeMap<u32, (u64, u32)>,
    write_cursor: u64,
    /// Deliveries seen, per destination: (node, qpn, seq).
    seen: BTreeSet<(NodeId, u32, u32)>,
    /// UC: the last sequence number delivered.
    last_delivered: Option<u32>,
}

/// A QP that receives: its buffer slots and what it may receive.
struct Receiver {
    /// UC: the one stream arriving on this connection; UD: any stream naming it.
    uc_stream: Option<usize>,
    slots: Region,
    slot_len: u64,
}

/// The UD/UC workload. Drive it with [`DatagramWorkload::pump`] (a [`Fabric::run_until`]
/// predicate), then call [`DatagramWorkload::finish`].
pub struct DatagramWorkload {
    cfg: DatagramConfig,
    rng: SimRng,
    resources: Vec<NodeResources>,
    streams: Vec<Stream>,
    receivers: BTreeMap<(NodeId, u32), Receiver>,
    /// Per sending QP, the stream of each outstanding send WR in posting order: a UD QP
    /// carries several streams, and its completions come in that order.
    sends: BTreeMap<(NodeId, u32), VecDeque<usize>>,
    report: DatagramReport,
    wc_buf: Vec<WorkCompletion>,
}

impl fmt::Debug for DatagramWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatagramWorkload")
            .field("cfg", &self.cfg)
            .field("streams", &self.streams.len())
            .field("report", &self.report)
            .finish()
    }
}

/// Base of the I/O virtual addresses the workload registers (apart from the RC workload's).
const IOVA_BASE: u64 = 0x4000_0000_0000;

impl DatagramWorkload {
    /// Creates the QPs, connections, group membership and buffers, and posts the receives.
    pub fn setup(fabric: &mut Fabric, cfg: DatagramConfig) -> Result<DatagramWorkload, SetupError> {
        let mut rng = SimRng::new(cfg.seed).fork(0x0064_6772_616d);
        // A UD QP carries a stream to every other node and maybe the group.
        let caps = QpCaps {
            max_send_wr: (cfg.window as u32).max(1) * (cfg.nodes as u32).max(1),
            max_recv_wr: (cfg.recv_depth as u32).max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let cq_len = 4 * (cfg.window + cfg.recv_depth) * cfg.nodes.max(1) * cfg.nodes.max(1);
        let resources = (0..cfg.nodes)
            .map(|i| node_resources(fabric, NodeId(i), cq_len.max(64)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut next_iova = IOVA_BASE;
        let mut region = |fabric: &mut Fabric, r: &NodeResources, len: u64| {
            let iova = next_iova;
            next_iova += len.next_multiple_of(1 << 20).max(1 << 20);
            Region::new(fabric, r, iova, len)
        };
        let window = cfg.window.max(1) as u64;
        let max_len = u64::from(cfg.max_len.max(HEADER_LEN as u32));
        let mut streams = Vec::new();
        let mut receivers = BTreeMap::new();

        // UD: one QP per node, one stream per ordered pair; the group last.
        let ud_qpns: Vec<u32> = resources
            .iter()
            .map(|r| ud_qp(fabric, r, caps, QKEY, draw_psn(&mut rng)))
            .collect::<Result<_, _>>()?;
        let ud_len = max_len.min(u64::from(
            fabric.engine(NodeId(0))?.config().port_mtu.bytes(),
        ));
        let group = IpAddr::from(GROUP);
        let multicast = cfg.multicast && cfg.nodes >= 3;
        for (i, r) in resources.iter().enumerate() {
            let slots = region(
                fabric,
                r,
                u64::from(cfg.recv_depth.max(1) as u32) * (GRH_LEN as u64 + ud_len),
            )?;
            receivers.insert(
                (r.node, ud_qpns[i]),
                Receiver {
                    uc_stream: None,
                    slots,
                    slot_len: GRH_LEN as u64 + ud_len,
                },
            );
            if multicast && i > 0 {
                fabric
                    .engine_mut(r.node)?
                    .attach_mcast(ud_qpns[i], group)
                    .map_err(|source| SetupError::Engine {
                        step: "attach_mcast",
                        source,
                    })?;
            }
        }
        let mut ud_streams = Vec::new();
        for (i, a) in resources.iter().enumerate() {
            for (j, b) in resources.iter().enumerate() {
                if i == j {
                    continue;
                }
                let staging = region(fabric, a, window * ud_len)?;
                ud_streams.push(streams.len());
                streams.push(Stream {
                    kind: Kind::Ud,
                    max_len: ud_len as u32,
                    sender: a.node,
                    sender_qpn: ud_qpns[i],
                    dests: vec![(b.node, ud_qpns[j])],
                    ud_dest: Some(UdDest {
                        av: av(IpAddr::V4(fabric.ip(b.node)?)),
                        remote_qpn: ud_qpns[j],
                        remote_qkey: QKEY,
                    }),
                    staging,
                    write_target: None,
                    ops_left: 0,
                    next_seq: 0,
                    outstanding: 0,
                    writes: BTreeMap::new(),
                    write_cursor: 0,
                    seen: BTreeSet::new(),
                    last_delivered: None,
                });
            }
        }
        if multicast {
            let staging = region(fabric, &resources[0], window * ud_len)?;
            ud_streams.push(streams.len());
            streams.push(Stream {
                kind: Kind::Mcast,
                max_len: ud_len as u32,
                sender: resources[0].node,
                sender_qpn: ud_qpns[0],
                dests: (1..cfg.nodes).map(|j| (NodeId(j), ud_qpns[j])).collect(),
                ud_dest: Some(UdDest {
                    av: av(group),
                    remote_qpn: MULTICAST_QPN,
                    remote_qkey: QKEY,
                }),
                staging,
                write_target: None,
                ops_left: 0,
                next_seq: 0,
                outstanding: 0,
                writes: BTreeMap::new(),
                write_cursor: 0,
                seen: BTreeSet::new(),
                last_delivered: None,
            });
        }
        deal(&mut streams, &ud_streams, cfg.ud_ops);

        // UC: one connection per pair, a stream each way.
        let mut uc_streams = Vec::new();
        let per_pair = cfg.nodes * cfg.nodes.saturating_sub(1);
        let uc_per_stream = cfg.uc_ops.div_ceil(per_pair.max(1) as u64);
        for i in 0..cfg.nodes {
            for j in i + 1..cfg.nodes {
                let (a, b) = (resources[i], resources[j]);
                let (qa, qb) = connect_uc(
                    fabric,
                    &a,
                    &b,
                    cfg.mtu,
                    caps,
                    draw_psn(&mut rng),
                    draw_psn(&mut rng),
                )?;
                for (from, fq, to, tq) in [(a, qa, b, qb), (b, qb, a, qa)] {
                    let staging = region(fabric, &from, window * max_len)?;
                    let target = region(fabric, &to, uc_per_stream.max(1) * max_len)?;
                    let slots = region(fabric, &to, cfg.recv_depth.max(1) as u64 * max_len)?;
                    receivers.insert(
                        (to.node, tq),
                        Receiver {
                            uc_stream: Some(streams.len()),
                            slots,
                            slot_len: max_len,
                        },
                    );
                    uc_streams.push(streams.len());
                    streams.push(Stream {
                        kind: Kind::Uc,
                        max_len: max_len as u32,
                        sender: from.node,
                        sender_qpn: fq,
                        dests: vec![(to.node, tq)],
                        ud_dest: None,
                        staging,
                        write_target: Some(target),
                        ops_left: 0,
                        next_seq: 0,
                        outstanding: 0,
                        writes: BTreeMap::new(),
                        write_cursor: 0,
                        seen: BTreeSet::new(),
                        last_delivered: None,
                    });
                }
            }
        }
        deal(&mut streams, &uc_streams, cfg.uc_ops);

        let mut wl = DatagramWorkload {
            cfg,
            rng,
            resources,
            streams,
            receivers,
            sends: BTreeMap::new(),
            report: DatagramReport::default(),
            wc_buf: Vec::new(),
        };
        let keys: Vec<(NodeId, u32)> = wl.receivers.keys().copied().collect();
        for key in keys {
            for slot in 0..cfg.recv_depth.max(1) as u64 {
                wl.post_recv(fabric, key, slot);
            }
        }
        Ok(wl)
    }

    /// The tallies so far.
    pub fn report(&self) -> &DatagramReport {
        &self.report
    }

    /// Whether every operation was posted and completed at its sender.
    pub fn is_done(&self) -> bool {
        self.streams
            .iter()
            .all(|s| s.ops_left == 0 && s.outstanding == 0)
    }

    /// Polls every CQ, checks each completion, posts more. Returns [`Self::is_done`].
    pub fn pump(&mut self, fabric: &mut Fabric) -> bool {
        self.poll(fabric);
        self.post_more(fabric);
        self.is_done()
    }

    /// The report: losses are counted, not failures.
    pub fn finish(&mut self, fabric: &Fabric) -> DatagramReport {
        self.report.mcast_expected = self
            .streams
            .iter()
            .filter(|s| s.kind == Kind::Mcast)
            .map(|s| u64::from(s.next_seq) * s.dests.len() as u64)
            .sum();
        if !self.is_done() {
            let left: u64 = self.streams.iter().map(|s| s.ops_left).sum();
            let out: usize = self.streams.iter().map(|s| s.outstanding).sum();
            self.diverge(
                fabric.now(),
                format!("{left} UD/UC ops never posted and {out} never completed at their senders"),
            );
        }
        self.report.clone()
    }

    fn diverge(&mut self, at: Instant, what: String) {
        self.report.mismatches += 1;
        if self.report.first_divergence.is_none() {
            self.report.first_divergence = Some(Divergence { at, what });
        }
    }

    fn post_recv(&mut self, fabric: &mut Fabric, key: (NodeId, u32), slot: u64) {
        let Some(r) = self.receivers.get(&key) else {
            return;
        };
        let wr = RecvWr {
            wr_id: slot,
            sg_list: vec![r.slots.sge(slot * r.slot_len, r.slot_len as u32)],
        };
        if let Ok(e) = fabric.engine_mut(key.0) {
            if let Err(err) = e.post_recv(key.1, wr) {
                let now = fabric.now();
                self.diverge(now, format!("{}: post_recv on {:#x}: {err}", key.0, key.1));
            }
        }
    }

    fn post_more(&mut self, fabric: &mut Fabric) {
        for s in 0..self.streams.len() {
            while self.streams[s].ops_left > 0
                && self.streams[s].outstanding < self.cfg.window.max(1)
            {
                self.post_one(fabric, s);
            }
        }
    }

    fn post_one(&mut self, fabric: &mut Fabric, s: usize) {
        let st = &mut self.streams[s];
        let seq = st.next_seq;
        let len = self
            .rng
            .range_inclusive(HEADER_LEN as u64, u64::from(st.max_len)) as u32;
        let bytes = message(self.cfg.seed, s as u32, seq, len);
        let slot = u64::from(seq) % self.cfg.window.max(1) as u64;
        let staging_off = slot * u64::from(st.max_len);
        st.staging.mem.write(staging_off as usize, &bytes);
        let sge = st.staging.sge(staging_off, len);
        let op = match st.kind {
            Kind::Ud | Kind::Mcast => {
                if self.rng.chance(0.5) {
                    SendOp::SendWithImm {
                        imm: imm_of(s as u32, seq),
                    }
                } else {
                    SendOp::Send
                }
            }
            Kind::Uc => match self.rng.below(3) {
                0 => SendOp::Send,
                1 => SendOp::SendWithImm {
                    imm: imm_of(s as u32, seq),
                },
                _ => {
                    let target = st.write_target.as_ref().expect("UC streams have a target");
                    let off = st.write_cursor;
                    st.write_cursor += u64::from(len).next_multiple_of(8);
                    st.writes.insert(seq, (off, len));
                    SendOp::RdmaWriteWithImm {
                        remote_addr: target.iova + off,
                        rkey: target.key,
                        imm: seq,
                    }
                }
            },
        };
        let wr = SendWr {
            ud: st.ud_dest,
            ..SendWr::signaled(u64::from(seq), op, vec![sge])
        };
        st.next_seq += 1;
        st.ops_left -= 1;
        st.outstanding += 1;
        let (node, qpn) = (st.sender, st.sender_qpn);
        let now = fabric.now();
        let posted = fabric
            .engine_mut(node)
            .map_err(|e| e.to_string())
            .and_then(|e| e.post_send(now, qpn, wr).map_err(|e| e.to_string()));
        match posted {
            Ok(()) => self.sends.entry((node, qpn)).or_default().push_back(s),
            Err(e) => {
                self.streams[s].outstanding -= 1;
                self.diverge(now, format!("{node}: post_send on {qpn:#x}: {e}"));
            }
        }
    }
}

/// Spreads `ops` over `streams` as evenly as possible.
fn deal(all: &mut [Stream], streams: &[usize], ops: u64) {
    let n = streams.len() as u64;
    if n == 0 {
        return;
    }
    for (k, &s) in streams.iter().enumerate() {
        all[s].ops_left = ops / n + u64::from((k as u64) < ops % n);
    }
}

fn av(dest_ip: IpAddr) -> AddressVector {
    AddressVector {
        dest_ip,
        traffic_class: 0,
        hop_limit: 64,
    }
}

fn draw_psn(rng: &mut SimRng) -> Psn {
    Psn::new(rng.below(1 << 24) as u32)
}

/// The bytes of message `seq` of stream `s`: the header, then bytes from the seed.
fn message(seed: u64, s: u32, seq: u32, len: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize);
    for w in [MAGIC, s, seq, len] {
        out.extend_from_slice(&w.to_be_bytes());
    }
    let mut rng = SimRng::new(seed ^ (u64::from(s) << 32 | u64::from(seq)));
    let mut rest = vec![0u8; (len as usize).saturating_sub(HEADER_LEN)];
    rng.fill_bytes(&mut rest);
    out.extend_from_slice(&rest);
    out.truncate(len as usize);
    out
}

fn imm_of(s: u32, seq: u32) -> u32 {
    (s.wrapping_mul(0x9e37_79b9) ^ seq).rotate_left(7)
}
