//! rdma_cm over a [`LocalFabric`]: rdma_cm finds the device of an address it binds or resolves
//! from, so on an in-process network each address needs a device there, with its connection
//! manager, before a program names it. [`FabricHosts`] opens them on first use.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use softrdma::{Device, DeviceConfig, FaultConfig, LocalFabric};

use crate::error::CmError;
use crate::service::CmService;

/// Devices on one [`LocalFabric`], one per address, each with its connection manager
/// running, opened when an address is first named and kept while the set lives. Every device
/// injects `faults`, drawn from a seed of its own (the given seed mixed with its address), so
/// a run's faults are the same each time the same addresses are named.
pub struct FabricHosts {
    fabric: LocalFabric,
    faults: FaultConfig,
    hosts: Mutex<HashMap<IpAddr, (Device, CmService)>>,
}

impl FabricHosts {
    /// Faults that cost rdma_cm no waiting: 2 % duplication and 5 % reordering, no loss (a
    /// lost MAD waits for rdma_cm's retransmission timeout, 2 × packet life time + CM
    /// response timeout = 6.3 s, as on Linux).
    pub const NO_LOSS: FaultConfig = FaultConfig {
        duplicate: 0.02,
        reorder: 0.05,
        ..FaultConfig::NONE
    };

    /// Hosts on `fabric`, each device injecting `faults`.
    pub fn new(fabric: &LocalFabric, faults: FaultConfig) -> FabricHosts {
        FabricHosts {
            fabric: fabric.clone(),
            faults,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    /// The fabric.
    pub fn fabric(&self) -> &LocalFabric {
        &self.fabric
    }

    /// The device at `ip`, opened with its connection manager if it is the first time. Fails
    /// when the device cannot open, or when rdma_cm already runs at `ip` on another device
    /// (one rdma_cm opened on a UDP socket before the address was first named here).
    pub fn host(&self, ip: IpAddr) -> Result<Device, CmError> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((device, _)) = hosts.get(&ip) {
            return Ok(device.clone());
        }
        let seed = ip
            .to_string()
            .bytes()
            .fold(self.faults.seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        let faults = FaultConfig {
            seed,
            ..self.faults
        };
        let device = Device::open(DeviceConfig::new(ip).fabric(&self.fabric).faults(faults))
            .map_err(CmError::Device)?;
        let cm = CmService::start(&device)?;
        if !cm.runs_on(&device) {
            // rdma_cm would go on using that device, off the fabric.
            return Err(CmError::Setup(format!(
                "{ip} already has a connection manager on a device that is not on the fabric"
            )));
        }
        hosts.insert(ip, (device.clone(), cm));
        Ok(device)
    }
}

impl std::fmt::Debug for FabricHosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("FabricHosts")
            .field("fabric", &self.fabric)
            .field("hosts", &hosts.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_rdma_cm_already_serves_off_the_fabric_is_refused() {
        // rdma_cm's own device (a UDP socket) at the address first.
        let ip: IpAddr = "127.0.62.1".parse().unwrap();
        let udp = Device::open(DeviceConfig::new(ip)).unwrap();
        let _cm = CmService::start(&udp).unwrap();
        let hosts = FabricHosts::new(&LocalFabric::new(), FaultConfig::NONE);
        assert!(matches!(hosts.host(ip), Err(CmError::Setup(_))));
        // Another address is hosted, once.
        let other: IpAddr = "127.0.62.2".parse().unwrap();
        let a = hosts.host(other).unwrap();
        let b = hosts.host(other).unwrap();
        assert_eq!(a.name(), b.name());
        assert_eq!(a.ip(), other);
    }
}
