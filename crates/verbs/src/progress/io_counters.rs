//! What the I/O around the engine did, counted (the engine counts the protocol).

/// Counters of the I/O around the engine (the engine counts the protocol).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounters {
    /// Datagrams received from the socket and handed to the engine.
    pub rx_datagrams: u64,
    /// Receive system calls (a `recvmmsg`, or a placed receive's `recvmsg`), those that
    /// found nothing included.
    pub rx_calls: u64,
    /// Received messages dropped because the kernel truncated them.
    pub rx_truncated: u64,
    /// Receive system calls that failed.
    pub rx_errors: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Batches handed to the socket: one `sendmmsg` each (one per UDP source port in the
    /// batch), however many datagrams they carry.
    pub tx_calls: u64,
    /// UDP sends the kernel took: a GSO send of many datagrams counts once, as it costs the
    /// kernel one buffer and one pass down its stack. `tx_datagrams / tx_sends` is how many
    /// packets a send carried.
    pub tx_sends: u64,
    /// Datagrams dropped because sending failed (the RC transport retransmits them).
    pub tx_errors: u64,
    /// Datagrams whose ICRC was recomputed because their UDP source port was unavailable.
    pub tx_port_fallbacks: u64,
    /// Times the progress thread woke from sleep.
    pub wakeups: u64,
    /// Times a completion queue's event fd was written to wake a thread sleeping in
    /// [`CompletionQueue::wait`](crate::CompletionQueue::wait) for completions another thread
    /// produced.
    pub cq_signals: u64,
    /// Records written to the pcap tap ([`DeviceConfig::pcap`](crate::DeviceConfig::pcap)).
    pub pcap_records: u64,
    /// Records the pcap tap failed to write.
    pub pcap_errors: u64,
    /// Datagrams dropped because their source is outside
    /// [`DeviceConfig::allowed_peers`](crate::DeviceConfig::allowed_peers).
    pub rx_denied: u64,
    /// Datagrams the engine built that fault injection lost before the socket
    /// ([`DeviceConfig::faults`](crate::DeviceConfig::faults); see `faults.rs` for how these
    /// add up).
    pub injected_tx_drops: u64,
    /// Datagrams received that fault injection lost before the transport.
    pub injected_rx_drops: u64,
    /// Datagrams sent twice by fault injection.
    pub injected_tx_duplicates: u64,
    /// Datagrams received that fault injection handed to the transport twice.
    pub injected_rx_duplicates: u64,
    /// Datagrams sent with a bit flipped by fault injection.
    pub injected_tx_corruptions: u64,
    /// Datagrams received that fault injection flipped a bit of.
    pub injected_rx_corruptions: u64,
    /// Datagrams held back (delayed or reordered) by fault injection on the way out.
    pub injected_tx_delays: u64,
    /// Datagrams held back by fault injection on the way in.
    pub injected_rx_delays: u64,
    /// Datagrams received straight into registered memory: the kernel copied their payload
    /// where it belongs, and nothing copied it again (direct placement, see
    /// [`DeviceConfig::direct_placement`](crate::DeviceConfig::direct_placement)). Also
    /// counted in `rx_datagrams`.
    pub rx_placed: u64,
    /// Placed receives that got something other than what the engine expected (another
    /// QP's packet, a duplicate, an ACK, a packet of another size): its bytes were copied
    /// back out of the region and handed over as usual.
    pub rx_placement_misses: u64,
}
