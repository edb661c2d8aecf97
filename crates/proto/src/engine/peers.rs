//! The IPv4-identification habits of UD senders, by address (see `crate::qp::PeerIpv4Ids`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::qp::PeerIpv4Ids;

/// Most UD senders whose IPv4-identification habit an engine remembers; senders beyond it
/// are checked with the ICRC's 16 remaining bits only (see `softrdma_wire::icrc`).
pub const MAX_UD_PEERS: usize = 4096;

/// The IPv4-identification habits of the senders of UD datagrams (connected QPs keep their one
/// peer's habit themselves).
#[derive(Debug, Default)]
pub(crate) struct UdPeers {
    peers: BTreeMap<IpAddr, PeerIpv4Ids>,
}

impl UdPeers {
    pub(super) fn admit(&mut self, src: IpAddr, id: u16, small_only: bool) -> bool {
        let full = self.peers.len() >= MAX_UD_PEERS;
        match self.peers.get_mut(&src) {
            Some(p) => p.admit(id),
            None if full => true,
            None => {
                let mut p = if small_only {
                    PeerIpv4Ids::small_only()
                } else {
                    PeerIpv4Ids::default()
                };
                let ok = p.admit(id);
                self.peers.insert(src, p);
                ok
            }
        }
    }
}
