//! Subsystems, namespaces and the target's limits: the configuration a controller serves,
//! with the checks that refuse a configuration no host could use.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::Backend;
use crate::wire::fabrics::DISCOVERY_NQN;

/// Largest queue (entries) a host may ask for: Linux's `NVME_RDMA_MAX_QUEUE_SIZE`.
pub const MAX_QUEUE_SIZE: u16 = 128;
/// Entries of an admin queue at most: Linux's `NVME_AQ_DEPTH`.
pub const ADMIN_QUEUE_SIZE: u16 = 32;
/// Keep alive timeout of a discovery controller whose host gave none (nvmet's
/// `NVMET_DISC_KATO_MS`): a discovery host that vanishes is still cleaned up.
pub const DISCOVERY_KATO_MS: u32 = 120_000;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Block sizes offered: 512 and 4096 bytes.
    #[error("block size {0} is not 512 or 4096")]
    BlockSize(u64),
    /// A namespace's size is zero or not a whole number of blocks.
    #[error("namespace size {size} is not a positive multiple of the {block}-byte block")]
    Size {
        /// Bytes.
        size: u64,
        /// Block size.
        block: u64,
    },
    /// An NQN must be 1 to 223 bytes of ASCII.
    #[error("NQN {0:?} is not 1 to 223 ASCII bytes")]
    Nqn(String),
    /// Two subsystems with one NQN, or an NVM subsystem with the discovery NQN.
    #[error("NQN {0:?} is used twice")]
    DuplicateNqn(String),
}

/// A namespace: storage and how the host sees it.
#[derive(Debug)]
pub struct Namespace {
    /// Its id (1-based).
    pub nsid: u32,
    /// The blocks.
    pub backend: Arc<dyn Backend>,
    /// Block size, as a power of two (9 or 12).
    pub block_shift: u8,
    /// Globally unique id (NGUID; also the UUID descriptor).
    pub nguid: [u8; 16],
}

impl Namespace {
    /// A namespace over `backend` with `block_size`-byte blocks; its NGUID comes from
    /// `seed` (e.g. the subsystem NQN) and `nsid`, so it is the same on every run.
    pub fn new(
        nsid: u32,
        backend: Arc<dyn Backend>,
        block_size: u64,
        seed: &str,
    ) -> Result<Namespace, ConfigError> {
        let block_shift = match block_size {
            512 => 9,
            4096 => 12,
            other => return Err(ConfigError::BlockSize(other)),
        };
        let size = backend.size();
        if size == 0 || size % block_size != 0 {
            return Err(ConfigError::Size {
                size,
                block: block_size,
            });
        }
        Ok(Namespace {
            nsid,
            backend,
            block_shift,
            nguid: stable_id(&format!("{seed}/ns{nsid}")),
        })
    }

    /// Blocks in the namespace.
    pub fn blocks(&self) -> u64 {
        self.backend.size() >> self.block_shift
    }

    /// Bytes per block.
    pub fn block_size(&self) -> u64 {
        1 << self.block_shift
    }
}

/// 16 bytes derived from `text` (FNV-1a, twice with different bases), shaped as an RFC 4122
/// version 4 UUID: an identifier that stays the same for the same configuration.
pub(crate) fn stable_id(text: &str) -> [u8; 16] {
    let fnv = |basis: u64| {
        text.bytes().fold(basis, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    id[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_be_bytes());
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}

/// What a subsystem counts for its SMART log.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// Bytes read by hosts.
    pub bytes_read: AtomicU64,
    /// Bytes written by hosts.
    pub bytes_written: AtomicU64,
    /// Read commands completed.
    pub reads: AtomicU64,
    /// Write commands completed.
    pub writes: AtomicU64,
    /// Commands that failed on the media (backend errors).
    pub media_errors: AtomicU64,
    /// Controllers lost without a shutdown (keep-alive expiry, transport errors).
    pub unsafe_shutdowns: AtomicU64,
}

impl IoCounters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A subsystem: the discovery subsystem, or an NVM subsystem with namespaces.
#[derive(Debug)]
pub struct Subsystem {
    /// Its NQN.
    pub nqn: String,
    /// Serial number (Identify Controller).
    pub serial: String,
    /// Model number.
    pub model: String,
    /// Namespaces, by increasing nsid (none for discovery).
    pub namespaces: Vec<Arc<Namespace>>,
    /// Host NQNs allowed to connect (empty: any host).
    pub allowed_hosts: Vec<String>,
    /// Counters for the SMART log.
    pub counters: IoCounters,
}

impl Subsystem {
    /// An NVM subsystem.
    pub fn new(
        nqn: &str,
        namespaces: Vec<Arc<Namespace>>,
        allowed_hosts: Vec<String>,
    ) -> Result<Subsystem, ConfigError> {
        check_nqn(nqn)?;
        if nqn == DISCOVERY_NQN {
            return Err(ConfigError::DuplicateNqn(nqn.into()));
        }
        for h in &allowed_hosts {
            check_nqn(h)?;
        }
        let id = stable_id(nqn);
        Ok(Subsystem {
            nqn: nqn.into(),
            serial: id[..10].iter().map(|b| format!("{b:02x}")).collect(),
            model: "softrdma".into(),
            namespaces,
            allowed_hosts,
            counters: IoCounters::default(),
        })
    }

    pub(crate) fn discovery() -> Subsystem {
        Subsystem {
            nqn: DISCOVERY_NQN.into(),
            serial: "softrdma-discovery".into(),
            model: "softrdma".into(),
            namespaces: Vec::new(),
            allowed_hosts: Vec::new(),
            counters: IoCounters::default(),
        }
    }

    /// Whether this is the discovery subsystem.
    pub fn is_discovery(&self) -> bool {
        self.nqn == DISCOVERY_NQN
    }

    /// Whether `hostnqn` may connect.
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.allowed_hosts.is_empty() || self.allowed_hosts.iter().any(|h| h == hostnqn)
    }

    /// The namespace `nsid`, if active.
    pub fn namespace(&self, nsid: u32) -> Option<&Arc<Namespace>> {
        self.namespaces.iter().find(|n| n.nsid == nsid)
    }

    /// The largest nsid (Identify Controller's NN).
    pub fn max_nsid(&self) -> u32 {
        self.namespaces.iter().map(|n| n.nsid).max().unwrap_or(0)
    }
}

fn check_nqn(nqn: &str) -> Result<(), ConfigError> {
    if nqn.is_empty() || nqn.len() > 223 || !nqn.is_ascii() || nqn.contains('\0') {
        return Err(ConfigError::Nqn(nqn.into()));
    }
    Ok(())
}

/// The target's limits, as it advertises them.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// I/O queues a controller may have.
    pub max_io_queues: u16,
    /// In-capsule data an I/O command may carry, bytes (a multiple of 16).
    pub in_capsule_data: u32,
    /// MDTS: a command moves at most 4 KiB << mdts.
    pub mdts: u8,
    /// Answer a host that asks for its key's invalidation with SEND with Invalidate (as
    /// nvmet-rdma does); without it the host invalidates the key itself.
    pub remote_invalidate: bool,
}

impl Default for Limits {
    /// 64 I/O queues, 8 KiB of in-capsule data (Linux's host sends writes up to that size in
    /// the capsule), 1 MiB per command (nvmet-rdma's MDTS).
    fn default() -> Limits {
        Limits {
            max_io_queues: 64,
            in_capsule_data: 8192,
            mdts: 8,
            remote_invalidate: true,
        }
    }
}

impl Limits {
    /// The most bytes one command may move.
    pub fn max_transfer(&self) -> u32 {
        4096u32 << self.mdts.min(12)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
