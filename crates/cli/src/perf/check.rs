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

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use softrdma::{MemoryRegion, Sge};
use softrdma_cm::perftest::PerftestDest;

use super::args::{AtomicKind, Verb};
use super::oob::{pattern, Ctx};
use super::PerfError;

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

    /// The landing SGE of READ `seq` of QP `qp`; poisons the slot first if `seq` is sampled.
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
        let at = ((qp as u64 * ring + seq % ring) * slot) as usize;
        if sampled {
            mr.fill(at, size as usize, POISON)?;
        }
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
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            let what = if got.iter().all(|&b| b == POISON) {
                "nothing landed".to_owned()
            } else {
                format!("byte {i} differs from the server's")
            };
            return Err(PerfError::check(format!(
                "READ {seq} of QP index {qp} ({size} bytes from offset {off}) completed, but {what}"
            )));
        }
        Ok(())
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
pub(crate) fn send_counts(stream: &TcpStream, counts: &[u64]) -> Result<(), PerfError> {
    let mut msg = COUNTS_MAGIC.to_vec();
    msg.extend((counts.len() as u32).to_be_bytes());
    for c in counts {
        msg.extend(c.to_be_bytes());
    }
    (&*stream)
        .write_all(&msg)
        .map_err(|e| PerfError::new(format!("sending the data-check counts: {e}")))
}

/// Reads what [`send_counts`] sent: one count per QP, `qps` of them.
pub(crate) fn read_counts(
    stream: &TcpStream,
    qps: usize,
    timeout: Duration,
) -> Result<Vec<u64>, PerfError> {
    let fail = |e: std::io::Error| PerfError::new(format!("reading the data-check counts: {e}"));
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    let mut head = [0u8; 12];
    (&*stream).read_exact(&mut head).map_err(fail)?;
    let n = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    if &head[..8] != COUNTS_MAGIC || n != qps {
        return Err(PerfError::new("the peer's data-check counts are malformed"));
    }
    let mut body = vec![0u8; 8 * n];
    (&*stream).read_exact(&mut body).map_err(fail)?;
    Ok(body
        .chunks(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// What a passive WRITE server can verify once it knows how many WRITEs of `size` each QP
/// posted: every target position holds the last WRITE aimed at it, stamp and all.
pub(crate) fn verify_writes(ctx: &Ctx, size: u64, counts: &[u64]) -> Result<String, PerfError> {
    let positions = super::bw::positions(ctx, size);
    let mut verified = 0u64;
    for (i, &n) in counts.iter().enumerate() {
        for k in 0..positions.min(n) {
            let last = k + positions * ((n - 1 - k) / positions);
            let off = super::bw::cycle_off(ctx, size, last);
            let got = ctx
                .mr
                .read_vec((ctx.target_off(i) + off) as usize, size as usize)?;
            if got != stamped_payload(i, last, size, off) {
                let landed =
                    got[..STAMP_LEN.min(got.len())] == stamp(i, last)[..STAMP_LEN.min(got.len())];
                let which = if landed {
                    "its bytes differ from what was sent".to_owned()
                } else {
                    let seen = (got.len() >= 8)
                        .then(|| u64::from_le_bytes(got[..8].try_into().expect("8 bytes")));
                    match seen {
                        Some(s) => format!("it holds what looks like WRITE {s}"),
                        None => "it holds other bytes".to_owned(),
                    }
                };
                return Err(PerfError::check(format!(
                    "QP index {i}: WRITE {last} (the last of {n} aimed at offset {off}) is missing: {which}"
                )));
            }
            verified += 1;
        }
    }
    let total: u64 = counts.iter().sum();
    let positions = if verified == 1 {
        "the one target position".to_owned()
    } else {
        format!("each of {verified} target positions")
    };
    Ok(format!(
        "OK (the last WRITE at {positions} landed intact, {total} {size}-byte WRITEs stamped; earlier WRITEs at a position leave nothing to check)"
    ))
}

/// What a passive server verifies once the client is done: for WRITE tests the last WRITE at
/// every position ([`verify_writes`]); for atomics that the targets add up to what the client
/// posted (`counts`, per QP); for READ tests that the source the client read is intact.
pub(crate) fn passive(ctx: &Ctx, counts: &[u64]) -> Result<String, PerfError> {
    let cfg = &ctx.cfg;
    let size = *cfg.sizes.last().unwrap_or(&2);
    match cfg.test.verb() {
        Verb::Write => verify_writes(ctx, size, counts),
        Verb::Atomic => {
            let mut sum = 0u64;
            for (i, &n) in counts.iter().enumerate() {
                for k in 0..super::bw::positions(ctx, 8).min(n.max(1)) {
                    let at = (ctx.target_off(i) + super::bw::cycle_off(ctx, 8, k)) as usize;
                    sum = sum.wrapping_add(ctx.mr.read_u64(at)?);
                }
            }
            let posted: u64 = counts.iter().sum();
            let expect = match cfg.atomic {
                AtomicKind::CMP_AND_SWAP => 0,
                AtomicKind::FETCH_AND_ADD => posted,
            };
            if sum != expect {
                return Err(PerfError::check(format!(
                    "the atomic targets add up to {sum}, but the client posted {posted} {} (expected {expect})",
                    cfg.atomic.as_str()
                )));
            }
            Ok(format!(
                "OK (the atomic targets add up to {expect} for the {posted} {} the client posted)",
                cfg.atomic.as_str()
            ))
        }
        Verb::Read => {
            let mut bytes = 0u64;
            for i in 0..ctx.qps.len() {
                let got = ctx
                    .mr
                    .read_vec(ctx.target_off(i) as usize, ctx.buf as usize)?;
                if let Some(at) = got
                    .iter()
                    .zip(pattern(0, got.len()))
                    .position(|(a, b)| *a != b)
                {
                    return Err(PerfError::check(format!(
                        "QP index {i}: the READ source changed at offset {at} during the run"
                    )));
                }
                bytes += got.len() as u64;
            }
            Ok(format!("OK (the READ source is intact: {bytes} bytes)"))
        }
        Verb::Send => Ok("OK".into()),
    }
}
