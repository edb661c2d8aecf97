//! Direct placement: the payload of the next datagram received straight into the registered
//! memory it is for, with no copy after the kernel's.
//!
//! The engine knows what the next packets of a message in progress look like — headers, one
//! path MTU of payload each (or what is left, on the last), pad, ICRC — their PSNs, and where
//! each payload goes: for an RC QP in the middle of an inbound RDMA WRITE, the rest of the
//! WRITE's target; for an RC QP waiting for the responses to its RDMA READ, the READ's local
//! buffer (when [`EngineConfig::place_read_responses`](crate::EngineConfig::place_read_responses)
//! says so). The I/O layer asks for that ([`Engine::plan_placement`](crate::Engine::plan_placement)),
//! lays the receive out accordingly — scratch bytes for headers and trailers, the region's own
//! bytes for the payloads, the whole as long as the largest datagram — and receives one
//! datagram (a GRO batch of segments) into it. The engine then takes each segment that is
//! what the plan expected, checks its ICRC over the bytes where they landed, and runs it as
//! any packet, only without copying its payload
//! ([`Engine::handle_placed`](crate::Engine::handle_placed)).
//!
//! # What a datagram that lands wrongly can do
//!
//! Anything may come instead of the expected packets: another QP's packet, a duplicate, an
//! ACK, a packet from a forger, a segment of another size, a corrupted one. The kernel writes
//! whatever it is along the same layout, so its bytes can land in the region. The rule this
//! keeps: **bytes land in registered memory only inside the target of the operation in
//! flight, and only at or after the position of the packet the QP expects next** (the plan's
//! pieces cover `[position of the expected PSN, end of the message)` of that target and
//! nothing else). Why that is enough:
//!
//! - IBTA leaves the target of a WRITE undefined until the WRITE completes, and the buffer of
//!   a READ until the READ completes; RC runs its packets strictly in PSN order, so the
//!   operation completes only after every packet from the expected one to its last has run,
//!   and each of them writes its own payload over its own range, after any stray bytes landed
//!   there. By completion every byte of the range holds what the peer sent, whatever had
//!   landed on it before; an operation that never completes leaves a target that is
//!   undefined anyway. The early requests a responder keeps (`qp::responder::reorder`) run in order
//!   too, after the landing; a READ's lost response is asked for again.
//! - A segment that is not exactly the expected packet is not run from where it landed. Its
//!   bytes, and those of every later segment of the datagram, are first copied back out of
//!   the region into the scratch buffer ([`PlacementPlan::restore`]), so that the scratch
//!   holds the datagram exactly as an ordinary receive would have, and the caller hands those
//!   segments to the engine the ordinary way — before any of them can write to the region (a
//!   stray packet's own execution writes where *it* belongs, which may be a range another
//!   segment landed in).
//! - A segment whose ICRC fails is not run, here or after the copy back: nothing it carried
//!   completes anything.
//! - The plan is made under the same lock, from the same state, as the receive and its
//!   handling, and each segment is checked against the QP's state again before it runs.
//!
//! Nothing is placed outside those: not the first packet of a WRITE (its RETH, the target, is
//! only known once it has been read), not a SEND, UC or UD, not a QP whose responder keeps
//! early packets or owes a NAK, not a READ response whose payload spans two SGEs.

use std::sync::Arc;

use softrdma_wire::{Opcode, Psn};

use crate::mr::{MemoryFault, RegionMemory};

/// The most bytes one received datagram can hold (a GRO batch included): 65535 minus the
/// IPv4 and UDP headers. A placed receive is laid out over this many bytes.
pub const MAX_DATAGRAM: usize = 65_535 - 20 - 8;

/// Payload bytes of one expected packet, placed into `memory` at `offset`: they are bytes
/// `[at, at + len)` of the datagram.
#[derive(Clone)]
pub struct PlacedPiece {
    /// Where in the datagram the payload starts.
    pub at: usize,
    /// Payload bytes.
    pub len: usize,
    /// The region's memory.
    pub memory: Arc<dyn RegionMemory>,
    /// Where in `memory` the payload goes.
    pub offset: usize,
}

impl std::fmt::Debug for PlacedPiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedPiece")
            .field("at", &self.at)
            .field("len", &self.len)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

/// What the plan expects one packet to be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected {
    pub opcode: Opcode,
    pub header_len: usize,
    /// Bytes of the whole packet.
    pub len: usize,
    /// Where the packet stands in its message, as the QP will check it: a WRITE's virtual
    /// address, a READ response's byte offset.
    pub at_message: u64,
}

/// Whose packets a plan expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanKind {
    /// The rest of an RDMA WRITE the QP is responder of.
    Write,
    /// The responses to an RDMA READ the QP asked for.
    Read,
}

/// How the next datagram should be received: the packets the engine expects, one piece of
/// registered memory per packet for its payload (see the module docs).
#[derive(Debug, Clone)]
pub struct PlacementPlan {
    pub(crate) qpn: u32,
    pub(crate) kind: PlanKind,
    pub(crate) first_psn: Psn,
    /// The PSN after the message's last packet.
    pub(crate) message_end: Psn,
    pieces: Vec<PlacedPiece>,
    expected: Vec<Expected>,
}

impl PlacementPlan {
    pub(crate) fn new(
        qpn: u32,
        kind: PlanKind,
        first_psn: Psn,
        message_end: Psn,
        pieces: Vec<PlacedPiece>,
        expected: Vec<Expected>,
    ) -> PlacementPlan {
        debug_assert_eq!(pieces.len(), expected.len());
        PlacementPlan {
            qpn,
            kind,
            first_psn,
            message_end,
            pieces,
            expected,
        }
    }

    /// The payload pieces, in datagram order, non-overlapping: every other byte of the
    /// datagram (up to [`MAX_DATAGRAM`]) goes to the caller's scratch buffer at its own
    /// offset.
    pub fn pieces(&self) -> &[PlacedPiece] {
        &self.pieces
    }

    /// Bytes of the first expected packet: the GRO segment size a batch of them arrives
    /// with.
    pub fn stride(&self) -> usize {
        self.expected.first().map_or(0, |e| e.len)
    }

    /// The QP the plan is for.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// A key for the message the plan places into (QP, and where the message ends): an I/O
    /// layer whose receive into it failed (the memory is gone: `EFAULT`) stops placing
    /// into that message and lets ordinary receives, which the engine answers with the
    /// access error, take it.
    pub fn message_key(&self) -> (u32, u32) {
        (self.qpn, self.message_end.value())
    }

    pub(crate) fn expected(&self, k: usize) -> Option<&Expected> {
        self.expected.get(k)
    }

    /// Receives `datagram` as the kernel does into the plan's layout: the bytes of each piece
    /// into its region (with [`RegionMemory::write`]), all others into `scratch` at their own
    /// offsets; bytes beyond `scratch` are cut off. For the simulator and tests, which have
    /// no kernel; the engine's handling cannot tell the difference.
    pub fn scatter(&self, datagram: &[u8], scratch: &mut [u8]) -> Result<usize, MemoryFault> {
        let n = datagram.len().min(scratch.len()).min(MAX_DATAGRAM);
        let mut at = 0;
        for p in &self.pieces {
            if p.at >= n {
                break;
            }
            scratch[at..p.at].copy_from_slice(&datagram[at..p.at]);
            let end = (p.at + p.len).min(n);
            p.memory.write(p.offset, &datagram[p.at..end])?;
            at = end;
        }
        scratch[at..n].copy_from_slice(&datagram[at..n]);
        Ok(n)
    }

    /// Copies the bytes that landed in region pieces at datagram offsets `from..len` back
    /// into `scratch`, so that `scratch[from..len]` holds the datagram as received: for a
    /// datagram none of which may run in place (from a sender the device does not accept),
    /// and, by the engine, for the segments after the first that was not expected.
    pub fn restore(&self, scratch: &mut [u8], from: usize, len: usize) -> Result<(), MemoryFault> {
        for p in &self.pieces {
            let (start, end) = (p.at.max(from), (p.at + p.len).min(len));
            if start < end {
                p.memory
                    .read(p.offset + (start - p.at), &mut scratch[start..end])?;
            }
        }
        Ok(())
    }
}

/// What [`Engine::handle_placed`](crate::Engine::handle_placed) did with a datagram received into a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct PlacedReceive {
    /// Leading segments the engine took where they landed.
    pub placed: usize,
    /// Where the rest of the datagram starts: its bytes `[rest_from, len)` are in the
    /// scratch buffer as an ordinary receive would have left them, for the caller to hand
    /// over segment by segment (segment `placed` first) as it hands over any datagram.
    pub rest_from: usize,
    /// The rest could not be copied back out of the region (its memory vanished): it is
    /// lost, as if the network had lost it (RC sends it again).
    pub rest_lost: bool,
}
