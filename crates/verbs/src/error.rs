//! Typed errors, one per operation. An `Err` means nothing happened (like an errno return of
//! ibverbs); problems found while a work request executes are reported in its completion's
//! [`WcStatus`](crate::WcStatus) instead, as on hardware.

use crate::QpState;

/// [`Device::open`](crate::Device::open) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenDeviceError {
    /// The UDP socket could not be opened or bound (address in use, not a local address...).
    #[error(transparent)]
    Socket(#[from] softrdma_udp::OpenError),
    /// Another device is attached to the address on the
    /// [`LocalFabric`](crate::LocalFabric) the config names.
    #[error("{addr} is in use on the local fabric")]
    FabricAddressInUse {
        /// The address.
        addr: std::net::SocketAddr,
    },
    /// Port 0 was asked for on a [`LocalFabric`](crate::LocalFabric) and every port of the
    /// ephemeral range (49152–65535) is taken at the address.
    #[error("no free port at {ip} on the local fabric")]
    FabricPortsExhausted {
        /// The address.
        ip: std::net::IpAddr,
    },
    /// A wildcard address was given; the ICRC covers the source address, so a device needs a
    /// specific one.
    #[error("a device must be bound to a specific IP address, not a wildcard")]
    Unspecified,
    /// The wake-up eventfd could not be created.
    #[error("cannot create the progress thread's wake-up fd: {0}")]
    Wake(std::io::Error),
    /// The progress thread could not be started.
    #[error("cannot start the progress thread: {0}")]
    Thread(std::io::Error),
    /// [`DeviceConfig::faults`](crate::DeviceConfig::faults) holds a probability outside
    /// 0..=1 or a delay above [`MAX_DELAY_US`](crate::MAX_DELAY_US).
    #[error("fault injection: {0}")]
    Faults(#[from] crate::FaultSpecError),
    /// The address could not be shared with the other devices on it (see
    /// [`DeviceConfig::share_address`](crate::DeviceConfig::share_address)).
    #[error(transparent)]
    Share(#[from] crate::ShareError),
    /// The pcap file of [`DeviceConfig::pcap`](crate::DeviceConfig::pcap) could not be created.
    #[error("cannot create pcap file {}: {source}", path.display())]
    Pcap {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A query named something that does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Only port 1 exists.
    #[error("no port {0} (a softrdma device has port 1 only)")]
    NoSuchPort(u8),
    /// The GID table has no such index (it has [`crate::gid::GID_TABLE_LEN`]).
    #[error("no GID at index {0}")]
    NoSuchGid(u32),
    /// The index is within the GID table, but holds no GID (ibverbs: `ENODATA`).
    #[error("GID index {0} is empty")]
    EmptyGid(u32),
}

/// Registering a memory region failed (`ibv_reg_mr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegMrError {
    /// Remote write or atomic access was asked for without local write (ibverbs: EINVAL).
    #[error("remote write/atomic access requires local write access")]
    AccessNeedsLocalWrite,
    /// The memory could not be allocated.
    #[error("cannot allocate {0} bytes")]
    OutOfMemory(usize),
    /// The range wraps around the address space or is otherwise invalid.
    #[error("invalid memory range: {0}")]
    InvalidRange(&'static str),
    /// The device already holds its maximum of memory regions (`max_mr`).
    #[error("too many memory regions")]
    TooMany,
}

/// Allocating a memory window failed (`ibv_alloc_mw`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocMwError {
    /// The device's key space (regions and windows together) is full.
    #[error("too many memory regions and windows")]
    TooMany,
}

/// Creating a completion queue failed (`ibv_create_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CreateCqError {
    /// More entries than the device's `max_cqe` (ibverbs: EINVAL).
    #[error("{requested} CQ entries requested; the device allows {max}")]
    TooManyEntries {
        /// Entries asked for.
        requested: u32,
        /// The device limit.
        max: u32,
    },
    /// The CQ's event descriptor could not be created (out of file descriptors).
    #[error("could not create the CQ's event descriptor: {0}")]
    EventFd(std::io::ErrorKind),
}

/// Resizing a completion queue was refused (`ibv_resize_cq`; ibverbs: EINVAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResizeCqError {
    /// More entries than the device's `max_cqe`.
    #[error("{requested} CQ entries requested; the device allows {max}")]
    TooManyEntries {
        /// Entries asked for.
        requested: u32,
        /// The device limit.
        max: u32,
    },
    /// More completions wait in the CQ than the new size holds: poll them first.
    #[error("{waiting} completions wait in the CQ, more than {requested} entries hold")]
    TooManyWaiting {
        /// Entries asked for.
        requested: u32,
        /// Completions waiting.
        waiting: usize,
    },
}

/// A completion channel operation on a CQ was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AttachChannelError {
    /// The CQ already reports to a channel.
    #[error("the completion queue is already attached to a completion channel")]
    AlreadyAttached,
    /// `req_notify` on a CQ without a channel: the event would go nowhere (ibverbs: EINVAL).
    #[error("the completion queue has no completion channel")]
    NoChannel,
}

/// Creating a queue pair failed (`ibv_create_qp`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateQpError {
    /// A capability is beyond the device's limits, or both queues are empty.
    #[error("invalid QP capabilities: {0}")]
    InvalidCaps(&'static str),
    /// The completion queues belong to another device.
    #[error("completion queue of another device")]
    WrongDevice,
}

/// `modify` of a queue pair was refused (`ibv_modify_qp`); the QP is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModifyQpError {
    /// The state machine refused the transition or an attribute (see the inner error).
    #[error(transparent)]
    Transition(#[from] softrdma_proto::ModifyQpError),
    /// The destination address is of another IP family than the device's.
    #[error("destination {0} is not reachable from this device's address family")]
    AddressFamily(std::net::IpAddr),
    /// The path MTU is larger than the port's `max_mtu`.
    #[error("path MTU larger than the port's max_mtu")]
    MtuTooLarge,
    /// The remote GID names no IP address (the all-zero GID of a peer without a GID).
    #[error("remote GID {0} is not an IP address")]
    NoAddress(crate::Gid),
}

/// Why one work request could not be posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostErrorKind {
    /// The QP's state does not accept this post (e.g. a send before RTS; ibverbs: EINVAL).
    #[error("QP in state {} does not accept this work request", .0.name())]
    InvalidState(QpState),
    /// The work queue is full (ibverbs: ENOMEM).
    #[error("work queue full")]
    QueueFull,
    /// The work request is malformed (too many SGEs, inline too long, misaligned atomic...).
    #[error("invalid work request: {0}")]
    InvalidArgument(&'static str),
    /// The message is longer than the port's `max_msg_sz`.
    #[error("message of {0} bytes exceeds max_msg_sz")]
    MessageTooLong(u64),
}

/// `post_send` stopped at a work request (ibverbs' `bad_wr`): the ones before `bad_wr` were
/// posted, it and the ones after were not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("post_send failed at work request {bad_wr}: {kind}")]
pub struct PostSendError {
    /// Index (in the batch) of the first work request not posted.
    pub bad_wr: usize,
    /// Why.
    pub kind: PostErrorKind,
}

/// `post_recv` stopped at a work request (ibverbs' `bad_wr`): the ones before `bad_wr` were
/// posted, it and the ones after were not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("post_recv failed at work request {bad_wr}: {kind}")]
pub struct PostRecvError {
    /// Index (in the batch) of the first work request not posted.
    pub bad_wr: usize,
    /// Why.
    pub kind: PostErrorKind,
}

impl PostErrorKind {
    pub(crate) fn from_engine(e: softrdma_proto::EngineError) -> PostErrorKind {
        use softrdma_proto::EngineError as E;
        match e {
            E::InvalidState(s) => PostErrorKind::InvalidState(s),
            E::QueueFull => PostErrorKind::QueueFull,
            E::InvalidArgument(s) => PostErrorKind::InvalidArgument(s),
            E::NoSuchQp => PostErrorKind::InvalidState(QpState::Reset),
            _ => PostErrorKind::InvalidArgument("rejected by the engine"),
        }
    }
}

/// Creating or modifying a shared receive queue failed (`ibv_create_srq`, `ibv_modify_srq`);
/// nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SrqError {
    /// The attributes are out of range (`max_wr`/`max_sge` 0 or beyond the device's limits,
    /// a limit above `max_wr`, `max_wr` below the work requests held); ibverbs: EINVAL.
    #[error("invalid SRQ attributes: {0}")]
    InvalidAttr(&'static str),
    /// The protection domain is gone (ibverbs: EINVAL).
    #[error("no such protection domain")]
    NoSuchPd,
    /// The protection domain, CQ and XRC domain of an XRC SRQ are not all of one device.
    #[error("protection domain, completion queue or XRC domain of another device")]
    WrongDevice,
}

impl SrqError {
    pub(crate) fn from_engine(e: softrdma_proto::EngineError) -> SrqError {
        use softrdma_proto::EngineError as E;
        match e {
            E::InvalidArgument(s) => SrqError::InvalidAttr(s),
            E::NoSuchPd => SrqError::NoSuchPd,
            _ => SrqError::InvalidAttr("refused by the engine"),
        }
    }
}

/// Creating an address handle failed (`ibv_create_ah`); nothing was created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateAhError {
    /// Only port 1 exists.
    #[error("no port {0} (a softrdma device has port 1 only)")]
    NoSuchPort(u8),
    /// The source GID index is not in the table.
    #[error("no GID at index {0}")]
    NoSuchGid(u8),
    /// The source GID is not the address this device sends from (index 2, the link-local GID:
    /// use 0 or 1, see [`crate::gid`]).
    #[error(
        "source GID {index} ({gid}) is not the device's address {local}; use the GID of {local}"
    )]
    SourceGid {
        /// The index given.
        index: u8,
        /// The GID at that index.
        gid: crate::Gid,
        /// The device's address.
        local: std::net::IpAddr,
    },
    /// The destination GID is not an IP address (the all-zero GID).
    #[error("destination GID {0} is not an IP address")]
    NotAnAddress(crate::Gid),
    /// The destination is of the other IP family than the device (or unspecified).
    #[error("destination {dest} is not reachable from this device's address family ({local})")]
    AddressFamily {
        /// The destination address.
        dest: std::net::IpAddr,
        /// The device's address.
        local: std::net::IpAddr,
    },
    /// The host has no route to the destination.
    #[error("no route to {dest}: {source}")]
    Unreachable {
        /// The destination address.
        dest: std::net::IpAddr,
        /// The routing lookup's error.
        source: std::io::Error,
    },
}

/// Attaching a QP to a multicast group, or detaching it, failed (`ibv_attach_mcast`,
/// `ibv_detach_mcast`); nothing changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McastError {
    /// Only UD QPs join groups (ibverbs: EINVAL).
    #[error("only UD queue pairs join multicast groups")]
    NotUd,
    /// The GID is not a multicast address of the device's family.
    #[error("{0} is not a multicast group of this device's address family")]
    NotAGroup(crate::Gid),
    /// Detaching a QP that was not attached.
    #[error("the QP is not attached to {0}")]
    NotAttached(crate::Gid),
    /// The host refused to join the IP multicast group (no multicast route on the interface).
    #[error(transparent)]
    Join(#[from] softrdma_udp::MulticastError),
}
