//! [`DeviceConfig`]: how a device is opened.

use std::net::IpAddr;
use std::path::PathBuf;

use softrdma_proto::cc::CcConfig;
use softrdma_proto::Mtu;
use softrdma_udp::ROCEV2_UDP_PORT;

use crate::backend::LocalFabric;
use crate::faults::FaultConfig;
#[cfg(doc)]
use crate::Device;

/// How to open a [`Device`]. `DeviceConfig::new(ip)` gives the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// The local IP address (IPv4 or IPv6) the device sends from and receives on. Use a
    /// specific address, not a wildcard: the ICRC covers it.
    pub ip: IpAddr,
    /// The UDP port to bind and to send to (4791, RoCEv2's; change only for unusual setups:
    /// every peer must use the same).
    pub port: u16,
    /// Spin on the socket instead of sleeping in `ppoll(2)`: lowest latency, one core busy.
    pub busy_poll: bool,
    /// Let the progress thread spin on the socket for a while before it sleeps (at most
    /// 50 µs, and only while datagrams have been coming at shorter intervals), so that a
    /// passive responder answers without a wake-up. On by default; see
    /// [`DeviceConfig::adaptive_spin`].
    pub adaptive_spin: bool,
    /// Transmit on the posting thread (run to completion: lowest latency). When `false`, the
    /// progress thread sends everything and posting only wakes it.
    pub inline_transmit: bool,
    /// The port's active MTU; `None` derives it from the interface MTU as rxe does (1024 on a
    /// 1500-byte Ethernet, 4096 on loopback or jumbo frames).
    pub active_mtu: Option<Mtu>,
    /// Socket buffer size to ask for, each direction.
    pub socket_buffer_bytes: usize,
    /// Messages one receive system call may return.
    pub recv_batch: usize,
    /// Check the ICRC of received packets (only a fuzzing setup turns this off).
    pub verify_icrc: bool,
    /// Write every datagram the device sends and receives to this pcap file (created or
    /// truncated at open), with synthesized IP/UDP headers whose IPv4 identification makes each
    /// ICRC verify; see [`DeviceConfig::pcap`].
    pub pcap: Option<PathBuf>,
    /// Batch equal-sized packets to the same loopback destination into UDP GSO sends (one
    /// system call and one trip through the stack for up to 64 packets; see
    /// [`DeviceConfig::gso`]). On by default.
    pub gso: bool,
    /// Accept datagrams only from these networks (empty, the default: from anywhere). Others
    /// are dropped before the transport sees them and counted in
    /// [`IoCounters::rx_denied`](crate::IoCounters::rx_denied). Connected QPs accept packets
    /// only from the address they were connected to in any case; this narrows who may reach
    /// the device at all (see [`IpNetwork`](crate::IpNetwork) for what it cannot stop).
    pub allowed_peers: Vec<crate::IpNetwork>,
    /// Congestion control: ECT(0) marks, CNPs for CE-marked packets, DCQCN pacing (see
    /// `softrdma_proto::cc`). Off by default, as in Linux rxe.
    pub congestion_control: CcConfig,
    /// Faults the device injects into its own traffic, on the way out and on the way in:
    /// loss, duplication, reordering, delay, corruption, from a seed (see [`FaultConfig`]).
    /// None by default. What a program does when packets are lost or a peer goes silent can
    /// be tried this way without root or netem.
    pub faults: FaultConfig,
    /// Share the address with the user's other softrdma devices on it, in this process and
    /// in others (see [`Device::shared_address`]): on by default, as every process of a host
    /// shares rxe's address. Off, the device binds the address alone and a second one fails
    /// with "address in use". Port 0 (a port the kernel picks) is never shared.
    pub share_address: bool,
    /// Receive the payload of an RDMA WRITE in progress straight into its target (one copy,
    /// the kernel's; see `softrdma_proto::placement` for what may land where). On by
    /// default; off, every datagram is received into the device's buffers and copied from
    /// there. Not with fault injection or a pcap tap, which need every datagram's bytes
    /// first.
    pub direct_placement: bool,
    /// Attach the device to this in-process network instead of the kernel's UDP stack (see
    /// [`LocalFabric`]): `ip` then needs to be no local address, nothing is bound, the
    /// address is never shared, and `port`, `socket_buffer_bytes` and `share_address` have
    /// no effect beyond the address the device takes on the fabric. `None` (the default): a
    /// UDP socket.
    pub fabric: Option<LocalFabric>,
}

impl DeviceConfig {
    /// Defaults for `ip`: port 4791, sleeping progress thread, inline transmit, GSO batching
    /// to loopback peers.
    pub fn new(ip: IpAddr) -> DeviceConfig {
        DeviceConfig {
            ip,
            port: ROCEV2_UDP_PORT,
            busy_poll: false,
            adaptive_spin: true,
            inline_transmit: true,
            active_mtu: None,
            socket_buffer_bytes: softrdma_udp::DEFAULT_SOCKET_BUFFER_BYTES,
            recv_batch: 32,
            verify_icrc: true,
            pcap: None,
            gso: true,
            allowed_peers: Vec::new(),
            congestion_control: CcConfig::OFF,
            faults: FaultConfig::NONE,
            share_address: true,
            direct_placement: true,
            fabric: None,
        }
    }

    /// Sharing the address with other devices on it (the default) or binding it alone (see
    /// [`DeviceConfig::share_address`]).
    pub fn share_address(mut self, on: bool) -> DeviceConfig {
        self.share_address = on;
        self
    }

    /// Receiving WRITE payloads straight into their target (the default) or through the
    /// device's buffers (see [`DeviceConfig::direct_placement`]).
    pub fn direct_placement(mut self, on: bool) -> DeviceConfig {
        self.direct_placement = on;
        self
    }

    /// On `fabric`, a network inside the process, instead of a UDP socket (see
    /// [`DeviceConfig::fabric`]).
    pub fn fabric(mut self, fabric: &LocalFabric) -> DeviceConfig {
        self.fabric = Some(fabric.clone());
        self
    }

    /// Injecting `faults` into the device's traffic (see [`DeviceConfig::faults`]).
    pub fn faults(mut self, faults: FaultConfig) -> DeviceConfig {
        self.faults = faults;
        self
    }

    /// With congestion control (e.g. `CcConfig::dcqcn(line_rate_bps)`).
    pub fn congestion_control(mut self, cc: CcConfig) -> DeviceConfig {
        self.congestion_control = cc;
        self
    }

    /// Accepting datagrams only from `networks` (see [`DeviceConfig::allowed_peers`]).
    pub fn allowed_peers(
        mut self,
        networks: impl IntoIterator<Item = crate::IpNetwork>,
    ) -> DeviceConfig {
        self.allowed_peers = networks.into_iter().collect();
        self
    }

    /// With UDP GSO batching on (the default) or off. On, a run of equal-sized packets to one loopback
    /// destination leaves as one GSO datagram (segment `k` with IPv4 identification `k`, which
    /// its ICRC covers), and receivers with GRO take it in one system call: much higher
    /// throughput on loopback. The price is visibility: `tcpdump -i lo` then records the
    /// unsplit datagrams (several RoCEv2 packets in one UDP payload), which packet decoders
    /// cannot read — the device's own [`pcap`](DeviceConfig::pcap) tap still records every
    /// packet separately. Datagrams to other destinations are never batched yet: segment
    /// numbering on real links belongs to the kernel or the NIC and has not been checked
    /// against rxe.
    pub fn gso(mut self, on: bool) -> DeviceConfig {
        self.gso = on;
        self
    }

    /// With busy polling on or off.
    pub fn busy_poll(mut self, on: bool) -> DeviceConfig {
        self.busy_poll = on;
        self
    }

    /// With the progress thread's adaptive spin before sleeping on or off. Off, a device
    /// whose application does not poll (the target of READs and WRITEs) pays a thread
    /// wake-up per request (5–10 µs on a virtual machine) but never spins; on, it spins up to
    /// 50 µs after a datagram while traffic keeps coming faster than that.
    pub fn adaptive_spin(mut self, on: bool) -> DeviceConfig {
        self.adaptive_spin = on;
        self
    }

    /// With another UDP port.
    pub fn port(mut self, port: u16) -> DeviceConfig {
        self.port = port;
        self
    }

    /// With a fixed active MTU.
    pub fn active_mtu(mut self, mtu: Mtu) -> DeviceConfig {
        self.active_mtu = Some(mtu);
        self
    }

    /// With inline transmit on or off.
    pub fn inline_transmit(mut self, on: bool) -> DeviceConfig {
        self.inline_transmit = on;
        self
    }

    /// Writes every datagram the device sends and receives to the pcap file `path` (classic
    /// pcap, nanosecond timestamps, raw-IP link type 101), like `tcpdump -w` on the device's
    /// address would, without root. The IP and UDP headers are synthesized: sent datagrams get
    /// IPv4 identification 0 and DF (what the kernel writes for them), received ones the
    /// identification recovered from their ICRC, so every intact packet's ICRC verifies in the
    /// file (`softrdma decode FILE` checks it). Records are buffered and flushed whenever the
    /// progress thread goes idle and when the device closes. The tap's counters are in
    /// [`IoCounters::pcap_records`](crate::IoCounters::pcap_records).
    pub fn pcap(mut self, path: impl Into<PathBuf>) -> DeviceConfig {
        self.pcap = Some(path.into());
        self
    }
}
