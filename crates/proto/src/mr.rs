//! Protection domains and memory regions as the engine sees them.
//!
//! The engine never touches memory through pointers. A registered region is a key, a virtual
//! address range, access rights, a protection domain, and a [`RegionMemory`] handle through
//! which bytes move. Every access — local SGEs and remote RETH/AtomicETH targets alike — is
//! checked here for key, PD, bounds and rights first, and only then handed to the region with
//! an in-bounds offset. How bytes are stored (a `Vec` in the simulator, application memory in
//! the verbs layer) is the region's business; so is making concurrent access sound.

use std::fmt;
use std::sync::Arc;

use crate::access::AccessFlags;
use crate::wr::Sge;

/// The bytes behind a memory region.
///
/// Offsets handed to these methods are always in bounds (`offset + len <= self.len()`); the
/// engine checks before it calls. Methods take `&self` because the application may use the
/// memory concurrently with the engine: implementations choose how to make that sound.
pub trait RegionMemory: Send + Sync {
    /// Length of the region in bytes.
    fn len(&self) -> usize;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]);
    /// Copies `src` into the region starting at `offset`.
    fn write(&self, offset: usize, src: &[u8]);
    /// Atomically compares the 8-byte word (host byte order, as RDMA NICs and rxe operate) at `offset` with `compare` and,
    /// if equal, replaces it with `swap`; returns the original value. `offset` is 8-aligned
    /// relative to the region's virtual address.
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64;
    /// Atomically adds `add` to the 8-byte word at `offset`; returns the original value.
    fn fetch_add(&self, offset: usize, add: u64) -> u64;
}

/// A protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdHandle(pub u32);

/// The engine's record of one registered memory region.
#[derive(Clone)]
pub struct MemoryRegion {
    /// Local key (equal to the remote key, as in rxe).
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Owning protection domain.
    pub pd: PdHandle,
    /// Virtual address of the first byte.
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// Granted rights.
    pub access: AccessFlags,
    /// The bytes.
    pub memory: Arc<dyn RegionMemory>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("pd", &self.pd)
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("length", &self.length)
            .field("access", &self.access)
            .finish()
    }
}

impl MemoryRegion {
    /// Offset of `[addr, addr + len)` inside the region, if it lies entirely inside.
    pub fn offset_of(&self, addr: u64, len: u64) -> Option<usize> {
        let off = addr.checked_sub(self.iova)?;
        let end = off.checked_add(len)?;
        if end > self.length {
            return None;
        }
        usize::try_from(off).ok()
    }
}

/// Why an access to registered memory was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AccessError {
    /// No region has this key.
    #[error("no memory region with key {0:#x}")]
    BadKey(u32),
    /// The region belongs to another protection domain.
    #[error("memory region belongs to another protection domain")]
    WrongPd,
    /// The range is not inside the region.
    #[error("range outside the memory region")]
    OutOfBounds,
    /// The region does not grant the needed right.
    #[error("memory region does not grant the access")]
    NoPermission,
    /// An atomic target is not 8-byte aligned.
    #[error("atomic target not 8-byte aligned")]
    Misaligned,
}

/// The most memory regions one engine holds at a time: keys carry a 24-bit index.
pub const MAX_MEMORY_REGIONS: usize = (1 << 24) - 1;

/// All memory regions of one engine, by key.
///
/// A key is `index << 8 | key_byte`, as on rxe: the index picks a slot (found without hashing:
/// this lookup sits on every data packet's path), the key byte is bumped each time the slot is
/// reused, so a key that outlived its region does not name the next region in that slot
/// (until 255 more reuses of the slot — the ibverbs key model).
#[derive(Default)]
pub struct MrTable {
    /// Slot 0 is never used, so no valid key is below 0x100.
    slots: Vec<MrSlot>,
    free: Vec<u32>,
}

#[derive(Default)]
struct MrSlot {
    key_byte: u8,
    region: Option<MemoryRegion>,
}

impl MrTable {
    /// Registers a region and returns its key (lkey = rkey), or `None` when
    /// [`MAX_MEMORY_REGIONS`] are registered.
    pub fn register(
        &mut self,
        pd: PdHandle,
        iova: u64,
        length: u64,
        access: AccessFlags,
        memory: Arc<dyn RegionMemory>,
    ) -> Option<u32> {
        if self.slots.is_empty() {
            self.slots.push(MrSlot::default());
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() <= MAX_MEMORY_REGIONS => {
                self.slots.push(MrSlot::default());
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        let slot = &mut self.slots[index as usize];
        // The first key byte is 0x02, like rxe's first MRs (0x2xx).
        slot.key_byte = if slot.key_byte == 0 {
            0x02
        } else {
            slot.key_byte.wrapping_add(1)
        };
        let key = (index << 8) | u32::from(slot.key_byte);
        slot.region = Some(MemoryRegion {
            lkey: key,
            rkey: key,
            pd,
            iova,
            length,
            access,
            memory,
        });
        Some(key)
    }

    /// Removes a region; `false` if the key was unknown.
    pub fn deregister(&mut self, key: u32) -> bool {
        if self.get(key).is_none() {
            return false;
        }
        self.slots[(key >> 8) as usize].region = None;
        self.free.push(key >> 8);
        true
    }

    /// The region with this key.
    #[inline]
    pub fn get(&self, key: u32) -> Option<&MemoryRegion> {
        self.slots
            .get((key >> 8) as usize)?
            .region
            .as_ref()
            .filter(|r| r.lkey == key)
    }

    /// Whether any region still belongs to `pd`.
    pub fn pd_in_use(&self, pd: PdHandle) -> bool {
        self.slots
            .iter()
            .filter_map(|s| s.region.as_ref())
            .any(|r| r.pd == pd)
    }

    /// Checks an access of `len` bytes at `addr` through `key` from protection domain `pd`
    /// needing `need`; returns the region and the offset into it.
    pub fn check(
        &self,
        pd: PdHandle,
        key: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(&MemoryRegion, usize), AccessError> {
        let mr = self.get(key).ok_or(AccessError::BadKey(key))?;
        if mr.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !mr.access.contains(need) {
            return Err(AccessError::NoPermission);
        }
        let off = mr.offset_of(addr, len).ok_or(AccessError::OutOfBounds)?;
        Ok((mr, off))
    }
}

impl MrTable {
    /// Checks every SGE of `sgl` for protection domain `pd` and access `need`.
    pub fn check_sgl(
        &self,
        pd: PdHandle,
        sgl: &[Sge],
        need: AccessFlags,
    ) -> Result<(), AccessError> {
        for sge in sgl {
            self.check(pd, sge.lkey, sge.addr, u64::from(sge.length), need)?;
        }
        Ok(())
    }

    /// Copies bytes out of the scatter/gather list `sgl`, starting `offset` bytes into it, to
    /// fill `dst`. Fails if an SGE is not accessible or the SGL is too short.
    pub fn gather(
        &self,
        pd: PdHandle,
        sgl: &[Sge],
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), AccessError> {
        self.walk(
            pd,
            sgl,
            offset,
            dst.len(),
            AccessFlags::empty(),
            |mr, mr_off, at, n| {
                mr.memory.read(mr_off, &mut dst[at..at + n]);
            },
        )
    }

    /// Copies `src` into the scatter/gather list `sgl`, starting `offset` bytes into it. The
    /// SGEs need local write access.
    pub fn scatter(
        &self,
        pd: PdHandle,
        sgl: &[Sge],
        offset: u64,
        src: &[u8],
    ) -> Result<(), AccessError> {
        self.walk(
            pd,
            sgl,
            offset,
            src.len(),
            AccessFlags::LOCAL_WRITE,
            |mr, mr_off, at, n| {
                mr.memory.write(mr_off, &src[at..at + n]);
            },
        )
    }

    /// Visits the pieces of `[offset, offset + len)` of an SGL: (region, offset in region,
    /// offset in the caller's buffer, length).
    fn walk(
        &self,
        pd: PdHandle,
        sgl: &[Sge],
        mut offset: u64,
        len: usize,
        need: AccessFlags,
        mut f: impl FnMut(&MemoryRegion, usize, usize, usize),
    ) -> Result<(), AccessError> {
        let mut done = 0usize;
        for sge in sgl {
            if done == len {
                break;
            }
            let sge_len = u64::from(sge.length);
            if offset >= sge_len {
                offset -= sge_len;
                continue;
            }
            let n = (sge_len - offset).min((len - done) as u64);
            let (mr, mr_off) = self.check(pd, sge.lkey, sge.addr + offset, n, need)?;
            let n = n as usize;
            f(mr, mr_off, done, n);
            done += n;
            offset = 0;
        }
        if done == len {
            Ok(())
        } else {
            Err(AccessError::OutOfBounds)
        }
    }
}

/// A simple region backed by a heap buffer behind a mutex: what the simulator and tests use.
pub struct VecMemory {
    bytes: std::sync::Mutex<Vec<u8>>,
    len: usize,
}

impl VecMemory {
    /// A zeroed region of `len` bytes.
    pub fn new(len: usize) -> VecMemory {
        VecMemory {
            bytes: std::sync::Mutex::new(vec![0; len]),
            len,
        }
    }

    /// A region holding `data`.
    pub fn from_vec(data: Vec<u8>) -> VecMemory {
        let len = data.len();
        VecMemory {
            bytes: std::sync::Mutex::new(data),
            len,
        }
    }

    /// A copy of the current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // A panic while holding the lock cannot leave bytes half-updated in a way that matters
        // more than the panic itself; keep going with the data.
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn word(bytes: &[u8], offset: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[offset..offset + 8]);
        u64::from_ne_bytes(w)
    }
}

impl RegionMemory for VecMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.lock()[offset..offset + dst.len()]);
    }
    fn write(&self, offset: usize, src: &[u8]) {
        self.lock()[offset..offset + src.len()].copy_from_slice(src);
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        let mut b = self.lock();
        let orig = Self::word(&b, offset);
        if orig == compare {
            b[offset..offset + 8].copy_from_slice(&swap.to_ne_bytes());
        }
        orig
    }
    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        let mut b = self.lock();
        let orig = Self::word(&b, offset);
        b[offset..offset + 8].copy_from_slice(&orig.wrapping_add(add).to_ne_bytes());
        orig
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_check() {
        let mut t = MrTable::default();
        let pd = PdHandle(1);
        let key = t
            .register(
                pd,
                0x1000,
                64,
                AccessFlags::REMOTE_READ,
                Arc::new(VecMemory::new(64)),
            )
            .unwrap();
        assert_eq!(
            t.check(pd, key, 0x1000, 64, AccessFlags::REMOTE_READ)
                .unwrap()
                .1,
            0
        );
        assert_eq!(
            t.check(pd, key, 0x1008, 8, AccessFlags::REMOTE_READ)
                .unwrap()
                .1,
            8
        );
        assert_eq!(
            t.check(pd, key, 0x1001, 64, AccessFlags::REMOTE_READ).err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(pd, key, 0xfff, 1, AccessFlags::REMOTE_READ).err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(pd, key, u64::MAX, 2, AccessFlags::REMOTE_READ)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(pd, key, 0x1000, 8, AccessFlags::REMOTE_WRITE).err(),
            Some(AccessError::NoPermission)
        );
        assert_eq!(
            t.check(PdHandle(2), key, 0x1000, 8, AccessFlags::REMOTE_READ)
                .err(),
            Some(AccessError::WrongPd)
        );
        assert_eq!(
            t.check(pd, key + 256, 0x1000, 8, AccessFlags::REMOTE_READ)
                .err(),
            Some(AccessError::BadKey(key + 256))
        );
        // Zero-length accesses at the end are in bounds.
        assert!(t
            .check(pd, key, 0x1040, 0, AccessFlags::REMOTE_READ)
            .is_ok());
    }

    #[test]
    fn test_stale_keys_do_not_alias() {
        let mut t = MrTable::default();
        let pd = PdHandle(1);
        let mem = || Arc::new(VecMemory::new(8)) as Arc<dyn RegionMemory>;
        let a = t
            .register(pd, 0, 8, AccessFlags::REMOTE_READ, mem())
            .unwrap();
        assert_eq!(a, 0x102, "first key like rxe's 0x2xx... at index 1");
        assert!(t.deregister(a));
        assert!(!t.deregister(a), "twice");
        // The slot is reused with the next key byte: the old key names nothing.
        let b = t
            .register(pd, 0, 8, AccessFlags::REMOTE_READ, mem())
            .unwrap();
        assert_eq!(b >> 8, a >> 8);
        assert_ne!(b, a);
        assert!(t.get(a).is_none());
        assert_eq!(
            t.check(pd, a, 0, 8, AccessFlags::REMOTE_READ).err(),
            Some(AccessError::BadKey(a))
        );
        assert!(t.get(b).is_some());
        // Keys below 0x100 and beyond the table name nothing.
        assert!(t.get(0x02).is_none() && t.get(0xffff_ff02).is_none());
    }

    #[test]
    fn test_vec_memory_atomics() {
        let m = VecMemory::new(16);
        assert_eq!(m.fetch_add(8, 5), 0);
        assert_eq!(m.compare_swap(8, 5, 9), 5);
        assert_eq!(m.compare_swap(8, 5, 1), 9);
        let mut w = [0u8; 8];
        m.read(8, &mut w);
        assert_eq!(u64::from_ne_bytes(w), 9);
    }
}
