//! The event loop of [`Fabric`]: engines' output drained into the links, the clock jumped to
//! the next event (an arrival, an engine deadline, a requested wakeup, a switch's transmitter),
//! datagrams delivered to their engines — through a direct placement plan when the fabric
//! models one — and due timers run; and the loops that step until a predicate, idleness or a
//! virtual-time bound ends a run.
//!
//! The fabric's module docs describe the steps and their order; this file is how each runs.
//! It holds the time-driven half of the fabric, apart from its setup and configuration (the
//! module root) and from the path a single datagram takes (`route`).

use std::cmp::Reverse;
use std::net::{IpAddr, SocketAddr};

use softrdma_proto::{DatagramMeta, Duration, Instant};

use super::{
    CapturePoint, Fabric, InFlight, NodeId, RunOutcome, SimError, Step, MAX_STEPS_PER_INSTANT,
    MAX_TRANSMITS_PER_INSTANT,
};
use crate::switch::SwitchedNet;

impl Fabric {
    /// Drains every engine's output into the links.
    fn flush_transmits(&mut self) -> Result<(), SimError> {
        let now = self.now;
        for i in 0..self.nodes.len() {
            let mut emitted = 0u64;
            loop {
                let mut buf = std::mem::take(&mut self.tx_buf);
                let t = self.nodes[i].engine.poll_transmit(now, &mut buf);
                let Some(t) = t else {
                    self.tx_buf = buf;
                    break;
                };
                emitted += 1;
                if emitted > MAX_TRANSMITS_PER_INSTANT {
                    return Err(SimError::Runaway {
                        node: NodeId(i),
                        at_ns: now.as_nanos(),
                    });
                }
                let len = t.len.min(buf.len());
                let data = buf[..len].to_vec();
                self.tx_buf = buf;
                self.route(NodeId(i), t.dst, t.src_port, t.ecn, data);
            }
        }
        Ok(())
    }

    /// The earliest pending event: an arrival, an engine deadline or a requested wakeup.
    pub fn next_event(&self) -> Option<Instant> {
        let arrival = self.in_flight.peek().map(|Reverse(s)| s.at);
        let deadline = self
            .nodes
            .iter()
            .filter_map(|n| n.engine.poll_timeout())
            .min();
        let switched = self.switched.as_ref().and_then(SwitchedNet::next_event);
        [arrival, deadline, self.wakeup, switched]
            .into_iter()
            .flatten()
            .min()
    }

    /// Asks the event loop to stop at `at` even if nothing else happens then: for timers of
    /// code that runs beside the engines (a workload's `done` callback sees the clock there,
    /// and asks again for its next timer). The earliest request wins; it is forgotten once
    /// reached.
    pub fn wake_at(&mut self, at: Instant) {
        self.wakeup = Some(self.wakeup.map_or(at, |w| w.min(at)));
    }

    /// Runs one instant of the event loop (see the module docs), never past `deadline`.
    pub fn step(&mut self, deadline: Instant) -> Result<Step, SimError> {
        self.flush_transmits()?;
        let Some(next) = self.next_event() else {
            return Ok(Step::Idle);
        };
        if next > deadline {
            if deadline > self.now {
                self.now = deadline;
            }
            return Ok(Step::DeadlineReached);
        }
        self.stats.steps += 1;
        if next > self.now {
            self.now = next;
            self.steps_at_instant = 0;
        } else {
            self.steps_at_instant += 1;
            if self.steps_at_instant > MAX_STEPS_PER_INSTANT {
                let node = self
                    .nodes
                    .iter()
                    .position(|n| n.engine.poll_timeout().is_some_and(|d| d <= self.now))
                    .map(NodeId);
                return Err(SimError::Stalled {
                    at_ns: self.now.as_nanos(),
                    node,
                });
            }
        }
        let now = self.now;
        if self.wakeup.is_some_and(|w| w <= now) {
            self.wakeup = None;
        }
        while self.in_flight.peek().is_some_and(|Reverse(s)| s.at <= now) {
            let Some(Reverse(s)) = self.in_flight.pop() else {
                break;
            };
            self.deliver(s.pkt);
        }
        if let Some(net) = self.switched.as_mut() {
            for (_, mut pkt, ce) in net.advance(now) {
                if ce {
                    pkt.ecn = 0b11;
                }
                self.deliver(pkt);
            }
        }
        for node in &mut self.nodes {
            if node.engine.poll_timeout().is_some_and(|d| d <= now) {
                node.engine.handle_timeout(now);
            }
        }
        Ok(Step::Progressed)
    }

    fn deliver(&mut self, pkt: InFlight) {
        if self.config.capture_point == CapturePoint::Delivery {
            self.capture(self.now, &pkt);
        }
        self.stats.packets_delivered += 1;
        let src_ip = self.nodes[pkt.src.0].ip;
        let meta = DatagramMeta {
            tos: pkt.ecn,
            ..DatagramMeta::new(
                SocketAddr::new(IpAddr::V4(src_ip), pkt.src_port),
                IpAddr::V4(pkt.dst_ip),
            )
        };
        let now = self.now;
        let engine = &mut self.nodes[pkt.dst.0].engine;
        let plan = if !self.config.direct_placement {
            None
        } else if self.config.mispredict > 0.0 && self.place_rng.chance(self.config.mispredict) {
            let qpns: Vec<u32> = engine.qpns().collect();
            self.place_rng
                .pick(&qpns)
                .and_then(|&q| engine.plan_placement_for(q))
        } else {
            engine.plan_placement()
        };
        let Some(plan) = plan else {
            engine.handle_datagram(now, &meta, &pkt.data);
            return;
        };
        // What the kernel does with a receive laid out this way.
        let scratch = &mut self.place_scratch;
        let Ok(n) = plan.scatter(&pkt.data, scratch) else {
            engine.handle_datagram(now, &meta, &pkt.data);
            return;
        };
        let r = engine.handle_placed(now, &meta, &plan, scratch, n, 0);
        self.stats.packets_placed += r.placed as u64;
        if r.rest_from < n && !r.rest_lost {
            self.stats.placement_misses += 1;
            engine.handle_datagram(now, &meta, &scratch[r.rest_from..n]);
        }
    }

    /// Steps until `done` returns true, the fabric goes idle, or virtual time would pass
    /// `deadline`. `done` runs before every step with the whole fabric: it is where a workload
    /// polls completions and posts more work.
    pub fn run_until(
        &mut self,
        deadline: Instant,
        mut done: impl FnMut(&mut Fabric) -> bool,
    ) -> Result<RunOutcome, SimError> {
        loop {
            if done(self) {
                return Ok(RunOutcome::Done);
            }
            match self.step(deadline)? {
                Step::Progressed => {}
                Step::DeadlineReached => {
                    return Ok(if done(self) {
                        RunOutcome::Done
                    } else {
                        RunOutcome::DeadlineReached
                    })
                }
                Step::Idle => {
                    // `done` may have posted work that is not transmitted yet: idle only if a
                    // further look finds nothing to do either.
                    if done(self) {
                        return Ok(RunOutcome::Done);
                    }
                    if self.step(deadline)? == Step::Idle {
                        return Ok(RunOutcome::Idle);
                    }
                }
            }
        }
    }

    /// Steps until nothing is in flight and no engine has a deadline, or `duration` of virtual
    /// time has passed.
    pub fn run_for(&mut self, duration: Duration) -> Result<RunOutcome, SimError> {
        let deadline = self.now + duration;
        self.run_until(deadline, |_| false)
    }
}
