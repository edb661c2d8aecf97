//! Connection establishment for softrdma: the InfiniBand CM and rdma_cm ([`ib`], [`rdma`]),
//! what rdma_cm programs (rping, ucmatose, `ib_write_bw -R`, every storage and MPI stack)
//! speak, as Linux's `ib_cm` and `rdma_cm` do on a RoCE port — MADs on QP 1, REQ/REP/RTU,
//! DREQ/DREP, REJ, MRA, SIDR, retransmission and time-wait; rdma_cm's port spaces, service IDs
//! and IP header on top. Both are sans-IO state machines (MADs and time in; MADs, events and
//! deadlines out) that a verbs driver runs with its GSI QP (see [`ib`] for the contract and
//! [`rdma::gsi`] for the QP 1 service every driver shares). They are checked byte for byte
//! against rxe's rdma_cm captures.
//!
//! This crate depends on no verbs code and does no I/O: it carries plain numbers, [`Gid`]s
//! and the transport engine's QP attribute type, and the caller moves its QP through RESET →
//! INIT → RTR → RTS between the steps. The tools' out-of-band TCP exchanges (ibv_rc_pingpong,
//! perftest), which block on sockets, are `softrdma-oob`'s.
//!
//! Nothing here panics on network input: a malformed or unexpected MAD is counted
//! ([`ib::CmStats`]) and dropped.
//!
//! `examples/rdma_cm_probe.rs` runs [`rdma`] with a GSI QP of its own on UDP 4791 against
//! rdma-core's `ucmatose -C 0` in both roles (`scripts/lab/cm.sh`).

#![forbid(unsafe_code)]

pub mod ib;
pub mod rdma;
mod rng;

pub use softrdma_wire::Gid;
