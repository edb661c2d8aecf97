//! A device's counters, and their names as `devinfo`, `perf --counters` and the drop-in
//! library's exit report print them.

use softrdma_proto::{DropReason, NakKind, Stats};
use softrdma_wire::Opcode;

use crate::IoCounters;

/// Counters of a device: the engine's protocol counters (drops by reason, NAKs, retries) and
/// the I/O around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStats {
    /// The engine's counters.
    pub engine: Stats,
    /// Socket-level counters.
    pub io: IoCounters,
}

impl DeviceStats {
    /// Every counter of a device, named, in a fixed order: engine packets and bytes, completions,
    /// retransmissions, drops by reason, NAKs sent and received by kind, packets by opcode (only
    /// opcodes seen), and the socket counters around the engine.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let e = &self.engine;
        let mut v: Vec<(String, u64)> = [
            ("rx_packets", e.rx_packets),
            ("rx_bytes", e.rx_bytes),
            ("tx_packets", e.tx_packets),
            ("tx_bytes", e.tx_bytes),
            ("completions", e.completions),
            ("cq_overruns", e.cq_overruns),
            ("retransmitted_packets", e.retransmitted_packets),
            ("retransmit_timeouts", e.retransmit_timeouts),
            ("tail_probes", e.tail_probes),
            ("duplicate_requests", e.duplicate_requests),
            ("reads_served", e.reads_served),
            ("atomics_executed", e.atomics_executed),
            ("atomics_replayed", e.atomics_replayed),
            ("ecn_ce_received", e.ecn_ce_received),
            ("cnps_sent", e.cnps_sent),
            ("cnps_received", e.cnps_received),
            ("cc_rate_cuts", e.cc_rate_cuts),
            ("cc_paced_waits", e.paced_waits),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_owned(), n))
        .collect();
        for r in DropReason::ALL {
            v.push((format!("drops.{}", r.name()), e.drops_for(r)));
        }
        for k in NakKind::ALL {
            v.push((format!("naks_sent.{}", k.name()), e.naks_sent_of(k)));
        }
        for k in NakKind::ALL {
            v.push((format!("naks_received.{}", k.name()), e.naks_received_of(k)));
        }
        for (dir, counts) in [("rx", &e.rx_by_opcode), ("tx", &e.tx_by_opcode)] {
            for (op, &n) in counts.iter().enumerate() {
                if n != 0 {
                    // `op` indexes a 256-entry table.
                    v.push((format!("{dir}_opcode.{}", Opcode(op as u8).name()), n));
                }
            }
        }
        let io = &self.io;
        for (k, n) in [
            ("io.rx_datagrams", io.rx_datagrams),
            ("io.rx_calls", io.rx_calls),
            ("io.rx_truncated", io.rx_truncated),
            ("io.rx_errors", io.rx_errors),
            ("io.rx_denied", io.rx_denied),
            ("io.rx_placed", io.rx_placed),
            ("io.rx_placement_misses", io.rx_placement_misses),
            ("io.tx_datagrams", io.tx_datagrams),
            ("io.tx_calls", io.tx_calls),
            ("io.tx_sends", io.tx_sends),
            ("io.tx_errors", io.tx_errors),
            ("io.tx_port_fallbacks", io.tx_port_fallbacks),
            ("io.wakeups", io.wakeups),
            ("io.cq_signals", io.cq_signals),
            ("io.pcap_records", io.pcap_records),
            ("io.pcap_errors", io.pcap_errors),
            ("io.injected_tx_drops", io.injected_tx_drops),
            ("io.injected_rx_drops", io.injected_rx_drops),
            ("io.injected_tx_duplicates", io.injected_tx_duplicates),
            ("io.injected_rx_duplicates", io.injected_rx_duplicates),
            ("io.injected_tx_corruptions", io.injected_tx_corruptions),
            ("io.injected_rx_corruptions", io.injected_rx_corruptions),
            ("io.injected_tx_delays", io.injected_tx_delays),
            ("io.injected_rx_delays", io.injected_rx_delays),
        ] {
            v.push((k.to_owned(), n));
        }
        v
    }
}
