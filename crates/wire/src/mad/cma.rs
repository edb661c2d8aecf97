//! What Linux's rdma_cm (`drivers/infiniband/core/cma.c`) layers on the CM for IP addressing
//! (IBTA Annex A11): the service ID built from a port space and a port, and the 36-byte header
//! at the start of REQ and SIDR_REQ private data that carries the IP addresses and the source
//! port (the destination port is in the service ID). The application's private data follows
//! the header; REP, REJ, RTU, DREQ and DREP carry none.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::bytes::{be16, check_len, put16};
use crate::mad::header::MadError;

/// The header's version (`CMA_VERSION`); Linux rejects any other.
pub const CMA_VERSION: u8 = 0x00;
/// Header length: version, IP version, port, two 16-byte addresses.
pub const CMA_HEADER_LEN: usize = 36;
/// The Q_Key rdma_cm gives UD QPs of the UDP and IB port spaces (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// An rdma_cm port space (`enum rdma_ucm_port_space`): which "protocol" a port number belongs
/// to. The value, shifted left 16, is the service ID's upper part: 0x0106 is Annex A11's
/// prefix 0x0000000001 followed by the IP protocol number of TCP (6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortSpace {
    /// `RDMA_PS_IPOIB` (0x0002): UD, IPoIB's.
    Ipoib,
    /// `RDMA_PS_TCP` (0x0106): reliable connected (rping, ucmatose, perftest -R).
    Tcp,
    /// `RDMA_PS_UDP` (0x0111): UD with SIDR (udaddy).
    Udp,
    /// `RDMA_PS_IB` (0x013F): any QP type.
    Ib,
}

impl PortSpace {
    /// All port spaces.
    pub const ALL: [PortSpace; 4] = [
        PortSpace::Ipoib,
        PortSpace::Tcp,
        PortSpace::Udp,
        PortSpace::Ib,
    ];

    /// The `RDMA_PS_*` value.
    pub const fn value(self) -> u16 {
        match self {
            PortSpace::Ipoib => 0x0002,
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013f,
        }
    }

    /// From an `RDMA_PS_*` value.
    pub const fn from_value(v: u16) -> Option<PortSpace> {
        match v {
            0x0002 => Some(PortSpace::Ipoib),
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            0x013f => Some(PortSpace::Ib),
            _ => None,
        }
    }

    /// The service ID of `port` in this space (`rdma_get_service_id`): `ps << 16 | port`.
    pub const fn service_id(self, port: u16) -> u64 {
        ((self.value() as u64) << 16) | port as u64
    }

    /// The port space and port a service ID encodes (`rdma_ps_from_service_id`,
    /// `cma_port_from_service_id`), if its upper 32 bits are zero and the space is known.
    pub const fn from_service_id(service_id: u64) -> Option<(PortSpace, u16)> {
        if service_id >> 32 != 0 {
            return None;
        }
        match PortSpace::from_value((service_id >> 16) as u16) {
            Some(ps) => Some((ps, service_id as u16)),
            None => None,
        }
    }

    /// Short name, as `rdma_cm` tools print it.
    pub const fn name(self) -> &'static str {
        match self {
            PortSpace::Ipoib => "IPOIB",
            PortSpace::Tcp => "TCP",
            PortSpace::Udp => "UDP",
            PortSpace::Ib => "IB",
        }
    }
}

impl fmt::Display for PortSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The RoCEv2 flow label rdma_cm puts in the REQ's primary path when the source address has
/// none (`cma_get_roce_udp_flow_label`): a hash of the two ports, `sport * 31 + dport`, cut to
/// 20 bits.
pub const fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    ((src_port as u32)
        .wrapping_mul(31)
        .wrapping_add(dst_port as u32))
        & 0xf_ffff
}

/// rdma_cm's header in REQ / SIDR_REQ private data (`struct cma_hdr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHeader {
    /// [`CMA_VERSION`].
    pub version: u8,
    /// IP version in the upper nibble of byte 1: 4 or 6 (anything else means AF_IB to Linux).
    pub ip_version: u8,
    /// The active side's port (its source port).
    pub src_port: u16,
    /// The active side's address: IPv4 in the last 4 bytes after 12 zero bytes, or IPv6.
    pub src_addr: [u8; 16],
    /// The address the active side connects to, same layout.
    pub dst_addr: [u8; 16],
}

fn raw(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl CmaHeader {
    /// The header Linux writes (`cma_format_hdr`) for a connection from `src` to `dst`; `None`
    /// if the two are not the same address family.
    pub fn new(src: SocketAddr, dst: IpAddr) -> Option<CmaHeader> {
        let ip_version = match (src.ip(), dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return None,
        };
        Some(CmaHeader {
            version: CMA_VERSION,
            ip_version,
            src_port: src.port(),
            src_addr: raw(src.ip()),
            dst_addr: raw(dst),
        })
    }

    fn ip(&self, b: &[u8; 16]) -> Option<IpAddr> {
        match self.ip_version {
            4 => Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
            6 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
            _ => None,
        }
    }

    /// The active side's address, for IP versions 4 and 6.
    pub fn src_ip(&self) -> Option<IpAddr> {
        self.ip(&self.src_addr)
    }

    /// The address connected to, for IP versions 4 and 6.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        self.ip(&self.dst_addr)
    }

    /// The active side's socket address, for IP versions 4 and 6.
    pub fn src(&self) -> Option<SocketAddr> {
        Some(SocketAddr::new(self.src_ip()?, self.src_port))
    }

    /// Parses the first 36 bytes of private data. No field is checked (Linux checks the
    /// version and IP version where it uses them; so does the caller).
    pub fn parse(b: &[u8]) -> Result<CmaHeader, MadError> {
        check_len(b, CMA_HEADER_LEN).map_err(|_| MadError::Truncated)?;
        Ok(CmaHeader {
            version: b[0],
            ip_version: b[1] >> 4,
            src_port: be16(b, 2),
            src_addr: b[4..20].try_into().expect("16 bytes"),
            dst_addr: b[20..36].try_into().expect("16 bytes"),
        })
    }

    /// Writes the header into the first 36 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`CMA_HEADER_LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.version;
        b[1] = self.ip_version << 4;
        put16(b, 2, self.src_port);
        b[4..20].copy_from_slice(&self.src_addr);
        b[20..36].copy_from_slice(&self.dst_addr);
    }
}

impl fmt::Display for CmaHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.src(), self.dst_ip()) {
            (Some(src), Some(dst)) => write!(f, "{src} → {dst}")?,
            _ => write!(f, "ipver={}", self.ip_version)?,
        }
        if self.version != CMA_VERSION {
            write!(f, " version={}", self.version)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The first 36 bytes of rping's REQ private data in rdma_cm.pcap.
    static HEADER_BYTES: [u8; 36] = [
        0x00, 0x40, 0x86, 0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 88, 0, 12, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 10, 88, 0, 11,
    ];

    #[test]
    fn test_parse() {
        let h = CmaHeader::parse(&HEADER_BYTES).unwrap();
        assert_eq!(h.version, CMA_VERSION);
        assert_eq!(h.src(), Some("10.88.0.12:34390".parse().unwrap()));
        assert_eq!(h.dst_ip(), Some("10.88.0.11".parse().unwrap()));
        assert_eq!(h.to_string(), "10.88.0.12:34390 → 10.88.0.11");
        assert_eq!(
            CmaHeader::parse(&HEADER_BYTES[..35]),
            Err(MadError::Truncated)
        );
    }

    #[test]
    fn test_emit() {
        let h = CmaHeader::new(
            "10.88.0.12:34390".parse().unwrap(),
            "10.88.0.11".parse().unwrap(),
        )
        .unwrap();
        let mut b = [0xffu8; 36];
        h.emit(&mut b);
        assert_eq!(b, HEADER_BYTES);
    }

    #[test]
    fn test_ipv6() {
        let h = CmaHeader::new("[fe80::1]:5".parse().unwrap(), "fe80::2".parse().unwrap()).unwrap();
        let mut b = [0u8; 36];
        h.emit(&mut b);
        assert_eq!(b[1], 0x60);
        assert_eq!(CmaHeader::parse(&b).unwrap(), h);
        assert_eq!(h.dst_ip(), Some("fe80::2".parse().unwrap()));
        assert!(CmaHeader::new("1.2.3.4:5".parse().unwrap(), "::1".parse().unwrap()).is_none());
        let odd = CmaHeader { ip_version: 5, ..h };
        assert_eq!(
            (odd.src_ip(), odd.to_string()),
            (None, "ipver=5".to_owned())
        );
    }

    #[test]
    fn test_service_ids() {
        // rping's default port 7174 in the TCP space: the service ID of rdma_cm.pcap's REQ.
        assert_eq!(PortSpace::Tcp.service_id(7174), 0x0000_0000_0106_1c06);
        assert_eq!(PortSpace::Udp.service_id(7174), 0x0111_1c06);
        assert_eq!(PortSpace::Ib.service_id(1), 0x013f_0001);
        assert_eq!(PortSpace::Ipoib.service_id(2), 0x0002_0002);
        for ps in PortSpace::ALL {
            assert_eq!(
                PortSpace::from_service_id(ps.service_id(0xbeef)),
                Some((ps, 0xbeef))
            );
            assert_eq!(PortSpace::from_value(ps.value()), Some(ps));
        }
        assert_eq!(PortSpace::from_service_id(0x0107_0001), None);
        assert_eq!(PortSpace::from_service_id(0x1_0106_0001), None);
    }

    #[test]
    fn test_flow_label() {
        // rdma_cm.pcap: 34390 → 7174 gives 0x06070; ucmatose.pcap: 42634 → 7471 gives 0x447e5.
        assert_eq!(roce_flow_label(34390, 7174), 0x0_6070);
        assert_eq!(roce_flow_label(42634, 7471), 0x4_47e5);
    }
}
