//! A connected QP's part in congestion control (see [`crate::cc`]): the notification point
//! answering CE marks with CNPs, the reaction point's pacer in front of the requester, its
//! reaction to CNPs and its timers.

use softrdma_wire::{Bth, ExtHeaders, Opcode, Psn};

use super::timers::Timer;
use super::{Ctx, QpContext};
use crate::cc::{ACK_BEFORE_PAUSE, ECT0};
use crate::io::DatagramOut;

impl QpContext {
    /// A packet for this QP arrived marked Congestion Experienced.
    pub(crate) fn on_congestion_experienced(&mut self, ctx: &mut Ctx<'_>) {
        ctx.stats.ecn_ce_received += 1;
        if ctx.config.cc.notify {
            self.np.on_ce(ctx.now, ctx.config.cc.cnp_interval);
        }
    }

    /// The CNP due to the peer QP, if one is (RoCEv2 Annex A17: BTH opcode 0x81 with BECN
    /// set and PSN 0, 16 reserved bytes, ICRC — as rxe's and Wireshark's decoders read it).
    pub(crate) fn poll_cnp(&mut self, ctx: &mut Ctx<'_>, out: &mut Vec<u8>) -> Option<DatagramOut> {
        if !self.np.pending {
            return None;
        }
        let bth = Bth {
            becn: true,
            ..Bth::new(Opcode::CNP, self.cfg.dest_qpn, Psn::new(0))
        };
        let t = self.build_packet(ctx, out, bth, &ExtHeaders::default(), 0, |_, _, crc| {
            Some(crc)
        });
        self.np.sent(ctx.now);
        if t.is_some() {
            ctx.stats.cnps_sent += 1;
        }
        t
    }

    /// A CNP for this QP arrived: the reaction point cuts the rate (a QP without congestion
    /// control ignores it, as rxe does).
    pub(crate) fn on_cnp(&mut self, ctx: &mut Ctx<'_>) {
        ctx.stats.cnps_received += 1;
        let Some(rp) = self.rp.as_mut() else {
            return;
        };
        rp.refill(ctx.now);
        let before = rp.ctl.rate_cuts();
        rp.ctl.on_congestion_notified(ctx.now);
        ctx.stats.cc_rate_cuts += rp.ctl.rate_cuts() - before;
        self.sync_cc_timer();
    }

    /// The requester measured a round trip: the reaction point's algorithm hears of it.
    pub(crate) fn on_rtt_sample(&mut self, ctx: &mut Ctx<'_>, rtt: core::time::Duration) {
        if let Some(rp) = self.rp.as_mut() {
            rp.refill(ctx.now);
            let before = rp.ctl.rate_cuts();
            rp.ctl.on_rtt_sample(ctx.now, rtt);
            ctx.stats.cc_rate_cuts += rp.ctl.rate_cuts() - before;
        }
    }

    /// The requester behind the pacer: a request packet leaves only when the rate allows,
    /// marked ECT(0); otherwise the pace timer wakes the QP when it may.
    pub(crate) fn poll_paced_requester_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        out: &mut Vec<u8>,
    ) -> Option<DatagramOut> {
        if let Some(rp) = &self.rp {
            if !rp.may_send(ctx.now) {
                if self.req.has_output() {
                    ctx.stats.paced_waits += 1;
                    self.timers.set(Timer::Pace, rp.next_send());
                }
                return None;
            }
            // The last packet before a pause asks for its ACK (as the last one a full window
            // lets out does): the pause must not look like a loss to the retransmit timer.
            let full = self.cfg.path_mtu.bytes() as usize + 64;
            if rp.wait_after(ctx.now, full) >= ACK_BEFORE_PAUSE {
                self.req.ask_for_ack();
            }
        }
        let mut t = self.poll_requester_transmit(ctx, out)?;
        if let Some(rp) = self.rp.as_mut() {
            t.ecn = ECT0;
            rp.on_sent(ctx.now, t.len);
            self.sync_cc_timer();
        }
        Some(t)
    }

    /// Runs the reaction point's expired timers (the pace timer needs nothing: the engine
    /// queues a woken QP that has output).
    pub(crate) fn handle_cc_timeout(&mut self, ctx: &mut Ctx<'_>) {
        self.timers.take_expired(Timer::Pace, ctx.now);
        if self.timers.take_expired(Timer::Cc, ctx.now) {
            if let Some(rp) = self.rp.as_mut() {
                rp.refill(ctx.now);
                rp.ctl.on_timeout(ctx.now);
            }
            self.sync_cc_timer();
        }
    }

    /// Arms the congestion-control timer for the algorithm's next deadline.
    fn sync_cc_timer(&mut self) {
        match self.rp.as_ref().and_then(|rp| rp.ctl.next_timeout()) {
            Some(at) => self.timers.set(Timer::Cc, at),
            None => self.timers.stop(Timer::Cc),
        }
    }

    /// The rate congestion control allows this QP, bits per second (`None`: not running).
    pub fn cc_rate_bps(&self) -> Option<f64> {
        self.rp.as_ref().map(|rp| rp.ctl.rate_bps())
    }
}
