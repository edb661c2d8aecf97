//! The data check (`--check`, implied by `--loopback`) between two softrdma peers.
//!
//! perftest moves the same bytes on every cycle of its buffer, so comparing the final memory
//! with a fixed pattern cannot tell a WRITE lost after the first cycle from one that landed,
//! and a READ that returned nothing from one that returned the right bytes. So between
//! softrdma peers the data carries the iteration:
//!
//! - every WRITE and SEND starts with a 16-byte **stamp** — the message's sequence number and
//!   QP index — gathered from a small ring of stamp slots by a second SGE (the rest of the
//!   message comes from perftest's buffer as before; on the wire nothing changes). A SEND
//!   receiver checks the stamp of every sampled message (order, loss, duplication); a passive
//!   WRITE server checks, once the client has told it how many WRITEs each QP posted, that
//!   every target position holds the stamp and bytes of the *last* WRITE aimed at it;
//! - every sampled READ lands in a slot of a private ring that was **poisoned** just before,
//!   and is compared with the server's bytes as soon as its completion arrives;
//! - atomics are summed against the client's count of them (timed runs included).
//!
//! What cannot be seen is said so: a WRITE that is not the last one at its position leaves no
//! trace a passive server could check.
//!
//! **Knowing the peer is softrdma.** The out-of-band exchange must stay byte for byte
//! perftest's, so no message is added for a real perftest peer. Instead each side marks two
//! values it chooses anyway: the PSN it starts with (its low byte a hash of the rest) and the
//! address of its buffer, which softrdma offsets by [`VADDR_TAG`] within a page (perftest's
//! buffers are page-aligned, and its target addresses are the buffer plus multiples of the
//! message size). A peer whose every key shows both marks is a softrdma device; only then do
//! the sides stamp, and only then does the client send, after perftest's closing `done`, the
//! counts the server needs ([`send_counts`]) — on a connection a real perftest has closed.

use super::control::Control;
use std::io::{Read, Write};
use std::time::Duration;

use softrdma::{MemoryRegion, Sge};
use softrdma_oob::perftest::PerftestDest;

use super::layout::pattern;
use super::output::PerfError;

/// Offset of softrdma's perftest buffer within its page (a multiple of the cache line, so
/// every slot stays cache-aligned).
pub(crate) const VADDR_TAG: u64 = 0x5c0;
/// Bytes of a stamp.
pub(crate) const STAMP_LEN: usize = 16;
/// What a poisoned READ landing slot is filled with.
const POISON: u8 = 0xa5;
/// One message in this many is verified (plus the last), so the check does not measure
/// `memcmp`.
pub(crate) const SAMPLE_EVERY: u64 = 16;
/// Largest READ landing ring (all QPs).
const MAX_LANDING_BYTES: u64 = 256 << 20;
/// What opens the counts message (and keeps a stray byte from being taken for one).
const COUNTS_MAGIC: &[u8; 8] = b"sRdMchk1";

/// A PSN whose low byte marks softrdma: a hash of its upper 16 bits.
pub(crate) fn marked_psn(psn: u32) -> u32 {
    let hi = psn & 0xff_ff00;
    hi | ((hi >> 8).wrapping_mul(0x9d) ^ 0x5c) & 0xff
}

/// Whether a peer's keys say it is a softrdma device (see the module docs).
pub(crate) fn is_softrdma(keys: &[PerftestDest]) -> bool {
    !keys.is_empty()
        && keys
            .iter()
            .all(|k| k.vaddr % 4096 == VADDR_TAG && marked_psn(k.psn) == k.psn)
}

/// The stamp of message `seq` of QP `qp`.
pub(crate) fn stamp(qp: usize, seq: u64) -> [u8; STAMP_LEN] {
    let mut s = [0u8; STAMP_LEN];
    s[..8].copy_from_slice(&seq.to_le_bytes());
    s[8..12].copy_from_slice(&(qp as u32).to_le_bytes());
    s[12..].copy_from_slice(b"sRdM");
    s
}

/// The bytes a stamped message of `size` carries when its unstamped bytes would be
/// `pattern(off, size)`.
pub(crate) fn stamped_payload(qp: usize, seq: u64, size: u64, off: u64) -> Vec<u8> {
    let mut v = pattern(off as usize, size as usize);
    let n = STAMP_LEN.min(v.len());
    v[..n].copy_from_slice(&stamp(qp, seq)[..n]);
    v
}

/// The check's own memory: stamp slots and READ landing slots (neither is seen by the peer).
pub(crate) struct CheckMemory {
    /// `ring` stamp slots per QP.
    stamps: Option<(MemoryRegion, u64)>,
    /// `ring` landing slots of `slot` bytes per QP.
    landing: Option<(MemoryRegion, u64, u64)>,
    /// `ring` receive slots of `slot` bytes per QP.
    recv: Option<(MemoryRegion, u64, u64)>,
}

impl CheckMemory {
    /// No check memory (no check, or a peer that is not softrdma).
    pub(crate) fn none() -> CheckMemory {
        CheckMemory {
            stamps: None,
            landing: None,
            recv: None,
        }
    }

    /// Stamp slots for `qps` QPs of `depth` outstanding sends each.
    pub(crate) fn with_stamps(mut self, mr: MemoryRegion, depth: u64) -> CheckMemory {
        self.stamps = Some((mr, depth));
        self
    }

    /// Landing slots of `slot` bytes, `ring` per QP.
    pub(crate) fn with_landing(mut self, mr: MemoryRegion, ring: u64, slot: u64) -> CheckMemory {
        self.landing = Some((mr, ring, slot));
        self
    }

    /// Receive slots of `slot` bytes, `ring` per QP: perftest's receives all land at the same
    /// few addresses, where a later message overwrites an earlier one before it can be
    /// checked; a receiver checking stamps keeps each receive's bytes apart until it has.
    pub(crate) fn with_recv(mut self, mr: MemoryRegion, ring: u64, slot: u64) -> CheckMemory {
        self.recv = Some((mr, ring, slot));
        self
    }

    /// Receives per QP the receive slots allow to be posted at a time, if they are used.
    pub(crate) fn recv_ring(&self) -> Option<u64> {
        self.recv.as_ref().map(|&(_, ring, _)| ring)
    }

    /// Where receive `seq` of QP `qp` lands, if receives use the check's slots: the region
    /// and the offset in it.
    pub(crate) fn recv_slot(&self, qp: usize, seq: u64) -> Option<(&MemoryRegion, usize)> {
        self.recv
            .as_ref()
            .map(|(mr, ring, slot)| (mr, ((qp as u64 * ring + seq % ring) * slot) as usize))
    }

    /// Whether messages are stamped.
    pub(crate) fn stamping(&self) -> bool {
        self.stamps.is_some()
    }

    /// READ landing slots per QP, if READs land in the ring.
    pub(crate) fn landing_ring(&self) -> Option<u64> {
        self.landing.as_ref().map(|&(_, ring, _)| ring)
    }

    /// The SGL of message `seq` of QP `qp` of `size` bytes whose unstamped bytes are at
    /// `source` in `mr`: its stamp (written now into the stamp slot), then the rest.
    pub(crate) fn stamped_sgl(
        &self,
        mr: &MemoryRegion,
        qp: usize,
        seq: u64,
        size: u64,
        source: usize,
    ) -> Result<Vec<Sge>, PerfError> {
        let Some((stamps, depth)) = &self.stamps else {
            return Ok(vec![mr.sge(source, size as u32)]);
        };
        let at = ((qp as u64 * depth + seq % depth) * STAMP_LEN as u64) as usize;
        stamps.write(at, &stamp(qp, seq))?;
        let n = (STAMP_LEN as u64).min(size);
        let mut sgl = vec![stamps.sge(at, n as u32)];
        if size > n {
            sgl.push(mr.sge(source + n as usize, (size - n) as u32));
        }
        Ok(sgl)
    }

    /// The landing SGE of READ `seq` of QP `qp` if it is `sampled` (its slot poisoned first),
    /// or `None`: a READ that is not checked lands where perftest's do, in the QP's own buffer.
    /// Landing every READ in a slot of its own would spread a run's writes over the whole
    /// ring (8 MiB at the default depth and 64 KiB), out of the caches that perftest's one
    /// buffer stays in, and cost the READ bandwidth the check is not there to measure.
    pub(crate) fn landing_sge(
        &self,
        qp: usize,
        seq: u64,
        size: u64,
        sampled: bool,
    ) -> Result<Option<Sge>, PerfError> {
        let Some((mr, ring, slot)) = &self.landing else {
            return Ok(None);
        };
        if !sampled {
            return Ok(None);
        }
        let at = ((qp as u64 * ring + seq % ring) * slot) as usize;
        mr.fill(at, size as usize, POISON)?;
        Ok(Some(mr.sge(at, size as u32)))
    }

    /// Checks sampled READ `seq` of QP `qp` returned `pattern(off, size)`.
    pub(crate) fn verify_read(
        &self,
        qp: usize,
        seq: u64,
        size: u64,
        off: u64,
    ) -> Result<(), PerfError> {
        let Some((mr, ring, slot)) = &self.landing else {
            return Ok(());
        };
        let at = ((qp as u64 * ring + seq % ring) * slot) as usize;
        let got = mr.read_vec(at, size as usize)?;
        let want = pattern(off as usize, size as usize);
        if got == want {
            return Ok(());
        }
        let what = if got.iter().all(|&b| b == POISON) {
            "nothing landed".to_owned()
        } else {
            let i = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
            format!("byte {i} differs from the server's")
        };
        Err(PerfError::check(format!(
            "READ {seq} of QP index {qp} ({size} bytes from offset {off}) completed, but {what}"
        )))
    }
}

/// Landing slots per QP for a run of `qps` QPs with up to `depth` READs outstanding and
/// messages of at most `max_size`: one per outstanding READ, fewer if that would exceed
/// 256 MiB (the client then keeps fewer READs outstanding).
pub(crate) fn landing_ring(qps: u64, depth: u64, max_size: u64) -> u64 {
    let per_slot = qps.saturating_mul(max_size).max(1);
    depth.min(MAX_LANDING_BYTES / per_slot).max(1)
}

/// Sends the server the number of messages each QP posted (after perftest's `done`, between
/// softrdma peers only).
/// Size of the counts message for `qps` QPs.
pub(crate) fn counts_len(qps: usize) -> usize {
    COUNTS_MAGIC.len() + 4 + 8 * qps
}

pub(crate) fn send_counts(stream: &mut Control, counts: &[u64]) -> Result<(), PerfError> {
    let mut msg = COUNTS_MAGIC.to_vec();
    msg.extend((counts.len() as u32).to_be_bytes());
    for c in counts {
        msg.extend(c.to_be_bytes());
    }
    stream
        .write_all(&msg)
        .map_err(|e| PerfError::new(format!("sending the data-check counts: {e}")))
}

/// Reads what [`send_counts`] sent: one count per QP, `qps` of them.
pub(crate) fn read_counts(
    stream: &mut Control,
    qps: usize,
    timeout: Duration,
) -> Result<Vec<u64>, PerfError> {
    let fail = |e: std::io::Error| PerfError::new(format!("reading the data-check counts: {e}"));
    stream.set_timeout(Some(timeout)).map_err(fail)?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).map_err(fail)?;
    let n = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    if &head[..8] != COUNTS_MAGIC || n != qps {
        return Err(PerfError::new("the peer's data-check counts are malformed"));
    }
    let mut body = vec![0u8; 8 * n];
    stream.read_exact(&mut body).map_err(fail)?;
    Ok(body
        .chunks(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
        .collect())
}
