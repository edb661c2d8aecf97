//! Protection domains and memory regions.

use std::sync::Arc;

use softrdma_proto::{AccessFlags, MemoryFault, PdHandle, RegionMemory, Sge};

use crate::ah::{AddressHandle, AhAttr};
use crate::error::{CreateAhError, RegMrError};
use crate::memory::{OwnedMemory, RawMemory, WordMemory};
use crate::progress::Access;
use crate::Device;

struct PdInner {
    device: Device,
    handle: PdHandle,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Every MR and QP of the PD holds it, so none is left: this cannot be refused.
        let _ = self
            .device
            .inner()
            .engine(Access::Query, |e, _| e.dealloc_pd(self.handle));
    }
}

/// A protection domain (`ibv_pd`): memory regions and queue pairs of one PD may be used
/// together; a key of another PD is refused (local protection or remote access error).
///
/// A cheap handle; it keeps its device alive.
#[derive(Clone)]
pub struct ProtectionDomain {
    inner: Arc<PdInner>,
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("handle", &self.inner.handle.0)
            .finish()
    }
}

impl ProtectionDomain {
    pub(crate) fn new(device: Device) -> ProtectionDomain {
        let handle = device.inner().engine(Access::Query, |e, _| e.alloc_pd());
        ProtectionDomain {
            inner: Arc::new(PdInner { device, handle }),
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    pub(crate) fn handle(&self) -> PdHandle {
        self.inner.handle
    }

    /// Creates an address handle (`ibv_create_ah`): the destination of UD sends. Checked
    /// now: port, source GID, address family and a route to the destination (see
    /// [`AddressHandle`]).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle, CreateAhError> {
        AddressHandle::new(self, attr)
    }

    /// Allocates `len` zeroed bytes and registers them (`ibv_reg_mr` on memory softrdma owns).
    ///
    /// The region's address ([`MemoryRegion::addr`]) is the real address of the memory, as in
    /// ibverbs, so SGEs and remote addresses are plain pointers. The memory is page-aligned and
    /// freed when the region is dropped. See the [crate docs](crate#memory-model) for how the
    /// application and remote peers share it.
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion, RegMrError> {
        let memory = OwnedMemory::new(len).ok_or(RegMrError::OutOfMemory(len))?;
        let addr = memory.addr();
        let ptr = memory.as_ptr();
        self.register(Arc::new(memory), addr, ptr, len, access)
    }

    /// Registers memory the caller owns (`ibv_reg_mr` on a user buffer), for FFI-style use.
    ///
    /// # Safety
    /// - `[ptr, ptr + len)` must be valid for reads and writes and stay allocated until the
    ///   returned region and all its clones are dropped (dropping deregisters it; from then on
    ///   softrdma never touches the memory). Memory that is unmapped or protected meanwhile
    ///   anyway makes softrdma's accesses fail with access errors rather than fault (x86-64
    ///   Linux; see [`CopyError::Fault`]), but memory mapped anew at the same addresses is
    ///   read and written as the region's.
    /// - While the region is registered, softrdma accesses the memory from its own threads at
    ///   any time (remote peers holding the rkey need no action of the application): every
    ///   8-byte word that lies wholly inside the range (aligned by address) with 8-byte atomic
    ///   operations, and the bytes of the at most two partial words at its ends with 1-byte
    ///   atomic operations — [`MemoryRegion::atomic_words`] gives the word part. An access by
    ///   the caller that may be concurrent with those must be an atomic access **of the same
    ///   size at the same place**: [`AtomicU64`](std::sync::atomic::AtomicU64) on a word of the
    ///   word part ([`MemoryRegion::atomic_u64`] hands it out), `AtomicU8` on an edge byte, or
    ///   the region's copying methods. Plain reads and writes, and atomics of any other size
    ///   (`AtomicU32`, `AtomicU16`, an `AtomicU64` straddling an end), are allowed only when
    ///   the application knows by its own protocol that no softrdma access is in flight: before
    ///   the rkey reaches a peer and a work request names the region, or after the completions
    ///   it waited for when no peer may still write.
    /// - Regions that overlap are accessed by softrdma through each of them by the rule above,
    ///   so where they share bytes the sizes must agree: every end of one region that falls
    ///   inside the other must be 8-byte aligned (simplest: start and length multiples of 8).
    ///   Overlapping regions that break this may exist (ibverbs allows them) but must not be in
    ///   use at the same time.
    ///
    /// Why a rule and not an access scheme that needs none: remote atomics must be 8-byte
    /// atomic operations; the ends must be accessed byte by byte, since the bytes next to the
    /// range may be the caller's and accessed without atomics; and an application atomic of
    /// any other size would mix with whichever size softrdma chose. Rust's memory model makes
    /// racing accesses of different sizes undefined behaviour, so the sizes are part of the
    /// contract. Memory from [`reg_mr`](Self::reg_mr) needs no such care: only softrdma can
    /// reach it, always with whole 8-byte words.
    pub unsafe fn reg_mr_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegMrError> {
        if (ptr as usize).checked_add(len).is_none() {
            return Err(RegMrError::InvalidRange("region wraps the address space"));
        }
        // SAFETY: forwarded from this function's contract.
        let memory = unsafe { RawMemory::new(ptr, len) };
        self.register(Arc::new(memory), ptr as u64, ptr, len, access)
    }

    /// Like [`reg_mr_raw`](Self::reg_mr_raw), but the region's virtual address — what SGEs
    /// and remote peers use — is `iova` instead of the memory's address (`ibv_reg_mr_iova2`):
    /// byte `i` of the region is at `iova + i` for the device and at `ptr + i` in memory.
    ///
    /// # Safety
    /// As for [`reg_mr_raw`](Self::reg_mr_raw).
    pub unsafe fn reg_mr_raw_iova(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegMrError> {
        // SAFETY: forwarded from this function's contract.
        let memory = unsafe { raw_memory(ptr, len, iova) }?;
        self.register(memory, iova, ptr, len, access)
    }

    /// Registers the whole address space of the process, at its own addresses (ibverbs'
    /// implicit on-demand region: `ibv_reg_mr(pd, NULL, SIZE_MAX, … IBV_ACCESS_ON_DEMAND)`): a
    /// peer holding the rkey may name any address. softrdma pins nothing, so every region is
    /// on demand: a page is accessed when an operation reaches it, and one that is not mapped
    /// (or not accessible as the operation needs) then is an access error for that operation,
    /// never a fault of the process ([`MemoryRegion::prefetch`] faults pages in ahead).
    ///
    /// # Safety
    /// As for [`reg_mr_raw`](Self::reg_mr_raw), for every byte of the address space: whatever
    /// memory the rights let peers write may be written by them, and the program's own
    /// accesses racing softrdma's must be atomics of the sizes that contract names. Give such
    /// a region's rkey only to peers trusted with all of the process's memory.
    pub unsafe fn reg_mr_implicit(&self, access: AccessFlags) -> Result<MemoryRegion, RegMrError> {
        // SAFETY: forwarded from this function's contract; the null start with the whole
        // length is the address space itself (`raw_memory` reads nothing at registration).
        unsafe { self.reg_mr_raw_iova(std::ptr::null_mut(), usize::MAX, 0, access) }
    }

    /// Registers `memory`, whose byte 0 is at `ptr` in this process and at `addr` for the
    /// device.
    pub(crate) fn register(
        &self,
        memory: Arc<dyn WordMemory>,
        addr: u64,
        ptr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegMrError> {
        check_access(access)?;
        let key = self
            .device()
            .inner()
            .engine(Access::Query, |e, _| {
                e.reg_mr(
                    self.handle(),
                    addr,
                    len as u64,
                    access,
                    memory.clone() as Arc<dyn RegionMemory>,
                )
            })
            .map_err(reg_error)?;
        Ok(MemoryRegion {
            inner: Arc::new(MrInner {
                registration: Arc::new(Registration {
                    device: self.device().clone(),
                    key,
                    pd: std::sync::Mutex::new(self.clone()),
                }),
                pd: self.clone(),
                addr,
                ptr,
                len,
                access,
                memory,
            }),
        })
    }

    /// Creates a shared receive queue (`ibv_create_srq`); a non-zero `attr.srq_limit` is
    /// armed at once.
    pub fn create_srq(
        &self,
        attr: softrdma_proto::SrqAttr,
    ) -> Result<crate::SharedReceiveQueue, crate::SrqError> {
        crate::SharedReceiveQueue::new(self, attr)
    }

    /// Creates a queue pair (`ibv_create_qp`).
    pub fn create_qp(
        &self,
        init: &crate::QpInitAttr,
    ) -> Result<crate::QueuePair, crate::CreateQpError> {
        crate::QueuePair::new(self.clone(), init, false)
    }

    /// Creates the device's general services QP, QP 1 (`init.qp_type` must be UD): what a
    /// connection manager sends and receives its MADs on (Q_Key 0x80010000, the well-known
    /// GSI Q_Key, whatever `ready_ud` is given). One per device; a second is refused.
    pub fn create_gsi_qp(
        &self,
        init: &crate::QpInitAttr,
    ) -> Result<crate::QueuePair, crate::CreateQpError> {
        crate::QueuePair::new(self.clone(), init, true)
    }
}

/// A key of the engine's table naming a region: shared by the handles of the region before
/// and after a re-registration, so that the last of them deregisters it.
struct Registration {
    device: Device,
    key: u32,
    /// The PD the engine files the region under now (a re-registration may move it): kept
    /// alive until the region is deregistered, so the PD's own drop is never refused. Changed
    /// under the device lock; dropped after `drop` deregistered the region.
    pd: std::sync::Mutex<ProtectionDomain>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // After this, the engine never touches the memory again (it accesses regions only
        // through its table, under the same lock).
        // Windows bound to the region are revoked with it (see `MemoryWindow`).
        let _ = self
            .device
            .inner()
            .engine(Access::Query, |e, _| e.dereg_mr_revoking_windows(self.key));
    }
}

struct MrInner {
    registration: Arc<Registration>,
    pd: ProtectionDomain,
    addr: u64,
    ptr: *mut u8,
    len: usize,
    access: AccessFlags,
    memory: Arc<dyn WordMemory>,
}

// SAFETY: `ptr` is only handed out as a raw pointer (never dereferenced by this type); the
// memory itself is accessed through `memory`, which is Send + Sync.
unsafe impl Send for MrInner {}
// SAFETY: as above.
unsafe impl Sync for MrInner {}

/// The program's memory `[ptr, ptr + len)`, to be registered at `iova`.
///
/// # Safety
/// As for [`ProtectionDomain::reg_mr_raw`].
unsafe fn raw_memory(
    ptr: *mut u8,
    len: usize,
    iova: u64,
) -> Result<Arc<dyn WordMemory>, RegMrError> {
    if (ptr as usize).checked_add(len).is_none() || iova.checked_add(len as u64).is_none() {
        return Err(RegMrError::InvalidRange("region wraps the address space"));
    }
    // SAFETY: forwarded from this function's contract.
    Ok(Arc::new(unsafe { RawMemory::new(ptr, len) }))
}

/// The access rules of ibverbs that a region's rights must follow.
fn check_access(access: AccessFlags) -> Result<(), RegMrError> {
    let needs_local_write =
        access.contains(AccessFlags::REMOTE_WRITE) || access.contains(AccessFlags::REMOTE_ATOMIC);
    if needs_local_write && !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(RegMrError::AccessNeedsLocalWrite);
    }
    Ok(())
}

fn reg_error(e: softrdma_proto::EngineError) -> RegMrError {
    match e {
        softrdma_proto::EngineError::InvalidArgument(s) => RegMrError::InvalidRange(s),
        softrdma_proto::EngineError::Exhausted(_) => RegMrError::TooMany,
        _ => RegMrError::InvalidRange("refused by the engine"),
    }
}

/// The range was not inside the memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("range {offset}..+{len} outside the {region_len}-byte memory region")]
pub struct OutOfBounds {
    /// Offset asked for.
    pub offset: usize,
    /// Length asked for.
    pub len: usize,
    /// The region's length.
    pub region_len: usize,
}

/// Why a copy in or out of a memory region failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    /// The range is not inside the region.
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
    /// The application's memory behind a [`reg_mr_raw`](ProtectionDomain::reg_mr_raw)
    /// region was unmapped or protected while registered.
    #[error(transparent)]
    Fault(#[from] MemoryFault),
}

/// Where a peer's memory region is: what one side sends the other out of band so it can
/// RDMA WRITE, READ or use atomics on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    /// Address of the first byte (in the peer's address space).
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteRegion {
    /// The address `offset` bytes into the region.
    pub fn at(&self, offset: u64) -> u64 {
        self.addr.wrapping_add(offset)
    }
}

/// A registered memory region (`ibv_mr`).
///
/// Its contents are shared with the device and, through the rkey, with remote peers, which
/// may change them at any time; so the application reads and writes them through copying
/// methods ([`read`](Self::read), [`write`](Self::write), [`read_u64`](Self::read_u64),
/// [`to_vec`](Self::to_vec)...), never through references (see the
/// [crate docs](crate#memory-model)). Dropping the last handle deregisters it (handles from
/// before a [re-registration](Self::rereg) count too).
#[derive(Clone)]
pub struct MemoryRegion {
    inner: Arc<MrInner>,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.inner.addr))
            .field("len", &self.inner.len)
            .field("lkey", &format_args!("{:#x}", self.inner.registration.key))
            .field("access", &self.inner.access)
            .finish()
    }
}

impl MemoryRegion {
    /// Address of the first byte: the real address of the memory (SGEs and remote addresses
    /// use it).
    pub fn addr(&self) -> u64 {
        self.inner.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Local key (for SGEs).
    pub fn lkey(&self) -> u32 {
        self.inner.registration.key
    }

    /// Remote key (for peers' RDMA and atomic operations).
    pub fn rkey(&self) -> u32 {
        self.inner.registration.key
    }

    /// Re-registers the region (`ibv_rereg_mr` without a new translation): it now belongs
    /// to `pd` and grants `access`, over the same memory and under the same keys (rxe and
    /// mlx5 keep them, and programs go on using the keys they exchanged). Returns the handle
    /// that describes the region now; `self` and its clones keep the registration alive but
    /// describe what it was. Windows stay bound, unless the new rights could no longer back
    /// one of them (see [`Engine::rereg_mr`]).
    ///
    /// [`Engine::rereg_mr`]: softrdma_proto::Engine::rereg_mr
    pub fn rereg(
        &self,
        pd: &ProtectionDomain,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegMrError> {
        let i = &self.inner;
        self.rereg_with(pd, i.memory.clone(), i.addr, i.ptr, i.len, access)
    }

    /// Re-registers the region over new memory (`ibv_rereg_mr` with a new translation):
    /// `[ptr, ptr + len)` at virtual address `iova`, in `pd`, granting `access`, under the same
    /// keys. Once this returns, softrdma never touches the old memory again (unless it is
    /// part of the new). Refused while memory windows are bound to the region: their rkeys
    /// would reach memory never bound to them (see [`Engine::rereg_mr`]).
    ///
    /// [`Engine::rereg_mr`]: softrdma_proto::Engine::rereg_mr
    ///
    /// # Safety
    /// As for [`ProtectionDomain::reg_mr_raw_iova`], for the new memory, with one difference
    /// in how long it must stay allocated: until every handle of the region is dropped (this
    /// one and its clones, the one returned and its clones, and handles from earlier
    /// re-registrations: they share the registration), or until the region is re-registered
    /// over other memory.
    pub unsafe fn rereg_raw_iova(
        &self,
        pd: &ProtectionDomain,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegMrError> {
        // SAFETY: forwarded from this function's contract.
        let memory = unsafe { raw_memory(ptr, len, iova) }?;
        self.rereg_with(pd, memory, iova, ptr, len, access)
    }

    fn rereg_with(
        &self,
        pd: &ProtectionDomain,
        memory: Arc<dyn WordMemory>,
        addr: u64,
        ptr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegMrError> {
        let registration = &self.inner.registration;
        if !Arc::ptr_eq(&pd.device().shared, &registration.device.shared) {
            return Err(RegMrError::InvalidRange(
                "the protection domain is of another device",
            ));
        }
        check_access(access)?;
        let filed_under = registration.device.inner().engine(Access::Query, |e, _| {
            e.rereg_mr(
                registration.key,
                pd.handle(),
                addr,
                len as u64,
                access,
                memory.clone() as Arc<dyn RegionMemory>,
            )
            .map_err(reg_error)?;
            // Under the device lock, with the engine's change.
            let mut held = registration.pd.lock().unwrap_or_else(|e| e.into_inner());
            Ok(std::mem::replace(&mut *held, pd.clone()))
        })?;
        // Outside the device lock: dropping the last handle of a PD takes it.
        drop(filed_under);
        Ok(MemoryRegion {
            inner: Arc::new(MrInner {
                registration: registration.clone(),
                pd: pd.clone(),
                addr,
                ptr,
                len,
                access,
                memory,
            }),
        })
    }

    /// Memory windows bound to the region now (while there are any, the C library's
    /// `ibv_dereg_mr` refuses, as rxe does; dropping the region revokes them).
    pub fn bound_windows(&self) -> usize {
        self.pd()
            .device()
            .inner()
            .engine(Access::Query, |e, _| e.mrs().windows_bound_to(self.lkey()))
    }

    /// Granted access.
    pub fn access(&self) -> AccessFlags {
        self.inner.access
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// A raw pointer to the first byte, for FFI. Accessing the memory through it while a peer
    /// may write it is a data race unless done atomically, with the access sizes
    /// [`ProtectionDomain::reg_mr_raw`] names: see the crate docs.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.ptr
    }

    /// The offsets (from the region's start) of the part softrdma accesses with whole 8-byte
    /// atomic operations: every 8-byte word, aligned by address, that lies wholly inside the
    /// region. The rest (at most 7 bytes at each end of a region registered with
    /// [`reg_mr_raw`](ProtectionDomain::reg_mr_raw)) is accessed byte by byte. Memory from
    /// [`reg_mr`](ProtectionDomain::reg_mr) is page-aligned and all words: `0..len`.
    pub fn atomic_words(&self) -> std::ops::Range<usize> {
        self.inner.memory.atomic_words()
    }

    /// The 8-byte word at `offset` as an [`AtomicU64`](std::sync::atomic::AtomicU64), the
    /// size softrdma itself uses for it, so that the application can operate on it while
    /// peers do (a flag polled locally, a counter peers FETCH_ADD): `None` unless `offset` is
    /// 8-aligned by address and the word lies in [`atomic_words`](Self::atomic_words) and inside
    /// the region.
    /// Remote atomics on the word are atomic with respect to these operations.
    pub fn atomic_u64(&self, offset: usize) -> Option<&std::sync::atomic::AtomicU64> {
        self.inner.memory.atomic_u64(offset)
    }

    /// A scatter/gather element for `len` bytes at `offset` (not checked here: the device
    /// checks every SGE when the work request executes and completes it with
    /// `LocProtErr` if it is outside the region).
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge {
            addr: self.inner.addr.wrapping_add(offset as u64),
            length: len,
            lkey: self.inner.registration.key,
        }
    }

    /// The whole region as one SGE.
    pub fn sge_all(&self) -> Sge {
        self.sge(0, u32::try_from(self.inner.len).unwrap_or(u32::MAX))
    }

    /// What a peer needs to access this region.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.inner.addr,
            len: self.inner.len as u64,
            rkey: self.inner.registration.key,
        }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfBounds> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.len => Ok(()),
            _ => Err(OutOfBounds {
                offset,
                len,
                region_len: self.inner.len,
            }),
        }
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), CopyError> {
        self.check(offset, buf.len())?;
        Ok(self.inner.memory.read(offset, buf)?)
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), CopyError> {
        self.check(offset, data.len())?;
        Ok(self.inner.memory.write(offset, data)?)
    }

    /// The CRC-32 (the Ethernet / zlib polynomial, as `crc32fast` computes it) of `len`
    /// bytes at `offset`, read where they are, without a copy: a cheap check that a
    /// buffer holds what was sent. It is the routine that checks the ICRC of payloads the
    /// network placed straight into a region, at the same speed.
    pub fn crc32(&self, offset: usize, len: usize) -> Result<u32, CopyError> {
        self.check(offset, len)?;
        Ok(self.inner.memory.crc32(offset, len, 0)?)
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`, as [`read`](Self::read) does, and
    /// returns their CRC-32 (as [`crc32`](Self::crc32)), computed on the way: one pass, as
    /// the device gathers a payload and its ICRC.
    pub fn read_crc32(&self, offset: usize, buf: &mut [u8]) -> Result<u32, CopyError> {
        self.check(offset, buf.len())?;
        Ok(self.inner.memory.read_crc(offset, buf, 0)?)
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), CopyError> {
        self.check(offset, len)?;
        let chunk = [byte; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.inner.memory.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Result<Vec<u8>, MemoryFault> {
        let mut v = vec![0u8; self.inner.len];
        self.inner.memory.read(0, &mut v)?;
        Ok(v)
    }

    /// A copy of `len` bytes at `offset`.
    pub fn read_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>, CopyError> {
        let mut v = vec![0u8; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// The 8-byte word at `offset`, host byte order (one atomic acquiring load when the
    /// address is 8-aligned — how remote atomics leave their results).
    pub fn read_u64(&self, offset: usize) -> Result<u64, CopyError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Stores the 8-byte word `value` at `offset`, host byte order (one atomic releasing store
    /// when 8-aligned).
    pub fn write_u64(&self, offset: usize, value: u64) -> Result<(), CopyError> {
        self.write(offset, &value.to_ne_bytes())
    }
}
