//! The registry: the target's subsystems and the controllers hosts have created, with the
//! keep alive reaper that ends controllers whose host went quiet.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::state::{Controller, TeardownReason};
use super::subsystem::{lock, ConfigError, Limits, Subsystem};

/// The target's subsystems and live controllers.
#[derive(Debug)]
pub struct Registry {
    discovery: Arc<Subsystem>,
    subsystems: Vec<Arc<Subsystem>>,
    /// Limits advertised.
    pub limits: Limits,
    /// Where the target listens (the discovery log's address and port).
    pub port: SocketAddr,
    controllers: Mutex<BTreeMap<u16, Arc<Controller>>>,
    next_cntlid: Mutex<u16>,
    started: Instant,
}

impl Registry {
    /// A target at `port` serving `subsystems` (and the discovery subsystem).
    pub fn new(
        port: SocketAddr,
        subsystems: Vec<Subsystem>,
        limits: Limits,
    ) -> Result<Registry, ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for s in &subsystems {
            if !seen.insert(s.nqn.clone()) {
                return Err(ConfigError::DuplicateNqn(s.nqn.clone()));
            }
        }
        Ok(Registry {
            discovery: Arc::new(Subsystem::discovery()),
            subsystems: subsystems.into_iter().map(Arc::new).collect(),
            limits,
            port,
            controllers: Mutex::new(BTreeMap::new()),
            next_cntlid: Mutex::new(1),
            started: Instant::now(),
        })
    }

    /// The subsystem named `nqn` (the discovery subsystem included).
    pub fn subsystem(&self, nqn: &str) -> Option<&Arc<Subsystem>> {
        if nqn == self.discovery.nqn {
            return Some(&self.discovery);
        }
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }

    /// The NVM subsystems.
    pub fn subsystems(&self) -> &[Arc<Subsystem>] {
        &self.subsystems
    }

    /// The live controllers.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        lock(&self.controllers).values().cloned().collect()
    }

    /// The controller `cntlid`.
    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        lock(&self.controllers).get(&cntlid).cloned()
    }

    /// Registers a new controller of `subsys` for a host, with a fresh id (1 to FFEFh,
    /// skipping ids in use).
    pub(crate) fn add_controller(
        &self,
        subsys: &Arc<Subsystem>,
        hostnqn: &str,
        hostid: [u8; 16],
        kato_ms: u32,
        now: Instant,
    ) -> Option<Arc<Controller>> {
        let mut ctrls = lock(&self.controllers);
        let mut next = lock(&self.next_cntlid);
        for _ in 0..0xffef {
            let id = *next;
            *next = if id >= 0xffef { 1 } else { id + 1 };
            if let std::collections::btree_map::Entry::Vacant(slot) = ctrls.entry(id) {
                let c = Arc::new(Controller::new(
                    id,
                    subsys.clone(),
                    hostnqn.into(),
                    hostid,
                    self.limits,
                    kato_ms,
                    now,
                ));
                slot.insert(c.clone());
                return Some(c);
            }
        }
        None
    }

    /// Deletes `ctrl` after a teardown: its queues are told to close, and it leaves the
    /// registry (its id may be reused).
    pub fn remove(&self, ctrl: &Controller, reason: TeardownReason) {
        ctrl.tear_down(reason);
        let mut ctrls = lock(&self.controllers);
        if ctrls
            .get(&ctrl.cntlid)
            .is_some_and(|c| std::ptr::eq(&**c, ctrl))
        {
            ctrls.remove(&ctrl.cntlid);
        }
    }

    /// Controllers whose keep alive timer expired at `now`: torn down and removed. Returns
    /// how many.
    pub fn reap_expired(&self, now: Instant) -> usize {
        let expired: Vec<_> = self
            .controllers()
            .into_iter()
            .filter(|c| c.keep_alive_expired(now))
            .collect();
        for c in &expired {
            tracing::info!(
                "controller {} of {} for {}: keep alive timeout ({} ms) expired",
                c.cntlid,
                c.subsys.nqn,
                c.hostnqn,
                c.kato_ms()
            );
            self.remove(c, TeardownReason::KeepAliveExpired);
        }
        expired.len()
    }

    /// Hours since the target started (SMART's power-on hours).
    pub fn power_on_hours(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_secs() / 3600
    }
}
