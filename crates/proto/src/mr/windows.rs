//! The window operations of the key table: allocation, binds, invalidation, and the check
//! of an incoming access through a window (the model is in [`crate::mw`]).

use super::{AccessError, KeyObject, MrEntry, MrTable, PdHandle};
use crate::access::AccessFlags;
use crate::mw::{Invalidator, MemoryWindow, MwBinding, MwError, MwType};
use crate::wr::MwBind;

/// Rights a bind may ask for: the remote ones, and local write, which rxe and mlx5 accept
/// (rdma-core's own tests bind with it). A window's key is an R_Key only, so local write
/// grants nothing here.
const WINDOW_RIGHTS: AccessFlags = AccessFlags::from_bits_truncate(
    AccessFlags::REMOTE_WRITE.bits()
        | AccessFlags::REMOTE_READ.bits()
        | AccessFlags::REMOTE_ATOMIC.bits()
        | AccessFlags::LOCAL_WRITE.bits(),
);

impl MrTable {
    /// Allocates an unbound window of protection domain `pd`; returns its rkey, or `None`
    /// when the key space is full.
    pub fn alloc_window(&mut self, pd: PdHandle, mw_type: MwType) -> Option<u32> {
        self.insert(|rkey| {
            KeyObject::Window(MemoryWindow {
                rkey,
                pd,
                mw_type,
                binding: None,
            })
        })
    }

    /// The window whose current rkey is `rkey`.
    pub fn window(&self, rkey: u32) -> Option<&MemoryWindow> {
        match self.slots.get(self.slot(rkey))?.object.as_ref()? {
            KeyObject::Window(w) if w.rkey == rkey => Some(w),
            _ => None,
        }
    }

    /// The window in the slot `rkey`'s index names, whatever its key byte now is: the handle
    /// an application holds keeps naming its window across binds (rdma-core updates
    /// `ibv_mw.rkey` before a type 1 bind has run, and leaves it to the application to
    /// undo when the bind fails).
    fn window_slot_mut(&mut self, rkey: u32) -> Option<&mut MemoryWindow> {
        let slot = self.slot(rkey);
        match self.slots.get_mut(slot)?.object.as_mut()? {
            KeyObject::Window(w) => Some(w),
            KeyObject::Region(_) => None,
        }
    }

    /// The current rkey of the window `rkey` (any rkey it has had) names.
    pub fn window_rkey(&mut self, rkey: u32) -> Option<u32> {
        self.window_slot_mut(rkey).map(|w| w.rkey)
    }

    /// Frees the window `rkey` (any rkey it has had) names, bound or not.
    pub fn dealloc_window(&mut self, rkey: u32) -> Result<(), MwError> {
        if self.window_slot_mut(rkey).is_none() {
            return Err(MwError::NoSuchWindow(rkey));
        }
        self.remove_slot(rkey);
        Ok(())
    }

    /// Windows bound to the region `mr_key`: while there are any, it cannot be deregistered.
    pub fn windows_bound_to(&self, mr_key: u32) -> usize {
        self.windows()
            .filter(|w| w.binding.is_some_and(|b| b.mr_key == mr_key))
            .count()
    }

    fn windows(&self) -> impl Iterator<Item = &MemoryWindow> {
        self.slots.iter().filter_map(|s| match s.object.as_ref()? {
            KeyObject::Window(w) => Some(w),
            KeyObject::Region(_) => None,
        })
    }

    /// Binds a window for QP `qpn` of protection domain `qp_pd` (the BIND_MW work request's
    /// execution, IBTA 10.6.7.2 as rxe checks it; see the module docs).
    pub fn bind_window(&mut self, qp_pd: PdHandle, qpn: u32, bind: &MwBind) -> Result<(), MwError> {
        let window = self
            .window(bind.mw_rkey)
            .ok_or(MwError::NoSuchWindow(bind.mw_rkey))?
            .clone();
        if bind.new_rkey >> 8 != window.rkey >> 8 {
            return Err(MwError::ForeignRkey(bind.new_rkey));
        }
        if window.mw_type == MwType::Type2 {
            if window.binding.is_some() {
                return Err(MwError::AlreadyBound);
            }
            if qp_pd != window.pd {
                return Err(MwError::WrongPd);
            }
            if bind.length == 0 {
                return Err(MwError::WrongType);
            }
        }
        if !WINDOW_RIGHTS.contains(bind.access) {
            return Err(MwError::BadAccess(bind.access.bits()));
        }
        let binding = if bind.length == 0 {
            None
        } else {
            let mr = self
                .get(bind.mr_lkey)
                .filter(|mr| mr.pd == window.pd)
                .ok_or(MwError::NoSuchRegion(bind.mr_lkey))?;
            check_region_for_window(mr, bind)?;
            Some(MwBinding {
                mr_key: mr.lkey,
                addr: bind.addr,
                length: bind.length,
                access: bind.access,
                qpn: (window.mw_type == MwType::Type2).then_some(qpn),
            })
        };
        let key_byte = bind.new_rkey as u8;
        let slot = self.slot(bind.mw_rkey);
        self.slots[slot].key_byte = key_byte;
        let w = self
            .window_slot_mut(bind.mw_rkey)
            .expect("window checked above");
        w.rkey = (w.rkey & !0xff) | u32::from(key_byte);
        w.binding = binding;
        Ok(())
    }

    /// Invalidates `rkey` (LOCAL_INV, or a peer's SEND_WITH_INV): a bound type 2 window
    /// becomes free and its rkey names nothing.
    pub fn invalidate(&mut self, rkey: u32, by: Invalidator) -> Result<(), MwError> {
        if self.get(rkey).is_some() {
            return Err(MwError::RegionKey(rkey));
        }
        let w = self
            .window_slot_mut(rkey)
            .filter(|w| w.rkey == rkey)
            .ok_or(MwError::NoSuchWindow(rkey))?;
        if w.mw_type == MwType::Type1 {
            return Err(MwError::WrongType);
        }
        // Only a QP of the window's domain revokes it; a peer only through the QP the window
        // serves (rxe checks neither: any QP of the device could revoke any window).
        let allowed = match by {
            Invalidator::Local { pd } => w.pd == pd,
            Invalidator::Remote { pd, qpn } => {
                w.pd == pd && w.binding.map_or(true, |b| b.qpn == Some(qpn))
            }
        };
        if !allowed {
            return Err(MwError::WrongPd);
        }
        if w.binding.take().is_none() {
            return Err(MwError::NotBound);
        }
        Ok(())
    }

    /// Frees the type 2 windows bound through QP `qpn`, which is being destroyed: its number
    /// may be reused, and the window must not serve a stranger.
    pub fn unbind_qp_windows(&mut self, qpn: u32) {
        for slot in &mut self.slots {
            if let Some(KeyObject::Window(w)) = &mut slot.object {
                if w.binding.is_some_and(|b| b.qpn == Some(qpn)) {
                    w.binding = None;
                }
            }
        }
    }

    /// Whether a region granting `access` could still back every window bound to `mr_key`:
    /// bind rights, and local write under a window that lets peers write (IBTA C10-73, C10-74,
    /// the checks of a bind).
    pub fn windows_allow(&self, mr_key: u32, access: AccessFlags) -> bool {
        self.slots.iter().all(|slot| match &slot.object {
            Some(KeyObject::Window(w)) => match w.binding {
                Some(b) if b.mr_key == mr_key => rights_back_window(access, b.access).is_ok(),
                _ => true,
            },
            _ => true,
        })
    }

    /// Unbinds every window bound to the region `mr_key` (what a region that must go away
    /// whatever happens does first: its windows then name nothing).
    pub fn unbind_region_windows(&mut self, mr_key: u32) {
        for slot in &mut self.slots {
            if let Some(KeyObject::Window(w)) = &mut slot.object {
                if w.binding.is_some_and(|b| b.mr_key == mr_key) {
                    w.binding = None;
                }
            }
        }
    }

    /// Checks an incoming access of `len` bytes at `va` through `rkey`, arriving on QP `qpn`
    /// of protection domain `pd` and needing `need`: a region's rkey as [`MrTable::check`]
    /// does, a window's against the window (see the module docs). Returns the region holding
    /// the bytes and the offset into it.
    pub fn check_remote(
        &self,
        pd: PdHandle,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(&MrEntry, usize), AccessError> {
        let Some(window) = self.window(rkey) else {
            return self.check(pd, rkey, va, len, need);
        };
        if window.pd != pd {
            return Err(AccessError::WrongPd);
        }
        let b = window.binding.ok_or(AccessError::BadKey(rkey))?;
        if b.qpn.is_some_and(|q| q != qpn) {
            return Err(AccessError::WrongQp);
        }
        if !b.access.contains(need) {
            return Err(AccessError::NoPermission);
        }
        let end = va.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        if va < b.addr || end > b.addr + b.length {
            return Err(AccessError::OutOfBounds);
        }
        let mr = self.get(b.mr_key).ok_or(AccessError::BadKey(rkey))?;
        let off = mr.offset_of(va, len).ok_or(AccessError::OutOfBounds)?;
        Ok((mr, off))
    }
}

/// The region-side checks of a bind (IBTA C10-73 to C10-75).
fn check_region_for_window(mr: &MrEntry, bind: &MwBind) -> Result<(), MwError> {
    rights_back_window(mr.access, bind.access)?;
    mr.offset_of(bind.addr, bind.length)
        .map(|_| ())
        .ok_or(MwError::OutOfBounds)
}

/// Whether a region granting `region` can back a window granting `window` (IBTA C10-73: bind
/// rights; C10-74: local write under a window peers may write or use atomics on).
fn rights_back_window(region: AccessFlags, window: AccessFlags) -> Result<(), MwError> {
    if !region.contains(AccessFlags::MW_BIND) {
        return Err(MwError::NoBindAccess);
    }
    let writable =
        window.contains(AccessFlags::REMOTE_WRITE) || window.contains(AccessFlags::REMOTE_ATOMIC);
    if writable && !region.contains(AccessFlags::LOCAL_WRITE) {
        return Err(MwError::NeedsLocalWrite);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::mr::VecMemory;

    const PD: PdHandle = PdHandle(1);
    const RW: AccessFlags = AccessFlags::from_bits_truncate(
        AccessFlags::LOCAL_WRITE.bits()
            | AccessFlags::REMOTE_WRITE.bits()
            | AccessFlags::REMOTE_READ.bits()
            | AccessFlags::MW_BIND.bits(),
    );

    fn table() -> (MrTable, u32) {
        let mut t = MrTable::default();
        let mr = t
            .register(PD, 0x1000, 4096, RW, Arc::new(VecMemory::new(4096)))
            .unwrap();
        (t, mr)
    }

    fn bind(mw: u32, new_byte: u8, mr: u32, addr: u64, length: u64, access: AccessFlags) -> MwBind {
        MwBind {
            mw_rkey: mw,
            new_rkey: (mw & !0xff) | u32::from(new_byte),
            mr_lkey: mr,
            addr,
            length,
            access,
        }
    }

    /// A bind may ask for local write besides remote rights (rdma-core's tests do; rxe and
    /// mlx5 accept it): it grants nothing more through the window. And a region may not lose
    /// the rights its bound windows rest on.
    #[test]
    fn local_write_in_a_bind_and_the_rights_windows_rest_on() {
        let (mut t, mr) = table();
        let mw = t.alloc_window(PD, MwType::Type1).unwrap();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let b = bind(mw, 5, mr, 0x1000, 64, access);
        t.bind_window(PD, 7, &b).unwrap();
        let rkey = b.new_rkey;
        assert!(t
            .check_remote(PD, 7, rkey, 0x1000, 8, AccessFlags::REMOTE_WRITE)
            .is_ok());
        assert_eq!(
            t.check_remote(PD, 7, rkey, 0x1000, 8, AccessFlags::REMOTE_READ)
                .err(),
            Some(AccessError::NoPermission)
        );
        assert!(t.windows_allow(mr, AccessFlags::MW_BIND | AccessFlags::LOCAL_WRITE));
        assert!(
            !t.windows_allow(mr, AccessFlags::MW_BIND),
            "a writable window needs local write"
        );
        assert!(
            !t.windows_allow(mr, AccessFlags::LOCAL_WRITE),
            "windows need bind rights"
        );
        assert!(
            t.windows_allow(mr ^ 0x100, AccessFlags::empty()),
            "another region's key"
        );
    }

    #[test]
    fn test_type2_bind_use_invalidate() {
        let (mut t, mr) = table();
        let mw = t.alloc_window(PD, MwType::Type2).unwrap();
        // Unbound: names nothing.
        assert_eq!(
            t.check_remote(PD, 7, mw, 0x1000, 8, AccessFlags::REMOTE_READ)
                .err(),
            Some(AccessError::BadKey(mw))
        );
        let b = bind(
            mw,
            mw as u8 ^ 1,
            mr,
            0x1100,
            0x100,
            AccessFlags::REMOTE_WRITE,
        );
        t.bind_window(PD, 7, &b).unwrap();
        let rkey = b.new_rkey;
        // The old rkey is dead, the new one works inside the window only, on QP 7 only,
        // for the granted right only.
        assert!(t.window(mw).is_none());
        let (_, off) = t
            .check_remote(PD, 7, rkey, 0x1100, 0x100, AccessFlags::REMOTE_WRITE)
            .unwrap();
        assert_eq!(off, 0x100);
        assert_eq!(
            t.check_remote(PD, 7, rkey, 0x10ff, 2, AccessFlags::REMOTE_WRITE)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check_remote(PD, 7, rkey, 0x11f8, 9, AccessFlags::REMOTE_WRITE)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check_remote(PD, 8, rkey, 0x1100, 8, AccessFlags::REMOTE_WRITE)
                .err(),
            Some(AccessError::WrongQp)
        );
        assert_eq!(
            t.check_remote(PD, 7, rkey, 0x1100, 8, AccessFlags::REMOTE_READ)
                .err(),
            Some(AccessError::NoPermission)
        );
        assert_eq!(
            t.check_remote(PdHandle(2), 7, rkey, 0x1100, 8, AccessFlags::REMOTE_WRITE)
                .err(),
            Some(AccessError::WrongPd)
        );
        // Bound: the region stays, and a second bind is refused.
        assert_eq!(t.windows_bound_to(mr), 1);
        assert_eq!(
            t.bind_window(
                PD,
                7,
                &bind(rkey, 9, mr, 0x1000, 8, AccessFlags::REMOTE_READ)
            ),
            Err(MwError::AlreadyBound)
        );
        // Invalidated: the rkey names nothing; invalidating again fails; rebinding works.
        t.invalidate(rkey, Invalidator::Local { pd: PD }).unwrap();
        assert_eq!(
            t.check_remote(PD, 7, rkey, 0x1100, 8, AccessFlags::REMOTE_WRITE)
                .err(),
            Some(AccessError::BadKey(rkey))
        );
        assert_eq!(
            t.invalidate(rkey, Invalidator::Local { pd: PD }),
            Err(MwError::NotBound)
        );
        assert_eq!(t.windows_bound_to(mr), 0);
        t.bind_window(
            PD,
            9,
            &bind(rkey, 3, mr, 0x1000, 8, AccessFlags::REMOTE_READ),
        )
        .unwrap();
        t.dealloc_window(rkey).unwrap();
        assert_eq!(t.windows_bound_to(mr), 0);
    }

    #[test]
    fn test_bind_checks() {
        let (mut t, mr) = table();
        let no_bind = t
            .register(
                PD,
                0,
                64,
                AccessFlags::LOCAL_WRITE,
                Arc::new(VecMemory::new(64)),
            )
            .unwrap();
        let read_only = t
            .register(
                PD,
                0,
                64,
                AccessFlags::MW_BIND,
                Arc::new(VecMemory::new(64)),
            )
            .unwrap();
        let other_pd = t
            .register(PdHandle(2), 0, 64, RW, Arc::new(VecMemory::new(64)))
            .unwrap();
        let mw = t.alloc_window(PD, MwType::Type2).unwrap();
        let w = AccessFlags::REMOTE_WRITE;
        for (b, qp_pd, err) in [
            (bind(mw, 1, no_bind, 0, 8, w), PD, MwError::NoBindAccess),
            (
                bind(mw, 1, read_only, 0, 8, w),
                PD,
                MwError::NeedsLocalWrite,
            ),
            (
                bind(mw, 1, other_pd, 0, 8, w),
                PD,
                MwError::NoSuchRegion(other_pd),
            ),
            (bind(mw, 1, mr, 0x1f00, 0x101, w), PD, MwError::OutOfBounds),
            (bind(mw, 1, mr, 0x1000, 0, w), PD, MwError::WrongType),
            (bind(mw, 1, mr, 0x1000, 8, w), PdHandle(2), MwError::WrongPd),
            (
                bind(mw, 1, mr, 0x1000, 8, AccessFlags::MW_BIND),
                PD,
                MwError::BadAccess(AccessFlags::MW_BIND.bits()),
            ),
            (
                bind(mw ^ 0x100, 1, mr, 0x1000, 8, w),
                PD,
                MwError::NoSuchWindow(mw ^ 0x100),
            ),
            (
                MwBind {
                    new_rkey: mr,
                    ..bind(mw, 1, mr, 0x1000, 8, w)
                },
                PD,
                MwError::ForeignRkey(mr),
            ),
        ] {
            assert_eq!(t.bind_window(qp_pd, 1, &b), Err(err), "{b:?}");
        }
        // A read-only window over a region without local write is fine.
        t.bind_window(
            PD,
            1,
            &bind(mw, 1, read_only, 0, 8, AccessFlags::REMOTE_READ),
        )
        .unwrap();
    }

    #[test]
    fn test_type1_rebind_unbind_and_no_invalidation() {
        let (mut t, mr) = table();
        let mw = t.alloc_window(PD, MwType::Type1).unwrap();
        let b1 = bind(
            mw,
            mw as u8 ^ 0x10,
            mr,
            0x1000,
            64,
            AccessFlags::REMOTE_READ,
        );
        // Type 1 windows serve any QP of the domain and can be rebound while bound.
        t.bind_window(PD, 1, &b1).unwrap();
        assert!(t
            .check_remote(PD, 99, b1.new_rkey, 0x1000, 64, AccessFlags::REMOTE_READ)
            .is_ok());
        let b2 = bind(b1.new_rkey, 0x77, mr, 0x1800, 64, AccessFlags::REMOTE_READ);
        t.bind_window(PD, 1, &b2).unwrap();
        assert_eq!(
            t.check_remote(PD, 99, b2.new_rkey, 0x1000, 64, AccessFlags::REMOTE_READ)
                .err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.invalidate(b2.new_rkey, Invalidator::Local { pd: PD }),
            Err(MwError::WrongType)
        );
        // Length 0 unbinds.
        let b3 = bind(b2.new_rkey, 0x78, 0, 0, 0, AccessFlags::REMOTE_READ);
        t.bind_window(PD, 1, &b3).unwrap();
        assert_eq!(t.windows_bound_to(mr), 0);
        assert!(t
            .check_remote(PD, 1, b3.new_rkey, 0x1000, 1, AccessFlags::REMOTE_READ)
            .is_err());
        // A region's key is not a window's, and cannot be invalidated.
        assert_eq!(
            t.invalidate(mr, Invalidator::Local { pd: PD }),
            Err(MwError::RegionKey(mr))
        );
        assert!(
            t.get(b3.new_rkey).is_none(),
            "a window's rkey is never an lkey"
        );
    }

    #[test]
    fn test_only_the_windows_domain_and_qp_revoke_it() {
        let (mut t, mr) = table();
        let mw = t.alloc_window(PD, MwType::Type2).unwrap();
        let b = bind(mw, 9, mr, 0x1000, 64, AccessFlags::REMOTE_READ);
        t.bind_window(PD, 4, &b).unwrap();
        let other_pd = Invalidator::Local { pd: PdHandle(2) };
        let other_qp = Invalidator::Remote { pd: PD, qpn: 5 };
        assert_eq!(t.invalidate(b.new_rkey, other_pd), Err(MwError::WrongPd));
        assert_eq!(t.invalidate(b.new_rkey, other_qp), Err(MwError::WrongPd));
        assert_eq!(
            t.windows_bound_to(mr),
            1,
            "a refused invalidation changes nothing"
        );
        t.invalidate(b.new_rkey, Invalidator::Remote { pd: PD, qpn: 4 })
            .unwrap();
        assert_eq!(t.windows_bound_to(mr), 0);
    }

    #[test]
    fn test_destroyed_qp_frees_its_windows() {
        let (mut t, mr) = table();
        let mw = t.alloc_window(PD, MwType::Type2).unwrap();
        let b = bind(mw, 5, mr, 0x1000, 64, AccessFlags::REMOTE_READ);
        t.bind_window(PD, 4, &b).unwrap();
        t.unbind_qp_windows(3);
        assert_eq!(t.windows_bound_to(mr), 1);
        t.unbind_qp_windows(4);
        assert_eq!(t.windows_bound_to(mr), 0);
        assert!(t
            .check_remote(PD, 4, b.new_rkey, 0x1000, 8, AccessFlags::REMOTE_READ)
            .is_err());
    }
}
