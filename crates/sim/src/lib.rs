//! softrdma-sim: a deterministic simulated RoCEv2 fabric that drives the very same sans-IO
//! engines (`softrdma-proto`) that run on real UDP, under seeded faults.
//!
//! - [`fabric`]: nodes (one [`softrdma_proto::Engine`] each, addresses 10.0.0.x), a virtual
//!   clock that jumps from event to event, and the event loop;
//! - [`link`]: the per-direction link model — delay, bandwidth, loss, duplication, reordering,
//!   single-bit corruption — each link with its own PRNG stream;
//! - [`intercept`]: targeted faults ("drop the 2nd READ response"), for exact scripted tests;
//! - captures of what crossed the fabric ([`Fabric::capture_to`], written with
//!   `softrdma_wire::pcap`) with real IPv4/UDP headers, so the ICRCs verify in Wireshark and
//!   `softrdma decode`;
//! - [`memory`]: region memory that stores only the pages that differ from a fill byte or a
//!   seeded byte stream, so thousands of simulated QPs cost what their queues hold;
//! - [`setup`]: protection domains, CQs, memory and RC QP pairs brought to RTS;
//! - [`workload`]: a random RC workload with a reference model that checks every result;
//! - [`datagrams`]: UD (unicast and multicast) and UC traffic beside it, checked for what
//!   unreliable transports must never do: deliver a message corrupt, partial or twice;
//! - [`errors`]: operations that must fail (bad rkeys, bounds, rights, RNR, a vanished peer),
//!   their completions, QP states and untouched memory predicted and checked;
//! - [`cm`]: rdma_cm handshakes, the IB CM's MADs on each node's QP 1, through the same
//!   faults;
//! - [`switch`]: output-queued switches (ECN marking, tail drop, PFC; star and leaf–spine)
//!   that [`Fabric::use_switches`] puts between the nodes instead of point-to-point links;
//! - [`incast`]: many senders to one receiver across them, DCQCN or none, measured;
//! - [`swarm`]: one seed in, verdict out — faults drawn from the seed (safety phase), then a
//!   healed network in which everything must finish (liveness phase);
//! - [`rng`]: the only randomness (xoshiro256** from a `u64` seed; no OS entropy).
//!
//! The same seed always replays the same run, packet for packet: on failure the swarm prints
//! `SOFTRDMA_SEED=<n>`, and that number is the whole reproduction recipe.
#![forbid(unsafe_code)]

pub mod cm;
pub mod datagrams;
pub mod errors;
pub mod fabric;
pub mod incast;
pub mod intercept;
pub mod link;
pub mod memory;
pub mod node_id;
pub mod rng;
pub mod setup;
pub mod swarm;
pub mod switch;
pub mod workload;

pub use fabric::{
    CapturePoint, Fabric, FabricConfig, FabricStats, Node, NodeId, RunOutcome, SimError, Step,
};
pub use intercept::{Interceptor, PacketInfo, PacketMatch, Targeted, Verdict};
pub use link::{Link, LinkConfig};
pub use rng::SimRng;
pub use softrdma_wire::pcap::PcapWriter;
