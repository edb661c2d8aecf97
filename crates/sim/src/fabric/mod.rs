//! The fabric: N engines, one virtual clock, a link per ordered pair of nodes, and the event
//! loop that moves datagrams between them.
//!
//! # Event loop
//! One [`Fabric::step`] is one instant of virtual time:
//! 1. every engine's [`Engine::poll_transmit`] is drained, in node order, and each datagram is
//!    routed by destination IP, shown to the interceptors, then handed to its link, which
//!    decides loss, corruption, duplication and arrival time;
//! 2. the clock jumps to the earliest next event: a datagram arrival or an engine deadline
//!    ([`Engine::poll_timeout`]); nothing happens between events, so idle time is free;
//! 3. every datagram due by then is delivered ([`Engine::handle_datagram`]) in (arrival,
//!    send order) order, then every engine whose deadline has passed runs
//!    [`Engine::handle_timeout`].
//!
//! Every choice is ordered (node order, a sequence number per datagram, one PRNG stream per
//! link), so a seed replays a run exactly. Every loop is bounded: [`Fabric::run_until`] stops
//! at a virtual-time deadline, and an engine that keeps the clock from advancing (a timer
//! that stays due, endless output at one instant) is reported as [`SimError::Stalled`] or
//! [`SimError::Runaway`] instead of hanging the caller.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use softrdma_proto::{Engine, EngineConfig, Instant};

use crate::intercept::Interceptor;
use crate::link::{Link, LinkConfig};
pub use crate::node_id::NodeId;
use crate::rng::SimRng;
use crate::switch::{SwitchConfig, SwitchStats, SwitchedNet};

mod event_loop;
mod route;
use softrdma_wire::pcap::PcapWriter;

/// Most nodes one fabric holds (addresses 10.0.0.1 ..= 10.0.0.250).
pub const MAX_NODES: usize = 250;
/// Most datagrams one engine may emit at a single instant before the fabric calls it a
/// runaway (a correct engine is bounded by its windows, far below this).
pub const MAX_TRANSMITS_PER_INSTANT: u64 = 1_000_000;
/// Most consecutive steps at one instant before the fabric calls the run stalled.
pub const MAX_STEPS_PER_INSTANT: u64 = 100_000;

/// Why the fabric stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// More nodes than [`MAX_NODES`].
    #[error("too many nodes (max {MAX_NODES})")]
    TooManyNodes,
    /// A node's engine configuration has no IPv4 address (the fabric is IPv4-only).
    #[error("the fabric needs an IPv4 local address, got {0}")]
    NotIpv4(IpAddr),
    /// Two nodes with one address.
    #[error("address {0} is already used by another node")]
    DuplicateAddress(Ipv4Addr),
    /// No such node.
    #[error("no such node {0}")]
    NoSuchNode(NodeId),
    /// Virtual time stopped advancing: the engine keeps reporting a deadline that has passed
    /// even after `handle_timeout`, or the nodes exchange packets endlessly at one instant.
    #[error("virtual time stalled at {at_ns} ns (node {node:?} still due after handle_timeout)")]
    Stalled {
        /// The instant the fabric is stuck at, in nanoseconds.
        at_ns: u64,
        /// The engine whose deadline stays due, if that is the cause.
        node: Option<NodeId>,
    },
    /// An engine produced more than [`MAX_TRANSMITS_PER_INSTANT`] datagrams at one instant.
    #[error("{node} produced more than {MAX_TRANSMITS_PER_INSTANT} datagrams at {at_ns} ns")]
    Runaway {
        /// The engine.
        node: NodeId,
        /// When.
        at_ns: u64,
    },
    /// Writing the capture failed (the run itself is unaffected; capturing stopped).
    #[error("pcap write failed: {0}")]
    Pcap(#[from] io::Error),
}

/// Where the capture taps the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CapturePoint {
    /// What senders put on the wire, including datagrams the fabric then loses: every ICRC
    /// in the capture verifies.
    #[default]
    Send,
    /// What receivers get, at arrival time, duplicates and corruption included.
    Delivery,
}

/// Static configuration of a fabric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FabricConfig {
    /// Seed of every random choice the fabric makes.
    pub seed: u64,
    /// Model of links created from now on (see [`Fabric::set_all_links`]).
    pub link: LinkConfig,
    /// Where a capture, if any, taps the fabric.
    pub capture_point: CapturePoint,
    /// Nodes added by [`Fabric::add_node`] keep requests that arrive after a gap and run them
    /// once it fills, as softrdma does; `false` makes their responders drop them, as IBTA
    /// says and Linux rxe does, so requesters must fall back to go-back-N.
    pub keep_early_packets: bool,
    /// Deliver datagrams as a device's direct placement receives them: when the receiving
    /// engine expects the rest of an RDMA WRITE, the datagram is scattered over the plan it
    /// makes (payload bytes straight into the region, see `softrdma_proto::placement`),
    /// whatever the datagram really is, and the engine sorts out what landed.
    pub direct_placement: bool,
    /// With direct placement: the chance that a datagram is received into the plan of a
    /// QP of the node drawn at random instead of the one the engine expects (a forced
    /// misprediction: another QP's packets land in a WRITE's target).
    pub mispredict: f64,
}

impl FabricConfig {
    /// Ideal links, capture at send, direct placement as the device does it.
    pub fn new(seed: u64) -> FabricConfig {
        FabricConfig {
            seed,
            link: LinkConfig::IDEAL,
            capture_point: CapturePoint::Send,
            keep_early_packets: true,
            direct_placement: true,
            mispredict: 0.0,
        }
    }
}

/// Counters of what the fabric did to traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Datagrams engines handed to the fabric.
    pub packets_sent: u64,
    /// UDP payload bytes engines handed to the fabric.
    pub bytes_sent: u64,
    /// Datagrams handed to a receiving engine (duplicates count twice).
    pub packets_delivered: u64,
    /// Datagrams lost by a link's random loss.
    pub packets_dropped: u64,
    /// Datagrams dropped by an interceptor.
    pub packets_dropped_by_interceptor: u64,
    /// Extra copies delivered.
    pub packets_duplicated: u64,
    /// Datagrams with a bit flipped.
    pub packets_corrupted: u64,
    /// Datagrams given extra reordering delay.
    pub packets_reordered: u64,
    /// Datagrams held or delayed by an interceptor.
    pub packets_held: u64,
    /// Datagrams to an address no node has.
    pub packets_unroutable: u64,
    /// Most datagrams in flight at once.
    pub max_in_flight: u64,
    /// Event-loop steps taken.
    pub steps: u64,
    /// Datagrams an engine took where direct placement had put their payload.
    pub packets_placed: u64,
    /// Datagrams received into a placement plan they did not fit (copied back out and
    /// handled as usual).
    pub placement_misses: u64,
}

/// One simulated host: an engine and its address.
pub struct Node {
    /// The node's transport engine.
    pub engine: Engine,
    ip: Ipv4Addr,
}

impl Node {
    /// The node's IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }
}

/// A datagram inside the fabric.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InFlight {
    src: NodeId,
    dst: NodeId,
    /// The destination address: `dst`'s, or the multicast group it was sent to.
    dst_ip: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    ecn: u8,
    data: Vec<u8>,
}

/// Heap entry: ordered by arrival, then by the order the fabric scheduled it.
#[derive(Debug, PartialEq, Eq)]
struct Scheduled {
    at: Instant,
    seq: u64,
    pkt: InFlight,
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What one [`Fabric::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Time advanced to an event and it was processed.
    Progressed,
    /// Nothing is in flight and no engine has a deadline.
    Idle,
    /// The next event lies beyond the deadline; the clock now stands at the deadline.
    DeadlineReached,
}

/// How [`Fabric::run_until`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The predicate became true.
    Done,
    /// The fabric went idle with the predicate still false.
    Idle,
    /// The virtual-time bound was reached with the predicate still false.
    DeadlineReached,
}

/// The simulated network. See the module docs.
pub struct Fabric {
    config: FabricConfig,
    nodes: Vec<Node>,
    by_ip: BTreeMap<Ipv4Addr, NodeId>,
    links: BTreeMap<(NodeId, NodeId), Link>,
    root_rng: SimRng,
    in_flight: BinaryHeap<Reverse<Scheduled>>,
    held: Vec<InFlight>,
    interceptors: Vec<Box<dyn Interceptor>>,
    pcap: Option<PcapWriter<Box<dyn Write>>>,
    pcap_error: Option<io::Error>,
    now: Instant,
    seq: u64,
    stats: FabricStats,
    tx_buf: Vec<u8>,
    /// Consecutive steps taken without the clock moving.
    steps_at_instant: u64,
    /// The earliest time something outside the engines asked to be woken at (a connection
    /// manager's retransmission timer): an event like the engines' deadlines.
    wakeup: Option<Instant>,
    /// Switches between the nodes instead of point-to-point links (see [`Fabric::use_switches`]).
    switched: Option<SwitchedNet<InFlight>>,
    /// Draws forced mispredictions ([`FabricConfig::mispredict`]).
    place_rng: SimRng,
    /// Where a placed receive puts what is not payload.
    place_scratch: Vec<u8>,
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fabric")
            .field("now_ns", &self.now.as_nanos())
            .field("nodes", &self.nodes.len())
            .field("in_flight", &self.in_flight.len())
            .field("held", &self.held.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Fabric {
    /// An empty fabric at virtual time zero.
    pub fn new(config: FabricConfig) -> Fabric {
        Fabric {
            config,
            nodes: Vec::new(),
            by_ip: BTreeMap::new(),
            links: BTreeMap::new(),
            root_rng: SimRng::new(config.seed),
            in_flight: BinaryHeap::new(),
            held: Vec::new(),
            interceptors: Vec::new(),
            pcap: None,
            pcap_error: None,
            now: Instant::ZERO,
            seq: 0,
            stats: FabricStats::default(),
            tx_buf: Vec::with_capacity(8192),
            steps_at_instant: 0,
            wakeup: None,
            switched: None,
            place_rng: SimRng::new(config.seed).fork(0x706c_6163_6564),
            place_scratch: vec![0; softrdma_proto::placement::MAX_DATAGRAM],
        }
    }

    /// The address the `index`th node gets from [`Fabric::add_node`]: 10.0.0.(index + 1).
    pub fn default_ip(index: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, (index % 256) as u8 + 1)
    }

    /// Adds a node with a default engine at the next address (10.0.0.1, 10.0.0.2, ...).
    /// Every node is a softrdma engine, so engines are told their peers send small IPv4
    /// identifications (`EngineConfig::peers_use_small_ipv4_ids`): the fabric's corruption
    /// is then judged by the ICRC at full strength from a connection's first packet on.
    pub fn add_node(&mut self) -> Result<NodeId, SimError> {
        let ip = Fabric::default_ip(self.nodes.len());
        // Memory keys as random as on a real device, and as reproducible as everything else.
        let key_seed = self
            .root_rng
            .fork(0x6b65_7900 ^ self.nodes.len() as u64)
            .next_u64();
        let mut config = EngineConfig {
            peers_use_small_ipv4_ids: true,
            // Off on devices for now (see its docs); checked here under every fault.
            place_read_responses: true,
            key_seed,
            ..EngineConfig::new(IpAddr::V4(ip))
        };
        if !self.config.keep_early_packets {
            config.reorder_packets = 0;
        }
        self.add_node_with(config)
    }

    /// Adds a node whose engine uses `config` (its `local_ip` must be IPv4 and unused).
    pub fn add_node_with(&mut self, config: EngineConfig) -> Result<NodeId, SimError> {
        if self.nodes.len() >= MAX_NODES {
            return Err(SimError::TooManyNodes);
        }
        let IpAddr::V4(ip) = config.local_ip else {
            return Err(SimError::NotIpv4(config.local_ip));
        };
        if self.by_ip.contains_key(&ip) {
            return Err(SimError::DuplicateAddress(ip));
        }
        let id = NodeId(self.nodes.len());
        self.nodes.push(Node {
            engine: Engine::new(config),
            ip,
        });
        self.by_ip.insert(ip, id);
        Ok(id)
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Node ids in order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes.len()).map(NodeId)
    }

    /// A node.
    pub fn node(&self, id: NodeId) -> Result<&Node, SimError> {
        self.nodes.get(id.0).ok_or(SimError::NoSuchNode(id))
    }

    /// A node's engine, to inspect.
    pub fn engine(&self, id: NodeId) -> Result<&Engine, SimError> {
        Ok(&self.node(id)?.engine)
    }

    /// A node's engine, to create objects, post work and poll completions. Anything posted
    /// is transmitted at the next [`Fabric::step`].
    pub fn engine_mut(&mut self, id: NodeId) -> Result<&mut Engine, SimError> {
        self.nodes
            .get_mut(id.0)
            .map(|n| &mut n.engine)
            .ok_or(SimError::NoSuchNode(id))
    }

    /// A node's address.
    pub fn ip(&self, id: NodeId) -> Result<Ipv4Addr, SimError> {
        Ok(self.node(id)?.ip)
    }

    /// The virtual clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Traffic counters.
    pub fn stats(&self) -> &FabricStats {
        &self.stats
    }

    /// Configuration (its `link` is the model for links not configured individually).
    pub fn config(&self) -> &FabricConfig {
        &self.config
    }

    fn link_mut(&mut self, from: NodeId, to: NodeId) -> &mut Link {
        let default = self.config.link;
        let rng = &self.root_rng;
        self.links.entry((from, to)).or_insert_with(|| {
            // One stream per ordered pair, derived from the seed alone: links do not share
            // luck, and creating one never changes another's draws.
            let stream = ((from.0 as u64) << 32) | to.0 as u64;
            Link::new(default, rng.fork(stream))
        })
    }

    /// Sets the model of the link from `from` to `to` (one direction).
    pub fn set_link(&mut self, from: NodeId, to: NodeId, config: LinkConfig) {
        self.link_mut(from, to).config = config;
    }

    /// The model of the link from `from` to `to`.
    pub fn link_config(&self, from: NodeId, to: NodeId) -> LinkConfig {
        self.links
            .get(&(from, to))
            .map_or(self.config.link, |l| l.config)
    }

    /// Sets the model of every link, existing and future.
    pub fn set_all_links(&mut self, config: LinkConfig) {
        self.config.link = config;
        for link in self.links.values_mut() {
            link.config = config;
        }
    }

    /// Ends all faults: random faults off on every link (timing kept), interceptors removed,
    /// held datagrams released. The liveness phase of a swarm run starts with this.
    pub fn heal(&mut self) {
        self.config.link = self.config.link.healed();
        for link in self.links.values_mut() {
            link.config = link.config.healed();
        }
        self.interceptors.clear();
        self.release_held();
    }

    /// Adds an interceptor; it sees every datagram after those added before it.
    pub fn add_interceptor(&mut self, interceptor: impl Interceptor + 'static) {
        self.interceptors.push(Box::new(interceptor));
    }

    /// Removes every interceptor.
    pub fn clear_interceptors(&mut self) {
        self.interceptors.clear();
    }

    /// Datagrams an interceptor is holding.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Datagrams travelling (scheduled for delivery).
    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// Puts every held datagram back on its link, in the order they were held; they arrive
    /// one link delay from now (no new random faults are applied to them).
    pub fn release_held(&mut self) {
        for pkt in std::mem::take(&mut self.held) {
            let delay = self.link_config(pkt.src, pkt.dst).delay;
            let at = self.now + delay;
            self.schedule(at, pkt);
        }
    }

    /// Starts capturing every datagram to `out` as pcap (see [`softrdma_wire::pcap`]).
    pub fn capture_to(&mut self, out: Box<dyn Write>) -> Result<(), SimError> {
        self.pcap = Some(PcapWriter::new(out)?);
        self.pcap_error = None;
        Ok(())
    }

    /// Flushes and closes the capture; returns the number of records, or the first write
    /// error (after which capturing had stopped).
    pub fn finish_capture(&mut self) -> Result<u64, SimError> {
        if let Some(e) = self.pcap_error.take() {
            self.pcap = None;
            return Err(SimError::Pcap(e));
        }
        match self.pcap.take() {
            Some(mut w) => {
                w.flush()?;
                Ok(w.records())
            }
            None => Ok(0),
        }
    }

    /// Sends `payload` from node `src` to `dst` as if `src`'s engine had emitted it: it goes
    /// through the interceptors and the link like any datagram. For tests that need exact
    /// packets (a forged peer, a malformed datagram) without an engine producing them.
    pub fn inject(
        &mut self,
        src: NodeId,
        dst: SocketAddr,
        src_port: u16,
        ecn: u8,
        payload: Vec<u8>,
    ) -> Result<(), SimError> {
        self.node(src)?;
        self.route(src, dst, src_port, ecn, payload);
        Ok(())
    }

    /// Connects the nodes through switches as `config` says instead of point-to-point links
    /// (whose faults then no longer apply): for congestion experiments. Call it once every
    /// node is added; `seed` drives the switches' ECN-marking decisions.
    pub fn use_switches(&mut self, config: SwitchConfig, seed: u64) {
        self.switched = Some(SwitchedNet::new(config, self.nodes.len(), seed));
    }

    /// What the switches did (`None`: point-to-point links).
    pub fn switch_stats(&self) -> Option<SwitchStats> {
        self.switched.as_ref().map(SwitchedNet::stats)
    }

    /// The switch port that delivers to `node`: bytes queued there now, the most it ever
    /// held, and nanoseconds its transmitter has been busy.
    pub fn switch_port_to(&self, node: NodeId) -> Option<(u64, u64, u64)> {
        let net = self.switched.as_ref()?;
        let q = net.port_to(node.0);
        Some((net.queue_bytes(q), net.queue_max_bytes(q), net.busy_ns(q)))
    }
}
