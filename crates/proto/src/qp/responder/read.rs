//! RDMA READ: validate the request, remember it as a responder resource, and queue the
//! response; `next_read_response` cuts it into MTU-sized packets as the wire takes them.

use softrdma_wire::{Aeth, Bth, ExtHeaders, Opcode, PacketRepr, Psn, Reth, Syndrome};

use super::{check_remote, check_remote_in, RespError};
use crate::access::AccessFlags;
use crate::io::DatagramOut;
use crate::qp::responder::state::{Output, Resource};
use crate::qp::{Ctx, QpContext};
use crate::stats::DropReason;

impl QpContext {
    pub(super) fn execute_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
    ) -> Result<(), RespError> {
        let reth = pkt.ext.reth.ok_or(RespError::InvalidRequest)?;
        self.check_read(ctx, &reth)?;
        if !self.resp.reserve(self.cfg.max_dest_rd_atomic) {
            return Err(RespError::InvalidRequest);
        }
        let npkts = read_packets(reth.dma_len, self.cfg.path_mtu.bytes());
        let psn = pkt.bth.psn;
        self.resp.resources.push_back(Resource::Read {
            psn,
            npkts,
            rkey: reth.rkey,
            va: reth.va,
            len: reth.dma_len,
        });
        // The READ is a completed message for MSN purposes; its responses carry the new MSN.
        self.resp.expected_psn = psn.add(npkts);
        self.resp.msn = (self.resp.msn + 1) & 0x00ff_ffff;
        self.queue_read_response(ctx, psn, psn, &reth);
        Ok(())
    }

    /// Access checks of a READ request (also for a duplicate, which is re-executed). A READ
    /// of zero bytes names no memory: its R_Key and address are not checked (IBTA C9-88; rxe:
    /// "a zero-byte op is not required to set an addr or rkey").
    pub(super) fn check_read(&self, ctx: &Ctx<'_>, reth: &Reth) -> Result<(), RespError> {
        if reth.dma_len > super::MAX_DMA_LEN {
            return Err(RespError::InvalidRequest);
        }
        if reth.dma_len == 0 {
            return Ok(());
        }
        let len = u64::from(reth.dma_len);
        check_remote(
            self,
            ctx.mrs,
            reth.rkey,
            reth.va,
            len,
            AccessFlags::REMOTE_READ,
        )
        .map(|_| ())
    }

    /// Queues the response to the READ whose resource starts at `start`, from `psn` (a
    /// restarted READ asks for the rest).
    pub(super) fn queue_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        start: Psn,
        psn: Psn,
        reth: &Reth,
    ) {
        ctx.stats.reads_served += 1;
        let msn = self.resp.msn;
        self.resp.output.push_back(Output::Read {
            start,
            pd: self.pd,
            psn,
            rkey: reth.rkey,
            va: reth.va,
            remaining: u64::from(reth.dma_len),
            first: true,
            msn,
        });
    }

    /// Builds the next packet of the READ response at the front of the output queue.
    pub(super) fn next_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
    ) -> Option<DatagramOut> {
        let Some(Output::Read {
            start,
            pd,
            psn,
            rkey,
            va,
            remaining,
            first,
            msn,
        }) = self.resp.output.front().copied()
        else {
            return None;
        };
        let mtu = u64::from(self.cfg.path_mtu.bytes());
        let n = remaining.min(mtu);
        let last = remaining <= mtu;
        let opcode = match (first, last) {
            (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        };
        let opcode = self.response_opcode(opcode);
        let mut ext = ExtHeaders::default();
        if first || last {
            ext.aeth = Some(Aeth {
                syndrome: Syndrome::ACK,
                msn,
            });
        }
        // Memory may have been deregistered since the request was accepted: answer with a
        // remote access NAK instead of data. An empty response reads nothing.
        let source = if n == 0 {
            None
        } else {
            match check_remote_in(self, pd, ctx.mrs, rkey, va, n, AccessFlags::REMOTE_READ) {
                Ok((mr, off)) => Some((mr.memory.clone(), off)),
                Err(_) if self.resp.replayed.contains(&start) => {
                    // A repeat for a duplicate request, whose key has been invalidated (or
                    // region deregistered) since the duplicate came: the requester got the
                    // first answer and completed the READ — it could not have revoked the
                    // key after a READ still waiting for data — so the repeat is dropped
                    // rather than failing the connection. rxe, whose resource holds the
                    // region, sends the old bytes again. (NVMe-oF over a lossy path: a
                    // target's stale READ retransmission reaches the host after the SEND
                    // with Invalidate that ended the command.)
                    self.resp.output.pop_front();
                    self.resp.replayed.retain(|&p| p != start);
                    ctx.stats.drop(DropReason::Duplicate);
                    return None;
                }
                Err(_) => {
                    self.nak_read_access(ctx, psn);
                    return None;
                }
            }
        };
        let bth = Bth::new(opcode, self.cfg.dest_qpn, psn);
        let mut faulted = false;
        let t = self.build_packet(
            ctx,
            out,
            bth,
            &ext,
            n as usize,
            |_, buf, crc| match source {
                Some((memory, off)) => {
                    let crc = memory.read_crc(off, buf, crc).ok();
                    faulted = crc.is_none();
                    crc
                }
                None => Some(crc),
            },
        );
        if faulted {
            // The memory went away under the registration (unmapped or protected).
            self.nak_read_access(ctx, psn);
            return None;
        }
        if let Some(Output::Read {
            psn,
            va,
            remaining,
            first,
            ..
        }) = self.resp.output.front_mut()
        {
            *psn = psn.next();
            *va = va.wrapping_add(n);
            *remaining -= n;
            *first = false;
            if last {
                self.resp.output.pop_front();
            }
        }
        t
    }
}

impl QpContext {
    /// Ends the READ response at the front of the output queue with a remote access NAK at
    /// `psn` in place of its data, which cannot be read: a fatal error for the QP (class C).
    fn nak_read_access(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        self.resp.output.pop_front();
        ctx.stats.nak_sent(crate::stats::NakKind::RemoteAccess);
        self.resp.push_ack(
            psn,
            Syndrome::Nak(softrdma_wire::NakCode::RemoteAccessError),
        );
        self.resp.fatal = true;
    }
}

/// Response packets (and so PSNs) of a READ of `len` bytes: at least one, even for 0 bytes.
pub(super) fn read_packets(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}
