//! Unreliable datagram (IBTA 9.8, as Linux rxe implements it): one packet per message, a DETH
//! on every packet, no acknowledgements, no retransmission, no PSN checks at the receiver.
//!
//! Sending: each WQE names its destination (address, remote QPN, Q_Key) and becomes one SEND
//! ONLY packet; it completes as soon as the packet is handed to the wire, as on rxe. The Q_Key
//! presented is the WQE's, unless its high bit is set ("controlled" Q_Key): then the QP's own.
//!
//! Receiving: the DETH's Q_Key must equal the QP's (QP1's is the GSI Q_Key), the message must
//! fit the port MTU, and a receive WQE must be posted with room for the 40-byte GRH area plus
//! the payload. Anything else loses the datagram — counted, never fatal: the QP and its
//! receive queue are exactly as before. The area receives the sender's IP header as rxe writes
//! it (see `softrdma_wire::grh`), so the application can answer the sender.

use std::net::SocketAddr;

use softrdma_wire::{crc32_update, Bth, Deth, ExtHeaders, ImmDt, Opcode, PacketRepr, GRH_LEN};

use super::attr::{QpState, GSI_QKEY};
use super::{Ctx, QpContext};
use crate::io::DatagramOut;
use crate::mr::MrTable;
use crate::stats::DropReason;
use crate::wr::{SendFlags, SendOp, WcOpcode, WcStatus, WorkCompletion};

impl QpContext {
    /// The next UD datagram: the WQE at the head of the send queue, sent and completed.
    pub(crate) fn poll_datagram_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
    ) -> Option<DatagramOut> {
        if !matches!(self.state, QpState::Rts) || self.req.waiting_out_rnr() {
            return None;
        }
        let wqe = self.req.wqes().front()?;
        let Some(dest) = wqe.wr.ud else {
            // post_send refuses UD WQEs without a destination; nothing else can put one here.
            self.fail_wqe(ctx, 0, WcStatus::LocQpOpErr);
            return None;
        };
        let sgl_ok = wqe.wr.inline_data.is_some()
            || ctx
                .mrs
                .check_sgl(self.pd, &wqe.wr.sg_list, wqe.wr.op.local_access())
                .is_ok();
        if !sgl_ok {
            self.fail_wqe(ctx, 0, WcStatus::LocProtErr);
            return None;
        }
        let imm = match wqe.wr.op {
            SendOp::SendWithImm { imm } => Some(imm),
            _ => None,
        };
        let opcode = if imm.is_some() {
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        } else {
            Opcode::UD_SEND_ONLY
        };
        let psn = self.req.next_psn();
        let mut bth = Bth::new(opcode, dest.remote_qpn, psn);
        bth.solicited = wqe.wr.flags.contains(SendFlags::SOLICITED);
        let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
            self.own_qkey()
        } else {
            dest.remote_qkey
        };
        let ext = ExtHeaders {
            deth: Some(Deth {
                qkey,
                src_qpn: self.qpn,
            }),
            imm_dt: imm.map(|imm| ImmDt { imm }),
            ..ExtHeaders::default()
        };
        let dst = SocketAddr::new(dest.av.dest_ip, ctx.config.remote_udp_port);
        let len = wqe.len as usize;
        let (pd, wr) = (self.pd, &wqe.wr);
        let fill = |mrs: &MrTable, buf: &mut [u8], crc: u32| match &wr.inline_data {
            Some(data) => {
                buf.copy_from_slice(&data[..buf.len()]);
                Some(crc32_update(crc, buf))
            }
            None if buf.is_empty() => Some(crc),
            None => mrs.gather_crc(pd, &wr.sg_list, 0, buf, crc).ok(),
        };
        let Some(t) = self.build_packet_to(ctx, out, dst, bth, &ext, len, fill) else {
            self.fail_wqe(ctx, 0, WcStatus::LocProtErr);
            return None;
        };
        let wqe = self
            .req
            .datagram_sent()
            .expect("the head WQE was just sent");
        if wqe.wr.flags.contains(SendFlags::SIGNALED) {
            ctx.complete(self.send_cq, wqe.completion(self.qpn, WcStatus::Success));
        }
        Some(t)
    }

    /// The QP's Q_Key: QP 1's is the GSI Q_Key whatever was set (IBTA 13.5.1: the GSI's
    /// well-known Q_Key, which is "controlled", so a MAD sent with it carries it too).
    fn own_qkey(&self) -> u32 {
        if self.qpn == 1 {
            GSI_QKEY
        } else {
            self.cfg.qkey
        }
    }

    /// Delivers one UD datagram (the transport and the QP's state are already checked) into
    /// the next receive WQE, `grh` first.
    pub(crate) fn handle_datagram_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketRepr<'_>,
        grh: &[u8; GRH_LEN],
    ) {
        let Some(deth) = pkt.ext.deth else {
            ctx.stats.drop(DropReason::Malformed);
            return;
        };
        if deth.qkey != self.own_qkey() {
            ctx.stats.drop(DropReason::BadQkey);
            return;
        }
        let len = pkt.payload.len();
        if len > ctx.config.port_mtu.bytes() as usize {
            ctx.stats.drop(DropReason::TooLong);
            return;
        }
        let Some(capacity) = self.next_recv_capacity(ctx) else {
            ctx.stats.drop(DropReason::NoReceiveWqe);
            return;
        };
        if capacity < (GRH_LEN + len) as u64 {
            ctx.stats.drop(DropReason::TooLong);
            return;
        }
        let wr = self.take_recv(ctx).expect("a WQE was just seen");
        let placed = ctx
            .mrs
            .scatter(self.pd, &wr.sg_list, 0, grh)
            .and_then(|()| {
                ctx.mrs
                    .scatter(self.pd, &wr.sg_list, GRH_LEN as u64, pkt.payload)
            });
        let status = if placed.is_ok() {
            WcStatus::Success
        } else {
            WcStatus::LocProtErr
        };
        let wc = WorkCompletion {
            wr_id: wr.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: (GRH_LEN + len) as u32,
            imm_data: pkt.ext.imm_dt.map(|i| i.imm),
            invalidated_rkey: None,
            qp_num: self.qpn,
            src_qp: deth.src_qpn,
            grh: true,
            timestamp: crate::time::Instant::ZERO,
        };
        ctx.complete(self.recv_cq, wc);
        if status != WcStatus::Success {
            // The receive WQE's own buffers are bad: a local error of this QP (rxe: class A).
            self.enter_error(ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::qp::source_port::ud_source_port;

    #[test]
    fn test_source_ports_like_rxe() {
        // From rxe captures: QP1 sends from 55410, UD QPN 0x11 from 57236.
        assert_eq!(ud_source_port(1), 55410);
        assert_eq!(ud_source_port(0x11), 57236);
    }
}
