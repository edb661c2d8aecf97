//! The 40-byte GRH area at the start of every UD receive buffer (IBTA 11.4.1.2, Annex A17.4.5).
//!
//! On InfiniBand a UD receive begins with the packet's Global Route Header. RoCEv2 has no GRH:
//! the network header plays its role, and Linux rxe (like RoCE NICs) writes that header into
//! the area instead, so `ibv_init_ah_from_wc` can reply to the sender:
//!
//! - IPv6: the 40-byte IPv6 header as received, which has the GRH's layout;
//! - IPv4: 20 zero bytes, then the 20-byte IPv4 header as received (TOS, TTL, identification
//!   and checksum included).
//!
//! A userspace receiver never sees the IP header, so [`GrhArea::write`] rebuilds it from what
//! the socket reports (addresses, TOS, TTL) and what the ICRC revealed (the IPv4
//! identification and don't-fragment flag, see [`IcrcContext::verify_unknown_ipv4`]): the
//! result is the header the sender's kernel wrote, byte for byte, with a valid checksum.
//!
//! [`IcrcContext::verify_unknown_ipv4`]: crate::IcrcContext::verify_unknown_ipv4

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ip::{Ipv4Header, Ipv6Header};
use crate::pcap::UdpDatagram;

/// Size of the GRH area.
pub const GRH_LEN: usize = 40;

/// What a GRH area says about the datagram that filled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrhArea {
    /// The sender's address.
    pub src: IpAddr,
    /// The address the datagram was sent to (the receiver's, or a multicast group).
    pub dst: IpAddr,
    /// TOS / traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// TTL / hop limit on arrival.
    pub hop_limit: u8,
    /// IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
}

impl GrhArea {
    /// The GRH area of the UDP datagram `d`, as rxe writes it for RoCEv2. `None` if the
    /// datagram is too long for an IP length field.
    pub fn write(d: &UdpDatagram<'_>) -> Option<[u8; GRH_LEN]> {
        let mut headers = [0u8; Ipv6Header::LEN + 8];
        d.emit_headers(&mut headers)?;
        let mut out = [0u8; GRH_LEN];
        if d.is_ipv4() {
            out[20..].copy_from_slice(&headers[..Ipv4Header::LEN]);
        } else {
            out.copy_from_slice(&headers[..Ipv6Header::LEN]);
        }
        Some(out)
    }

    /// The GRH area of a UD receive, as `ibv_init_ah_from_wc` reads it for RoCEv2: an IPv4
    /// header at offset 20 after 20 zero bytes, else an IPv6 header at offset 0. `None` for
    /// anything else (a receive that did not come with a GRH).
    pub fn parse(area: &[u8]) -> Option<GrhArea> {
        let area: &[u8; GRH_LEN] = area.get(..GRH_LEN)?.try_into().ok()?;
        if area[..20].iter().all(|&b| b == 0) && area[20] >> 4 == 4 {
            let h = &area[20..];
            return Some(GrhArea {
                src: IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15])),
                dst: IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19])),
                traffic_class: h[1],
                hop_limit: h[8],
                flow_label: 0,
            });
        }
        if area[0] >> 4 == 6 {
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&area[8..24]);
            dst.copy_from_slice(&area[24..40]);
            return Some(GrhArea {
                src: IpAddr::V6(Ipv6Addr::from(src)),
                dst: IpAddr::V6(Ipv6Addr::from(dst)),
                traffic_class: (area[0] << 4) | (area[1] >> 4),
                hop_limit: area[7],
                flow_label: u32::from_be_bytes([0, area[1] & 0x0f, area[2], area[3]]),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::ipv4_checksum;

    #[test]
    fn test_ipv4_area() {
        let payload = [0u8; 44];
        let d = UdpDatagram {
            tos: 0x02,
            ttl: 63,
            ipv4_id: 0x1234,
            ..UdpDatagram::new(
                "10.88.0.12:57236".parse().unwrap(),
                "10.88.0.11:4791".parse().unwrap(),
                &payload,
            )
        };
        let area = GrhArea::write(&d).unwrap();
        assert_eq!(area[..20], [0u8; 20]);
        let ip = &area[20..];
        assert_eq!(ip[0], 0x45);
        assert_eq!(ip[1], 0x02);
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 20 + 8 + 44);
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 0x1234);
        assert_eq!(ip[6], 0x40);
        assert_eq!(ip[8], 63);
        assert_eq!(ip[9], 17);
        assert_eq!(ipv4_checksum(ip), 0, "a stored checksum sums to zero");
        let g = GrhArea::parse(&area).unwrap();
        assert_eq!(g.src, "10.88.0.12".parse::<IpAddr>().unwrap());
        assert_eq!(g.dst, "10.88.0.11".parse::<IpAddr>().unwrap());
        assert_eq!((g.traffic_class, g.hop_limit, g.flow_label), (0x02, 63, 0));
    }

    #[test]
    fn test_ipv6_area() {
        let d = UdpDatagram {
            tos: 0xb8,
            ttl: 5,
            ..UdpDatagram::new(
                "[fd00::2]:50000".parse().unwrap(),
                "[ff0e::1]:4791".parse().unwrap(),
                &[1, 2, 3],
            )
        };
        let area = GrhArea::write(&d).unwrap();
        assert_eq!(area[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([area[4], area[5]]), 8 + 3);
        assert_eq!(area[6], 17);
        let g = GrhArea::parse(&area).unwrap();
        assert_eq!(g.src, "fd00::2".parse::<IpAddr>().unwrap());
        assert_eq!(g.dst, "ff0e::1".parse::<IpAddr>().unwrap());
        assert_eq!((g.traffic_class, g.hop_limit), (0xb8, 5));
    }

    #[test]
    fn test_parse_rejects_garbage() {
        assert_eq!(GrhArea::parse(&[0u8; 40]), None);
        assert_eq!(GrhArea::parse(&[0x45; 39]), None);
    }
}
