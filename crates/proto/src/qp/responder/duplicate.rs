//! Duplicate requests (PSN before the expected one, IBTA 9.7.5.1.6): the requester resent
//! because an answer was lost or late.
//!
//! - SEND / WRITE: already executed; re-ACK with the newest PSN so the requester moves on
//!   (what rxe does for every duplicate packet).
//! - READ: re-executed from the duplicate request's own RETH (a requester restarting a READ
//!   mid-response asks only for the rest), if it falls within a remembered READ.
//! - Atomic: never executed again; the remembered original value is sent again.

use softrdma_wire::{OpKind, PacketRepr, Syndrome};

use crate::qp::responder_state::{Output, Resource};
use crate::qp::{Ctx, QueuePair};
use crate::stats::DropReason;

impl QueuePair {
    pub(super) fn handle_duplicate(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketRepr<'_>) {
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        let psn = pkt.bth.psn;
        match info.kind {
            OpKind::ReadRequest => {
                let known = self.resp.resources.iter().any(
                    |r| matches!(*r, Resource::Read { psn: p, npkts } if psn.in_window(p, npkts)),
                );
                let Some(reth) = pkt.ext.reth else { return };
                if !known || self.check_read(ctx, &reth).is_err() {
                    ctx.stats.drop(DropReason::Duplicate);
                    return;
                }
                // Drop a not-yet-finished response to the same request: the new one replaces it.
                self.resp
                    .output
                    .retain(|o| !matches!(*o, Output::Read { psn: p, .. } if p == psn));
                self.queue_read_response(ctx, psn, &reth);
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let found = self.resp.resources.iter().find_map(|r| match *r {
                    Resource::Atomic { psn: p, orig, msn } if p == psn => Some((orig, msn)),
                    _ => None,
                });
                match found {
                    Some((orig, msn)) => {
                        ctx.stats.atomics_replayed += 1;
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
