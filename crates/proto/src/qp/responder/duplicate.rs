//! Duplicate requests (PSN before the expected one, IBTA 9.7.5.1.6): the requester resent
//! because an answer was lost or late.
//!
//! - SEND / WRITE: already executed; re-ACK with the newest PSN so the requester moves on
//!   (what rxe does for every duplicate packet).
//! - READ: re-executed from the duplicate request's own RETH (a requester restarting a READ
//!   mid-response asks only for the rest), if it falls within a remembered READ: the same
//!   R_Key, bytes inside the original ones, response PSNs inside the original's (rxe checks
//!   the key and the bytes). Anything else is dropped: a peer must not get, by repeating a
//!   request with an old PSN, more or other data than it was answered.
//! - Atomic: never executed again; the remembered original value is sent again.
//! - ATOMIC_WRITE, FLUSH: never executed again; the empty acknowledgement is sent again.

use softrdma_wire::{OpKind, PacketRepr, Syndrome};

use super::read::read_packets;
use crate::qp::responder::state::{Output, Resource};
use crate::qp::{Ctx, QpContext};
use crate::stats::DropReason;

impl QpContext {
    pub(super) fn handle_duplicate(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) {
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        if self.enter_xrc_srq(ctx, pkt).is_err() {
            ctx.stats.drop(DropReason::Duplicate);
            return;
        }
        let psn = pkt.bth.psn;
        match info.kind {
            OpKind::ReadRequest => {
                let Some(reth) = pkt.ext.reth else { return };
                let mtu = self.cfg.path_mtu.bytes();
                let start = self.resp.resources.iter().find_map(|r| match *r {
                    Resource::Read {
                        psn: p,
                        npkts,
                        rkey,
                        va,
                        len,
                    } if psn.in_window(p, npkts) => {
                        let end = va.saturating_add(u64::from(len));
                        let within = reth.dma_len == 0
                            || reth.rkey == rkey
                                && reth.va >= va
                                && reth
                                    .va
                                    .checked_add(u64::from(reth.dma_len))
                                    .is_some_and(|e| e <= end);
                        let offset = psn.distance(p).unsigned_abs();
                        let fits = offset + read_packets(reth.dma_len, mtu) <= npkts;
                        (within && fits).then_some(p)
                    }
                    _ => None,
                });
                let Some(start) = start.filter(|_| self.check_read(ctx, &reth).is_ok()) else {
                    ctx.stats.drop(DropReason::Duplicate);
                    return;
                };
                // The response still going out, partly sent or not, is replaced by the
                // requester's new ask (rxe: the resource restarts from the duplicate's PSN).
                self.resp.cancel_answer(start);
                self.resp.mark_replayed(start);
                self.queue_read_response(ctx, start, psn, &reth);
            }
            OpKind::AtomicWrite | OpKind::Flush => {
                let found = self.resp.resources.iter().find_map(|r| match *r {
                    Resource::Placement { psn: p, msn } if p == psn => Some(msn),
                    _ => None,
                });
                match found {
                    Some(msn) => {
                        self.resp.cancel_answer(psn);
                        self.resp.mark_replayed(psn);
                        self.resp
                            .output
                            .push_back(Output::PlacementAck { psn, msn });
                    }
                    None => ctx.stats.drop(DropReason::Duplicate),
                }
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let found = self.resp.resources.iter().find_map(|r| match *r {
                    Resource::Atomic { psn: p, orig, msn } if p == psn => Some((orig, msn)),
                    _ => None,
                });
                match found {
                    Some((orig, msn)) => {
                        ctx.stats.atomics_replayed += 1;
                        self.resp.cancel_answer(psn);
                        self.resp.mark_replayed(psn);
                        self.resp
                            .output
                            .push_back(Output::AtomicAck { psn, orig, msn });
                    }
                    None => ctx.stats.drop(DropReason::Duplicate),
                }
            }
            _ => {
                let newest = self.resp.expected_psn.sub(1);
                self.resp.push_ack(newest, Syndrome::ACK);
            }
        }
    }
}
