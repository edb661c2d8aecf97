//! Registered memory of the engine: memory regions and memory windows (their checks live
//! in `crate::mr` and `crate::mw`; these are the verbs that create and destroy them).

use std::sync::Arc;

use super::Engine;
use crate::access::AccessFlags;
use crate::error::EngineError;
use crate::mr::{PdHandle, RegionMemory};
use crate::mw::MwType;

impl Engine {
    /// Registers `length` bytes of `memory` at virtual address `iova`; returns the key
    /// (lkey = rkey). As in ibverbs, remote write or atomic access requires local write.
    pub fn reg_mr(
        &mut self,
        pd: PdHandle,
        iova: u64,
        length: u64,
        access: AccessFlags,
        memory: Arc<dyn RegionMemory>,
    ) -> Result<u32, EngineError> {
        check_region(&self.pds, pd, iova, length, access, &*memory)?;
        self.shared
            .mrs
            .register(pd, iova, length, access, memory)
            .ok_or(EngineError::Exhausted("memory regions"))
    }

    /// Re-registers the region `key` (ibverbs `ibv_rereg_mr`): a new protection domain, range,
    /// rights or memory, under the same key. Checked as [`Engine::reg_mr`] checks a new
    /// region. New memory or a new range is refused while windows are bound to the region, as
    /// deregistration is: a window's rkey in a peer's hands would otherwise reach memory the
    /// application never bound it to. A new protection domain or new rights leave the windows
    /// bound (as rxe, which re-registers only those), unless the rights could no longer back
    /// one of them (bind rights; local write under a writable window: IBTA C10-73, C10-74),
    /// which is refused.
    pub fn rereg_mr(
        &mut self,
        key: u32,
        pd: PdHandle,
        iova: u64,
        length: u64,
        access: AccessFlags,
        memory: Arc<dyn RegionMemory>,
    ) -> Result<(), EngineError> {
        let Some(old) = self.shared.mrs.get(key) else {
            return Err(EngineError::NoSuchMr);
        };
        let moves = old.iova != iova || old.length != length || !Arc::ptr_eq(&old.memory, &memory);
        if moves && self.shared.mrs.windows_bound_to(key) > 0 {
            return Err(EngineError::InvalidArgument(
                "memory windows are bound to the region",
            ));
        }
        if !self.shared.mrs.windows_allow(key, access) {
            return Err(EngineError::InvalidArgument(
                "a window bound to the region needs rights the new ones lack",
            ));
        }
        check_region(&self.pds, pd, iova, length, access, &*memory)?;
        self.shared
            .mrs
            .reregister(key, pd, iova, length, access, memory);
        Ok(())
    }

    /// Deregisters a memory region. Requests already in flight that name it fail their
    /// access checks from now on. A region with memory windows bound is refused (IBTA
    /// 10.6.7.2.6; rxe: `EINVAL`).
    pub fn dereg_mr(&mut self, key: u32) -> Result<(), EngineError> {
        if self.shared.mrs.get(key).is_none() {
            return Err(EngineError::NoSuchMr);
        }
        if self.shared.mrs.windows_bound_to(key) > 0 {
            return Err(EngineError::InvalidArgument(
                "memory windows are bound to the region",
            ));
        }
        self.shared.mrs.deregister(key);
        Ok(())
    }

    /// Deregisters a memory region after revoking the windows bound to it: for callers that
    /// cannot refuse (a region dropped in Rust).
    pub fn dereg_mr_revoking_windows(&mut self, key: u32) -> Result<(), EngineError> {
        self.shared.mrs.unbind_region_windows(key);
        self.dereg_mr(key)
    }

    /// Allocates a memory window in `pd` (ibverbs `ibv_alloc_mw`); returns its rkey. It
    /// grants nothing until bound (see [`crate::mw`]).
    pub fn alloc_mw(&mut self, pd: PdHandle, mw_type: MwType) -> Result<u32, EngineError> {
        if !self.pds.contains(&pd.0) {
            return Err(EngineError::NoSuchPd);
        }
        self.shared
            .mrs
            .alloc_window(pd, mw_type)
            .ok_or(EngineError::Exhausted("memory regions and windows"))
    }

    /// Frees the memory window that `rkey` (its current rkey or any earlier one) names, bound
    /// or not (ibverbs `ibv_dealloc_mw`).
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), EngineError> {
        self.shared
            .mrs
            .dealloc_window(rkey)
            .map_err(|_| EngineError::NoSuchMw)
    }

    /// The current rkey of the window `rkey` (any rkey it has had) names: it changes with
    /// every bind.
    pub fn mw_rkey(&mut self, rkey: u32) -> Result<u32, EngineError> {
        self.shared
            .mrs
            .window_rkey(rkey)
            .ok_or(EngineError::NoSuchMw)
    }
}

/// What a region must be, new or re-registered: in a live protection domain; remote write or
/// atomic access only with local write (as in ibverbs); memory as long as the region; a range
/// that does not wrap.
fn check_region(
    pds: &std::collections::BTreeSet<u32>,
    pd: PdHandle,
    iova: u64,
    length: u64,
    access: AccessFlags,
    memory: &dyn RegionMemory,
) -> Result<(), EngineError> {
    if !pds.contains(&pd.0) {
        return Err(EngineError::NoSuchPd);
    }
    let needs_local_write =
        access.contains(AccessFlags::REMOTE_WRITE) || access.contains(AccessFlags::REMOTE_ATOMIC);
    if needs_local_write && !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(EngineError::InvalidArgument(
            "remote write/atomic access requires local write",
        ));
    }
    if (memory.len() as u64) < length {
        return Err(EngineError::InvalidArgument(
            "memory shorter than the region",
        ));
    }
    if iova.checked_add(length).is_none() {
        return Err(EngineError::InvalidArgument(
            "region wraps the address space",
        ));
    }
    Ok(())
}
