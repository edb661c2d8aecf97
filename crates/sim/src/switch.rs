//! Switched networks: hosts on output-queued switches, for congestion experiments.
//!
//! Every hop is a queue: a FIFO in front of a transmitter of fixed rate, followed by a
//! wire of fixed propagation delay. A host's NIC is a queue without a limit; a switch port is
//! a queue with a finite buffer that drops at its tail, marks ECN Congestion Experienced the
//! RED way (DCQCN's: no marks below `Kmin`, probability rising linearly to `Pmax` at `Kmax`,
//! every ECN-capable packet above it) and, with PFC, pauses the hops that feed it: a switch
//! counts the bytes it holds per ingress (per upstream queue), sends a PAUSE upstream when
//! they pass `Xoff` and a RESUME when they fall below `Xon`; a paused queue finishes the
//! packet on its wire and then holds — so the pause propagates hop by hop towards the
//! senders, as on a lossless fabric.
//!
//! Topologies: a star (every host on one switch) and a two-tier leaf–spine (hosts spread over
//! the leaves, every leaf linked to every spine, a flow's spine chosen by a hash of its
//! addresses and ports, as ECMP does). The network is event-driven like the fabric around it,
//! deterministic, and knows nothing of RoCE: it moves opaque packets of a length.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use softrdma_proto::{Duration, Instant};

use crate::link::{serialization_time, IP_UDP_OVERHEAD_BYTES};
use crate::rng::SimRng;

/// RED-style ECN marking of a switch port (DCQCN's settings: `Kmin` 5 KB, `Kmax` 200 KB,
/// `Pmax` 1 %).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Red {
    /// Queue depth below which nothing is marked, bytes.
    pub kmin: u64,
    /// Queue depth at and above which every ECN-capable packet is marked, bytes.
    pub kmax: u64,
    /// Marking probability just below `kmax`.
    pub pmax: f64,
}

impl Red {
    /// The marking probability at queue depth `q` bytes.
    pub fn probability(&self, q: u64) -> f64 {
        if q < self.kmin {
            0.0
        } else if q >= self.kmax {
            1.0
        } else {
            (q - self.kmin) as f64 / (self.kmax - self.kmin).max(1) as f64 * self.pmax
        }
    }
}

/// Priority flow control thresholds (bytes a switch holds from one ingress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pfc {
    /// Send PAUSE upstream above this.
    pub xoff: u64,
    /// Send RESUME once below this.
    pub xon: u64,
}

/// How hosts and switches are wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Every host on one switch.
    Star,
    /// `leaves` leaf switches (host `i` on leaf `i % leaves`), each linked to each of
    /// `spines` spine switches.
    LeafSpine {
        /// Leaf switches.
        leaves: usize,
        /// Spine switches.
        spines: usize,
    },
}

/// The knobs of a switched network: every link alike.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwitchConfig {
    /// Line rate of every link, bits per second.
    pub link_bps: u64,
    /// Propagation delay of every link.
    pub delay: Duration,
    /// Buffer of every switch port, bytes.
    pub buffer_bytes: u64,
    /// ECN marking at switch ports (`None`: never mark).
    pub red: Option<Red>,
    /// PFC (`None`: ports drop when full).
    pub pfc: Option<Pfc>,
    /// How the hosts are wired.
    pub topology: Topology,
}

/// What the network did, in total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Packets dropped at a full switch port.
    pub drops: u64,
    /// Packets marked Congestion Experienced.
    pub ecn_marks: u64,
    /// PAUSE frames sent (RESUMEs not counted).
    pub pause_frames: u64,
    /// Packets delivered to hosts.
    pub delivered: u64,
}

/// Index of a queue.
pub type QueueId = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Host,
    Switch(usize),
}

#[derive(Debug)]
struct Pkt<P> {
    /// Bytes on the wire (IP datagram).
    wire_len: u64,
    ect: bool,
    ce: bool,
    path: Vec<QueueId>,
    hop: usize,
    dst: usize,
    payload: P,
}

#[derive(Debug)]
struct Queue<P> {
    owner: Owner,
    buffer: Option<u64>,
    fifo: VecDeque<Pkt<P>>,
    bytes: u64,
    busy: bool,
    paused: bool,
    /// PFC: bytes this queue's packets occupy in the next switch, and whether a PAUSE for it
    /// is in force.
    held_downstream: u64,
    pause_sent: bool,
    max_bytes: u64,
    busy_ns: u64,
    tx_bytes: u64,
}

#[derive(Debug)]
enum Event<P> {
    Arrive(Box<Pkt<P>>),
    TxDone(QueueId),
    Pause(QueueId, bool),
}

#[derive(Debug)]
struct Scheduled<P> {
    at: Instant,
    seq: u64,
    event: Event<P>,
}

impl<P> PartialEq for Scheduled<P> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<P> Eq for Scheduled<P> {}
impl<P> PartialOrd for Scheduled<P> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<P> Ord for Scheduled<P> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A switched network carrying packets of type `P` between `hosts` hosts.
#[derive(Debug)]
pub struct SwitchedNet<P> {
    cfg: SwitchConfig,
    queues: Vec<Queue<P>>,
    /// Each host's NIC queue.
    host_q: Vec<QueueId>,
    /// The switch port that delivers to each host.
    down_q: Vec<QueueId>,
    /// Leaf–spine: `up_q[leaf][spine]` and `spine_q[spine][leaf]`.
    up_q: Vec<Vec<QueueId>>,
    spine_q: Vec<Vec<QueueId>>,
    events: BinaryHeap<Reverse<Scheduled<P>>>,
    seq: u64,
    rng: SimRng,
    stats: SwitchStats,
}

impl<P> SwitchedNet<P> {
    /// A network of `hosts` hosts wired as `cfg` says; `seed` drives the marking decisions.
    pub fn new(cfg: SwitchConfig, hosts: usize, seed: u64) -> SwitchedNet<P> {
        let mut net = SwitchedNet {
            cfg,
            queues: Vec::new(),
            host_q: Vec::new(),
            down_q: Vec::new(),
            up_q: Vec::new(),
            spine_q: Vec::new(),
            events: BinaryHeap::new(),
            seq: 0,
            rng: SimRng::new(seed),
            stats: SwitchStats::default(),
        };
        for _ in 0..hosts {
            let q = net.add_queue(Owner::Host, None);
            net.host_q.push(q);
        }
        let buffer = Some(cfg.buffer_bytes);
        match cfg.topology {
            Topology::Star => {
                for _ in 0..hosts {
                    let q = net.add_queue(Owner::Switch(0), buffer);
                    net.down_q.push(q);
                }
            }
            Topology::LeafSpine { leaves, spines } => {
                let (leaves, spines) = (leaves.max(1), spines.max(1));
                for h in 0..hosts {
                    let q = net.add_queue(Owner::Switch(h % leaves), buffer);
                    net.down_q.push(q);
                }
                for l in 0..leaves {
                    let ups = (0..spines)
                        .map(|_| net.add_queue(Owner::Switch(l), buffer))
                        .collect();
                    net.up_q.push(ups);
                }
                for s in 0..spines {
                    let downs = (0..leaves)
                        .map(|_| net.add_queue(Owner::Switch(leaves + s), buffer))
                        .collect();
                    net.spine_q.push(downs);
                }
            }
        }
        net
    }

    fn add_queue(&mut self, owner: Owner, buffer: Option<u64>) -> QueueId {
        self.queues.push(Queue {
            owner,
            buffer,
            fifo: VecDeque::new(),
            bytes: 0,
            busy: false,
            paused: false,
            held_downstream: 0,
            pause_sent: false,
            max_bytes: 0,
            busy_ns: 0,
            tx_bytes: 0,
        });
        self.queues.len() - 1
    }

    /// The queues a packet from `src` to `dst` passes, NIC first; `flow` picks the spine.
    fn path(&self, src: usize, dst: usize, flow: u64) -> Vec<QueueId> {
        match self.cfg.topology {
            Topology::Star => vec![self.host_q[src], self.down_q[dst]],
            Topology::LeafSpine { leaves, spines } => {
                let (leaves, spines) = (leaves.max(1), spines.max(1));
                let (ls, ld) = (src % leaves, dst % leaves);
                if ls == ld {
                    vec![self.host_q[src], self.down_q[dst]]
                } else {
                    let s = (flow % spines as u64) as usize;
                    vec![
                        self.host_q[src],
                        self.up_q[ls][s],
                        self.spine_q[s][ld],
                        self.down_q[dst],
                    ]
                }
            }
        }
    }

    fn schedule(&mut self, at: Instant, event: Event<P>) {
        self.seq += 1;
        self.events.push(Reverse(Scheduled {
            at,
            seq: self.seq,
            event,
        }));
    }

    /// Host `src` hands a packet for host `dst` to its NIC at `now`: `len` bytes of UDP
    /// payload, ECN-capable or not; `flow` identifies its flow for ECMP.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        now: Instant,
        src: usize,
        dst: usize,
        flow: u64,
        len: usize,
        ect: bool,
        payload: P,
    ) {
        let pkt = Pkt {
            wire_len: (len + IP_UDP_OVERHEAD_BYTES) as u64,
            ect,
            ce: false,
            path: self.path(src, dst, flow),
            hop: 0,
            dst,
            payload,
        };
        self.enqueue(now, pkt);
    }

    /// The next time something happens inside the network.
    pub fn next_event(&self) -> Option<Instant> {
        self.events.peek().map(|Reverse(s)| s.at)
    }

    /// Runs every event due at or before `now`; returns the packets delivered to hosts, each
    /// with its destination and whether it was marked Congestion Experienced on the way.
    pub fn advance(&mut self, now: Instant) -> Vec<(usize, P, bool)> {
        let mut out = Vec::new();
        while self.events.peek().is_some_and(|Reverse(s)| s.at <= now) {
            let Some(Reverse(s)) = self.events.pop() else {
                break;
            };
            match s.event {
                Event::Arrive(pkt) => {
                    let pkt = *pkt;
                    if pkt.hop >= pkt.path.len() {
                        self.stats.delivered += 1;
                        out.push((pkt.dst, pkt.payload, pkt.ce));
                    } else {
                        self.enqueue(s.at, pkt);
                    }
                }
                Event::TxDone(q) => self.tx_done(s.at, q),
                Event::Pause(q, on) => {
                    self.queues[q].paused = on;
                    if !on {
                        self.start(s.at, q);
                    }
                }
            }
        }
        out
    }

    /// A packet reaches the queue of its current hop.
    fn enqueue(&mut self, now: Instant, mut pkt: Pkt<P>) {
        let q = pkt.path[pkt.hop];
        let len = pkt.wire_len;
        let queue = &self.queues[q];
        if queue.buffer.is_some_and(|b| queue.bytes + len > b) {
            self.stats.drops += 1;
            return;
        }
        if let (Some(red), Owner::Switch(_)) = (self.cfg.red, queue.owner) {
            if pkt.ect && !pkt.ce && self.rng.chance(red.probability(queue.bytes)) {
                pkt.ce = true;
                self.stats.ecn_marks += 1;
            }
        }
        // PFC: the bytes this packet holds here count against the hop that sent it.
        if pkt.hop > 0 && self.queues[q].buffer.is_some() {
            let up = pkt.path[pkt.hop - 1];
            self.queues[up].held_downstream += len;
            self.check_pause(now, up);
        }
        let queue = &mut self.queues[q];
        queue.bytes += len;
        queue.max_bytes = queue.max_bytes.max(queue.bytes);
        queue.fifo.push_back(pkt);
        self.start(now, q);
    }

    /// Starts the head packet of `q` if its transmitter is idle and not paused.
    fn start(&mut self, now: Instant, q: QueueId) {
        let rate = self.cfg.link_bps;
        let queue = &mut self.queues[q];
        if queue.busy || queue.paused {
            return;
        }
        let Some(head) = queue.fifo.front() else {
            return;
        };
        let ser = serialization_time(head.wire_len as usize, rate);
        queue.busy = true;
        queue.busy_ns += u64::try_from(ser.as_nanos()).unwrap_or(u64::MAX);
        queue.tx_bytes += head.wire_len;
        self.schedule(now + ser, Event::TxDone(q));
    }

    /// The head packet of `q` is on the wire: it arrives at its next hop a delay later.
    fn tx_done(&mut self, now: Instant, q: QueueId) {
        let queue = &mut self.queues[q];
        queue.busy = false;
        let Some(mut pkt) = queue.fifo.pop_front() else {
            return;
        };
        queue.bytes -= pkt.wire_len;
        if pkt.hop > 0 && queue.buffer.is_some() {
            let up = pkt.path[pkt.hop - 1];
            self.queues[up].held_downstream -= pkt.wire_len;
            self.check_pause(now, up);
        }
        pkt.hop += 1;
        let delay = self.cfg.delay;
        self.schedule(now + delay, Event::Arrive(Box::new(pkt)));
        self.start(now, q);
    }

    /// PFC: pauses or resumes `up` as the bytes it holds downstream cross the thresholds;
    /// the frame takes a link's delay to get there.
    fn check_pause(&mut self, now: Instant, up: QueueId) {
        let Some(pfc) = self.cfg.pfc else {
            return;
        };
        let queue = &mut self.queues[up];
        let at = now + self.cfg.delay;
        if !queue.pause_sent && queue.held_downstream > pfc.xoff {
            queue.pause_sent = true;
            self.stats.pause_frames += 1;
            self.schedule(at, Event::Pause(up, true));
        } else if queue.pause_sent && queue.held_downstream < pfc.xon {
            queue.pause_sent = false;
            self.schedule(at, Event::Pause(up, false));
        }
    }

    /// Totals so far.
    pub fn stats(&self) -> SwitchStats {
        self.stats
    }

    /// The switch port that delivers to `host` (an incast's bottleneck when `host` receives).
    pub fn port_to(&self, host: usize) -> QueueId {
        self.down_q[host]
    }

    /// Bytes queued at `q` now (including the packet on its transmitter).
    pub fn queue_bytes(&self, q: QueueId) -> u64 {
        self.queues[q].bytes
    }

    /// The most bytes `q` ever held.
    pub fn queue_max_bytes(&self, q: QueueId) -> u64 {
        self.queues[q].max_bytes
    }

    /// Nanoseconds `q`'s transmitter has been busy (counted when each packet starts).
    pub fn busy_ns(&self, q: QueueId) -> u64 {
        self.queues[q].busy_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(topology: Topology) -> SwitchConfig {
        SwitchConfig {
            link_bps: 8_000_000_000,
            delay: Duration::from_micros(1),
            buffer_bytes: 10_000,
            red: None,
            pfc: None,
            topology,
        }
    }

    /// 1000 bytes on the wire: 1 µs at 8 Gb/s.
    const LEN: usize = 1000 - IP_UDP_OVERHEAD_BYTES;

    fn run(net: &mut SwitchedNet<u32>) -> Vec<(Instant, u32, bool)> {
        let mut got = Vec::new();
        while let Some(t) = net.next_event() {
            for (_, p, ce) in net.advance(t) {
                got.push((t, p, ce));
            }
        }
        got
    }

    #[test]
    fn star_store_and_forward_timing() {
        let mut net = SwitchedNet::new(cfg(Topology::Star), 3, 1);
        net.send(Instant::ZERO, 0, 2, 0, LEN, false, 1);
        net.send(Instant::ZERO, 1, 2, 0, LEN, false, 2);
        let got = run(&mut net);
        // NIC 1 µs + wire 1 µs + port 1 µs + wire 1 µs; the second waits 1 µs at the port.
        assert_eq!(got[0], (Instant::from_nanos(4_000), 1, false));
        assert_eq!(got[1], (Instant::from_nanos(5_000), 2, false));
        assert_eq!(net.queue_max_bytes(net.port_to(2)), 2000);
    }

    #[test]
    fn full_ports_drop_at_the_tail() {
        let mut net = SwitchedNet::new(cfg(Topology::Star), 21, 1);
        // Twenty senders at once into a 10 000-byte port: ten fit.
        for s in 0..20 {
            net.send(Instant::ZERO, s, 20, 0, LEN, false, s as u32);
        }
        let got = run(&mut net);
        assert_eq!(got.len(), 10);
        assert_eq!(net.stats().drops, 10);
    }

    #[test]
    fn red_marks_only_ecn_capable_packets_above_kmin() {
        let mut c = cfg(Topology::Star);
        c.buffer_bytes = 1_000_000;
        c.red = Some(Red {
            kmin: 3_000,
            kmax: 5_000,
            pmax: 0.5,
        });
        assert_eq!(c.red.unwrap().probability(2_999), 0.0);
        assert_eq!(c.red.unwrap().probability(4_000), 0.25);
        assert_eq!(c.red.unwrap().probability(5_000), 1.0);
        let mut net = SwitchedNet::new(c, 11, 7);
        for s in 0..10 {
            net.send(Instant::ZERO, s, 10, 0, LEN, s % 2 == 0, s as u32);
        }
        let got = run(&mut net);
        // Packets queued behind 5 000 bytes or more are all marked if ECN-capable.
        for (_, p, ce) in &got {
            if p % 2 == 1 {
                assert!(!ce, "packet {p} is not ECN-capable");
            }
        }
        assert!(got.iter().filter(|g| g.2).count() >= 2);
        assert_eq!(net.stats().drops, 0);
    }

    #[test]
    fn pfc_pauses_senders_instead_of_dropping() {
        let mut c = cfg(Topology::Star);
        // Headroom: after Xoff a sender still delivers what is on its wire and what it
        // sends until the PAUSE arrives (about three packets here), per ingress.
        c.buffer_bytes = 30_000;
        c.pfc = Some(Pfc {
            xoff: 3_000,
            xon: 1_000,
        });
        let mut net = SwitchedNet::new(c, 5, 1);
        // Four senders, 20 packets each, into one 30 000-byte port: without PFC most drop.
        for s in 0..4 {
            for k in 0..20 {
                net.send(Instant::ZERO, s, 4, 0, LEN, false, (s * 100 + k) as u32);
            }
        }
        let got = run(&mut net);
        assert_eq!(got.len(), 80);
        assert_eq!(net.stats().drops, 0);
        assert!(net.stats().pause_frames > 0);
        // Each sender's packets stay in order.
        for s in 0..4u32 {
            let mine: Vec<u32> = got.iter().map(|g| g.1).filter(|p| p / 100 == s).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn leaf_spine_paths_cross_a_spine_between_leaves() {
        let mut net = SwitchedNet::new(
            cfg(Topology::LeafSpine {
                leaves: 2,
                spines: 2,
            }),
            4,
            1,
        );
        // Hosts 0 and 2 share leaf 0; host 1 is on leaf 1.
        net.send(Instant::ZERO, 0, 2, 0, LEN, false, 1);
        net.send(Instant::ZERO, 0, 1, 1, LEN, false, 2);
        let got = run(&mut net);
        assert_eq!(got[0], (Instant::from_nanos(4_000), 1, false));
        // NIC, leaf uplink, spine port, leaf port: 4 × (1 µs + 1 µs), the NIC waits 1 µs.
        assert_eq!(got[1], (Instant::from_nanos(9_000), 2, false));
    }
}
