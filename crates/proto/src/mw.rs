//! Memory windows (IBTA 10.6.7; ibverbs `ibv_alloc_mw`, `ibv_bind_mw`, `IBV_WR_BIND_MW`,
//! `IBV_WR_LOCAL_INV`, `IBV_WR_SEND_WITH_INV`).
//!
//! A window is an rkey of its own that exposes part of a registered region, with its own
//! rights, and that can be moved or revoked without re-registering the region: storage
//! targets hand one out per I/O and have the client's SEND_WITH_INV revoke it in the same
//! message that ends the I/O. The remote-memory model, as enforced here:
//!
//! - A peer reaches memory only through an rkey naming a live region of the responder QP's
//!   protection domain that grants the right, or a *bound* window of that domain that grants
//!   it; for a window, the whole access must lie inside the window (rxe checks only the
//!   region's bounds; the window's are what IBTA promises the application).
//! - A type 2 window is usable only through the QP that bound it (IBTA C10-72 ff.); a type 1
//!   window through any QP of its domain.
//! - Binding needs `MW_BIND` on the region, local write on it for a writable window, the
//!   range inside the region, and (beyond rxe, which does not check) the region in the
//!   window's protection domain — a window never widens what a domain can reach.
//! - Only a QP of the window's domain invalidates it (LOCAL_INV), and a peer only through the
//!   QP a type 2 window serves (SEND_WITH_INV); rxe checks neither. An invalidated window
//!   names nothing at once: the next packet using its rkey is answered with a remote access
//!   NAK. A region with windows bound cannot be deregistered (rxe:
//!   `EINVAL`), so a bound window never outlives its bytes.
//!
//! Windows share the key space of regions (see [`crate::mr::MrTable`], whose window
//! operations are in `mr/windows.rs`): their keys are as unpredictable, and a window's rkey
//! never names a region.

use crate::access::AccessFlags;
use crate::pd::PdHandle;

/// The two kinds of memory windows (ibverbs `enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound by `ibv_bind_mw` through any QP of its domain; can be rebound, not invalidated.
    Type1,
    /// Bound by a BIND_MW work request, tied to the binding QP, revoked by LOCAL_INV or a
    /// peer's SEND_WITH_INV; must be invalidated before it is bound again.
    Type2,
}

/// The engine's record of one memory window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryWindow {
    /// The current rkey (its low byte changes with every bind).
    pub rkey: u32,
    /// Owning protection domain.
    pub pd: PdHandle,
    /// Kind.
    pub mw_type: MwType,
    /// What the window exposes; `None` for an unbound window (a type 2 window in the free
    /// state, or a type 1 window of length 0).
    pub binding: Option<MwBinding>,
}

/// What a bound window exposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBinding {
    /// Key of the region underneath.
    pub mr_key: u32,
    /// First byte exposed.
    pub addr: u64,
    /// Bytes exposed (never 0).
    pub length: u64,
    /// Rights granted to peers.
    pub access: AccessFlags,
    /// The QP a type 2 window was bound through: the only one it serves.
    pub qpn: Option<u32>,
}

/// Why a bind, an invalidation or a deallocation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MwError {
    /// The key names no window (or a window whose key has since changed).
    #[error("no memory window with rkey {0:#x}")]
    NoSuchWindow(u32),
    /// The new rkey's index part is not the window's.
    #[error("the new rkey {0:#x} does not name the window")]
    ForeignRkey(u32),
    /// A type 2 window must be invalidated before it is bound again (IBTA o10-37.2.30).
    #[error("type 2 memory window is already bound")]
    AlreadyBound,
    /// Type 2 windows are bound only through a QP of their own domain (IBTA C10-72).
    #[error("memory window belongs to another protection domain")]
    WrongPd,
    /// Type 2 windows cannot be bound with length 0; type 1 windows cannot be invalidated.
    #[error("operation not allowed for this window type")]
    WrongType,
    /// No region with that lkey, or one of another protection domain.
    #[error("no memory region with lkey {0:#x} in the window's protection domain")]
    NoSuchRegion(u32),
    /// The region was registered without `MW_BIND` (IBTA C10-73).
    #[error("memory region does not allow window binding")]
    NoBindAccess,
    /// A writable or atomic window over a region without local write (IBTA C10-74).
    #[error("writable window over a region without local write access")]
    NeedsLocalWrite,
    /// Rights other than remote read, write and atomic (and local write, accepted as rxe does).
    #[error("unsupported window access flags {0:#x}")]
    BadAccess(u32),
    /// The window's range is not inside the region (IBTA C10-75).
    #[error("window range outside the memory region")]
    OutOfBounds,
    /// Nothing is bound: there is nothing to invalidate.
    #[error("memory window is not bound")]
    NotBound,
    /// The key names a memory region. User regions cannot be invalidated (only
    /// fast-registered ones can, which softrdma does not have), as on rxe.
    #[error("rkey {0:#x} names a memory region, which cannot be invalidated")]
    RegionKey(u32),
}

/// Who asks for an invalidation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidator {
    /// A LOCAL_INV work request of a QP of protection domain `pd`.
    Local {
        /// The QP's protection domain.
        pd: PdHandle,
    },
    /// A peer's SEND_WITH_INV arriving on QP `qpn` of protection domain `pd`.
    Remote {
        /// The receiving QP's protection domain.
        pd: PdHandle,
        /// The receiving QP.
        qpn: u32,
    },
}
