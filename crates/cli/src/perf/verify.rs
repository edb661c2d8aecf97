//! What the receiving side verifies once its peer is done (see [`super::check`] for the
//! scheme): the last WRITE at every position, atomic sums, an intact READ source, every SEND
//! arrived. The receiving side is a passive server, a `send-bw` server, or with `-b` either
//! side.

use super::args::{AtomicKind, Verb};
use super::check::{stamp, stamped_payload, STAMP_LEN};
use super::layout::pattern;
use super::oob::Ctx;
use super::output::PerfError;
use crate::transport::Transport;

/// What a passive WRITE server can verify once it knows how many WRITEs of `size` each QP
/// posted: every target position holds the last WRITE aimed at it, stamp and all.
pub(crate) fn verify_writes(ctx: &Ctx, size: u64, counts: &[u64]) -> Result<String, PerfError> {
    let positions = ctx.positions(size);
    let unreliable = ctx.cfg.transport != Transport::RC;
    let mut verified = 0u64;
    let mut earlier = 0u64;
    for (i, &n) in counts.iter().enumerate() {
        for k in 0..positions.min(n) {
            let last = k + positions * ((n - 1 - k) / positions);
            let off = ctx.cycle_off(size, last);
            let got = ctx
                .mr
                .read_vec((ctx.target_off(i) + off) as usize, size as usize)?;
            // UC loses WRITEs silently (and keeps the packets of a WRITE before the lost
            // one): a position may hold an earlier WRITE aimed at it, stamp and bytes intact.
            if unreliable && got.len() >= 8 {
                let seen = u64::from_le_bytes(got[..8].try_into().expect("8 bytes"));
                if seen < last
                    && seen % positions == k
                    && got == stamped_payload(i, seen, size, off)
                {
                    earlier += 1;
                    continue;
                }
            }
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
    if earlier > 0 {
        return Ok(format!(
            "OK ({verified} target positions hold their last WRITE intact, {earlier} an earlier WRITE aimed at them, intact: the later ones were lost, as UC may lose them; {total} {size}-byte WRITEs stamped)"
        ));
    }
    let positions = if verified == 1 {
        "the one target position".to_owned()
    } else {
        format!("each of {verified} target positions")
    };
    Ok(format!(
        "OK (the last WRITE at {positions} landed intact, {total} {size}-byte WRITEs stamped; earlier WRITEs at a position leave nothing to check)"
    ))
}

/// The side that sent to us: the client, or with `-b` the peer (both send).
fn sender(ctx: &Ctx) -> &'static str {
    if ctx.cfg.duplex {
        "the peer"
    } else {
        "the client"
    }
}

/// What the receiving side verifies once it knows how many messages each of the peer's QPs
/// posted (`counts`): SENDs, that every one arrived (UC and UD: no more than were posted,
/// intact); WRITEs and atomics, the memory they target ([`passive`]).
pub(crate) fn peer_counts(ctx: &Ctx, counts: &[u64]) -> Result<String, PerfError> {
    if ctx.cfg.test.verb() != Verb::Send {
        return passive(ctx, counts);
    }
    let who = sender(ctx);
    // The SEND receiver: every message the peer posted arrived (UC and UD: no more than it
    // posted; they lose messages silently).
    let got_each = &ctx.received;
    let (got, posted): (u64, u64) = (got_each.iter().sum(), counts.iter().sum());
    let unreliable = ctx.cfg.transport != Transport::RC;
    let arrived_ok = if unreliable {
        got_each.iter().zip(counts).all(|(g, p)| g <= p)
    } else {
        got_each == counts
    };
    if !arrived_ok || got_each.len() != counts.len() {
        return Err(PerfError::check(format!(
            "{who} posted {posted} SENDs, {got} arrived ({got_each:?} per QP, {counts:?} posted)"
        )));
    }
    Ok(if got == posted {
        format!("OK (all {posted} SENDs {who} posted arrived)")
    } else {
        format!(
            "OK ({got} of the {posted} SENDs {who} posted arrived, intact; {} lost, as {} may lose them)",
            posted - got,
            ctx.cfg.transport.as_str()
        )
    })
}

/// What a passive server (or with `-b` either side) verifies once the peer is done: for WRITE tests the last WRITE at
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
                for k in 0..ctx.positions(8).min(n.max(1)) {
                    let at = (ctx.target_off(i) + ctx.cycle_off(8, k)) as usize;
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
                    "the atomic targets add up to {sum}, but {} posted {posted} {} (expected {expect})",
                    sender(ctx),
                    cfg.atomic.as_str()
                )));
            }
            Ok(format!(
                "OK (the atomic targets add up to {expect} for the {posted} {} {} posted)",
                cfg.atomic.as_str(),
                sender(ctx)
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
