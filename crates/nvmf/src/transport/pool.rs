//! Registered buffers for RDMA READ and WRITE data, reused by size class (powers of two from
//! 4 KiB) so a busy queue registers memory only while it warms up, and bounded per queue:
//! a command that would go past the budget waits for a buffer to come back.

use std::collections::BTreeMap;

use softrdma::{AccessFlags, MemoryRegion, ProtectionDomain, RegMrError};

/// Smallest buffer.
const MIN_CLASS: usize = 4096;
/// Free buffers kept per size class; more are deregistered.
const KEEP_PER_CLASS: usize = 32;

pub(crate) struct BufferPool {
    pd: ProtectionDomain,
    free: BTreeMap<usize, Vec<MemoryRegion>>,
    /// Bytes of buffers handed out.
    out: usize,
    budget: usize,
}

impl BufferPool {
    pub(crate) fn new(pd: ProtectionDomain, budget: usize) -> BufferPool {
        BufferPool {
            pd,
            free: BTreeMap::new(),
            out: 0,
            budget,
        }
    }

    fn class(len: usize) -> usize {
        len.max(MIN_CLASS).next_power_of_two()
    }

    /// A buffer of at least `len` bytes; `Ok(None)` while the budget is spent (one buffer
    /// is always allowed, however large, so no command waits forever).
    pub(crate) fn get(&mut self, len: usize) -> Result<Option<MemoryRegion>, RegMrError> {
        let class = BufferPool::class(len);
        if self.out != 0 && self.out + class > self.budget {
            return Ok(None);
        }
        let mr = match self.free.get_mut(&class).and_then(Vec::pop) {
            Some(mr) => mr,
            None => self.pd.reg_mr(class, AccessFlags::LOCAL_WRITE)?,
        };
        self.out += class;
        Ok(Some(mr))
    }

    /// Gives a buffer back.
    pub(crate) fn put(&mut self, mr: MemoryRegion) {
        let class = mr.len();
        self.out = self.out.saturating_sub(class);
        let list = self.free.entry(class).or_default();
        if list.len() < KEEP_PER_CLASS {
            list.push(mr);
        }
    }
}
