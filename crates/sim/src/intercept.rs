//! Targeted faults: code that looks at each datagram entering the fabric and decides its fate.
//!
//! Random link faults find bugs; interceptors pin them. A scripted test says exactly which
//! packet to lose ("the second READ response middle packet from node 1"), so the assertion
//! can be exact. Interceptors run in the order they were added, before the link's random
//! faults. Every interceptor sees every datagram (so its own count of matches never depends
//! on the others); the first verdict other than [`Verdict::Pass`] decides.

use std::fmt;
use std::net::SocketAddr;

use softrdma_proto::{Duration, Instant};
use softrdma_wire::{Opcode, PacketRepr, Psn};

use crate::node_id::NodeId;

/// What an interceptor sees of a datagram.
#[derive(Debug, Clone, Copy)]
pub struct PacketInfo<'a> {
    /// Virtual time at which the datagram enters the fabric.
    pub now: Instant,
    /// Sending node.
    pub src_node: NodeId,
    /// Receiving node.
    pub dst_node: NodeId,
    /// Source address and UDP port.
    pub src: SocketAddr,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// The UDP payload (BTH through ICRC).
    pub payload: &'a [u8],
    /// The parsed packet, if it parses (engines only send packets that do).
    pub packet: Option<&'a PacketRepr<'a>>,
}

impl PacketInfo<'_> {
    /// The BTH opcode, if the packet parsed.
    pub fn opcode(&self) -> Option<Opcode> {
        self.packet.map(|p| p.bth.opcode)
    }

    /// The BTH PSN, if the packet parsed.
    pub fn psn(&self) -> Option<Psn> {
        self.packet.map(|p| p.bth.psn)
    }
}

/// An interceptor's decision about one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the datagram through to the link's own (random) model.
    Pass,
    /// Lose it.
    Drop,
    /// Deliver it twice.
    Duplicate,
    /// Deliver it this much later than the link would (lets later packets overtake it).
    Delay(Duration),
    /// Keep it in the fabric until [`crate::Fabric::release_held`] is called.
    Hold,
    /// Flip one bit of the UDP payload: the `n`th bit the ICRC covers, modulo their number
    /// (see [`crate::link::covered_bit`]).
    CorruptBit(usize),
}

/// Targeted fault injection: see the module docs.
pub trait Interceptor {
    /// Decides the fate of one datagram entering the fabric.
    fn intercept(&mut self, pkt: &PacketInfo<'_>) -> Verdict;
}

impl<F: FnMut(&PacketInfo<'_>) -> Verdict> Interceptor for F {
    fn intercept(&mut self, pkt: &PacketInfo<'_>) -> Verdict {
        self(pkt)
    }
}

/// A predicate over datagrams, built field by field; unset fields match anything.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketMatch {
    /// BTH opcode.
    pub opcode: Option<Opcode>,
    /// BTH PSN.
    pub psn: Option<Psn>,
    /// Sending node.
    pub src_node: Option<NodeId>,
    /// Receiving node.
    pub dst_node: Option<NodeId>,
    /// BTH destination QP.
    pub dest_qpn: Option<u32>,
}

impl fmt::Debug for PacketMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("PacketMatch");
        if let Some(o) = self.opcode {
            d.field("opcode", &format_args!("{o}"));
        }
        if let Some(p) = self.psn {
            d.field("psn", &p.value());
        }
        if let Some(n) = self.src_node {
            d.field("src_node", &n);
        }
        if let Some(n) = self.dst_node {
            d.field("dst_node", &n);
        }
        if let Some(q) = self.dest_qpn {
            d.field("dest_qpn", &q);
        }
        d.finish()
    }
}

impl PacketMatch {
    /// Matches every datagram.
    pub fn any() -> PacketMatch {
        PacketMatch::default()
    }
    /// Matches packets with this opcode.
    pub fn opcode(op: Opcode) -> PacketMatch {
        PacketMatch {
            opcode: Some(op),
            ..PacketMatch::default()
        }
    }
    /// Also require this PSN.
    pub fn with_psn(self, psn: Psn) -> PacketMatch {
        PacketMatch {
            psn: Some(psn),
            ..self
        }
    }
    /// Also require this sending node.
    pub fn from_node(self, node: NodeId) -> PacketMatch {
        PacketMatch {
            src_node: Some(node),
            ..self
        }
    }
    /// Also require this receiving node.
    pub fn to_node(self, node: NodeId) -> PacketMatch {
        PacketMatch {
            dst_node: Some(node),
            ..self
        }
    }
    /// Also require this destination QP.
    pub fn to_qpn(self, qpn: u32) -> PacketMatch {
        PacketMatch {
            dest_qpn: Some(qpn),
            ..self
        }
    }

    /// Whether `pkt` matches. A packet that did not parse matches only a predicate with no
    /// packet-field requirements.
    pub fn matches(&self, pkt: &PacketInfo<'_>) -> bool {
        if self.src_node.is_some_and(|n| n != pkt.src_node)
            || self.dst_node.is_some_and(|n| n != pkt.dst_node)
        {
            return false;
        }
        let needs_packet = self.opcode.is_some() || self.psn.is_some() || self.dest_qpn.is_some();
        match pkt.packet {
            None => !needs_packet,
            Some(p) => {
                self.opcode.map_or(true, |o| o == p.bth.opcode)
                    && self.psn.map_or(true, |s| s == p.bth.psn)
                    && self.dest_qpn.map_or(true, |q| q == p.bth.dest_qpn)
            }
        }
    }
}

/// Applies `action` to the `nth` (0-based) through `nth + count - 1`th datagrams that match,
/// and passes everything else: "drop the 2nd READ response", "duplicate the 1st atomic".
#[derive(Debug, Clone)]
pub struct Targeted {
    matcher: PacketMatch,
    nth: u64,
    count: u64,
    action: Verdict,
    seen: u64,
    fired: u64,
}

impl Targeted {
    /// Acts on the `nth` (0-based) matching datagram only.
    pub fn new(matcher: PacketMatch, nth: u64, action: Verdict) -> Targeted {
        Targeted::times(matcher, nth, 1, action)
    }

    /// Acts on `count` consecutive matching datagrams starting with the `nth`.
    pub fn times(matcher: PacketMatch, nth: u64, count: u64, action: Verdict) -> Targeted {
        Targeted {
            matcher,
            nth,
            count,
            action,
            seen: 0,
            fired: 0,
        }
    }

    /// Drops the `nth` matching datagram.
    pub fn drop_nth(matcher: PacketMatch, nth: u64) -> Targeted {
        Targeted::new(matcher, nth, Verdict::Drop)
    }

    /// Duplicates the `nth` matching datagram.
    pub fn duplicate_nth(matcher: PacketMatch, nth: u64) -> Targeted {
        Targeted::new(matcher, nth, Verdict::Duplicate)
    }

    /// Holds the `nth` matching datagram until released.
    pub fn hold_nth(matcher: PacketMatch, nth: u64) -> Targeted {
        Targeted::new(matcher, nth, Verdict::Hold)
    }

    /// How many datagrams this interceptor acted on so far.
    pub fn fired(&self) -> u64 {
        self.fired
    }
}

impl Interceptor for Targeted {
    fn intercept(&mut self, pkt: &PacketInfo<'_>) -> Verdict {
        if !self.matcher.matches(pkt) {
            return Verdict::Pass;
        }
        let idx = self.seen;
        self.seen += 1;
        if idx >= self.nth && idx - self.nth < self.count {
            self.fired += 1;
            self.action
        } else {
            Verdict::Pass
        }
    }
}
