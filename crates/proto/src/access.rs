//! Access rights: what a memory region, a memory window or a queue pair grants (ibverbs
//! `IBV_ACCESS_*`). A leaf module: memory regions, work requests and QP attributes all speak it.

use std::fmt;

/// Memory access rights (ibverbs `IBV_ACCESS_*` bit values).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// The local HCA may write (needed for receives, READ results, atomic results).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// Remote peers may RDMA WRITE.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    /// Remote peers may RDMA READ.
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    /// Remote peers may perform atomics.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);
    /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND`).
    pub const MW_BIND: AccessFlags = AccessFlags(1 << 4);
    /// Remote peers may FLUSH for global visibility (`IBV_ACCESS_FLUSH_GLOBAL`, IBTA 1.5).
    pub const FLUSH_GLOBAL: AccessFlags = AccessFlags(1 << 8);
    /// Remote peers may FLUSH for persistence (`IBV_ACCESS_FLUSH_PERSISTENT`, IBTA 1.5).
    pub const FLUSH_PERSISTENT: AccessFlags = AccessFlags(1 << 9);

    const KNOWN: u32 = 0xf | (1 << 4) | (1 << 8) | (1 << 9);

    /// No rights.
    pub const fn empty() -> AccessFlags {
        AccessFlags(0)
    }
    /// Every right: local write, remote write, read and atomics, window binding, both FLUSH
    /// placement types.
    pub const fn all() -> AccessFlags {
        AccessFlags(Self::KNOWN)
    }
    /// From ibverbs bits; unknown bits are dropped.
    pub const fn from_bits_truncate(bits: u32) -> AccessFlags {
        AccessFlags(bits & Self::KNOWN)
    }
    /// The ibverbs bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// Whether every right in `other` is granted.
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::LOCAL_WRITE, "LOCAL_WRITE"),
            (Self::REMOTE_WRITE, "REMOTE_WRITE"),
            (Self::REMOTE_READ, "REMOTE_READ"),
            (Self::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (Self::MW_BIND, "MW_BIND"),
            (Self::FLUSH_GLOBAL, "FLUSH_GLOBAL"),
            (Self::FLUSH_PERSISTENT, "FLUSH_PERSISTENT"),
        ];
        let mut set = f.debug_set();
        for (flag, name) in names {
            if self.contains(flag) {
                set.entry(&format_args!("{name}"));
            }
        }
        set.finish()
    }
}
