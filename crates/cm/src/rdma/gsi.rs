//! Running an [`RdmaCm`] over a GSI QP (QP 1): the buffers it keeps posted and the rounds it
//! makes — hand the CM what arrived, run its timers, send what it queued, pass on its events —
//! once, for every driver. The simulator drives it over engines on its fabric
//! (`softrdma-sim`'s `cm.rs`); `softrdma-rdmacm` over a device's verbs, from a thread. Each
//! driver says how a MAD is sent and what an event means to it ([`GsiService`]); how the slots
//! lie and what a received slot holds is [`GsiBuffers`]'s.

use std::net::IpAddr;

use softrdma_proto::Instant;
use softrdma_wire::mad::MAD_LEN;
use softrdma_wire::{GrhArea, GRH_LEN};

use super::{RdmaCm, RdmaEvent};
use crate::ib::OutMad;
use crate::Gid;

/// The GSI QP's buffers: receive slots of a GRH area and a MAD each, kept posted; send slots
/// of one MAD each, used round robin (a UD send completes as soon as it leaves, and a MAD it
/// overwrote too early is one the CM retransmits).
#[derive(Debug, Clone)]
pub struct GsiBuffers {
    recv_slots: usize,
    send_slots: usize,
    next_send: usize,
}

impl GsiBuffers {
    /// Bytes of a receive slot: the GRH area a UD receive starts with, then the MAD.
    pub const RECV_SLOT_LEN: usize = GRH_LEN + MAD_LEN;

    /// `recv_slots` receive and `send_slots` send slots (each at least 1).
    pub fn new(recv_slots: usize, send_slots: usize) -> GsiBuffers {
        GsiBuffers {
            recv_slots: recv_slots.max(1),
            send_slots: send_slots.max(1),
            next_send: 0,
        }
    }

    /// Receive slots, kept posted.
    pub fn recv_slots(&self) -> usize {
        self.recv_slots
    }

    /// Send slots.
    pub fn send_slots(&self) -> usize {
        self.send_slots
    }

    /// Bytes of receive memory the slots need.
    pub fn recv_bytes(&self) -> usize {
        self.recv_slots * Self::RECV_SLOT_LEN
    }

    /// Bytes of send memory the slots need.
    pub fn send_bytes(&self) -> usize {
        self.send_slots * MAD_LEN
    }

    /// Where receive slot `slot` starts in the receive memory ([`Self::RECV_SLOT_LEN`] bytes).
    pub fn recv_offset(slot: usize) -> usize {
        slot * Self::RECV_SLOT_LEN
    }

    /// The next send slot: its number, and where it starts in the send memory
    /// ([`MAD_LEN`] bytes).
    pub fn next_send(&mut self) -> (usize, usize) {
        let slot = self.next_send;
        self.next_send = (slot + 1) % self.send_slots;
        (slot, slot * MAD_LEN)
    }

    /// The sender of a received slot's bytes and its MAD: the sender's address is in the GRH
    /// area — an IPv4 header in its last 20 bytes behind 20 zero bytes (RoCEv2 over IPv4), or
    /// the IPv6 header ([`GrhArea::parse`]). `None` for a slot too short, or with neither.
    pub fn received(slot: &[u8]) -> Option<(IpAddr, &[u8])> {
        if slot.len() < Self::RECV_SLOT_LEN {
            return None;
        }
        let (grh, mad) = slot.split_at(GRH_LEN);
        Some((GrhArea::parse(grh)?.src, &mad[..MAD_LEN]))
    }
}

/// A driver of an [`RdmaCm`] over QP 1: what it must say (how a MAD leaves, what an event
/// means to it); the rounds are provided.
pub trait GsiService {
    /// The CM.
    fn cm(&mut self) -> &mut RdmaCm;

    /// Sends `mad` on the GSI QP (a full send queue may lose it: the CM retransmits).
    fn send_mad(&mut self, mad: OutMad);

    /// Acts on one of the CM's events (it may call the CM again).
    fn on_event(&mut self, now: Instant, event: RdmaEvent);

    /// Whether a received request belongs to someone else and is to be dropped unhandled (a
    /// request steered to the wrong program of a shared address); `false` by default.
    fn misdirected(&mut self, _mad: &[u8]) -> bool {
        false
    }

    /// Hands the CM the MAD in a received slot from QP `src_qp` (see
    /// [`GsiBuffers::received`]); returns whether the CM took it. Repost the slot either way.
    fn on_received(&mut self, now: Instant, slot: &[u8], src_qp: u32) -> bool {
        let Some((src, mad)) = GsiBuffers::received(slot) else {
            return false;
        };
        if self.misdirected(mad) {
            self.cm().misdirected();
            return false;
        }
        self.cm().handle_mad(now, Gid::from_ip(src), src_qp, mad);
        true
    }

    /// Runs the CM's timers if one is due.
    fn on_timers(&mut self, now: Instant) {
        if self.cm().poll_timeout().is_some_and(|t| t <= now) {
            self.cm().handle_timeout(now);
        }
    }

    /// Sends every MAD the CM queued and acts on its events, until neither is left (acting
    /// on an event may queue more).
    fn pump(&mut self, now: Instant) {
        loop {
            let mut progressed = false;
            while let Some(m) = self.cm().poll_transmit() {
                progressed = true;
                self.send_mad(m);
            }
            while let Some(e) = self.cm().poll_event() {
                progressed = true;
                self.on_event(now, e);
            }
            if !progressed {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_received_slot_names_its_sender_for_ipv4_and_ipv6_and_nothing_else() {
        let mut slot = vec![0u8; GsiBuffers::RECV_SLOT_LEN];
        slot[GRH_LEN] = 0x01; // the MAD's first byte
        slot[20] = 0x45;
        slot[32..36].copy_from_slice(&[10, 0, 0, 7]);
        let (src, mad) = GsiBuffers::received(&slot).unwrap();
        assert_eq!(src, "10.0.0.7".parse::<IpAddr>().unwrap());
        assert_eq!((mad.len(), mad[0]), (MAD_LEN, 0x01));
        let mut v6 = vec![0u8; GsiBuffers::RECV_SLOT_LEN];
        v6[0] = 0x60;
        v6[8..24].copy_from_slice(&"fd00::9".parse::<std::net::Ipv6Addr>().unwrap().octets());
        assert_eq!(
            GsiBuffers::received(&v6).unwrap().0,
            "fd00::9".parse::<IpAddr>().unwrap()
        );
        // An IPv6 source whose 13th byte (the GRH area's byte 20) reads as IPv4's version.
        v6[8..24].copy_from_slice(
            &"fd00::4a00:1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        assert_eq!(
            GsiBuffers::received(&v6).unwrap().0,
            "fd00::4a00:1".parse::<IpAddr>().unwrap()
        );
        assert!(GsiBuffers::received(&vec![0u8; GsiBuffers::RECV_SLOT_LEN]).is_none());
        assert!(GsiBuffers::received(&slot[..GsiBuffers::RECV_SLOT_LEN - 1]).is_none());
    }

    #[test]
    fn send_slots_go_round() {
        let mut b = GsiBuffers::new(4, 3);
        let got: Vec<_> = (0..4).map(|_| b.next_send()).collect();
        assert_eq!(got, [(0, 0), (1, MAD_LEN), (2, 2 * MAD_LEN), (0, 0)]);
        assert_eq!(
            (b.recv_bytes(), b.send_bytes()),
            (4 * (GRH_LEN + MAD_LEN), 3 * MAD_LEN)
        );
        assert_eq!(GsiBuffers::recv_offset(2), 2 * GsiBuffers::RECV_SLOT_LEN);
    }
}
