//! The host's handle on a remote controller (admin queue, Connect, enable, Identify,
//! features, logs, keep alive, shutdown) and its I/O queues (Read, Write, Flush, Write
//! Zeroes, Dataset Management).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::config::HostConfig;
use super::error::HostError;
use super::queue::{Completion, Data, HostQueue};
use crate::controller::lock;
use crate::wire::fabrics::{
    property, Connect, ConnectData, Property, CC_ENABLE_NVM, CC_SHN_NORMAL, CNTLID_DYNAMIC,
    CONNECT_DATA_LEN, CSTS_CFS, CSTS_RDY, CSTS_SHST_COMPLETE, CSTS_SHST_MASK, DISCOVERY_NQN,
};
use crate::wire::identify::{
    cns, parse_ns_list, IdentifyController, IdentifyNamespace, IDENTIFY_LEN,
};
use crate::wire::log::{lid, DiscoveryLog, DISCOVERY_RECORD_LEN};
use crate::wire::sgl::SglDescriptor;
use crate::wire::sqe::{admin, io, Sqe};

/// Entries of the admin queue (Linux's `NVME_AQ_DEPTH`).
const ADMIN_ENTRIES: u16 = 32;

/// A namespace as Identify Namespace describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Its id.
    pub nsid: u32,
    /// Blocks.
    pub blocks: u64,
    /// Bytes per block.
    pub block_size: u64,
    /// The raw structure.
    pub identify: IdentifyNamespace,
}

/// The host's handle on a remote controller: its admin queue (shared with the keep alive
/// thread) and what Identify said.
pub struct RemoteController {
    config: HostConfig,
    admin: Arc<Mutex<HostQueue>>,
    /// The controller id.
    pub cntlid: u16,
    /// Controller capabilities (CAP).
    pub cap: u64,
    /// Version (VS).
    pub version: u32,
    /// Identify Controller.
    pub identify: IdentifyController,
    /// I/O queues granted (0 for a discovery controller).
    pub io_queues: u16,
    subnqn: String,
    keep_alive: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl std::fmt::Debug for RemoteController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteController")
            .field("cntlid", &self.cntlid)
            .field("subnqn", &self.subnqn)
            .finish()
    }
}

fn prop_get(q: &mut HostQueue, offset: u32, eight_bytes: bool) -> Result<u64, HostError> {
    let p = Property {
        eight_bytes,
        offset,
        value: 0,
    };
    let c = q.execute("Property Get", p.to_sqe(false, 0), Data::None)?;
    Ok(c.cqe.result64())
}

fn prop_set_cc(q: &mut HostQueue, cc: u32) -> Result<(), HostError> {
    let p = Property {
        eight_bytes: false,
        offset: property::CC,
        value: u64::from(cc),
    };
    q.execute("Property Set", p.to_sqe(true, 0), Data::None)
        .map(|_| ())
}

/// Sends the Fabrics Connect for queue `qid` (of `entries`) on `q`; returns the controller
/// id the response names.
fn fabrics_connect(
    q: &mut HostQueue,
    config: &HostConfig,
    subnqn: &str,
    cntlid: u16,
    kato_ms: u32,
) -> Result<u16, HostError> {
    let c = Connect {
        recfmt: 0,
        qid: q.qid(),
        sqsize: q.entries() - 1,
        cattr: 0,
        kato: kato_ms,
    };
    let d = ConnectData {
        hostid: config.hostid,
        cntlid,
        subnqn: subnqn.into(),
        hostnqn: config.hostnqn.clone(),
    };
    let data = d.emit();
    debug_assert_eq!(data.len(), CONNECT_DATA_LEN);
    let done = q.execute(
        "Connect",
        c.to_sqe(0, SglDescriptor::NONE),
        Data::Out(&data),
    )?;
    Ok(done.cqe.dw0 as u16)
}

impl RemoteController {
    /// Connects to subsystem `subnqn` ([`DISCOVERY_NQN`] for the discovery controller):
    /// admin queue, Connect, CC.EN and CSTS.RDY, Identify Controller; for an NVM subsystem
    /// also Set Features Number of Queues (`io_queues` asked).
    pub fn connect(
        config: &HostConfig,
        subnqn: &str,
        io_queues: u16,
    ) -> Result<RemoteController, HostError> {
        let discovery = subnqn == DISCOVERY_NQN;
        let mut q = HostQueue::connect(config, 0, ADMIN_ENTRIES, 0)?;
        let kato = config.kato_ms;
        let cntlid = fabrics_connect(&mut q, config, subnqn, CNTLID_DYNAMIC, kato)?;
        let cap = prop_get(&mut q, property::CAP, true)?;
        let version = prop_get(&mut q, property::VS, false)? as u32;
        prop_set_cc(&mut q, CC_ENABLE_NVM)?;
        // CAP.TO: how long enabling may take, in 500 ms units.
        let deadline = Instant::now() + Duration::from_millis(500 * ((cap >> 24) & 0xff).max(1));
        loop {
            let csts = prop_get(&mut q, property::CSTS, false)? as u32;
            if csts & CSTS_CFS != 0 {
                return Err(HostError::Transport("controller fatal status".into()));
            }
            if csts & CSTS_RDY != 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(HostError::Timeout("CSTS.RDY"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let id = q.execute(
            "Identify Controller",
            identify_sqe(cns::CONTROLLER, 0),
            Data::In(IDENTIFY_LEN),
        )?;
        let identify = IdentifyController::parse(&id.data)?;
        let granted = if discovery {
            0
        } else {
            let mut sqe = Sqe::new(admin::SET_FEATURES, 0, SglDescriptor::NONE);
            let n = u32::from(io_queues.max(1) - 1);
            sqe.cdw[0] = 0x07;
            sqe.cdw[1] = n | n << 16;
            let c = q.execute("Set Features (Number of Queues)", sqe, Data::None)?;
            ((c.cqe.dw0 & 0xffff).min(c.cqe.dw0 >> 16) + 1) as u16
        };
        let admin = Arc::new(Mutex::new(q));
        let keep_alive = (kato != 0).then(|| keep_alive_thread(admin.clone(), kato));
        Ok(RemoteController {
            config: config.clone(),
            admin,
            cntlid,
            cap,
            version,
            identify,
            io_queues: granted,
            subnqn: subnqn.into(),
            keep_alive,
        })
    }

    /// Runs an admin command.
    pub fn admin(
        &self,
        command: &'static str,
        sqe: Sqe,
        data: Data<'_>,
    ) -> Result<Completion, HostError> {
        lock(&self.admin).execute(command, sqe, data)
    }

    /// Submits an Asynchronous Event Request and leaves it outstanding (the controller
    /// completes it when an event occurs, as Linux's host keeps one); returns its cid.
    pub fn async_event_request(&self) -> Result<u16, HostError> {
        let sqe = Sqe::new(admin::ASYNC_EVENT, 0, SglDescriptor::NONE);
        lock(&self.admin).submit(sqe, Data::None)
    }

    /// Reads a property.
    pub fn property(&self, offset: u32, eight_bytes: bool) -> Result<u64, HostError> {
        prop_get(&mut lock(&self.admin), offset, eight_bytes)
    }

    /// Reads `len` bytes of log page `log_id` from byte `offset`.
    pub fn log_page(
        &self,
        log_id: u8,
        nsid: u32,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, HostError> {
        if len == 0 || len % 4 != 0 {
            return Err(HostError::Invalid(format!("a log of {len} bytes")));
        }
        let numd = (len / 4 - 1) as u32;
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, 0, SglDescriptor::NONE);
        sqe.nsid = nsid;
        sqe.cdw[0] = u32::from(log_id) | (numd & 0xffff) << 16;
        sqe.cdw[1] = numd >> 16;
        sqe.cdw[2] = offset as u32;
        sqe.cdw[3] = (offset >> 32) as u32;
        Ok(self.admin("Get Log Page", sqe, Data::In(len))?.data)
    }

    /// The discovery log: the header first, then the whole log, as nvme-cli reads it.
    pub fn discovery_log(&self) -> Result<DiscoveryLog, HostError> {
        let header = self.log_page(lid::DISCOVERY, 0, 0, DISCOVERY_RECORD_LEN)?;
        let (_, numrec) = DiscoveryLog::parse_header(&header)?;
        if numrec > 1024 {
            return Err(HostError::Invalid(format!("{numrec} discovery records")));
        }
        let len = DISCOVERY_RECORD_LEN * (1 + numrec as usize);
        let all = self.log_page(lid::DISCOVERY, 0, 0, len)?;
        Ok(DiscoveryLog::parse(&all)?)
    }

    /// The active namespaces.
    pub fn namespaces(&self) -> Result<Vec<u32>, HostError> {
        let c = self.admin(
            "Identify (active namespaces)",
            identify_sqe(cns::ACTIVE_NS_LIST, 0),
            Data::In(IDENTIFY_LEN),
        )?;
        Ok(parse_ns_list(&c.data))
    }

    /// Identify Namespace `nsid`.
    pub fn namespace(&self, nsid: u32) -> Result<NamespaceInfo, HostError> {
        let c = self.admin(
            "Identify Namespace",
            identify_sqe(cns::NAMESPACE, nsid),
            Data::In(IDENTIFY_LEN),
        )?;
        let identify = IdentifyNamespace::parse(&c.data)?;
        Ok(NamespaceInfo {
            nsid,
            blocks: identify.nsze,
            block_size: identify.block_size(),
            identify,
        })
    }

    /// Connects I/O queue `qid` (1 to the granted number).
    pub fn io_queue(&self, qid: u16) -> Result<IoQueue, HostError> {
        if qid == 0 || qid > self.io_queues {
            return Err(HostError::Invalid(format!(
                "queue {qid} of {} granted",
                self.io_queues
            )));
        }
        let mqes = (self.cap & 0xffff) as u16;
        let maxcmd = if self.identify.maxcmd == 0 {
            u16::MAX
        } else {
            self.identify.maxcmd
        };
        let entries = self
            .config
            .queue_size
            .min(mqes.saturating_add(1))
            .min(maxcmd)
            .max(2);
        let in_capsule = if self.config.in_capsule {
            self.identify.in_capsule_len().min(64 << 10)
        } else {
            0
        };
        let mut q = HostQueue::connect(&self.config, qid, entries, in_capsule)?;
        fabrics_connect(&mut q, &self.config, &self.subnqn, self.cntlid, 0)?;
        Ok(IoQueue {
            q,
            max_transfer: self.identify.max_transfer().unwrap_or(1 << 20).min(8 << 20) as usize,
        })
    }

    /// Shuts the controller down (CC.SHN, until CSTS.SHST says complete) and disconnects.
    pub fn shutdown(mut self) -> Result<(), HostError> {
        self.stop_keep_alive();
        let mut q = lock(&self.admin);
        prop_set_cc(&mut q, CC_ENABLE_NVM | CC_SHN_NORMAL)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while prop_get(&mut q, property::CSTS, false)? as u32 & CSTS_SHST_MASK != CSTS_SHST_COMPLETE
        {
            if Instant::now() > deadline {
                return Err(HostError::Timeout("CSTS.SHST"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        q.disconnect();
        Ok(())
    }

    /// Stops sending Keep Alive: unless other commands come, the controller's keep alive
    /// timeout expires and the target ends it (what a host that hangs looks like).
    pub fn stop_keep_alive(&mut self) {
        if let Some((stop, t)) = self.keep_alive.take() {
            stop.store(true, Ordering::Release);
            let _ = t.join();
        }
    }
}

impl Drop for RemoteController {
    fn drop(&mut self) {
        self.stop_keep_alive();
    }
}

fn identify_sqe(cns_value: u8, nsid: u32) -> Sqe {
    let mut sqe = Sqe::new(admin::IDENTIFY, 0, SglDescriptor::NONE);
    sqe.nsid = nsid;
    sqe.cdw[0] = u32::from(cns_value);
    sqe
}

/// Sends Keep Alive every `kato / 2` until stopped.
fn keep_alive_thread(
    admin: Arc<Mutex<HostQueue>>,
    kato_ms: u32,
) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let period = Duration::from_millis(u64::from(kato_ms / 2).max(100));
    let thread = std::thread::spawn(move || {
        let mut next = Instant::now() + period;
        while !flag.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20));
            if Instant::now() < next {
                continue;
            }
            next = Instant::now() + period;
            let sqe = Sqe::new(admin::KEEP_ALIVE, 0, SglDescriptor::NONE);
            if let Err(e) = lock(&admin).execute("Keep Alive", sqe, Data::None) {
                tracing::warn!("keep alive: {e}");
                return;
            }
        }
    });
    (stop, thread)
}

/// An I/O queue.
#[derive(Debug)]
pub struct IoQueue {
    q: HostQueue,
    max_transfer: usize,
}

impl IoQueue {
    /// The queue underneath (for pipelined submissions).
    pub fn queue(&mut self) -> &mut HostQueue {
        &mut self.q
    }

    /// The most bytes one command moves (MDTS).
    pub fn max_transfer(&self) -> usize {
        self.max_transfer
    }

    /// A Read or Write command of `nlb` blocks at `slba`.
    pub fn rw_sqe(opcode: u8, nsid: u32, slba: u64, nlb: u32) -> Sqe {
        let mut sqe = Sqe::new(opcode, 0, SglDescriptor::NONE);
        sqe.nsid = nsid;
        sqe.cdw[0] = slba as u32;
        sqe.cdw[1] = (slba >> 32) as u32;
        sqe.cdw[2] = nlb.saturating_sub(1) & 0xffff;
        sqe
    }

    /// Reads `blocks` blocks of `ns` from `slba` (split at MDTS).
    pub fn read(
        &mut self,
        ns: &NamespaceInfo,
        slba: u64,
        blocks: u64,
    ) -> Result<Vec<u8>, HostError> {
        let per = self.blocks_per_command(ns);
        let mut out = Vec::with_capacity((blocks * ns.block_size) as usize);
        let mut lba = slba;
        while lba < slba + blocks {
            let n = per.min(slba + blocks - lba);
            let len = (n * ns.block_size) as usize;
            let sqe = IoQueue::rw_sqe(io::READ, ns.nsid, lba, n as u32);
            out.extend(self.q.execute("Read", sqe, Data::In(len))?.data);
            lba += n;
        }
        Ok(out)
    }

    /// Writes `data` (whole blocks) to `ns` from `slba` (split at MDTS).
    pub fn write(&mut self, ns: &NamespaceInfo, slba: u64, data: &[u8]) -> Result<(), HostError> {
        if data.len() as u64 % ns.block_size != 0 {
            return Err(HostError::Invalid(format!(
                "{} bytes is not a whole number of {}-byte blocks",
                data.len(),
                ns.block_size
            )));
        }
        let per = self.blocks_per_command(ns);
        for (i, chunk) in data.chunks((per * ns.block_size) as usize).enumerate() {
            let lba = slba + i as u64 * per;
            let n = chunk.len() as u64 / ns.block_size;
            let sqe = IoQueue::rw_sqe(io::WRITE, ns.nsid, lba, n as u32);
            self.q.execute("Write", sqe, Data::Out(chunk))?;
        }
        Ok(())
    }

    /// Flushes `nsid` (FFFFFFFFh: every namespace).
    pub fn flush(&mut self, nsid: u32) -> Result<(), HostError> {
        let mut sqe = Sqe::new(io::FLUSH, 0, SglDescriptor::NONE);
        sqe.nsid = nsid;
        self.q.execute("Flush", sqe, Data::None).map(|_| ())
    }

    /// Write Zeroes over `nlb` blocks (at most 65536) at `slba`; `deallocate` lets the
    /// target drop them.
    pub fn write_zeroes(
        &mut self,
        nsid: u32,
        slba: u64,
        nlb: u32,
        deallocate: bool,
    ) -> Result<(), HostError> {
        let mut sqe = IoQueue::rw_sqe(io::WRITE_ZEROES, nsid, slba, nlb);
        if deallocate {
            sqe.cdw[2] |= 1 << 25;
        }
        self.q.execute("Write Zeroes", sqe, Data::None).map(|_| ())
    }

    /// Dataset Management, deallocate: each `(slba, nlb)` range.
    pub fn deallocate(&mut self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        if ranges.is_empty() || ranges.len() > 256 {
            return Err(HostError::Invalid(format!("{} ranges", ranges.len())));
        }
        let mut list = Vec::with_capacity(16 * ranges.len());
        for &(slba, nlb) in ranges {
            list.extend_from_slice(&0u32.to_le_bytes());
            list.extend_from_slice(&nlb.to_le_bytes());
            list.extend_from_slice(&slba.to_le_bytes());
        }
        let mut sqe = Sqe::new(io::DSM, 0, SglDescriptor::NONE);
        sqe.nsid = nsid;
        sqe.cdw[0] = ranges.len() as u32 - 1;
        sqe.cdw[1] = 1 << 2;
        self.q
            .execute("Dataset Management", sqe, Data::Out(&list))
            .map(|_| ())
    }

    fn blocks_per_command(&self, ns: &NamespaceInfo) -> u64 {
        (self.max_transfer as u64 / ns.block_size).clamp(1, 65536)
    }

    /// Disconnects the queue.
    pub fn disconnect(self) {
        self.q.disconnect();
    }
}
