//! The softrdma transport engine: RDMA reliable-connected transport (IBTA Vol. 1 ch. 9) as a
//! deterministic state machine with no I/O.
//!
//! Packets, work requests and the current time go in; packets to transmit, work completions
//! and the next deadline come out (see [`Engine`] for the exact contract). The same engine runs
//! under the verbs layer on real UDP sockets and under the simulator on a virtual fabric.
//!
//! Layout, one concern per file:
//! - [`engine`]: QPN demux, object tables, the `handle_*`/`poll_*` surface;
//! - [`qp`]: a queue pair — `attr` (state machine), `requester`, `completer`,
//!   `responder/{send,write,read,atomic}` (one file per operation), `timers`;
//! - [`mr`]: protection domains, memory regions, every access check;
//! - [`wr`]: work requests and completions; [`cq`]: completion queues;
//! - [`srq`]: shared receive queues; [`xrc`]: XRC domains, which tie XRC target QPs to them;
//! - [`stats`]: counters for every drop, NAK and retry; [`time`]: the engine's clock type;
//! - `budget`: the device's adaptive limit on packets in flight over all QPs.
#![forbid(unsafe_code)]

pub mod access;
mod budget;
pub mod cc;
pub mod config;
pub mod cq;
pub mod engine;
pub mod error;
pub mod event;
pub mod io;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod placement;
pub mod qp;
pub mod srq;
pub mod stats;
pub mod time;
pub mod wr;
pub mod xrc;

pub use access::AccessFlags;
pub use config::EngineConfig;
pub use cq::{CqContext, CqHandle};
pub use engine::{Engine, MAX_MCAST_GROUPS, MAX_MCAST_QP_ATTACH, MAX_MESSAGE_BYTES, MAX_UD_PEERS};
pub use error::EngineError;
pub use event::AsyncEvent;
pub use io::{DatagramMeta, DatagramOut};
pub use mr::{AccessError, MemoryFault, MrEntry, MrTable, PdHandle, RegionMemory, VecMemory};
pub use mw::{Invalidator, MemoryWindow, MwBinding, MwError, MwType};
pub use placement::{PlacedPiece, PlacedReceive, PlacementPlan};
pub use qp::{
    rxe_source_port, ud_source_port, AddressVector, ModifyQpError, Mtu, QpAttr, QpCaps, QpConfig,
    QpContext, QpState, QpType, GSI_QKEY,
};
pub use srq::{SharedReceiveQueue, SrqAttr, SrqHandle};
pub use stats::{DropReason, NakKind, Stats};
pub use time::{Duration, Instant};
pub use wr::{
    FlushLevel, MwBind, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus,
    WorkCompletion, FLUSH_GLOBAL, FLUSH_PERSISTENT, MULTICAST_QPN,
};
pub use xrc::{XrcSrq, XrcdHandle};

/// The most READ/atomic requests a QP may have outstanding in either direction (rxe: 128).
pub const MAX_RD_ATOMIC: u8 = 128;
