//! Egress and time: which QP transmits next and how much (turns of one GSO datagram, the
//! device's in-flight budget shared by all QPs), the timer index, and the timers firing.

use std::collections::BTreeSet;

use super::Engine;
use crate::io::DatagramOut;
use crate::qp::{turn_goes_on, QpContext, QpState, TRANSMIT_TURN};
use crate::time::Instant;

/// Packets a budget-starved QP woken is taken to send, until a turn has run to its end and
/// shown how many a turn holds (15 at MTU 4096, 60 at MTU 1024).
pub(super) const WAKE_PER_PACKETS: u32 = 8;

impl Engine {
    /// Writes the next datagram to send into `out` and describes it, or returns `None` when
    /// nothing is ready. Call until `None`. The ICRC assumes the datagram leaves with IPv4
    /// identification 0 (a plain don't-fragment send from an unconnected socket).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<DatagramOut> {
        self.poll_transmit_segment(now, out, 0)
    }

    /// Like [`Engine::poll_transmit`], for a datagram the kernel will send with IPv4
    /// identification `ipv4_id` — segment `k` of a UDP GSO send gets identification `k`
    /// (see `softrdma_udp::ipv4_id_of_segment`), and the ICRC covers it. A caller batching
    /// datagrams into GSO sends asks for segment `k` with `ipv4_id = k`; if the datagram turns
    /// out not to fit the batch, it recomputes the ICRC for the identification it really gets.
    pub fn poll_transmit_segment(
        &mut self,
        now: Instant,
        out: &mut Vec<u8>,
        ipv4_id: u16,
    ) -> Option<DatagramOut> {
        let t = self.poll_transmit_at(now, out, 0, ipv4_id);
        if let Some(t) = &t {
            out.truncate(t.len);
        }
        t
    }

    /// Like [`Engine::poll_transmit_segment`], but writes the datagram at
    /// `out[at..at + len]`, growing `out` as needed and leaving the rest of it as it was. A
    /// caller joining datagrams into one GSO send builds each straight after the one before
    /// (instead of copying it there), and may keep its buffer long to spare the zero-filling
    /// of growth.
    pub fn poll_transmit_at(
        &mut self,
        now: Instant,
        out: &mut Vec<u8>,
        at: usize,
        ipv4_id: u16,
    ) -> Option<DatagramOut> {
        if self.ready.is_empty() {
            // Nothing else would wake the QPs waiting for the budget if no ACK is to come.
            self.wake_starved(u32::MAX);
        }
        let mut rewoken = false;
        while let Some(&qpn) = self.ready.front() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                // Destroyed while in line, perhaps woken for room an ACK freed: that room
                // must go to another QP.
                self.ready.pop_front();
                self.turn_bytes = 0;
                self.turn_packets = 0;
                self.rewake_when_idle(&mut rewoken);
                continue;
            };
            let mut ctx = self.shared.ctx(now, ipv4_id);
            ctx.out_at = at;
            ctx.others_inflight = self.inflight - qp.counted_inflight;
            ctx.turn_used = (self.ready.len() > 1).then_some(self.turn_bytes);
            let sent = qp.poll_transmit(&mut ctx, out);
            // Round robin by turns of up to `TRANSMIT_TURN` bytes: a QP with more to send keeps
            // the front of the line until its turn is used, then goes to the back. Turns, not
            // single packets, because the I/O layer joins a QP's consecutive packets into one
            // GSO datagram; one packet per turn would give every datagram a different source
            // port and cost a system call per packet as soon as two QPs send.
            let more = sent.is_some() && qp.wants_transmit();
            let len = sent.as_ref().map_or(0, |t| t.len);
            self.turn_bytes += len;
            self.turn_packets += u32::from(sent.is_some());
            // The turn goes on while another packet of this size still fits, or to finish a
            // message whose tail is short (the requester asks for an ACK on the packet that
            // ends its turn: `turn_ends`).
            let mut full_turn = None;
            if !(more && turn_goes_on(self.turn_bytes, len, ctx.message_tail)) {
                self.ready.pop_front();
                if more {
                    self.ready.push_back(qpn);
                }
                // A turn that ran to its end, and one drawn out to finish a WRITE, tells how
                // many packets a turn holds; one cut short by an empty queue (before it was
                // full) does not.
                if more || self.turn_bytes + len > TRANSMIT_TURN {
                    full_turn = Some(self.turn_packets.max(1));
                }
                self.turn_bytes = 0;
                self.turn_packets = 0;
            }
            if qp.req.take_starved() && !qp.budget_listed {
                qp.budget_listed = true;
                self.starved.push_back(qpn);
            }
            // Sending arms the retransmit timer; a failed send may have stopped them all.
            let freed = sync_qp(&mut self.timers, &mut self.inflight, qpn, qp);
            // Only a turn of requests tells what a QP woken for the budget sends: READ
            // responses, UC and UD packets take no budget, and their turns can be far longer.
            if let Some(packets) = full_turn.filter(|_| qp.counted_inflight > 0) {
                self.full_turn_packets = packets;
            }
            self.budget_freed(freed);
            self.settle_overflows();
            if sent.is_some() {
                return sent;
            }
            // The woken QPs had nothing to send after all (an error, a flush).
            self.rewake_when_idle(&mut rewoken);
        }
        None
    }

    /// When the ready line has run empty without a packet, wakes the QPs waiting for the
    /// budget while it has room, or they would wait for an ACK that may not come. Once per
    /// [`Engine::poll_transmit_at`]: a QP the budget refuses again waits for the next ACK.
    fn rewake_when_idle(&mut self, rewoken: &mut bool) {
        if self.ready.is_empty() && !*rewoken {
            *rewoken = true;
            self.wake_starved(u32::MAX);
        }
    }

    /// The earliest instant at which [`Engine::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(at, _)| at)
    }

    /// Runs every timer that has expired at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .timers
            .iter()
            .take_while(|&&(at, _)| at <= now)
            .map(|&(_, qpn)| qpn)
            .collect();
        for qpn in due {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut ctx = self.shared.ctx(now, 0);
            qp.handle_timeout(&mut ctx);
            if qp.wants_transmit() {
                self.ready.push_back(qpn);
            }
            self.sync_timer(qpn);
        }
        self.settle_overflows();
    }

    /// Brings the engine's view of `qpn` up to date after anything that may have changed it:
    /// its packets in flight in the device total (waking QPs that waited for the budget when
    /// it went down) and its earliest timer in the timer index.
    pub(super) fn sync_timer(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let freed = sync_qp(&mut self.timers, &mut self.inflight, qpn, qp);
        self.budget_freed(freed);
    }

    /// `freed` packets of the device budget went: QPs waiting for room may go. (The budget's
    /// limit grew already if an ACK freed them: see the completer's `acknowledge_to`.)
    fn budget_freed(&mut self, freed: u32) {
        if freed > 0 {
            self.wake_starved(freed);
        }
    }

    /// Puts QPs that waited for the device budget back in line, oldest first, for up to
    /// `room` packets of the budget's free room: one QP per turn's worth of packets (a woken
    /// QP sends up to a turn, see `TRANSMIT_TURN`). Waking them all on every ACK would poll
    /// and refuse all but a few again, at O(QPs) per ACK (with 64 QPs that was most of the
    /// CPU). An ACK wakes QPs for the room it freed, not for all the room there is: the rest
    /// is already promised to QPs woken before and still waiting in line for their turn
    /// (waking for all of it on every ACK of a batch woke many times too many, and each
    /// one refused cost two cache misses with a thousand QPs). Too few woken leaves room
    /// unused only until the ready line empties, which wakes for all of it.
    pub(super) fn wake_starved(&mut self, room: u32) {
        let limit = self.shared.budget.limit();
        // Asked whenever the ready line runs empty: mostly with nobody waiting.
        if self.starved.is_empty() || self.inflight >= limit {
            return;
        }
        let room = room.min(limit - self.inflight);
        let wake = room.div_ceil(self.full_turn_packets);
        let mut woken = 0;
        while woken < wake {
            let Some(qpn) = self.starved.pop_front() else {
                break;
            };
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.budget_listed = false;
            // One that has nothing to send any more (flushed, or the WQE it waited with
            // was completed in error) takes no room.
            if qp.wants_transmit() {
                self.ready.push_back(qpn);
                woken += 1;
            }
        }
    }
}

/// [`Engine::sync_timer`] for a QP the caller already holds (a lookup in a thousand QPs is
/// not free: two per packet were 5 % of a 1000-QP run): updates the device's in-flight total
/// and the timer index from `qp`, and returns the budget packets it freed.
fn sync_qp(
    timers: &mut BTreeSet<(Instant, u32)>,
    inflight: &mut u32,
    qpn: u32,
    qp: &mut QpContext,
) -> u32 {
    let now_inflight = match qp.state {
        QpState::Rts | QpState::Sqd => qp.req.budget_share(),
        _ => 0,
    };
    let freed = qp.counted_inflight.saturating_sub(now_inflight);
    *inflight = *inflight - qp.counted_inflight + now_inflight;
    qp.counted_inflight = now_inflight;
    let next = qp.next_deadline();
    if next != qp.scheduled {
        if let Some(old) = qp.scheduled {
            timers.remove(&(old, qpn));
        }
        if let Some(new) = next {
            timers.insert((new, qpn));
        }
        qp.scheduled = next;
    }
    freed
}
