//! Global identifiers (GIDs) and the GID table a device exposes.
//!
//! On RoCEv2 a GID is an IPv6 address; IPv4 endpoints use the IPv4-mapped form
//! `::ffff:a.b.c.d`. A device sends from, and answers at, the one address it is bound to:
//!
//! | index | IPv4 bind address `a.b.c.d` | IPv6 bind address `A` |
//! |---|---|---|
//! | 0 | `::ffff:a.b.c.d` | `A` |
//! | 1 | `::ffff:a.b.c.d` | `A` (absent when `A` is link-local) |
//! | 2 | `fe80::` + EUI-64 of the interface MAC | the same (absent when `A` is link-local) |
//!
//! Index 0 is what programs take when they are not told otherwise (pyverbs, UCX without
//! sysfs, perftest's default `-x 0`), so it is the device's address. Index 1 is the index of
//! the IPv4 GID on Linux rxe, whose table starts with the interface's IPv6 link-local GID, so
//! `-g 1` / `-x 1` written for rxe select the same address here. Index 2 is that link-local
//! GID, last: the device cannot send from it (its socket is bound to its one address, and an
//! address handle from it is refused), but programs read it: libfabric's verbs provider
//! derives its fabric name and the InfiniBand-style (`AF_IB`) addresses of a device from the
//! table's link-local GIDs, and without one lists no message endpoints for a device whose
//! address no interface holds (127.0.0.x beyond 127.0.0.1).
//!
//! The MAC is the one of the interface that holds the bind address (read
//! from `/sys/class/net/IF/address`). When there is none — loopback, a wildcard or an address
//! no interface holds — softrdma derives a locally administered MAC from the address:
//! `02:00:a:b:c:d` for IPv4 `a.b.c.d`, `02:00:` + the last four bytes for IPv6. For example
//! `127.0.5.1` gets MAC `02:00:7f:00:05:01`, EUI-64 `0000:7fff:fe00:0501` (also the node GUID)
//! and GID 2 `fe80::7fff:fe00:501`.

use std::net::IpAddr;

pub use softrdma_wire::{eui64, Gid, GidParseError};

/// The locally administered MAC softrdma derives for an address no interface MAC belongs to.
pub(crate) fn derived_mac(ip: IpAddr) -> [u8; 6] {
    let tail = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x00, tail[0], tail[1], tail[2], tail[3]]
}

/// The MAC a device on `ip` uses: its interface's (`iface` from [`interface_of`]), else the
/// derived one.
pub(crate) fn mac_of(ip: IpAddr, iface: Option<&Interface>) -> [u8; 6] {
    iface
        .and_then(|(_, mac, _)| *mac)
        .unwrap_or_else(|| derived_mac(ip))
}

/// The node GUID (host order) a device opened on `ip` will report: the EUI-64 of its MAC (see
/// the module docs). Lets a device be described before it is opened, as `ibv_devices` does.
pub fn node_guid(ip: IpAddr) -> u64 {
    u64::from_be_bytes(eui64(mac_of(ip, interface_of(ip).as_ref())))
}

/// The kernel's index of the interface holding `ip` (`ibv_gid_entry.ndev_ifindex`): `lo` for
/// every loopback address, 0 when no interface holds it.
pub fn interface_index(ip: IpAddr) -> u32 {
    interface_of(ip)
        .and_then(|(name, _, _)| std::ffi::CString::new(name).ok())
        // SAFETY: a NUL-terminated interface name.
        .map_or(0, |c| unsafe { libc::if_nametoindex(c.as_ptr()) })
}

/// Entries of a port's GID table (`ibv_port_attr.gid_tbl_len`): the three above, then empty
/// ones, as on RoCE devices (rxe's has 1024), whose tables have room for the addresses an
/// interface may get. Programs skip the empty ones (`ibv_query_gid` reads them as the zero
/// GID, `ibv_query_gid_ex` answers `ENODATA`), and rdma-core's tests look for one to check
/// that answer.
pub const GID_TABLE_LEN: u32 = 16;

/// The GID table a device opened on `ip` will have (as [`node_guid`], before it is opened:
/// `softrdma exec` describes the device to programs that read sysfs).
pub fn table_of(ip: IpAddr) -> Vec<GidEntry> {
    table(ip, mac_of(ip, interface_of(ip).as_ref()))
}

/// The name of the interface holding `ip` (`lo` for every loopback address), as the kernel's
/// `/sys/class/infiniband/DEV/device/net/` names an RDMA device's netdev.
pub fn interface_name_of(ip: IpAddr) -> Option<String> {
    interface_of(ip).map(|(name, _, _)| name)
}

/// The GID table of a device on `ip` whose interface has `mac` (see [`crate::gid`]): the
/// device's own address at index 0 and, for rxe's numbering, again at index 1, then the
/// link-local GID of the interface MAC; a device on an IPv6 link-local address has that one
/// entry.
pub(crate) fn table(ip: IpAddr, mac: [u8; 6]) -> Vec<GidEntry> {
    let entry = |index, gid| GidEntry {
        gid,
        index,
        gid_type: GidType::RoceV2,
    };
    let own = Gid::from_ip(ip);
    match ip {
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => vec![entry(0, own)],
        _ => vec![
            entry(0, own),
            entry(1, own),
            entry(2, Gid::link_local_from_mac(mac)),
        ],
    }
}

/// Type of a GID table entry (ibverbs `ibv_gid_type`); softrdma, like rxe, has only RoCE v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// RoCE v2 (UDP/IP encapsulation).
    RoceV2,
}

/// One GID table entry (ibverbs `ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the table.
    pub index: u32,
    /// Its type.
    pub gid_type: GidType,
}

/// An interface: (name, MAC, MTU).
pub(crate) type Interface = (String, Option<[u8; 6]>, Option<u32>);

/// The interface holding `ip`, if any.
pub(crate) fn interface_of(ip: IpAddr) -> Option<Interface> {
    // Every 127.0.0.0/8 address is routed through `lo`, though only 127.0.0.1 is assigned.
    let name = interface_name(ip).or_else(|| ip.is_loopback().then(|| "lo".to_string()))?;
    let sys = format!("/sys/class/net/{name}");
    let mac = std::fs::read_to_string(format!("{sys}/address"))
        .ok()
        .and_then(|s| parse_mac(s.trim()))
        .filter(|m| *m != [0; 6]);
    let mtu = std::fs::read_to_string(format!("{sys}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Some((name, mac, mtu))
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in m.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

#[cfg(target_os = "linux")]
fn interface_name(ip: IpAddr) -> Option<String> {
    use std::ffi::CStr;
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of the family it names.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let addr = match family {
            libc::AF_INET => {
                // SAFETY: the family says this is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
            }
            libc::AF_INET6 => {
                // SAFETY: the family says this is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::from(sin6.sin6_addr.s6_addr)
            }
            _ => continue,
        };
        if addr == ip {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

#[cfg(not(target_os = "linux"))]
fn interface_name(_ip: IpAddr) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_gids() {
        // rxe-lab guest g1: MAC 52:54:00:58:00:0b -> GID 0 fe80::5054:ff:fe58:b.
        let g = Gid::link_local_from_mac([0x52, 0x54, 0x00, 0x58, 0x00, 0x0b]);
        assert_eq!(g.to_string(), "fe80::5054:ff:fe58:b");
        let g1 = Gid::from_ip("10.88.0.11".parse().unwrap());
        assert_eq!(g1.to_string(), "::ffff:10.88.0.11");
        assert_eq!(&g1.to_hex32(), b"00000000000000000000ffff0a58000b");
        assert_eq!(g1.to_ip(), Some("10.88.0.11".parse::<IpAddr>().unwrap()));
        assert_eq!("::ffff:10.88.0.11".parse::<Gid>().unwrap(), g1);
        let derived = Gid::link_local_from_mac(derived_mac("127.0.5.1".parse().unwrap()));
        assert_eq!(derived.to_string(), "fe80::7fff:fe00:501");
        // No interface holds 127.0.5.1: the GUID is the EUI-64 of the derived MAC.
        assert_eq!(
            node_guid("127.0.5.1".parse().unwrap()),
            0x0000_7fff_fe00_0501
        );
    }
}
