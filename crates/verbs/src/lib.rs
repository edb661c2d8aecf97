//! RDMA verbs in userspace, over the real RoCEv2 wire protocol (UDP port 4791).
//!
//! `softrdma` gives a program the ibverbs object model — devices, protection domains, memory
//! regions, completion queues, queue pairs, work requests and completions — and moves the data
//! with InfiniBand's reliable-connected transport encapsulated in UDP/IP, exactly as a RoCEv2
//! NIC or Linux Soft-RoCE (`rdma_rxe`) does. No RDMA hardware, kernel module or root is
//! needed, and the peer may be another softrdma device or a real RoCEv2 implementation.
//!
//! | ibverbs | softrdma |
//! |---|---|
//! | `ibv_open_device` / `ibv_context` | [`Device::open`] / [`Device`] (one per local IP address) |
//! | `ibv_query_device`, `ibv_query_port`, `ibv_query_gid` | [`Device::query_device`], [`Device::query_port`], [`Device::query_gid`] |
//! | `ibv_alloc_pd` | [`Device::alloc_pd`] → [`ProtectionDomain`] |
//! | `ibv_reg_mr` | [`ProtectionDomain::reg_mr`] (softrdma allocates), `unsafe` [`ProtectionDomain::reg_mr_raw`] (your memory) → [`MemoryRegion`] |
//! | `ibv_create_cq`, `ibv_poll_cq`, completion channel | [`Device::create_cq`] → [`CompletionQueue`]: [`poll`](CompletionQueue::poll), [`wait`](CompletionQueue::wait), [`ready`](CompletionQueue::ready)`.await` |
//! | `ibv_comp_channel`, `ibv_req_notify_cq`, `ibv_get_cq_event` | [`CompletionChannel`], [`CompletionQueue::attach_channel`], [`CompletionQueue::req_notify`], [`CompletionChannel::get_event`] |
//! | `ibv_get_async_event` (the context's `async_fd`) | [`Device::async_events`] → [`AsyncEvents`] |
//! | `ibv_create_qp`, `ibv_modify_qp` | [`ProtectionDomain::create_qp`] → [`QueuePair`]: [`modify`](QueuePair::modify) with [`QpAttr`], or [`connect`](QueuePair::connect) |
//! | `ibv_post_send`, `ibv_post_recv` (with `bad_wr`) | [`QueuePair::post_send`], [`QueuePair::post_recv`] → [`PostSendError::bad_wr`] |
//! | `ibv_wc`, `ibv_wc_status` | [`WorkCompletion`], [`WcStatus`] |
//!
//! Work requests are the engine's [`SendWr`] and [`RecvWr`]; the [`wr`] module has shorthands.
//!
//! # Example
//! Two devices in one process, on two loopback addresses; a SEND, then an RDMA WRITE the
//! receiving application never sees.
//! ```
//! use softrdma::{wr, AccessFlags, ConnectOptions, Device, DeviceConfig, QpInitAttr, WcStatus};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let a = Device::open(DeviceConfig::new("127.0.9.1".parse()?))?;
//! let b = Device::open(DeviceConfig::new("127.0.9.2".parse()?))?;
//! let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
//! let (pd_a, pd_b) = (a.alloc_pd(), b.alloc_pd());
//! let (mr_a, mr_b) = (pd_a.reg_mr(4096, access)?, pd_b.reg_mr(4096, access)?);
//! let (cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
//! let qp_a = pd_a.create_qp(&QpInitAttr::rc(&cq_a))?;
//! let qp_b = pd_b.create_qp(&QpInitAttr::rc(&cq_b))?;
//! // Exchange endpoints out of band (here: directly) and connect both sides.
//! qp_a.connect(&qp_b.endpoint(), &ConnectOptions::default())?;
//! qp_b.connect(&qp_a.endpoint(), &ConnectOptions::default())?;
//!
//! // SEND / RECV.
//! qp_b.post_recv([wr::recv(1, vec![mr_b.sge(0, 4096)])])?;
//! mr_a.write(0, b"hello, RDMA")?;
//! qp_a.post_send([wr::send(2, vec![mr_a.sge(0, 11)])])?;
//! let mut wcs = Vec::new();
//! while wcs.len() < 1 {
//!     cq_b.poll_blocking(1, &mut wcs, Some(Duration::from_secs(5)));
//! }
//! assert_eq!((wcs[0].status, wcs[0].byte_len), (WcStatus::Success, 11));
//! assert_eq!(mr_b.read_vec(0, 11)?, b"hello, RDMA");
//!
//! // One-sided WRITE into b's region: b's application takes no part.
//! let remote = mr_b.remote();
//! mr_a.write(100, b"written")?;
//! qp_a.post_send([wr::write(3, vec![mr_a.sge(100, 7)], remote.at(2048), remote.rkey)])?;
//! let wc = loop {
//!     if let Some(wc) = cq_a.poll_one().filter(|wc| wc.wr_id == 3) {
//!         break wc;
//!     }
//!     cq_a.wait(Some(Duration::from_secs(5)));
//! };
//! assert_eq!(wc.status, WcStatus::Success);
//! assert_eq!(mr_b.read_vec(2048, 7)?, b"written");
//! # Ok(())
//! # }
//! ```
//!
//! # Memory model
//! A memory region is shared by three parties: the application, the local device (which
//! gathers SEND/WRITE payloads from it and scatters received data and READ/atomic results into
//! it), and remote peers holding its rkey. The device's progress thread may write a region at
//! any time — an RDMA WRITE from a peer needs no action by the local application — so handing
//! out `&[u8]` or `&mut [u8]` into a region would allow data races, which are undefined
//! behaviour in Rust. softrdma therefore:
//!
//! - never gives safe code a reference into region memory. The application copies in and out
//!   with [`MemoryRegion::read`], [`write`](MemoryRegion::write),
//!   [`read_u64`](MemoryRegion::read_u64), [`write_u64`](MemoryRegion::write_u64),
//!   [`to_vec`](MemoryRegion::to_vec); [`as_ptr`](MemoryRegion::as_ptr) exists for FFI, and
//!   using it is `unsafe` code's responsibility;
//! - performs every access to region memory, its own and the application's copies alike, with
//!   atomic operations: memory softrdma allocates ([`ProtectionDomain::reg_mr`]) is a
//!   page-aligned array of 8-byte words, always accessed as whole [`AtomicU64`] words
//!   (partial words by compare-exchange), so concurrent accesses are never a data race and
//!   never even mixed-size. Stores release and loads acquire, in ascending address order:
//!   observing the last word of an incoming WRITE packet with `read_u64` implies observing
//!   the rest of that packet's data. Bytes may still be *torn* between concurrent
//!   writers at word granularity, as on real RDMA hardware — ordering is what completions are
//!   for;
//! - keeps [device memory](DeviceMemory) (`ibv_alloc_dm`) out of the application's reach
//!   altogether: it is memory of the library, copied in and out in 4-byte units
//!   ([`DeviceMemory::copy_to`], [`copy_from`](DeviceMemory::copy_from)) and reached by the
//!   device through zero-based regions on it ([`ProtectionDomain::reg_dm_mr`]) under the
//!   same rules as any region; each region holds the memory, so none outlives it;
//! - runs remote atomics (CMP_SWAP, FETCH_ADD) as real [`AtomicU64`] operations on the 8-byte
//!   aligned word, in host byte order (like rxe and RoCE NICs), so they are atomic with
//!   respect to local CPU atomics too;
//! - lets a remote peer touch exactly `[addr, addr + len)` of a region whose rkey it presents,
//!   with the rights the region grants (REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC) and the
//!   QP allows (`qp_access_flags`), in the QP's protection domain. The engine checks key,
//!   PD, bounds and rights before any access and answers violations with a NAK
//!   (the requester sees [`WcStatus::RemAccessErr`]); local SGEs are checked the same way
//!   ([`WcStatus::LocProtErr`]);
//! - makes rkeys unguessable, since RoCE has no authentication and an rkey is all that stands
//!   between registered memory and any host that can reach UDP port 4791: each registration
//!   draws a random key byte and a scrambled 24-bit index from a seed the device takes from
//!   the operating system, so a blind guess names one of `L` live regions with odds of at
//!   most `L / 2^32`; every wrong key a peer tries costs it its connection (the remote access
//!   NAK moves the QP to the error state) and is counted
//!   ([`Stats::naks_sent`](softrdma_proto::Stats::naks_sent), kind `remote_access`);
//! - accepts a connected QP's packets only from the address it was connected to (others
//!   are dropped and counted as [`DropReason::WrongSource`]), and, with
//!   [`DeviceConfig::allowed_peers`], any datagram only from the listed networks. A host that
//!   can send with a *spoofed* source address (on the same L2 segment, or through routers
//!   without source validation) is not stopped by either: it still needs the QPN, the PSN
//!   the responder expects next and a live rkey;
//! - keeps a region's memory alive while the engine may use it: the region's table entry holds
//!   a reference, and dropping the last [`MemoryRegion`] handle deregisters it under the device
//!   lock, after which nothing touches the memory. For [`ProtectionDomain::reg_mr_raw`] the
//!   caller promises the memory outlives the registration — and, since the application can
//!   reach that memory by itself, that its accesses which may race with softrdma's are
//!   atomics of the *same sizes*: 8-byte words wholly inside the range, single bytes at its
//!   ends ([`MemoryRegion::atomic_words`]); racing atomics of different sizes are undefined
//!   behaviour in Rust, and no scheme could avoid naming sizes (see `reg_mr_raw`'s safety
//!   section for the rule, overlapping registrations included). Local atomics on region
//!   memory use the very words softrdma uses: [`MemoryRegion::atomic_u64`].
//!
//! As in ibverbs, the application must not change a buffer a posted send WR reads until the
//! WR completes (a retransmission re-reads it); doing so is not unsound, the peer just gets
//! the new bytes.
//!
//! # Threads and progress
//! Each device has a progress thread: the software NIC. It owns the UDP socket and the
//! transport state, receives in `recvmmsg` batches, answers READs and atomics and places WRITE
//! data without the application's involvement, runs the retransmission and RNR timers,
//! transmits in `sendmmsg` batches, and wakes completion waiters. It sleeps in `ppoll(2)` on
//! the socket and an eventfd unless [`DeviceConfig::busy_poll`] is set. Posting takes the
//! device lock briefly and, by default, transmits the new packets on the posting thread
//! ([`DeviceConfig::inline_transmit`]); it never waits for the network.
//!
//! A thread blocked in [`CompletionQueue::wait`] (or `poll_blocking`) drives the device
//! itself: it sleeps on the socket and on its CQ's event fd, so the datagram that completes
//! its work wakes *it* rather than the progress thread, which would then have to wake it in
//! turn. While such a thread waits, the progress thread leaves the socket to it and keeps the
//! timers.
//!
//! [`DeviceConfig::pcap`] taps the device: every datagram it sends and receives goes to a
//! pcap file, with synthesized IP/UDP headers that keep each ICRC verifiable (`softrdma
//! decode FILE`), so traffic can be inspected without root or tcpdump.
//!
//! Every object holds its parent (a QP its PD, CQs and device; an MR its PD), so drop order
//! does not matter. Dropping a QP moves it to the error state first, so its outstanding work
//! completes with [`WcStatus::WrFlushErr`]; dropping the last object of a device stops its
//! progress thread.
//!
//! [`AtomicU64`]: std::sync::atomic::AtomicU64

mod ah;
mod backend;
mod cq;
mod crc;
mod device;
mod dm;
mod error;
mod event;
mod fallible;
pub mod farewell;
mod faults;
pub mod gid;
mod limits;
mod memory;
mod mw;
mod netdev;
mod pd;
mod peers;
mod prefetch;
mod progress;
mod qp;
mod share;
mod srq;
mod stats;
mod tap;
mod wake;
pub mod wr;
mod xrc;

pub use ah::{AddressHandle, AhAttr};
pub use backend::{FabricStats, LocalFabric};
pub use cq::{CompletionQueue, CqReady};
pub use device::{
    AtomicCap, Device, DeviceAttr, DeviceConfig, LinkLayer, PortAttr, PortState, WeakDevice,
};
pub use dm::{
    AllocDmError, DeviceMemory, DmCopyError, DM_COPY_UNIT, MAX_DM_LOG_ALIGN, MAX_DM_SIZE,
};
pub use error::{
    AllocMwError, AttachChannelError, CreateAhError, CreateCqError, CreateQpError, McastError,
    ModifyQpError, OpenDeviceError, PostErrorKind, PostRecvError, PostSendError, QueryError,
    RegMrError, ResizeCqError, SrqError,
};
pub use event::{AsyncEvent, AsyncEvents, CompletionChannel};
pub use faults::{FaultConfig, FaultSpecError, MAX_DELAY_US, REORDER_SPAN};
pub use gid::{Gid, GidEntry, GidParseError, GidType};
pub use limits::{MAX_CQE, MAX_INLINE_DATA, MAX_MSG_SZ, MAX_QP_WR, MAX_SGE};
pub use mw::{MemoryWindow, MwBindInfo};
pub use pd::{CopyError, MemoryRegion, OutOfBounds, ProtectionDomain, RemoteRegion};
pub use peers::{IpNetwork, IpNetworkParseError};
pub use prefetch::{page_size, populate, PrefetchError};
pub use progress::IoCounters;
pub use qp::{ConnectOptions, QpEndpoint, QpInfo, QpInitAttr, QueuePair};
pub use share::{run_directory, ServiceClaim, ShareError, SharedAddressInfo};
pub use srq::SharedReceiveQueue;
pub use stats::DeviceStats;
pub use xrc::XrcDomain;

pub use softrdma_proto::cc::CcConfig;
/// A time on a device's clock: nanoseconds since the device opened (a completion's
/// [`timestamp`](WorkCompletion::timestamp); [`Device::clock_ns`] reads it as
/// `CLOCK_MONOTONIC`).
pub use softrdma_proto::Instant as DeviceTime;
pub use softrdma_proto::{
    AccessFlags, AddressVector, DropReason, FlushLevel, MemoryFault, Mtu, MwBind, MwType, NakKind,
    QpAttr, QpCaps, QpConfig, QpState, QpType, RecvWr, SendFlags, SendOp, SendWr, Sge, SrqAttr,
    Stats, UdDest, WcOpcode, WcStatus, WorkCompletion, FLUSH_GLOBAL, FLUSH_PERSISTENT, GSI_QKEY,
    MULTICAST_QPN,
};
pub use softrdma_wire::Psn;
pub use softrdma_wire::GRH_LEN;
