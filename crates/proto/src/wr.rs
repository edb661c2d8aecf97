//! Work requests in, work completions out: the engine's side of the ibverbs queue model.

use crate::access::AccessFlags;
use crate::qp::attr::AddressVector;
use crate::time::Instant;

/// One scatter/gather element: `length` bytes at virtual address `addr` of the memory region
/// whose local key is `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Start address (in the MR's virtual address space).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// What a send work request does (ibverbs `ibv_wr_opcode` plus its operands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    /// Two-sided SEND.
    Send,
    /// SEND with 32-bit immediate data (delivered in the receiver's completion).
    SendWithImm {
        /// Immediate data.
        imm: u32,
    },
    /// SEND that asks the receiver to invalidate `rkey`.
    SendWithInv {
        /// The remote key to invalidate.
        rkey: u32,
    },
    /// One-sided RDMA WRITE of the SGL to `remote_addr`.
    RdmaWrite {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data (consumes a receive WQE at the target).
    RdmaWriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// One-sided RDMA READ from `remote_addr` into the SGL.
    RdmaRead {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// 8-byte compare and swap; the original value lands in the SGL (8 bytes).
    AtomicCmpSwap {
        /// Remote virtual address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// New value if the comparison succeeds.
        swap: u64,
    },
    /// 8-byte fetch and add; the original value lands in the SGL (8 bytes).
    AtomicFetchAdd {
        /// Remote virtual address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
    /// 8-byte atomic RDMA WRITE (IBTA 1.5 `ATOMIC_WRITE`, ibverbs `ibv_wr_atomic_write`): the
    /// 8 bytes of the SGL (or inline data) are stored at once, after every earlier operation
    /// of the QP has executed. Needs remote write access and an aligned target.
    AtomicWrite {
        /// Remote virtual address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// FLUSH (IBTA 1.5, ibverbs `ibv_wr_flush`): makes what earlier operations placed in the
    /// responder's memory globally visible and/or persistent. No data moves.
    Flush {
        /// Start of the range (ignored for [`FlushLevel::Region`]).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Length of the range (ignored for [`FlushLevel::Region`]).
        len: u32,
        /// Placement type: [`FLUSH_GLOBAL`] and/or [`FLUSH_PERSISTENT`].
        placement: u8,
        /// Selectivity level.
        level: FlushLevel,
    },
    /// Binds a memory window to part of a memory region (ibverbs `IBV_WR_BIND_MW`; a type 1
    /// window's `ibv_bind_mw` is this WR too, as in rdma-core). Executes locally when the
    /// requester reaches it, in order with the QP's other work; nothing goes on the wire.
    /// A failure completes with [`WcStatus::MwBindErr`] and moves the QP to the error state.
    BindMw(MwBind),
    /// Invalidates the rkey of a type 2 memory window bound through this QP's protection
    /// domain (ibverbs `IBV_WR_LOCAL_INV`), locally, in order. A failure completes with
    /// [`WcStatus::LocQpOpErr`], as on rxe.
    LocalInv {
        /// The rkey to invalidate.
        rkey: u32,
    },
}

/// The operands of a memory window bind (ibverbs `struct ibv_mw_bind_info` plus the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The window's current rkey.
    pub mw_rkey: u32,
    /// The rkey the window has once bound: its index part must be the window's; its low
    /// byte (the key) is the caller's choice (rdma-core's `ibv_inc_rkey` for type 1).
    pub new_rkey: u32,
    /// Local key of the region the window exposes part of (ignored when `length` is 0).
    pub mr_lkey: u32,
    /// First byte the window exposes (in the region's virtual address space).
    pub addr: u64,
    /// Bytes exposed; 0 unbinds a type 1 window (type 2 windows are unbound by invalidation).
    pub length: u64,
    /// Rights granted to remote peers (remote read / write / atomic).
    pub access: AccessFlags,
}

/// FLUSH placement type bit: global visibility (`IBV_FLUSH_GLOBAL`).
pub const FLUSH_GLOBAL: u8 = 1;
/// FLUSH placement type bit: persistence (`IBV_FLUSH_PERSISTENT`).
pub const FLUSH_PERSISTENT: u8 = 2;

/// What a FLUSH covers (the FETH's selectivity level).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushLevel {
    /// The range `[remote_addr, remote_addr + len)` (`IBV_FLUSH_RANGE`, 0).
    Range,
    /// The whole memory region the rkey names (`IBV_FLUSH_MR`, 1).
    Region,
}

impl SendOp {
    /// The completion opcode a successful WR of this kind reports.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
                WcOpcode::Send
            }
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::AtomicCmpSwap { .. } => WcOpcode::CompSwap,
            SendOp::AtomicFetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::AtomicWrite { .. } => WcOpcode::AtomicWrite,
            SendOp::Flush { .. } => WcOpcode::Flush,
            SendOp::BindMw(_) => WcOpcode::BindMw,
            SendOp::LocalInv { .. } => WcOpcode::LocalInv,
        }
    }

    /// Operations the requester executes itself, on its own memory tables, without a packet
    /// (ibverbs' local work requests: `BIND_MW`, `LOCAL_INV`).
    pub fn is_local(&self) -> bool {
        matches!(self, SendOp::BindMw(_) | SendOp::LocalInv { .. })
    }

    /// Operations answered from a responder resource (READ, the atomics, ATOMIC_WRITE and
    /// FLUSH): they count against `max_rd_atomic`, and a later ACK without their response
    /// means the response was lost.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::RdmaRead { .. }
                | SendOp::AtomicCmpSwap { .. }
                | SendOp::AtomicFetchAdd { .. }
                | SendOp::AtomicWrite { .. }
                | SendOp::Flush { .. }
        )
    }

    /// Operations that bring data back into the local SGL (READ, compare-and-swap,
    /// fetch-and-add): they need local write access and cannot be inline.
    pub fn writes_locally(&self) -> bool {
        matches!(
            self,
            SendOp::RdmaRead { .. } | SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. }
        )
    }

    /// Atomics operate on exactly 8 bytes.
    pub fn is_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. }
        )
    }

    /// The local access the SGL needs: READ and atomics write into local memory.
    pub fn local_access(&self) -> AccessFlags {
        if self.writes_locally() {
            AccessFlags::LOCAL_WRITE
        } else {
            AccessFlags::empty()
        }
    }
}

/// Send work request flags (ibverbs `IBV_SEND_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(u8);

impl SendFlags {
    /// Generate a completion on success (errors always complete).
    pub const SIGNALED: SendFlags = SendFlags(1 << 0);
    /// Wait for earlier READs and atomics to complete before starting.
    pub const FENCE: SendFlags = SendFlags(1 << 1);
    /// Set the solicited-event bit on the last packet.
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);
    /// The payload was copied at post time (see [`SendWr::inline_data`]).
    pub const INLINE: SendFlags = SendFlags(1 << 3);

    /// No flags.
    pub const fn empty() -> SendFlags {
        SendFlags(0)
    }
    /// Whether all flags of `other` are set.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation and remote operands.
    pub op: SendOp,
    /// Local buffers: the data to send (SEND, WRITE) or where results land (READ, atomics).
    pub sg_list: Vec<Sge>,
    /// Flags.
    pub flags: SendFlags,
    /// Payload copied at post time; when set, `sg_list` is not used for the payload (ibverbs
    /// `IBV_SEND_INLINE`: the caller may reuse its buffer as soon as `post_send` returns).
    pub inline_data: Option<Box<[u8]>>,
    /// Where a SEND on a UD QP goes (ibverbs `wr.ud`); `None` on connected QPs, which send to
    /// their one peer.
    pub ud: Option<UdDest>,
    /// The XRC SRQ at the target that a WR of an XRC initiator QP is for (ibverbs
    /// `wr.qp_type.xrc.remote_srqn`, 24 bits); required there, `None` on every other QP.
    pub xrc_srqn: Option<u32>,
}

impl SendWr {
    /// A signaled, non-inline request of `op` over `sg_list`, for a connected QP: what the
    /// verbs crate's shorthands (`softrdma::wr`) and the simulator's workloads start from.
    pub fn signaled(wr_id: u64, op: SendOp, sg_list: Vec<Sge>) -> SendWr {
        SendWr {
            wr_id,
            op,
            sg_list,
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
            xrc_srqn: None,
        }
    }

    /// This work request, on an XRC initiator QP, for the XRC SRQ numbered `srqn` at the
    /// target (ibverbs `wr.qp_type.xrc.remote_srqn`).
    pub fn to_xrc_srq(mut self, srqn: u32) -> SendWr {
        self.xrc_srqn = Some(srqn);
        self
    }
}

/// The destination of a UD SEND: the address handle's address, the remote QP and its Q_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// Where the datagram goes (from the address handle).
    pub av: AddressVector,
    /// The remote QP number ([`MULTICAST_QPN`] for a multicast group).
    pub remote_qpn: u32,
    /// The Q_Key to present. With the high bit set ("controlled" Q_Key) the sending QP's own
    /// Q_Key goes instead (IBTA 10.2.5, as rxe does).
    pub remote_qkey: u32,
}

/// The destination QP number of a datagram to a multicast group (IBTA 9.8.1: QPN 0xFFFFFF).
pub const MULTICAST_QPN: u32 = 0x00ff_ffff;

impl SendWr {
    /// Payload length in bytes (for READ: bytes to read; for atomics: 8).
    pub fn length(&self) -> u64 {
        if self.op.is_atomic() {
            return 8;
        }
        match &self.inline_data {
            Some(data) => data.len() as u64,
            None => self.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        }
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where incoming SEND payload is placed, in order.
    pub sg_list: Vec<Sge>,
}

impl RecvWr {
    /// Capacity of the SGL in bytes.
    pub fn capacity(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// Completion status (ibverbs `ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The operation completed successfully.
    Success,
    /// Local length error: a received message did not fit the receive buffers, or a WR's
    /// length is invalid.
    LocLenErr,
    /// Local QP operation error: an internal consistency error of the local QP.
    LocQpOpErr,
    /// Local protection error: an SGE's lkey, bounds or access rights do not allow the access.
    LocProtErr,
    /// The WR was flushed because the QP entered the error state.
    WrFlushErr,
    /// A memory window bind failed (window state or type, region rights or bounds, PD).
    MwBindErr,
    /// The responder answered with something the requester did not expect.
    BadRespErr,
    /// Local access error on an incoming request (e.g. a WRITE with immediate hit a bad rkey).
    LocAccessErr,
    /// The responder rejected the request as invalid (NAK invalid request).
    RemInvReqErr,
    /// The responder rejected the access (NAK remote access error: rkey, bounds, rights).
    RemAccessErr,
    /// The responder could not complete the operation (NAK remote operational error).
    RemOpErr,
    /// The transport retry counter was exhausted: no answer from the responder.
    RetryExcErr,
    /// The RNR retry counter was exhausted: the responder never had a receive posted.
    RnrRetryExcErr,
    /// Another error.
    GeneralErr,
}

impl WcStatus {
    /// The status's value in ibverbs' `enum ibv_wc_status` (what `ibv_wc.status` holds).
    pub fn ibv_code(self) -> u32 {
        match self {
            WcStatus::Success => 0,
            WcStatus::LocLenErr => 1,
            WcStatus::LocQpOpErr => 2,
            WcStatus::LocProtErr => 4,
            WcStatus::WrFlushErr => 5,
            WcStatus::MwBindErr => 6,
            WcStatus::BadRespErr => 7,
            WcStatus::LocAccessErr => 8,
            WcStatus::RemInvReqErr => 9,
            WcStatus::RemAccessErr => 10,
            WcStatus::RemOpErr => 11,
            WcStatus::RetryExcErr => 12,
            WcStatus::RnrRetryExcErr => 13,
            WcStatus::GeneralErr => 21,
        }
    }

    /// A machine-readable name (`remote_access_error`, `wr_flush_error`, …): what reports
    /// key tallies by.
    pub fn snake_name(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local_length_error",
            WcStatus::LocQpOpErr => "local_qp_operation_error",
            WcStatus::LocProtErr => "local_protection_error",
            WcStatus::WrFlushErr => "wr_flush_error",
            WcStatus::MwBindErr => "mw_bind_error",
            WcStatus::BadRespErr => "bad_response_error",
            WcStatus::LocAccessErr => "local_access_error",
            WcStatus::RemInvReqErr => "remote_invalid_request_error",
            WcStatus::RemAccessErr => "remote_access_error",
            WcStatus::RemOpErr => "remote_operation_error",
            WcStatus::RetryExcErr => "retry_exceeded_error",
            WcStatus::RnrRetryExcErr => "rnr_retry_exceeded_error",
            WcStatus::GeneralErr => "general_error",
        }
    }

    /// The status name as ibverbs' `ibv_wc_status_str` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory bind operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// What a completion reports was done (ibverbs `ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (any variant) completed at the requester.
    Send,
    /// An RDMA WRITE completed at the requester.
    RdmaWrite,
    /// An RDMA READ completed at the requester.
    RdmaRead,
    /// A compare and swap completed at the requester.
    CompSwap,
    /// A fetch and add completed at the requester.
    FetchAdd,
    /// An ATOMIC_WRITE completed at the requester.
    AtomicWrite,
    /// A FLUSH completed at the requester.
    Flush,
    /// A memory window bind completed.
    BindMw,
    /// A local invalidation completed.
    LocalInv,
    /// A SEND was received.
    Recv,
    /// An RDMA WRITE with immediate was received (consumed a receive WQE).
    RecvRdmaWithImm,
}

/// A work completion (ibverbs `ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkCompletion {
    /// The WR's identifier.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed. For error completions this is the opcode of the WR as posted.
    pub opcode: WcOpcode,
    /// Bytes transferred (receives: bytes placed; READ: bytes read; atomics: 8).
    pub byte_len: u32,
    /// Immediate data of a SEND/WRITE with immediate, as the 32-bit value sent.
    pub imm_data: Option<u32>,
    /// The rkey a SEND with invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// The remote QP number (receives; on UD the sender's QPN from its DETH).
    pub src_qp: u32,
    /// The receive buffer starts with the 40-byte GRH area (ibverbs `IBV_WC_GRH`): every UD
    /// receive, which reports the area in `byte_len`.
    pub grh: bool,
    /// When the engine made the completion, on its caller's clock (ibverbs' completion
    /// timestamp): the latest time the engine was given when it was made.
    pub timestamp: Instant,
}
