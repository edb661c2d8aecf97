//! rdma_cm's addressing (Linux `cma.c`): which ports are bound in which port space, the IP
//! header an active side writes into REQ / SIDR_REQ private data, and the checks a passive
//! side makes on it before a listener sees the request.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use softrdma_wire::mad::cma::{CmaHeader, PortSpace, CMA_HEADER_LEN, CMA_VERSION};

use super::id::RdmaId;

/// Ephemeral ports Linux hands out (`inet_get_local_port_range` defaults).
pub(crate) const EPHEMERAL_PORTS: std::ops::RangeInclusive<u16> = 32768..=60999;

/// Why a received request's rdma_cm header is refused (Linux then rejects with REJ 28, or a
/// SIDR_REP "reject").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// Version other than 0 (`cma_save_ip_info`: -EINVAL).
    Version,
    /// IP version neither 4 nor 6.
    IpVersion,
    /// Zero, multicast or broadcast addresses (`validate_ipv4_net_dev`).
    Address,
}

/// The listeners and bound ids of every (port space, port).
#[derive(Debug, Default)]
pub(crate) struct Ports {
    bound: BTreeMap<(PortSpace, u16), Vec<(RdmaId, IpAddr)>>,
}

impl Ports {
    /// Binds `id` to `addr` in `ps`; port 0 picks a free ephemeral port with `pick`. Two ids
    /// may share a port only on different specific addresses (`cma_check_port` without
    /// SO_REUSEADDR). Returns the port.
    pub(crate) fn bind(
        &mut self,
        id: RdmaId,
        ps: PortSpace,
        addr: SocketAddr,
        mut pick: impl FnMut() -> u16,
    ) -> Option<u16> {
        let port = if addr.port() != 0 {
            addr.port()
        } else {
            let span = usize::from(EPHEMERAL_PORTS.end() - EPHEMERAL_PORTS.start()) + 1;
            let mut found = None;
            for _ in 0..span {
                let p = pick();
                if !self.bound.contains_key(&(ps, p)) {
                    found = Some(p);
                    break;
                }
            }
            found?
        };
        let ids = self.bound.entry((ps, port)).or_default();
        let ip = addr.ip();
        let clash = ids
            .iter()
            .any(|&(_, other)| other == ip || other.is_unspecified() || ip.is_unspecified());
        if clash {
            if ids.is_empty() {
                self.bound.remove(&(ps, port));
            }
            return None;
        }
        ids.push((id, ip));
        Some(port)
    }

    /// Releases `id`'s port.
    pub(crate) fn unbind(&mut self, id: RdmaId, ps: PortSpace, port: u16) {
        if let Some(ids) = self.bound.get_mut(&(ps, port)) {
            ids.retain(|&(i, _)| i != id);
            if ids.is_empty() {
                self.bound.remove(&(ps, port));
            }
        }
    }

    /// The ids bound to (ps, port).
    pub(crate) fn on_port(&self, ps: PortSpace, port: u16) -> &[(RdmaId, IpAddr)] {
        self.bound.get(&(ps, port)).map_or(&[], Vec::as_slice)
    }
}

/// The private data rdma_cm sends in a REQ or SIDR_REQ: its header from `src` to `dst`, then
/// the application's bytes.
pub(crate) fn request_private_data(src: SocketAddr, dst: IpAddr, user: &[u8]) -> Option<Vec<u8>> {
    let header = CmaHeader::new(src, dst)?;
    let mut out = vec![0u8; CMA_HEADER_LEN + user.len()];
    header.emit(&mut out);
    out[CMA_HEADER_LEN..].copy_from_slice(user);
    Some(out)
}

fn unusable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_unspecified() || v4.is_multicast() || v4 == Ipv4Addr::BROADCAST,
        IpAddr::V6(v6) => v6.is_unspecified() || v6.is_multicast(),
    }
}

/// Reads and checks the header of a received request (`cma_save_ip_info`,
/// `validate_net_dev`'s address rules): the peer's socket address and the local address it
/// was sent to. Linux also refuses loopback addresses here; softrdma does not, because its
/// devices live on 127.0.0.x in loopback mode.
pub(crate) fn read_header(
    private_data: &[u8],
) -> Result<(CmaHeader, SocketAddr, IpAddr), HeaderError> {
    let h = CmaHeader::parse(private_data).map_err(|_| HeaderError::Version)?;
    if h.version != CMA_VERSION {
        return Err(HeaderError::Version);
    }
    let (Some(src), Some(dst)) = (h.src(), h.dst_ip()) else {
        return Err(HeaderError::IpVersion);
    };
    if unusable(src.ip()) || unusable(dst) {
        return Err(HeaderError::Address);
    }
    Ok((h, src, dst))
}

/// Does a listener bound to `bound` take a request for `dst` (`cma_match_private_data`)?
/// IPv4 listeners take only IPv4; an IPv6 listener on the any-address takes both families
/// (Linux's default `bindv6only=0`), a specific one only its own address.
pub(crate) fn listener_matches(bound: IpAddr, dst: IpAddr) -> bool {
    match bound {
        IpAddr::V4(b) => matches!(dst, IpAddr::V4(d) if b.is_unspecified() || b == d),
        IpAddr::V6(b) if b.is_unspecified() => true,
        IpAddr::V6(b) => matches!(dst, IpAddr::V6(d) if b == d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_listener_matching() {
        let v4: IpAddr = "10.88.0.11".parse().unwrap();
        let other: IpAddr = "10.88.0.12".parse().unwrap();
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert!(listener_matches("0.0.0.0".parse().unwrap(), v4));
        assert!(listener_matches(v4, v4));
        assert!(!listener_matches(v4, other));
        assert!(!listener_matches("0.0.0.0".parse().unwrap(), v6));
        assert!(listener_matches("::".parse().unwrap(), v4));
        assert!(listener_matches("::".parse().unwrap(), v6));
        assert!(!listener_matches(v6, "fe80::2".parse().unwrap()));
    }

    #[test]
    fn test_read_header() {
        let pd = request_private_data(
            "10.88.0.12:34390".parse().unwrap(),
            "10.88.0.11".parse().unwrap(),
            b"hi",
        )
        .unwrap();
        assert_eq!(pd.len(), 38);
        let (_, src, dst) = read_header(&pd).unwrap();
        assert_eq!(src, "10.88.0.12:34390".parse().unwrap());
        assert_eq!(dst, "10.88.0.11".parse::<IpAddr>().unwrap());
        let mut bad = pd.clone();
        bad[0] = 1;
        assert_eq!(read_header(&bad).unwrap_err(), HeaderError::Version);
        bad = pd.clone();
        bad[1] = 0x50;
        assert_eq!(read_header(&bad).unwrap_err(), HeaderError::IpVersion);
        bad = pd;
        bad[32..36].copy_from_slice(&[224, 0, 0, 1]);
        assert_eq!(read_header(&bad).unwrap_err(), HeaderError::Address);
    }

    #[test]
    fn test_ports() {
        let mut p = Ports::default();
        let any: SocketAddr = "0.0.0.0:7174".parse().unwrap();
        let a: SocketAddr = "10.0.0.1:7174".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:7174".parse().unwrap();
        assert_eq!(p.bind(RdmaId(1), PortSpace::Tcp, a, || 0), Some(7174));
        assert_eq!(p.bind(RdmaId(2), PortSpace::Tcp, b, || 0), Some(7174));
        assert_eq!(p.bind(RdmaId(3), PortSpace::Tcp, any, || 0), None);
        assert_eq!(p.bind(RdmaId(3), PortSpace::Udp, any, || 0), Some(7174));
        assert_eq!(p.on_port(PortSpace::Tcp, 7174).len(), 2);
        p.unbind(RdmaId(1), PortSpace::Tcp, 7174);
        p.unbind(RdmaId(2), PortSpace::Tcp, 7174);
        assert!(p.on_port(PortSpace::Tcp, 7174).is_empty());
        let mut next = 40000;
        let eph: SocketAddr = "10.0.0.1:0".parse().unwrap();
        assert_eq!(
            p.bind(RdmaId(4), PortSpace::Tcp, eph, || 40000),
            Some(40000)
        );
        let got = p.bind(RdmaId(5), PortSpace::Tcp, eph, || {
            next += 1;
            next - 1
        });
        assert_eq!(got, Some(40001), "a taken ephemeral port is skipped");
    }
}
