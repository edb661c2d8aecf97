//! The responder (placeholder while it is being written).

use softrdma_wire::{PacketRepr, Psn};

use super::{Ctx, QueuePair};
use crate::engine::Transmit;

#[derive(Debug, Default)]
pub(crate) struct Responder {
    pub expected_psn: Psn,
}

impl Responder {
    pub(crate) fn reset(&mut self, psn: Psn) {
        self.expected_psn = psn;
    }
    pub(crate) fn clear_output(&mut self) {}
    pub(crate) fn has_output(&self) -> bool {
        false
    }
}

impl QueuePair {
    pub(crate) fn handle_request(&mut self, _ctx: &mut Ctx<'_>, _pkt: &PacketRepr<'_>) {}
    pub(crate) fn poll_responder_transmit(
        &mut self,
        _ctx: &mut Ctx<'_>,
        _out: &mut Vec<u8>,
    ) -> Option<Transmit> {
        None
    }
}
