//! Multicast groups (UD multicast, IBTA 10.5). A socket bound to `<ip>:<port>` never sees
//! datagrams sent to a group address, so each joined group gets a receive-only socket bound to
//! `<group>:<port>` and joined on the interface of `<ip>`. Several devices on one host may join
//! the same group: the sockets share the group address (`SO_REUSEADDR`) and the kernel gives
//! each a copy of every datagram. Sending needs nothing extra: every socket of a
//! [`RoceSocket`] already sends multicast out of its own interface (`IP_MULTICAST_IF`), with
//! its TTL, and loops copies back to local members.

use std::net::IpAddr;

use crate::fork::Uninherited;
use crate::socket::{Group, RoceSocket};
use crate::{imp, MulticastError};

impl RoceSocket {
    /// Joins `group` on this socket's interface: datagrams sent to `<group>:<port>` are
    /// received from now on (by [`try_recv`](Self::try_recv), with
    /// [`RecvMeta::dst_ip`](crate::RecvMeta::dst_ip) the group). Joining a joined group is not
    /// an error.
    pub fn join_multicast(&mut self, group: IpAddr) -> Result<(), MulticastError> {
        let local = self.local_addr();
        if !group.is_multicast() || group.is_ipv4() != local.is_ipv4() {
            return Err(MulticastError::NotAGroup { group, local });
        }
        if self.groups.iter().any(|g| g.addr == group) {
            return Ok(());
        }
        let socket =
            imp::open_group(&self.config, local, group).map_err(|source| MulticastError::Join {
                group,
                local,
                source,
            })?;
        self.poller
            .add(&socket)
            .map_err(|source| MulticastError::Join {
                group,
                local,
                source,
            })?;
        self.groups.push(Group {
            addr: group,
            socket: Uninherited::new(socket),
        });
        Ok(())
    }

    /// Leaves `group`; `false` if it was not joined.
    pub fn leave_multicast(&mut self, group: IpAddr) -> bool {
        let Some(i) = self.groups.iter().position(|g| g.addr == group) else {
            return false;
        };
        let g = self.groups.swap_remove(i);
        self.poller.remove(&g.socket);
        true
    }

    /// The groups joined.
    pub fn multicast_groups(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.groups.iter().map(|g| g.addr)
    }
}
