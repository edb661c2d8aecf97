//! The 16-byte global identifier (GID) and the textual forms tools exchange.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A 128-bit InfiniBand/RoCE global identifier, as the raw bytes in network order
/// (`union ibv_gid.raw`).
///
/// For RoCE v2 a GID *is* an IPv6 address: rxe's GID index 1 is the IPv4-mapped address
/// `::ffff:a.b.c.d` of the netdev, which is how a softrdma peer finds the IP to send to. The
/// type lives in `wire` because every layer names peers by it: the verbs GID table, the
/// out-of-band exchanges of the tools, the address vectors of QPs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID: what `ibv_rc_pingpong` sends when run without `-g`.
    pub const ZERO: Gid = Gid([0; 16]);

    /// The IPv4-mapped GID `::ffff:a.b.c.d`, the one rxe publishes for an IPv4 netdev address
    /// (GID index 1 in the lab).
    pub fn from_ipv4_mapped(ip: Ipv4Addr) -> Gid {
        Gid(ip.to_ipv6_mapped().octets())
    }

    /// The GID for an IP address: IPv4 addresses become IPv4-mapped, IPv6 addresses are
    /// taken verbatim (a RoCE v2 GID is the address itself).
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid::from_ipv4_mapped(v4),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for on RoCE v2: `IpAddr::V4` for an IPv4-mapped GID,
    /// otherwise the GID as an IPv6 address. `None` for the all-zero GID, which names no
    /// address (a peer that sent it has no GID configured and cannot be reached over RoCE v2).
    pub fn to_ip(&self) -> Option<IpAddr> {
        if self.is_zero() {
            return None;
        }
        let v6 = Ipv6Addr::from(self.0);
        Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        })
    }

    /// True if every byte is zero.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// True for `::ffff:a.b.c.d`.
    pub fn is_ipv4_mapped(&self) -> bool {
        Ipv6Addr::from(self.0).to_ipv4_mapped().is_some()
    }

    /// The 32 lowercase hex digits of the raw bytes, in order: the GID field of
    /// `ibv_rc_pingpong`'s message (rdma-core's `gid_to_wire_gid`, which prints four
    /// `htobe32`-swapped words and so reproduces the byte order exactly).
    pub fn to_hex32(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = hex_digit(b >> 4);
            out[2 * i + 1] = hex_digit(b & 0xf);
        }
        out
    }

    /// Parses exactly 32 hex digits (either case), the inverse of [`Gid::to_hex32`].
    pub fn from_hex32(s: &[u8]) -> Result<Gid, GidParseError> {
        if s.len() != 32 {
            return Err(GidParseError);
        }
        let mut raw = [0u8; 16];
        for (i, pair) in s.chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0]).ok_or(GidParseError)?;
            let lo = hex_value(pair[1]).ok_or(GidParseError)?;
            raw[i] = (hi << 4) | lo;
        }
        Ok(Gid(raw))
    }
}

impl Gid {
    /// The IPv6 link-local GID `fe80::/64` + EUI-64 of a MAC: rxe's GID index 0.
    pub fn link_local_from_mac(mac: [u8; 6]) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..16].copy_from_slice(&eui64(mac));
        Gid(g)
    }
}

/// The modified EUI-64 of a MAC (RFC 4291 appendix A): what IPv6 link-local addresses and
/// rxe's node GUID are made of.
pub fn eui64(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// A string or byte sequence that is not a GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidParseError;

impl fmt::Display for GidParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a GID: expected an IPv6/IPv4 address or 32 hex digits")
    }
}

impl std::error::Error for GidParseError {}

/// Displays the GID the way `ibv_devinfo` does (`inet_ntop(AF_INET6)`), e.g.
/// `::ffff:10.88.0.11` or `fe80::5054:ff:fe58:b`.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(a: Ipv4Addr) -> Gid {
        Gid::from_ipv4_mapped(a)
    }
}

impl From<IpAddr> for Gid {
    fn from(a: IpAddr) -> Gid {
        Gid::from_ip(a)
    }
}

impl From<[u8; 16]> for Gid {
    fn from(raw: [u8; 16]) -> Gid {
        Gid(raw)
    }
}

/// Parses an IPv6 address (`::ffff:10.88.0.11`), an IPv4 address (made IPv4-mapped), or the
/// 32-hex-digit wire form — the three ways users and tools write GIDs.
impl FromStr for Gid {
    type Err = GidParseError;

    fn from_str(s: &str) -> Result<Gid, GidParseError> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Gid::from_ip(ip));
        }
        Gid::from_hex32(s.as_bytes())
    }
}

fn hex_digit(v: u8) -> u8 {
    b"0123456789abcdef"[usize::from(v & 0xf)]
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_roundtrip_and_display() {
        let g = Gid::from_ipv4_mapped(Ipv4Addr::new(10, 88, 0, 11));
        assert_eq!(&g.to_hex32(), b"00000000000000000000ffff0a58000b");
        assert_eq!(g.to_string(), "::ffff:10.88.0.11");
        assert_eq!(g.to_ip(), Some(IpAddr::V4(Ipv4Addr::new(10, 88, 0, 11))));
        assert!(g.is_ipv4_mapped());
        assert_eq!("::ffff:10.88.0.11".parse::<Gid>().unwrap(), g);
        assert_eq!("10.88.0.11".parse::<Gid>().unwrap(), g);
        assert_eq!(
            "00000000000000000000FFFF0A58000B".parse::<Gid>().unwrap(),
            g
        );
    }

    #[test]
    fn link_local_gid_is_v6() {
        let g: Gid = "fe80::5054:ff:fe58:b".parse().unwrap();
        assert_eq!(g.to_string(), "fe80::5054:ff:fe58:b");
        assert!(matches!(g.to_ip(), Some(IpAddr::V6(_))));
        assert!(!g.is_ipv4_mapped());
        assert_eq!(Gid::from_hex32(&g.to_hex32()).unwrap(), g);
    }

    #[test]
    fn link_local_from_mac_is_rxe_gid_0() {
        // rxe0 in the lab: MAC 52:54:00:58:00:0b.
        let g = Gid::link_local_from_mac([0x52, 0x54, 0x00, 0x58, 0x00, 0x0b]);
        assert_eq!(g.to_string(), "fe80::5054:ff:fe58:b");
    }

    #[test]
    fn zero_gid_has_no_ip() {
        assert_eq!(Gid::ZERO.to_ip(), None);
        assert_eq!(Gid::ZERO.to_string(), "::");
    }

    #[test]
    fn bad_hex_is_an_error() {
        assert_eq!(Gid::from_hex32(b"xyz"), Err(GidParseError));
        assert_eq!(
            Gid::from_hex32(b"00000000000000000000ffff0a58000g"),
            Err(GidParseError)
        );
        assert!("not a gid".parse::<Gid>().is_err());
    }
}
