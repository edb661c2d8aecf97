//! What the network interface a device sends from does with its datagrams.
//!
//! UDP GSO hands the kernel one datagram of up to 64 packets; the ICRC of segment `k` is
//! computed for IPv4 identification `k`, the numbering Linux's software segmentation gives
//! (`inet_gso_segment`, measured in the udp crate). That holds where the kernel itself
//! segments, or a GRO receiver keeps the datagram whole: on loopback and across a veth pair
//! (containers, network namespaces — measured: every ICRC verified by the receiving engine,
//! `drops.bad_icrc` 0). Behind a physical NIC with hardware USO the numbering is the NIC's,
//! and through a bridge to a tap (VMs, the rxe lab) a capture on the bridge shows the unsplit
//! datagram: GSO stays off there.

use std::net::IpAddr;
use std::os::fd::AsRawFd;

/// Whether GSO datagrams from `ip` to any destination are segmented by this kernel as the
/// ICRC assumes: `ip` is a loopback address or sits on a veth interface.
pub(crate) fn kernel_segments_gso(ip: IpAddr) -> bool {
    ip.is_loopback()
        || crate::gid::interface_of(ip)
            .and_then(|(name, _, _)| driver(&name))
            .is_some_and(|d| d == "veth")
}

/// linux/ethtool.h `struct ethtool_drvinfo`, the answer to `ETHTOOL_GDRVINFO`.
#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

const ETHTOOL_GDRVINFO: u32 = 0x3;

/// The kernel driver of interface `name` (`ethtool -i`), if it answers.
fn driver(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
        return None;
    }
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    let mut info = DrvInfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    // SAFETY: `ifreq` is plain old data; all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in ifr.ifr_name.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut info as *mut DrvInfo).cast();
    // SAFETY: SIOCETHTOOL reads the NUL-terminated name and writes at most
    // `size_of::<DrvInfo>()` bytes through `ifru_data`, which points to `info`, alive for the
    // call; the socket is open.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    if rc != 0 {
        return None;
    }
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_segments_and_unknown_addresses_do_not() {
        assert!(kernel_segments_gso("127.0.0.2".parse().unwrap()));
        assert!(kernel_segments_gso("::1".parse().unwrap()));
        // No interface holds a documentation address.
        assert!(!kernel_segments_gso("192.0.2.1".parse().unwrap()));
        assert_eq!(driver("softrdma-none0"), None, "no such interface");
        assert_eq!(driver("a-name-longer-than-ifnamsiz"), None);
        assert_eq!(driver(""), None);
    }
}
