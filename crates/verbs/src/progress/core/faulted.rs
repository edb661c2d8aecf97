//! Fault injection at the socket (`crate::faults`): the fate of each datagram received or
//! about to be sent, applied and counted.

use softrdma_proto::{DatagramMeta, Instant};

use crate::faults::{self, Fate, Faults, Held, Route};
use crate::progress::io_counters::IoCounters;

/// Applies the fate drawn for a received datagram `d`: counts it, holds a copy back if it is
/// to be late; returns how many times the engine gets it now (0, 1 or 2). A corruption is the
/// caller's to apply to what it hands over.
pub(super) fn received_with_faults(
    f: &mut Faults,
    io: &mut IoCounters,
    now: Instant,
    fate: Fate,
    meta: DatagramMeta,
    d: &[u8],
) -> usize {
    if fate.drop {
        io.injected_rx_drops += 1;
        return 0;
    }
    io.injected_rx_corruptions += u64::from(fate.corrupt.is_some());
    io.injected_rx_duplicates += u64::from(fate.duplicate);
    if fate.hold.is_zero() {
        return 1 + usize::from(fate.duplicate);
    }
    io.injected_rx_delays += 1;
    for _ in 0..1 + usize::from(fate.duplicate) {
        f.held.push_back(Held {
            due: now + fate.hold,
            bytes: d.to_vec(),
            corrupt: fate.corrupt,
            route: Route::In(meta),
        });
    }
    0
}

/// Draws and applies the fate of `pkt`, a datagram about to join the batch: counts it, flips
/// its bit, holds it back or queues its duplicate. Returns whether it goes in the batch now.
pub(super) fn sent_with_faults(
    f: &mut Faults,
    io: &mut IoCounters,
    now: Instant,
    route: Route,
    pkt: &mut [u8],
) -> bool {
    let fate = f.draw(pkt.len(), true);
    if fate.drop {
        io.injected_tx_drops += 1;
        return false;
    }
    io.injected_tx_corruptions += u64::from(fate.corrupt.is_some());
    if fate.duplicate {
        // The copy follows in the next batch, unharmed: a duplicating network copies what
        // it was given.
        io.injected_tx_duplicates += 1;
        let hold = fate.hold;
        f.held.push_back(Held {
            due: now + hold,
            bytes: pkt.to_vec(),
            corrupt: None,
            route,
        });
    }
    if !fate.hold.is_zero() {
        io.injected_tx_delays += 1;
        f.held.push_back(Held {
            due: now + fate.hold,
            bytes: pkt.to_vec(),
            corrupt: fate.corrupt,
            route,
        });
        return false;
    }
    if let Some(bit) = fate.corrupt {
        faults::flip(pkt, bit);
    }
    true
}
