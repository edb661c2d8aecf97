//! Device memory (`ibv_alloc_dm`): memory of the device itself, which the application reaches
//! only by copying ([`DeviceMemory::copy_to`], [`DeviceMemory::copy_from`]) and which work
//! requests and remote peers reach through a zero-based region on it
//! ([`ProtectionDomain::reg_dm_mr`]).
//!
//! On a NIC this is on-chip memory (mlx5's MEMIC): small, and faster for the NIC than host
//! memory. softrdma's device is the library, so its memory is memory the library allocates
//! and nobody else maps: the application cannot touch it but through the copies, exactly the
//! contract of the verbs. What carries over from mlx5 is the shape: at most
//! [`MAX_DM_SIZE`] bytes per device in all, copies in whole 4-byte units at 4-byte offsets
//! (the hardware's limit, which programs written for it keep), and regions on it that are
//! zero-based (`IBV_ACCESS_ZERO_BASED`: SGEs and remote addresses are offsets into the
//! region).
//!
//! The memory lives as long as the last [`DeviceMemory`] handle or region on it (each holds
//! it), so a region can never reach freed memory; the C library adds the verbs' rule that
//! `ibv_free_dm` is `EBUSY` while regions exist.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use softrdma_proto::{MemoryFault, RegionMemory};

use crate::memory::{OwnedMemory, WordMemory};
use crate::{AccessFlags, Device, MemoryRegion, ProtectionDomain, RegMrError};

/// Device memory a device has in all (`ibv_device_attr_ex.max_dm_size`): mlx5's ConnectX-5
/// and later have 256 KiB.
pub const MAX_DM_SIZE: usize = 256 * 1024;
/// The largest start alignment of an allocation (`ibv_alloc_dm_attr.log_align_req`): a page.
pub const MAX_DM_LOG_ALIGN: u32 = 12;
/// Copies move whole units of this many bytes, at offsets that are multiples of it.
pub const DM_COPY_UNIT: usize = 4;

/// Allocating device memory failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AllocDmError {
    /// No bytes asked for, or more than the device has left of [`MAX_DM_SIZE`] (ibverbs:
    /// `ENOMEM`).
    #[error("cannot allocate {asked} bytes of device memory: {left} of {MAX_DM_SIZE} left")]
    NoSpace {
        /// Bytes asked for.
        asked: usize,
        /// Bytes the device has left.
        left: usize,
    },
    /// An alignment above [`MAX_DM_LOG_ALIGN`] (ibverbs: `EINVAL`).
    #[error("device memory is aligned to at most 2^{MAX_DM_LOG_ALIGN} bytes, not 2^{0}")]
    Alignment(u32),
}

/// A copy into or out of device memory was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DmCopyError {
    /// The offset or the length is not a multiple of [`DM_COPY_UNIT`] (ibverbs: `EINVAL`).
    #[error("device memory is copied in units of {DM_COPY_UNIT} bytes at offsets that are multiples of {DM_COPY_UNIT}: offset {offset}, length {len}")]
    Unaligned {
        /// Offset asked for.
        offset: usize,
        /// Length asked for.
        len: usize,
    },
    /// The range is not inside the allocation (ibverbs: `EFAULT`).
    #[error("range {offset}..+{len} outside the {dm_len}-byte device memory")]
    OutOfBounds {
        /// Offset asked for.
        offset: usize,
        /// Length asked for.
        len: usize,
        /// The allocation's length.
        dm_len: usize,
    },
}

/// The device's count of allocated bytes, given back when the memory is freed.
#[derive(Debug)]
struct Allocation {
    memory: OwnedMemory,
    device: Device,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.device
            .shared
            .dm_in_use
            .fetch_sub(self.memory_len(), Ordering::AcqRel);
    }
}

impl Allocation {
    fn memory_len(&self) -> usize {
        self.memory.len()
    }
}

/// An allocation of device memory (`ibv_dm`). Clones share it.
#[derive(Debug, Clone)]
pub struct DeviceMemory {
    alloc: Arc<Allocation>,
}

impl Device {
    /// Allocates `len` zeroed bytes of the device's memory, starting at a multiple of
    /// 2^`log_align` (`ibv_alloc_dm`).
    pub fn alloc_dm(&self, len: usize, log_align: u32) -> Result<DeviceMemory, AllocDmError> {
        if log_align > MAX_DM_LOG_ALIGN {
            return Err(AllocDmError::Alignment(log_align));
        }
        let in_use = &self.shared.dm_in_use;
        let taken = in_use.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            (len > 0 && len <= MAX_DM_SIZE - used).then_some(used + len)
        });
        let used = match taken {
            Ok(_) => len,
            Err(used) => {
                return Err(AllocDmError::NoSpace {
                    asked: len,
                    left: MAX_DM_SIZE - used,
                })
            }
        };
        // Page-aligned, which covers every alignment allowed.
        let Some(memory) = OwnedMemory::new(len) else {
            in_use.fetch_sub(used, Ordering::AcqRel);
            return Err(AllocDmError::NoSpace {
                asked: len,
                left: MAX_DM_SIZE - in_use.load(Ordering::Acquire),
            });
        };
        Ok(DeviceMemory {
            alloc: Arc::new(Allocation {
                memory,
                device: self.clone(),
            }),
        })
    }

    /// Bytes of device memory allocated now (of [`MAX_DM_SIZE`]).
    pub fn dm_in_use(&self) -> usize {
        self.shared.dm_in_use.load(Ordering::Acquire)
    }
}

impl DeviceMemory {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.alloc.memory.len()
    }

    /// Whether it is empty (never: an allocation has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), DmCopyError> {
        if offset % DM_COPY_UNIT != 0 || len % DM_COPY_UNIT != 0 {
            return Err(DmCopyError::Unaligned { offset, len });
        }
        if !offset.checked_add(len).is_some_and(|end| end <= self.len()) {
            return Err(DmCopyError::OutOfBounds {
                offset,
                len,
                dm_len: self.len(),
            });
        }
        Ok(())
    }

    /// Copies `data` into the memory at `offset` (`ibv_memcpy_to_dm`).
    pub fn copy_to(&self, offset: usize, data: &[u8]) -> Result<(), DmCopyError> {
        self.check(offset, data.len())?;
        // Memory the library owns cannot fault.
        let _ = self.alloc.memory.write(offset, data);
        Ok(())
    }

    /// Copies `buf.len()` bytes of the memory at `offset` into `buf` (`ibv_memcpy_from_dm`).
    pub fn copy_from(&self, offset: usize, buf: &mut [u8]) -> Result<(), DmCopyError> {
        self.check(offset, buf.len())?;
        let _ = self.alloc.memory.read(offset, buf);
        Ok(())
    }

    /// Whether `other` is a handle on the same allocation.
    pub fn same_as(&self, other: &DeviceMemory) -> bool {
        Arc::ptr_eq(&self.alloc, &other.alloc)
    }
}

impl ProtectionDomain {
    /// Registers `len` bytes of `dm` from `offset` as a zero-based region (`ibv_reg_dm_mr`
    /// with `IBV_ACCESS_ZERO_BASED`): its addresses, in SGEs and for remote peers, run from 0.
    /// The region holds the memory: it stays allocated while the region lives.
    pub fn reg_dm_mr(
        &self,
        dm: &DeviceMemory,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegMrError> {
        if !Arc::ptr_eq(&dm.alloc.device.shared, &self.device().shared) {
            return Err(RegMrError::InvalidRange("device memory of another device"));
        }
        if !offset.checked_add(len).is_some_and(|end| end <= dm.len()) {
            return Err(RegMrError::InvalidRange(
                "the range is not inside the device memory",
            ));
        }
        let view = DmView {
            alloc: dm.alloc.clone(),
            offset,
            len,
        };
        let ptr = dm.alloc.memory.as_ptr().wrapping_add(offset);
        self.register(Arc::new(view), 0, ptr, len, access)
    }
}

/// A region's view of device memory: `[offset, offset + len)` of the allocation.
#[derive(Debug)]
struct DmView {
    alloc: Arc<Allocation>,
    offset: usize,
    len: usize,
}

impl RegionMemory for DmView {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        self.alloc.memory.read(self.offset + offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemoryFault> {
        self.alloc.memory.write(self.offset + offset, src)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemoryFault> {
        self.alloc
            .memory
            .compare_swap(self.offset + offset, compare, swap)
    }
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemoryFault> {
        self.alloc.memory.fetch_add(self.offset + offset, add)
    }
    fn is_atomic_word(&self, offset: usize) -> bool {
        offset.checked_add(8).is_some_and(|end| end <= self.len)
            && self.alloc.memory.is_atomic_word(self.offset + offset)
    }
}

impl WordMemory for DmView {
    fn atomic_words(&self) -> std::ops::Range<usize> {
        // The allocation is whole words from a page boundary: the view's words are those at
        // addresses aligned to 8.
        let lo = ((8 - self.offset % 8) % 8).min(self.len);
        let hi = ((self.offset + self.len) & !7).saturating_sub(self.offset);
        lo..hi.max(lo)
    }
    fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        if !offset.checked_add(8).is_some_and(|end| end <= self.len) {
            return None;
        }
        self.alloc.memory.atomic_u64(self.offset + offset)
    }
}
