//! What one datagram is, going out ([`Transmit`]) and coming in ([`RecvMeta`]), and its ECN bits.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The ECN codepoint: the two low bits of the IPv4 TOS / IPv6 traffic class (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Ecn {
    /// Not ECN-capable (00). What rxe sends.
    #[default]
    NotEct = 0b00,
    /// ECN-capable transport, ECT(1) (01).
    Ect1 = 0b01,
    /// ECN-capable transport, ECT(0) (10). What DCQCN senders mark their packets with.
    Ect0 = 0b10,
    /// Congestion experienced (11): set by a congested switch; the receiver answers with a CNP.
    Ce = 0b11,
}

impl Ecn {
    /// The codepoint in the two low bits of `tos` (a TOS or traffic-class byte).
    #[must_use]
    pub const fn from_tos(tos: u8) -> Self {
        match tos & 0b11 {
            0b00 => Self::NotEct,
            0b01 => Self::Ect1,
            0b10 => Self::Ect0,
            _ => Self::Ce,
        }
    }

    /// The two ECN bits.
    #[must_use]
    pub const fn bits(self) -> u8 {
        self as u8
    }
}

/// One outgoing datagram, or one GSO super-packet of equal-sized datagrams.
#[derive(Debug, Clone, Copy)]
pub struct Transmit<'a> {
    /// Where to send it (the peer's RoCEv2 port, normally [`ROCEV2_UDP_PORT`](crate::ROCEV2_UDP_PORT)).
    pub dst: SocketAddr,
    /// The UDP source port. 0 or the socket's own port send from the main socket; any other
    /// port goes through the source-port pool ([`RoceSocket::prepare_source_port`](crate::RoceSocket::prepare_source_port)).
    pub src_port: u16,
    /// The ECN codepoint written into the IP header.
    pub ecn: Ecn,
    /// With `Some(n)`, `contents` is a run of datagrams of `n` bytes each (the last may be
    /// shorter) sent with one GSO call. Each must be a complete RoCEv2 packet, with its own ICRC
    /// computed for IPv4 identification [`ipv4_id_of_segment(k)`](crate::ipv4_id_of_segment). At most
    /// [`RoceSocket::max_gso_segments`](crate::RoceSocket::max_gso_segments) segments.
    pub segment_size: Option<usize>,
    /// The UDP payload (the RoCEv2 packet from the BTH to the ICRC).
    pub contents: &'a [u8],
}

impl Transmit<'_> {
    /// Number of datagrams this transmit becomes on the wire.
    #[must_use]
    pub fn segments(&self) -> usize {
        match self.segment_size {
            Some(size) if size > 0 && !self.contents.is_empty() => {
                self.contents.len().div_ceil(size)
            }
            _ => 1,
        }
    }
}

/// One piece of memory a scattered receive fills
/// ([`RoceSocket::try_recv_scattered`](crate::RoceSocket::try_recv_scattered)).
#[derive(Debug, Clone, Copy)]
pub struct RecvPiece {
    /// The first byte.
    pub addr: *mut u8,
    /// Bytes.
    pub len: usize,
}

/// What the kernel said about one received message (one datagram, or several coalesced by GRO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// The sender's address and UDP source port.
    pub src: SocketAddr,
    /// The destination IP address of the datagram (`IP_PKTINFO`/`IPV6_PKTINFO`), needed for the
    /// ICRC when the socket is bound to a wildcard address. Without packet info (fallback
    /// platforms) it is the socket's bound IP.
    pub dst_ip: IpAddr,
    /// Bytes received into the slot. With GRO this is several datagrams of `stride` bytes each
    /// (the last may be shorter).
    pub len: usize,
    /// Size of each coalesced datagram (`UDP_GRO` control message), or `len` when the message is
    /// one datagram.
    pub stride: usize,
    /// The TOS / traffic-class byte of the datagram(s) (`IP_TOS`/`IPV6_TCLASS`): DSCP and
    /// ECN (see [`RecvMeta::ecn`]). GRO coalesces only equal TOS bytes. 0 without control
    /// messages (fallback platforms).
    pub tos: u8,
    /// TTL / hop limit on arrival (`IP_TTL`/`IPV6_HOPLIMIT`); GRO coalesces only equal ones.
    /// [`DEFAULT_TTL`](crate::DEFAULT_TTL) without control messages.
    pub ttl: u8,
    /// The message did not fit the slot and its tail was dropped (`MSG_TRUNC`): the last
    /// datagram in the slot is incomplete. Cannot happen with slots of [`MAX_UDP_PAYLOAD`](crate::MAX_UDP_PAYLOAD) bytes.
    pub truncated: bool,
}

impl Default for RecvMeta {
    fn default() -> Self {
        Self {
            src: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            dst_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            len: 0,
            stride: 0,
            tos: 0,
            ttl: crate::DEFAULT_TTL,
            truncated: false,
        }
    }
}

impl RecvMeta {
    /// The ECN codepoint: the two low bits of the TOS.
    #[must_use]
    pub const fn ecn(&self) -> Ecn {
        Ecn::from_tos(self.tos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_round_trips_through_tos() {
        for ecn in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
            assert_eq!(Ecn::from_tos(ecn.bits() | 0b1010_1000), ecn);
        }
    }

    #[test]
    fn transmit_segment_count() {
        let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let bytes = [0u8; 2500];
        let mut t = Transmit {
            dst,
            src_port: 0,
            ecn: Ecn::NotEct,
            segment_size: None,
            contents: &bytes,
        };
        assert_eq!(t.segments(), 1);
        t.segment_size = Some(1000);
        assert_eq!(t.segments(), 3);
        t.segment_size = Some(2500);
        assert_eq!(t.segments(), 1);
    }
}
