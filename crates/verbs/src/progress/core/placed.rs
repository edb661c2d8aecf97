//! Receiving straight into registered memory (direct placement, see
//! `softrdma_proto::placement`): when the engine expects the rest of an RDMA WRITE, the next
//! datagram is received with one `recvmsg` scattered over the arena's first slot for headers
//! and trailers and the WRITE's target for the payloads, so the kernel's copy is the only
//! one. What lands where it does not belong is copied back into the slot and handed over as
//! an ordinary receive would have been.
//!
//! The region bytes are written by the kernel during the system call, as a NIC's DMA would
//! write them: softrdma's soundness model for regions (`crate::memory`) has every Rust access
//! to them atomic, so an outside writer races with nothing the language forbids; the engine
//! reads them back (to check the ICRC, or to copy a stray datagram back out) only after the
//! call returned, through the region's own atomic or fault-catching accesses. Which bytes the
//! kernel may write is the engine's rule: only the rest of the WRITE in flight.

use softrdma_proto::{DatagramMeta, Instant, PlacementPlan};
use softrdma_udp::{RecvPiece, RECV_PIECES_MAX};

use super::Core;

impl Core {
    /// Receives the next datagram into the engine's placement plan, if it has one the device
    /// can lay out; hands the engine what landed in place and leaves the rest in the arena
    /// for `deliver`. `None` when no placed receive was tried (receive as usual); otherwise
    /// how many datagrams the engine took in place (0: nothing was queued, or nothing fit).
    pub(super) fn receive_placed(&mut self, now: Instant) -> Option<usize> {
        if !self.placement
            || self.faults.is_some()
            || self.tap.is_some()
            || !self.backend.scatters()
        {
            return None;
        }
        let plan = self.engine.plan_placement()?;
        if self.placement_off == Some(plan.message_key()) {
            return None;
        }
        let slot = self.arena.slot_mut(0)?;
        if slot.len() < softrdma_proto::placement::MAX_DATAGRAM {
            return None;
        }
        let pieces = layout(&plan, slot)?;
        // SAFETY: the scratch pieces lie inside the arena's slot 0, borrowed mutably (the
        // pointers were derived from that borrow and are used only during this call); the
        // region pieces are bytes the engine may have the network write (the rest of the
        // WRITE in flight, see `softrdma_proto::placement`), of regions whose memory stays
        // mapped for the call (owned memory is kept alive by the plan's handles; caller
        // memory that vanished makes the call fail with EFAULT), and which Rust code only
        // accesses atomically (see the module docs).
        let got = unsafe { self.backend.try_recv_scattered(&pieces) };
        self.io.rx_calls += 1;
        // Whatever the arena held was handed over before (see `Core::receive`).
        self.arena.clear();
        self.rx_next = (0, 0);
        let meta = match got {
            Ok(Some(meta)) => meta,
            // Multicast groups have sockets of their own, which the ordinary receive reads.
            Ok(None) if self.backend.has_multicast_groups() => return None,
            Ok(None) => return Some(0),
            Err(e) => {
                self.io.rx_errors += 1;
                // The region is gone: the engine answers that with an access error, which an
                // ordinary receive of the same message gets it to.
                self.placement_off = Some(plan.message_key());
                tracing::debug!(error = %e, "placed receive failed");
                return Some(0);
            }
        };
        let len = meta.len.min(softrdma_proto::placement::MAX_DATAGRAM);
        let allowed = self.allowed_peers.is_empty()
            || self.allowed_peers.iter().any(|n| n.contains(meta.src.ip()));
        let slot = self.arena.slot_mut(0)?;
        let r = if meta.truncated || !allowed {
            // Nothing of it runs in place: back into the slot, for `deliver` to count.
            softrdma_proto::PlacedReceive {
                placed: 0,
                rest_from: 0,
                rest_lost: plan.restore(slot, 0, len).is_err(),
            }
        } else {
            let dm = DatagramMeta {
                tos: meta.tos,
                ttl: meta.ttl,
                ..DatagramMeta::new(meta.src, meta.dst_ip)
            };
            self.engine
                .handle_placed(now, &dm, &plan, slot, len, meta.stride)
        };
        self.io.rx_datagrams += r.placed as u64;
        self.io.rx_placed += r.placed as u64;
        self.placing = r.placed > 0;
        if r.rest_lost {
            self.io.rx_errors += 1;
            return Some(r.placed);
        }
        if r.rest_from < len {
            self.io.rx_placement_misses += 1;
            self.arena.set_received(meta);
            self.rx_next = (0, r.rest_from);
        }
        Some(r.placed)
    }
}

/// The receive's pieces: scratch in `slot` at each byte's own offset, except the plan's
/// region pieces; `None` if one of those cannot be placed into (memory that does not allow
/// it) or the layout needs more pieces than one receive takes.
fn layout(plan: &PlacementPlan, slot: &mut [u8]) -> Option<Vec<RecvPiece>> {
    let mut pieces = Vec::with_capacity(2 * plan.pieces().len() + 1);
    let base = slot.as_mut_ptr();
    let mut at = 0;
    for p in plan.pieces() {
        let addr = p.memory.placement_address(p.offset, p.len)?;
        if p.at > at {
            pieces.push(RecvPiece {
                // In bounds: `p.at < MAX_DATAGRAM <= slot.len()` (plans never reach past it).
                addr: base.wrapping_add(at),
                len: p.at - at,
            });
        }
        pieces.push(RecvPiece {
            addr: addr.as_ptr(),
            len: p.len,
        });
        at = p.at + p.len;
    }
    if at >= slot.len() {
        return None;
    }
    pieces.push(RecvPiece {
        addr: base.wrapping_add(at),
        len: slot.len() - at,
    });
    (pieces.len() <= RECV_PIECES_MAX).then_some(pieces)
}
