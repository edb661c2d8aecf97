//! The sending half of the core: what the engine has to send, built in place into batch
//! buffers, grouped into UDP GSO datagrams where the receiver can split them again, and handed
//! to the backend one `sendmmsg` batch at a time; and what fault injection held back, sent
//! when it falls due.

use std::time::Duration;

use softrdma_proto::Instant;
use softrdma_udp::{Ecn, SendError, Transmit, BATCH_MAX, MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD};
use softrdma_wire::IcrcContext;

use super::faulted::sent_with_faults;
use super::{Core, TxGroup};
use crate::faults::{self, Route};

impl Core {
    /// Sends the datagrams fault injection held back that are due, each on its own (its
    /// ICRC recomputed for IPv4 identification 0, which a lone datagram leaves with).
    fn release_sent(&mut self, now: Instant) {
        let Some(f) = self.faults.as_mut() else {
            return;
        };
        let local = self.backend.local_addr().ip();
        for mut h in f.take_due(now, true) {
            let Route::Out { dst, src_port, ecn } = h.route else {
                continue;
            };
            let ctx = IcrcContext::new(local, dst.ip(), src_port, dst.port());
            if ctx.fill(&mut h.bytes).is_err() {
                self.io.tx_errors += 1;
                continue;
            }
            if let Some(bit) = h.corrupt {
                faults::flip(&mut h.bytes, bit);
            }
            let t = Transmit {
                dst,
                src_port,
                ecn: Ecn::from_tos(ecn),
                segment_size: None,
                contents: &h.bytes,
            };
            match self.backend.send(std::slice::from_ref(&t)) {
                Ok(1) => {
                    self.io.tx_datagrams += 1;
                    self.io.tx_sends += 1;
                    if let Some(tap) = self.tap.as_mut() {
                        tap.sent(src_port, dst, ecn, 0, &h.bytes);
                    }
                }
                _ => self.io.tx_errors += 1,
            }
        }
    }

    /// Sends everything the engine has to send.
    pub(crate) fn flush(&mut self, now: Instant) {
        self.flush_while(now, || true);
    }

    /// Sends what the engine has to send, one `sendmmsg` batch after another while
    /// `go_on()`; returns whether it stopped for that with a full batch sent (so that more
    /// may wait).
    pub(crate) fn flush_while(&mut self, now: Instant, go_on: impl Fn() -> bool) -> bool {
        self.release_sent(now);
        loop {
            self.tx_meta.clear();
            // Poll only while a packet that does not join the open group still has a slot.
            while self.tx_meta.len() < BATCH_MAX {
                // Ask for the packet as the next segment of the open group: the kernel will
                // give it that IPv4 identification, which the ICRC covers.
                let next_id = match self.tx_meta.last() {
                    Some(g) if g.open => g.count as u16,
                    _ => 0,
                };
                // Built straight after the open group's datagrams, where it joins them if it
                // can; otherwise in the next free slot.
                let (slot, at) = match self.tx_meta.last() {
                    Some(g) if g.open => (self.tx_meta.len() - 1, g.len),
                    _ => (self.tx_meta.len(), 0),
                };
                let Some(t) =
                    self.engine
                        .poll_transmit_at(now, &mut self.tx_bufs[slot], at, next_id)
                else {
                    break;
                };
                let port = match self.ports.get(&t.src_port) {
                    Some(&p) => p,
                    None => {
                        let p = self.backend.prepare_source_port(t.src_port);
                        self.ports.insert(t.src_port, p);
                        p
                    }
                };
                // A shorter packet ends a group (GSO: only the last segment may be shorter),
                // but not a group of one: after an RDMA WRITE's FIRST (16 bytes of RETH more
                // than the rest) the MIDDLEs start a group of their own, so that the receiver,
                // which learns from the FIRST where the rest goes, receives all of the rest in
                // place (`progress/core/placed.rs`) instead of one MIDDLE in its buffers.
                let joins = self.tx_meta.last().is_some_and(|g| {
                    g.open
                        && g.dst == t.dst
                        && g.src_port == port
                        && g.ecn == t.ecn
                        && (t.len == g.segment || t.len < g.segment && g.count > 1)
                        && g.len + t.len <= MAX_UDP_PAYLOAD
                });
                let id = if joins { next_id } else { 0 };
                if port != t.src_port || id != next_id {
                    // The ICRC covers the UDP source port and the IPv4 identification:
                    // recompute it for the ones the datagram really gets.
                    if port != t.src_port {
                        self.io.tx_port_fallbacks += 1;
                    }
                    let local = self.backend.local_addr().ip();
                    let ctx = IcrcContext {
                        ipv4_id: id,
                        ..IcrcContext::new(local, t.dst.ip(), port, t.dst.port())
                    };
                    if ctx.fill(&mut self.tx_bufs[slot][at..at + t.len]).is_err() {
                        self.io.tx_errors += 1;
                        continue;
                    }
                }
                if let Some(f) = self.faults.as_mut() {
                    let pkt = &mut self.tx_bufs[slot][at..at + t.len];
                    let route = Route::Out {
                        dst: t.dst,
                        src_port: port,
                        ecn: t.ecn,
                    };
                    if !sent_with_faults(f, &mut self.io, now, route, pkt) {
                        continue;
                    }
                }
                if joins {
                    let g = &mut self.tx_meta[slot];
                    g.count += 1;
                    g.len += t.len;
                    // GSO allows only the last segment to be shorter; a full group is done.
                    g.open = t.len == g.segment
                        && g.count < MAX_GSO_SEGMENTS
                        && g.len + g.segment <= MAX_UDP_PAYLOAD;
                    continue;
                }
                let i = self.tx_meta.len();
                if slot != i {
                    // Built behind a group it does not join: it starts the next slot (the only
                    // packets copied, one per group at most).
                    let (done, free) = self.tx_bufs.split_at_mut(i);
                    let to = &mut free[0];
                    if to.len() < t.len {
                        to.resize(t.len, 0);
                    }
                    to[..t.len].copy_from_slice(&done[slot][at..at + t.len]);
                }
                let gso = self.gso
                    && (self.gso_any_destination
                        || t.dst.ip().is_loopback()
                        || t.dst.ip() == self.local_ip);
                self.tx_meta.push(TxGroup {
                    dst: t.dst,
                    src_port: port,
                    ecn: t.ecn,
                    segment: t.len,
                    count: 1,
                    len: t.len,
                    open: gso,
                });
            }
            if self.tx_meta.is_empty() {
                return false;
            }
            let full = self.tx_meta.len() == BATCH_MAX;
            self.send_batch();
            if !full {
                return false;
            }
            if !go_on() {
                return true;
            }
        }
    }

    fn send_batch(&mut self) {
        let mut sent = 0;
        let mut stalls = 0;
        while sent < self.tx_meta.len() {
            let groups = self.tx_meta[sent..].iter().zip(&self.tx_bufs[sent..]);
            // A lone datagram (a ping-pong's answer) is sent without allocating.
            let (one, many): (Option<Transmit<'_>>, Vec<Transmit<'_>>) = if groups.len() == 1 {
                (groups.map(TxGroup::transmit).next(), Vec::new())
            } else {
                (None, groups.map(TxGroup::transmit).collect())
            };
            let transmits = one.as_ref().map_or(&many[..], std::slice::from_ref);
            let port = transmits[0].src_port;
            self.io.tx_calls += 1;
            match self.backend.send(transmits) {
                Ok(0) => {
                    // Socket buffer full: wait a little, then give the rest up to the
                    // transport's retransmission rather than stall every thread.
                    stalls += 1;
                    drop(many);
                    let ready = self
                        .backend
                        .wait_writable(port, Some(Duration::from_millis(1)))
                        .unwrap_or(false);
                    if !ready && stalls > 3 {
                        let left: usize = self.tx_meta[sent..].iter().map(|g| g.count).sum();
                        self.io.tx_errors += left as u64;
                        return;
                    }
                }
                Ok(n) => {
                    drop(many);
                    for i in sent..sent + n {
                        self.record_sent(i);
                    }
                    sent += n;
                }
                Err(SendError::GsoUnavailable { .. }) => {
                    // The kernel refused GSO (the socket stopped using it): send this group's
                    // segments one by one, each now identification 0.
                    drop(many);
                    self.gso = false;
                    self.send_split(sent);
                    sent += 1;
                }
                Err(e) => {
                    if !matches!(e, SendError::SourcePortUnavailable { .. }) {
                        tracing::debug!(error = %e, "send failed; the datagram is dropped");
                    }
                    self.io.tx_errors += self.tx_meta[sent].count as u64;
                    sent += 1;
                }
            }
        }
    }

    /// Sends group `i` as separate datagrams, recomputing each segment's ICRC for IPv4
    /// identification 0.
    fn send_split(&mut self, i: usize) {
        let g = self.tx_meta[i];
        let local = self.backend.local_addr().ip();
        let ctx = IcrcContext::new(local, g.dst.ip(), g.src_port, g.dst.port());
        for k in 0..g.count {
            let start = k * g.segment;
            let seg = &mut self.tx_bufs[i][start..(start + g.segment).min(g.len)];
            if ctx.fill(seg).is_err() {
                self.io.tx_errors += 1;
                continue;
            }
            let t = Transmit {
                dst: g.dst,
                src_port: g.src_port,
                ecn: Ecn::from_tos(g.ecn),
                segment_size: None,
                contents: seg,
            };
            match self.backend.send(std::slice::from_ref(&t)) {
                Ok(1) => {
                    self.io.tx_datagrams += 1;
                    self.io.tx_sends += 1;
                    if let Some(tap) = self.tap.as_mut() {
                        tap.sent(g.src_port, g.dst, g.ecn, 0, seg);
                    }
                }
                _ => self.io.tx_errors += 1,
            }
        }
    }

    /// Accounts for (and taps) group `i` after the kernel took it.
    fn record_sent(&mut self, i: usize) {
        let g = self.tx_meta[i];
        self.io.tx_datagrams += g.count as u64;
        self.io.tx_sends += 1;
        if let Some(tap) = self.tap.as_mut() {
            for (k, seg) in self.tx_bufs[i][..g.len].chunks(g.segment).enumerate() {
                tap.sent(g.src_port, g.dst, g.ecn, k as u16, seg);
            }
        }
    }
}
