//! Which hosts may talk to a device: the optional allow-list of peer networks
//! ([`DeviceConfig::allowed_peers`](crate::DeviceConfig::allowed_peers)).
//!
//! RoCE has no authentication. What a userspace stack can check, and a NIC does not, is where
//! a packet comes from: a connected QP (RC, UC) accepts packets only from the address it was
//! connected to (the engine drops others as `DropReason::WrongSource`), and a device may in
//! addition accept datagrams only from a few networks. Neither stops a host that can put
//! packets with a *spoofed* source address on the path (on the same L2 segment, or behind a
//! router that does no source validation): that host still needs the QPN, the expected PSN
//! and a valid rkey, which is why keys are random (see `softrdma_proto::MrTable`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network in CIDR notation (`10.88.0.0/24`, `fd00::/8`, or one address).
///
/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, the RoCEv2 GID form of an IPv4 address)
/// are compared as the IPv4 addresses they are, on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNetwork {
    addr: IpAddr,
    prefix: u8,
}

/// Why a string is not an [`IpNetwork`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IP network (expected ADDRESS or ADDRESS/PREFIX, e.g. 10.88.0.0/24)")]
pub struct IpNetworkParseError(pub String);

impl IpNetwork {
    /// The network of `addr` with `prefix` leading bits; `None` if the prefix is longer than
    /// the address. Host bits of `addr` are cleared.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<IpNetwork> {
        let addr = addr.to_canonical();
        let bits = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if prefix > bits {
            return None;
        }
        Some(IpNetwork {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The network address (host bits clear; an IPv4-mapped address as IPv4).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is inside the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

impl FromStr for IpNetwork {
    type Err = IpNetworkParseError;

    fn from_str(s: &str) -> Result<IpNetwork, IpNetworkParseError> {
        let err = || IpNetworkParseError(s.to_owned());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => {
                let p: u8 = p.parse().map_err(|_| err())?;
                (a, Some(p))
            }
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| err())?;
        // A prefix written for an IPv4-mapped IPv6 address counts the 96 mapping bits.
        let mapped = matches!(addr, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some());
        let prefix = match (prefix, addr.to_canonical()) {
            (None, IpAddr::V4(_)) => 32,
            (None, IpAddr::V6(_)) => 128,
            (Some(p), IpAddr::V4(_)) if mapped => p.checked_sub(96).ok_or_else(err)?,
            (Some(p), _) => p,
        };
        IpNetwork::new(addr, prefix).ok_or_else(err)
    }
}

impl fmt::Display for IpNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_contain() {
        let n: IpNetwork = "10.88.0.7/24".parse().unwrap();
        assert_eq!(n.to_string(), "10.88.0.0/24");
        assert!(n.contains(ip("10.88.0.200")));
        assert!(n.contains(ip("::ffff:10.88.0.1")));
        assert!(!n.contains(ip("10.88.1.1")));
        assert!(!n.contains(ip("fd00::1")));
        let one: IpNetwork = "127.0.0.2".parse().unwrap();
        assert!(one.contains(ip("127.0.0.2")) && !one.contains(ip("127.0.0.3")));
        let all: IpNetwork = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("192.0.2.1")) && !all.contains(ip("::1")));
        let mapped: IpNetwork = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        let v6: IpNetwork = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        for bad in [
            "10.0.0.0/33",
            "10.0.0.0/x",
            "nonsense",
            "fd00::/129",
            "::ffff:1.2.3.4/8",
        ] {
            assert!(bad.parse::<IpNetwork>().is_err(), "{bad}");
        }
    }
}
