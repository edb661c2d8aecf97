//! How a host reaches a target.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use softrdma::Device;

/// How to reach a target.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The target's address and port.
    pub target: SocketAddr,
    /// The local address to connect from (`None`: as the routing table says).
    pub source: Option<IpAddr>,
    /// A device opened by the caller (e.g. with a pcap tap); its address is the source.
    pub device: Option<Device>,
    /// The host's NQN.
    pub hostnqn: String,
    /// The host's identifier.
    pub hostid: [u8; 16],
    /// Keep alive timeout to ask for, milliseconds (0: none; a thread sends Keep Alive at
    /// half of it).
    pub kato_ms: u32,
    /// Entries per I/O queue (clamped to what the controller offers).
    pub queue_size: u16,
    /// Use in-capsule data for writes that fit, as Linux's host does.
    pub in_capsule: bool,
    /// Expose data through memory windows the target invalidates (SEND with Invalidate).
    pub remote_invalidate: bool,
    /// How long to wait for the target at each step: 30 s, Linux's `nvme_core.io_timeout`.
    /// A 1 MiB READ from the kernel's target over rxe at 3 % loss took 9 s in the lab (rxe
    /// goes back N for each lost packet, and waits out its 2.1 s ACK timeout for each lost
    /// NAK): the 10 s this was gave up on a target that was still delivering.
    pub timeout: Duration,
}

impl HostConfig {
    /// A host with an NQN made from its identifier, a 5 s keep alive, 128-entry queues.
    pub fn new(target: SocketAddr) -> HostConfig {
        let hostid = crate::controller::stable_id(&format!(
            "softrdma-host-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        let hex: String = hostid.iter().map(|b| format!("{b:02x}")).collect();
        let uuid = format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        );
        HostConfig {
            target,
            source: None,
            device: None,
            hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:{uuid}"),
            hostid,
            kato_ms: 5000,
            queue_size: 128,
            in_capsule: true,
            remote_invalidate: false,
            timeout: Duration::from_secs(30),
        }
    }
}
