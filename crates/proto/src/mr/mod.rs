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
use crate::mw::MemoryWindow;
use crate::wr::Sge;

mod windows;

pub use crate::pd::PdHandle;

/// The bytes behind a memory region.
///
/// Offsets handed to these methods are always in bounds (`offset + len <= self.len()`); the
/// engine checks before it calls. Methods take `&self` because the application may use the
/// memory concurrently with the engine: implementations choose how to make that sound.
///
/// Every access may fail with [`MemoryFault`]: memory the application registered can be
/// unmapped or protected while it is registered (softrdma pins nothing), and the engine then
/// completes or NAKs the operation with the access error hardware gives for memory it cannot
/// reach, rather than the process dying. A copy that fails may have moved some bytes: as on
/// hardware, the contents of a buffer whose operation failed are undefined.
pub trait RegionMemory: Send + Sync {
    /// Length of the region in bytes.
    fn len(&self) -> usize;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemoryFault>;
    /// Copies `src` into the region starting at `offset`.
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemoryFault>;
    /// Copies like [`read`](Self::read) and continues the CRC-32 `crc` (zlib's convention:
    /// see `softrdma_wire::crc32_update`) over the bytes copied: the engine gathers a payload
    /// and computes its ICRC in one pass. The default copies, then hashes the copy;
    /// implementations that can do both as the bytes go by override it.
    fn read_crc(&self, offset: usize, dst: &mut [u8], crc: u32) -> Result<u32, MemoryFault> {
        self.read(offset, dst)?;
        Ok(softrdma_wire::crc32_update(crc, dst))
    }
    /// Continues the CRC-32 `crc` over the `len` bytes at `offset` without copying them
    /// anywhere: how the engine checks a payload the network placed straight into the region
    /// (see `crate::placement`). The default reads them in small pieces and hashes those.
    fn crc32(&self, offset: usize, len: usize, mut crc: u32) -> Result<u32, MemoryFault> {
        let mut buf = [0u8; 512];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(buf.len());
            self.read(offset + at, &mut buf[..n])?;
            crc = softrdma_wire::crc32_update(crc, &buf[..n]);
            at += n;
        }
        Ok(crc)
    }
    /// The address of the bytes `[offset, offset + len)`, for the network to receive a
    /// payload straight into them (direct placement, `crate::placement`): memory that an
    /// outside writer (the kernel's `recvmsg`) may fill while the application accesses it
    /// only as the implementation's soundness model allows. `None` (the default): never
    /// placed into directly; the engine copies into it with [`write`](Self::write).
    fn placement_address(&self, offset: usize, len: usize) -> Option<std::ptr::NonNull<u8>> {
        let _ = (offset, len);
        None
    }
    /// Atomically compares the 8-byte word (host byte order, as RDMA NICs and rxe operate) at
    /// `offset` with `compare` and, if equal, replaces it with `swap`; returns the original
    /// value. `offset` is 8-aligned relative to the region's virtual address.
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemoryFault>;
    /// Atomically adds `add` to the 8-byte word at `offset`; returns the original value.
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemoryFault>;
    /// Whether the 8 bytes at `offset` are one naturally aligned word of the memory behind
    /// the region, the only target an atomic can update as one (the engine asks before
    /// [`compare_swap`](Self::compare_swap), [`fetch_add`](Self::fetch_add) or an ATOMIC_WRITE).
    /// A virtual address aligned to 8 need not be: a zero-based region or one registered at an
    /// arbitrary iova maps it to any host address, and rxe checks the host address too
    /// (misaligned: NAK Invalid Request). The default suits memory whose first byte is
    /// aligned.
    fn is_atomic_word(&self, offset: usize) -> bool {
        offset % 8 == 0 && offset.checked_add(8).is_some_and(|end| end <= self.len())
    }
}

/// The memory behind a region could not be accessed: the application unmapped it, or
/// protected it against the access, while it was registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("the memory behind the region is not accessible (unmapped or protected)")]
pub struct MemoryFault;

/// The engine's record of one registered memory region.
///
/// An entry of the key table [`MrTable`], as a NIC's memory key table entry; the
/// application's handle is `softrdma::MemoryRegion`.
#[derive(Clone)]
pub struct MrEntry {
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

impl fmt::Debug for MrEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrEntry")
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("pd", &self.pd)
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("length", &self.length)
            .field("access", &self.access)
            .finish()
    }
}

impl MrEntry {
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
    /// A type 2 memory window used through a QP other than the one that bound it.
    #[error("memory window bound to another queue pair")]
    WrongQp,
    /// The checks passed, but the memory behind the region could not be reached.
    #[error(transparent)]
    Fault(#[from] MemoryFault),
}

/// The most memory regions one engine holds at a time: keys carry a 24-bit index, and index 0
/// is never handed out (so no valid key is below 0x100).
pub const MAX_MEMORY_REGIONS: usize = (1 << 24) - 1;

/// All memory regions of one engine, by key.
///
/// A key is `index << 8 | key_byte`, the layout rxe uses. Since RoCE has no authentication, a
/// region's rkey is all that stands between any host able to send UDP to port 4791 and the
/// memory, so neither part is predictable:
/// - the *key byte* is drawn at random for every registration (as rxe does), and differs from
///   the slot's previous key byte, so the key of a deregistered region does not name the next
///   region in its slot (an older one may, with odds 1/256: the ibverbs key model);
/// - the *index* is the region's slot number passed through a keyed permutation of the 24-bit
///   index space (a four-round Feistel network), so keys do not count up either: lookups stay
///   a vector index (this sits on every data packet's path), undone by the inverse
///   permutation.
///
/// Both come from a generator seeded by [`MrTable::with_key_seed`] (the engine passes
/// `EngineConfig::key_seed`): the engine stays deterministic for the simulator, and the verbs
/// layer seeds it from the operating system's random source.
///
/// **Odds of guessing a live rkey.** With `L` regions registered, a key guessed without
/// knowledge of the seed names one of them with probability at most `L / 2^32` (a random
/// index names a slot in use with odds `L / 2^24`, and then the key byte matches with odds
/// 1/256); knowing valid keys of other regions helps little, since the permutation hides how
/// slots map to indices (it is a scrambler, not a cipher: it is not meant to withstand
/// cryptanalysis from many known keys). Each wrong guess on a connected QP costs the prober
/// that connection — a remote access NAK moves the responder's QP to the error state — and
/// is counted (`Stats::naks_sent`, kind `remote_access`), so probing shows.
pub struct MrTable {
    /// By slot number; the slot whose index would be 0 is never used.
    pub(crate) slots: Vec<MrSlot>,
    free: Vec<u32>,
    keys: KeyGen,
}

impl Default for MrTable {
    /// A table keyed with seed 0 (tests; see [`MrTable::with_key_seed`]).
    fn default() -> MrTable {
        MrTable::with_key_seed(0)
    }
}

#[derive(Default)]
pub(crate) struct MrSlot {
    pub(crate) key_byte: u8,
    pub(crate) object: Option<KeyObject>,
}

/// What a key names: regions and windows share one key space, as their rkeys travel in the
/// same RETH field and must never collide.
pub(crate) enum KeyObject {
    Region(MrEntry),
    Window(MemoryWindow),
}

/// Bits of the index part of a key.
const INDEX_BITS: u32 = 24;
const HALF_BITS: u32 = INDEX_BITS / 2;
const HALF_MASK: u32 = (1 << HALF_BITS) - 1;

/// Where key bytes and the index permutation come from: splitmix64 over a seed.
struct KeyGen {
    state: u64,
    round_keys: [u32; 4],
}

impl KeyGen {
    fn new(seed: u64) -> KeyGen {
        let mut g = KeyGen {
            state: seed,
            round_keys: [0; 4],
        };
        for k in 0..4 {
            g.round_keys[k] = g.next() as u32;
        }
        g
    }

    /// splitmix64: a full-period generator whose outputs pass statistical tests.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn round(half: u32, key: u32) -> u32 {
        ((half ^ key).wrapping_mul(0x9e37_79b1).rotate_left(7) ^ key) & HALF_MASK
    }

    /// The index of slot `slot` (a bijection of `0..2^24`).
    fn index_of(&self, slot: u32) -> u32 {
        let (mut l, mut r) = (slot >> HALF_BITS & HALF_MASK, slot & HALF_MASK);
        for &k in &self.round_keys {
            (l, r) = (r, l ^ Self::round(r, k));
        }
        l << HALF_BITS | r
    }

    /// The slot whose index is `index` (the inverse of [`KeyGen::index_of`]).
    fn slot_of(&self, index: u32) -> u32 {
        let (mut l, mut r) = (index >> HALF_BITS & HALF_MASK, index & HALF_MASK);
        for &k in self.round_keys.iter().rev() {
            (l, r) = (r ^ Self::round(l, k), l);
        }
        l << HALF_BITS | r
    }
}

impl MrTable {
    /// An empty table whose keys come from `seed` (see the type's docs).
    pub fn with_key_seed(seed: u64) -> MrTable {
        MrTable {
            slots: Vec::new(),
            free: Vec::new(),
            keys: KeyGen::new(seed),
        }
    }

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
        self.insert(|key| {
            KeyObject::Region(MrEntry {
                lkey: key,
                rkey: key,
                pd,
                iova,
                length,
                access,
                memory,
            })
        })
    }

    /// Gives the region `key` a new protection domain, range, rights and memory, keeping its
    /// key (ibverbs `ibv_rereg_mr`, where rxe and mlx5 keep the keys: programs and
    /// rdma-core's tests go on using the ones they exchanged); `false` if the key names no
    /// region. The old memory is never touched again once this returns.
    pub fn reregister(
        &mut self,
        key: u32,
        pd: PdHandle,
        iova: u64,
        length: u64,
        access: AccessFlags,
        memory: Arc<dyn RegionMemory>,
    ) -> bool {
        let slot = self.slot(key);
        match self.slots.get_mut(slot).and_then(|s| s.object.as_mut()) {
            Some(KeyObject::Region(r)) if r.lkey == key => {
                r.pd = pd;
                r.iova = iova;
                r.length = length;
                r.access = access;
                r.memory = memory;
                true
            }
            _ => false,
        }
    }

    /// Puts the object `make` builds from its new key into a free slot; `None` when every
    /// slot is taken.
    pub(crate) fn insert(&mut self, make: impl FnOnce(u32) -> KeyObject) -> Option<u32> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => loop {
                if self.slots.len() >= 1 << INDEX_BITS {
                    return None;
                }
                let s = self.slots.len() as u32;
                self.slots.push(MrSlot::default());
                // The slot that maps to index 0 stays empty forever.
                if self.keys.index_of(s) != 0 {
                    break s;
                }
            },
        };
        let previous = self.slots[slot as usize].key_byte;
        let mut key_byte = self.keys.next() as u8;
        if key_byte == previous {
            key_byte = key_byte.wrapping_add(1 + (self.keys.next() % 255) as u8);
        }
        let key = (self.keys.index_of(slot) << 8) | u32::from(key_byte);
        self.slots[slot as usize] = MrSlot {
            key_byte,
            object: Some(make(key)),
        };
        Some(key)
    }

    /// Empties the slot `key`'s index names (whatever its key byte) and frees it.
    pub(crate) fn remove_slot(&mut self, key: u32) {
        let slot = self.slot(key);
        if let Some(s) = self.slots.get_mut(slot) {
            if s.object.take().is_some() {
                self.free.push(slot as u32);
            }
        }
    }

    /// The slot a key's index names.
    #[inline]
    pub(crate) fn slot(&self, key: u32) -> usize {
        self.keys.slot_of(key >> 8) as usize
    }

    /// Removes a region; `false` if the key was unknown. A region that memory windows are
    /// bound to stays (see [`MrTable::windows_bound_to`]); the caller checks first.
    pub fn deregister(&mut self, key: u32) -> bool {
        if self.get(key).is_none() {
            return false;
        }
        self.remove_slot(key);
        true
    }

    /// The region with this key.
    #[inline]
    pub fn get(&self, key: u32) -> Option<&MrEntry> {
        match self.slots.get(self.slot(key))?.object.as_ref()? {
            KeyObject::Region(r) if r.lkey == key => Some(r),
            _ => None,
        }
    }

    /// Every registered region, in slot order (not key order: keys are scrambled).
    pub fn iter(&self) -> impl Iterator<Item = &MrEntry> {
        self.slots.iter().filter_map(|s| match s.object.as_ref()? {
            KeyObject::Region(r) => Some(r),
            KeyObject::Window(_) => None,
        })
    }

    /// Whether any region or window still belongs to `pd`.
    pub fn pd_in_use(&self, pd: PdHandle) -> bool {
        self.slots.iter().any(|s| match &s.object {
            Some(KeyObject::Region(r)) => r.pd == pd,
            Some(KeyObject::Window(w)) => w.pd == pd,
            None => false,
        })
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
    ) -> Result<(&MrEntry, usize), AccessError> {
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
        // The engine gathers with the CRC on the way (`gather_crc`); this is the same copy.
        self.gather_crc(pd, sgl, offset, dst, 0).map(|_| ())
    }

    /// [`gather`](Self::gather), continuing the CRC-32 `crc` over the bytes gathered, in the
    /// same pass (see [`RegionMemory::read_crc`]); returns the CRC.
    pub fn gather_crc(
        &self,
        pd: PdHandle,
        sgl: &[Sge],
        offset: u64,
        dst: &mut [u8],
        mut crc: u32,
    ) -> Result<u32, AccessError> {
        self.walk(
            pd,
            sgl,
            offset,
            dst.len(),
            AccessFlags::empty(),
            |mr, mr_off, at, n| {
                crc = mr.memory.read_crc(mr_off, &mut dst[at..at + n], crc)?;
                Ok(())
            },
        )?;
        Ok(crc)
    }

    /// The memory and offset of `[offset, offset + len)` of `sgl`, if those bytes lie in one
    /// SGE whose region allows `need`: where a payload may be received directly (see
    /// `crate::placement`). `None` for bytes across SGEs, out of bounds, or not allowed.
    pub fn locate(
        &self,
        pd: PdHandle,
        sgl: &[Sge],
        offset: u64,
        len: u64,
        need: AccessFlags,
    ) -> Option<(Arc<dyn RegionMemory>, usize)> {
        let mut found = None;
        let mut pieces = 0;
        let len = usize::try_from(len).ok()?;
        self.walk(pd, sgl, offset, len, need, |mr, mr_off, _, _| {
            pieces += 1;
            found = Some((Arc::clone(&mr.memory), mr_off));
            Ok(())
        })
        .ok()?;
        found.filter(|_| pieces == 1)
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
            |mr, mr_off, at, n| mr.memory.write(mr_off, &src[at..at + n]),
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
        mut f: impl FnMut(&MrEntry, usize, usize, usize) -> Result<(), MemoryFault>,
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
            // The SGE comes from a work request: an address near the top of the address
            // space is a protection error, not an overflow.
            let addr = sge
                .addr
                .checked_add(offset)
                .ok_or(AccessError::OutOfBounds)?;
            let (mr, mr_off) = self.check(pd, sge.lkey, addr, n, need)?;
            let n = n as usize;
            f(mr, mr_off, done, n)?;
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

/// Plain memory cannot fault: the same operations, infallible, for callers that hold the
/// concrete type (the simulator, tests).
impl VecMemory {
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.lock()[offset..offset + dst.len()]);
    }
    /// Copies `src` into the memory starting at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) {
        self.lock()[offset..offset + src.len()].copy_from_slice(src);
    }
    /// [`RegionMemory::compare_swap`], infallible.
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        let mut b = self.lock();
        let orig = Self::word(&b, offset);
        if orig == compare {
            b[offset..offset + 8].copy_from_slice(&swap.to_ne_bytes());
        }
        orig
    }
    /// [`RegionMemory::fetch_add`], infallible.
    pub fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        let mut b = self.lock();
        let orig = Self::word(&b, offset);
        b[offset..offset + 8].copy_from_slice(&orig.wrapping_add(add).to_ne_bytes());
        orig
    }
}

impl RegionMemory for VecMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        VecMemory::read(self, offset, dst);
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemoryFault> {
        VecMemory::write(self, offset, src);
        Ok(())
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemoryFault> {
        Ok(VecMemory::compare_swap(self, offset, compare, swap))
    }
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemoryFault> {
        Ok(VecMemory::fetch_add(self, offset, add))
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
            t.check(pd, key ^ 0x100, 0x1000, 8, AccessFlags::REMOTE_READ)
                .err(),
            Some(AccessError::BadKey(key ^ 0x100))
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
        assert!(t.deregister(a));
        assert!(!t.deregister(a), "twice");
        // The slot is reused with another key byte: the old key names nothing.
        let b = t
            .register(pd, 0, 8, AccessFlags::REMOTE_READ, mem())
            .unwrap();
        assert_eq!(b >> 8, a >> 8, "same slot, same index");
        assert_ne!(b, a);
        assert!(t.get(a).is_none());
        assert_eq!(
            t.check(pd, a, 0, 8, AccessFlags::REMOTE_READ).err(),
            Some(AccessError::BadKey(a))
        );
        assert!(t.get(b).is_some());
        // Keys below 0x100 (index 0) and keys of slots never used name nothing.
        for k in [0x00, 0x02, 0xff, b ^ 0x100, b ^ 0x8000_0000] {
            assert!(t.get(k).is_none(), "{k:#x}");
        }
    }

    /// Issue 15: keys were `index << 8 | byte` with the byte counting up from 0x02 and the
    /// index from 1 — the first region was always 0x102. Now neither part is predictable:
    /// different seeds give different keys, and one table's keys neither count up nor share
    /// a key byte.
    #[test]
    fn test_keys_are_not_predictable() {
        let pd = PdHandle(1);
        let keys = |seed: u64| {
            let mut t = MrTable::with_key_seed(seed);
            (0..64)
                .map(|_| {
                    t.register(
                        pd,
                        0,
                        8,
                        AccessFlags::REMOTE_READ,
                        Arc::new(VecMemory::new(8)),
                    )
                    .unwrap()
                })
                .collect::<Vec<u32>>()
        };
        let (a, b) = (keys(1), keys(2));
        assert_eq!(a, keys(1), "deterministic per seed");
        assert!(a.iter().zip(&b).all(|(x, y)| x != y), "{a:x?} {b:x?}");
        for k in [&a, &b] {
            assert!(!k.contains(&0x102));
            let bytes: std::collections::BTreeSet<u8> = k.iter().map(|k| *k as u8).collect();
            assert!(bytes.len() > 40, "key bytes repeat: {bytes:x?}");
            let indices: std::collections::BTreeSet<u32> = k.iter().map(|k| k >> 8).collect();
            assert_eq!(indices.len(), k.len(), "indices unique");
            let ascending = k.windows(2).filter(|w| w[1] >> 8 > w[0] >> 8).count();
            assert!((10..54).contains(&ascending), "indices count up: {k:x?}");
            // Spread over the 24-bit space, not packed at the bottom.
            assert!(k.iter().any(|k| k >> 8 > 1 << 20), "{k:x?}");
        }
    }

    #[test]
    fn test_index_permutation_round_trips() {
        let g = KeyGen::new(0xdead_beef);
        let mut x = 12345u32;
        for i in 0..100_000u32 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            for s in [i, x & 0xff_ffff] {
                let idx = g.index_of(s);
                assert!(idx < 1 << 24);
                assert_eq!(g.slot_of(idx), s);
            }
        }
    }

    /// Issue 9: an SGE near the top of the address space made `sge.addr + offset` overflow
    /// (a panic in debug builds) when a message continued into it.
    #[test]
    fn test_sge_address_overflow_is_a_protection_error() {
        let mut t = MrTable::default();
        let pd = PdHandle(1);
        let key = t
            .register(
                pd,
                u64::MAX - 15,
                16,
                AccessFlags::LOCAL_WRITE,
                Arc::new(VecMemory::new(16)),
            )
            .unwrap();
        let sgl = [Sge {
            addr: u64::MAX - 3,
            length: u32::MAX,
            lkey: key,
        }];
        assert_eq!(
            t.scatter(pd, &sgl, 8, &[1; 8]),
            Err(AccessError::OutOfBounds)
        );
        let mut buf = [0u8; 8];
        assert_eq!(
            t.gather(pd, &sgl, u64::from(u32::MAX) - 8, &mut buf),
            Err(AccessError::OutOfBounds)
        );
        // In bounds at the very top still works.
        let top = [Sge {
            addr: u64::MAX - 15,
            length: 16,
            lkey: key,
        }];
        assert_eq!(t.scatter(pd, &top, 8, &[7; 8]), Ok(()));
        t.gather(pd, &top, 8, &mut buf).unwrap();
        assert_eq!(buf, [7; 8]);
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
