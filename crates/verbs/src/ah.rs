//! Address handles: where a UD datagram goes (`ibv_ah`).
//!
//! On RoCEv2 an address handle is a destination GID — an IP address, IPv4-mapped for IPv4 —
//! plus the source GID index, hop limit and traffic class. Creating one checks what a send
//! would need, so that a bad address fails here, with a reason, rather than as silence on the
//! wire: the port exists, the source GID index names the device's address (not the link-local GID
//! at index 2, which it cannot send from), the destination
//! is an IP address of the same family, and the host has a route to it. Like rdma-core's
//! `ibv_create_ah`, which resolves the neighbour, it fails for an unreachable destination.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;

use softrdma_proto::{AddressVector, UdDest, WorkCompletion};
use softrdma_wire::GrhArea;

use crate::error::CreateAhError;
use crate::{Gid, ProtectionDomain};

/// What to create an address handle from (`ibv_ah_attr` with its `grh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    /// The destination GID (a unicast address or a multicast group).
    pub dgid: Gid,
    /// The local GID index to send from (1: the IPv4-mapped GID on an IPv4 device, as on rxe).
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// Service level (no meaning on RoCEv2; kept for `ibv_query_ah`-style round trips).
    pub sl: u8,
    /// Port (1).
    pub port_num: u8,
}

impl AhAttr {
    /// Towards `dgid`, from GID index `sgid_index`, hop limit 64, traffic class 0, port 1.
    pub fn new(dgid: Gid, sgid_index: u8) -> AhAttr {
        AhAttr {
            dgid,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            port_num: 1,
        }
    }

    /// The attributes that answer the sender of a received UD datagram
    /// (`ibv_init_ah_from_wc`): the destination is the source of the GRH area that starts the
    /// receive buffer (`grh`, at least 40 bytes), sent from GID index `sgid_index`. `None` if
    /// the completion did not come with a GRH area or the area is not one.
    pub fn from_wc(wc: &WorkCompletion, grh: &[u8], sgid_index: u8) -> Option<AhAttr> {
        if !wc.grh {
            return None;
        }
        let area = GrhArea::parse(grh)?;
        Some(AhAttr {
            dgid: Gid::from_ip(area.src),
            sgid_index,
            // rdma-core answers with the maximum hop limit and the received traffic class.
            hop_limit: 0xff,
            traffic_class: area.traffic_class,
            flow_label: area.flow_label,
            sl: 0,
            port_num: 1,
        })
    }
}

struct AhInner {
    pd: ProtectionDomain,
    attr: AhAttr,
    av: AddressVector,
}

/// An address handle (`ibv_ah`): the destination of UD sends, checked at creation. Create it
/// with [`ProtectionDomain::create_ah`]; a cheap handle that keeps its PD alive. Work requests
/// copy the address ([`crate::wr::ud_send`]), so dropping the handle after posting is fine.
#[derive(Clone)]
pub struct AddressHandle {
    inner: Arc<AhInner>,
}

impl std::fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressHandle")
            .field("dgid", &self.inner.attr.dgid)
            .field("dest_ip", &self.inner.av.dest_ip)
            .finish()
    }
}

impl AddressHandle {
    pub(crate) fn new(
        pd: &ProtectionDomain,
        attr: &AhAttr,
    ) -> Result<AddressHandle, CreateAhError> {
        let device = pd.device();
        if attr.port_num != 1 {
            return Err(CreateAhError::NoSuchPort(attr.port_num));
        }
        let sgid = device
            .query_gid(1, u32::from(attr.sgid_index))
            .map_err(|_| CreateAhError::NoSuchGid(attr.sgid_index))?;
        let local = device.ip();
        if sgid.to_ip() != Some(local) {
            return Err(CreateAhError::SourceGid {
                index: attr.sgid_index,
                gid: sgid,
                local,
            });
        }
        let dest_ip = attr
            .dgid
            .to_ip()
            .ok_or(CreateAhError::NotAnAddress(attr.dgid))?;
        if dest_ip.is_ipv4() != local.is_ipv4() || dest_ip.is_unspecified() {
            return Err(CreateAhError::AddressFamily {
                dest: dest_ip,
                local,
            });
        }
        if !dest_ip.is_multicast() {
            route_exists(local, dest_ip).map_err(|source| CreateAhError::Unreachable {
                dest: dest_ip,
                source,
            })?;
        }
        Ok(AddressHandle {
            inner: Arc::new(AhInner {
                pd: pd.clone(),
                attr: *attr,
                av: AddressVector {
                    dest_ip,
                    traffic_class: attr.traffic_class,
                    hop_limit: attr.hop_limit,
                },
            }),
        })
    }

    /// The attributes it was created with.
    pub fn attr(&self) -> AhAttr {
        self.inner.attr
    }

    /// The destination IP address.
    pub fn dest_ip(&self) -> IpAddr {
        self.inner.av.dest_ip
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// The destination of a UD send through this handle to QP `remote_qpn` with `remote_qkey`.
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            av: self.inner.av,
            remote_qpn,
            remote_qkey,
        }
    }
}

/// Whether the host routes `dest` from `local`: a UDP `connect(2)` looks the route up and
/// sends nothing.
fn route_exists(local: IpAddr, dest: IpAddr) -> std::io::Result<()> {
    let probe = UdpSocket::bind(SocketAddr::new(local, 0))?;
    probe.connect(SocketAddr::new(dest, softrdma_udp::ROCEV2_UDP_PORT))
}
