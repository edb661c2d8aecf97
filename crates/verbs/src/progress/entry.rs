//! The one way into the engine from the rest of the crate. A verb says what kind of access it
//! makes ([`Access`]); what must happen around it — sending what it produced, waking the
//! progress thread or completion waiters, receiving first — follows from that here, not from
//! which of several helpers the verb happened to call. Work that touches the engine and the
//! I/O together (a QP that leaves its multicast groups and source port, a CQ the device
//! watches) is a method of its own here, so no verb reaches past the engine into the core.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use softrdma_proto::{CqHandle, Engine, Instant, QpAttr, QpState, Stats};

use super::{Access, CqNotify, Flush, Inner, IoCounters, Round};
use crate::event::AsyncEvents;

impl Inner {
    /// Runs `f` on the engine as `access` says (see [`Access`]).
    pub(crate) fn engine<R>(&self, access: Access, f: impl FnOnce(&mut Engine, Instant) -> R) -> R {
        let on_engine = |core: &mut super::Core, now| f(&mut core.engine, now);
        match access {
            Access::Query => {
                let mut core = self.lock();
                let now = core.now();
                on_engine(&mut core, now)
            }
            Access::Post => self.with_core_then(Flush::After, on_engine),
            Access::PostReceive => self.with_core_then(Flush::Never, on_engine),
            Access::Teardown => self.with_core_then(Flush::BeforeAndAfter, on_engine),
            Access::Poll => {
                self.drive_inner(Round::Spinner, |core| {
                    let now = core.now();
                    on_engine(core, now)
                })
                .then
            }
        }
    }

    /// Creates a CQ of `cqe` entries whose completions wake `notify`'s waiters.
    pub(crate) fn create_cq(&self, cqe: usize, notify: Arc<CqNotify>) -> CqHandle {
        let mut core = self.lock();
        let handle = core.engine.create_cq(cqe);
        core.watch_cq(handle, notify);
        handle
    }

    /// Destroys a CQ and stops watching it.
    pub(crate) fn destroy_cq(&self, handle: CqHandle) {
        let mut core = self.lock();
        core.unwatch_cq(handle);
        let _ = core.engine.destroy_cq(handle);
    }

    /// Ends QP `qpn`: to ERR (every posted WR completes, flushed), out of its multicast
    /// groups (the device leaves a group with its last QP), destroyed, its source port
    /// released unless another QP sends from it. ibverbs' destroy discards outstanding work
    /// silently and refuses an attached QP; a dropped handle cannot be asked first.
    pub(crate) fn end_qp(&self, qpn: u32) {
        self.with_core_then(Flush::BeforeAndAfter, |core, _| {
            let err = QpAttr {
                qp_state: Some(QpState::Err),
                ..Default::default()
            };
            let _ = core.engine.modify_qp(qpn, &err);
            let groups: Vec<IpAddr> = core.engine.mcast_groups().collect();
            for group in groups {
                if core.engine.detach_mcast(qpn, group).is_ok()
                    && !core.engine.mcast_groups().any(|g| g == group)
                {
                    core.leave_multicast(group);
                }
            }
            let sport = core.engine.qp(qpn).map(|qp| qp.source_port());
            if core.engine.destroy_qp(qpn).is_ok() {
                if let Some(sport) = sport {
                    core.release_source_port(sport);
                }
            }
        });
    }

    /// Attaches QP `qpn` to multicast `group`; the device joins the group with its first QP.
    /// `Err(None)`: the engine refused the QP; `Err(Some(e))`: the network refused the group.
    pub(crate) fn attach_mcast(
        &self,
        qpn: u32,
        group: IpAddr,
    ) -> Result<(), Option<softrdma_udp::MulticastError>> {
        self.with_core_then(Flush::After, |core, _| {
            let joined = core.engine.mcast_groups().any(|g| g == group);
            core.engine.attach_mcast(qpn, group).map_err(|_| None)?;
            if !joined {
                if let Err(e) = core.join_multicast(group) {
                    let _ = core.engine.detach_mcast(qpn, group);
                    return Err(Some(e));
                }
            }
            Ok(())
        })
    }

    /// Detaches QP `qpn` from `group` (`false`: it was not attached); the device leaves the
    /// group with its last QP.
    pub(crate) fn detach_mcast(&self, qpn: u32, group: IpAddr) -> bool {
        self.with_core_then(Flush::After, |core, _| {
            if core.engine.detach_mcast(qpn, group).is_err() {
                return false;
            }
            if !core.engine.mcast_groups().any(|g| g == group) {
                core.leave_multicast(group);
            }
            true
        })
    }

    /// The engine's counters and the I/O counters (with the progress thread's wake-ups),
    /// taken together.
    pub(crate) fn counters(&self) -> (Stats, IoCounters) {
        let core = self.lock();
        let io = IoCounters {
            wakeups: self.wakeups.load(Ordering::Relaxed),
            ..core.io_counters()
        };
        (core.engine.stats().clone(), io)
    }

    /// Datagrams received so far, by whichever thread: a waiter's sign of activity.
    pub(crate) fn datagrams_received(&self) -> u64 {
        self.lock().io.rx_datagrams
    }

    /// The device's asynchronous events, created on first use.
    pub(crate) fn async_events(&self) -> std::io::Result<AsyncEvents> {
        let mut core = self.lock();
        if let Some(e) = &core.async_events {
            return Ok(e.clone());
        }
        let e = AsyncEvents::new()?;
        core.async_events = Some(e.clone());
        Ok(e)
    }
}
