//! Connection establishment for softrdma: how two RC endpoints learn each other's QPN, PSN
//! and address before any RoCEv2 packet can flow. Two ways:
//!
//! - **The InfiniBand CM and rdma_cm** ([`ib`], [`rdma`]): what rdma_cm programs (rping,
//!   ucmatose, `ib_write_bw -R`, every storage and MPI stack) speak, as Linux's `ib_cm` and
//!   `rdma_cm` do on a RoCE port — MADs on QP 1, REQ/REP/RTU, DREQ/DREP, REJ, MRA, SIDR,
//!   retransmission and time-wait; rdma_cm's port spaces, service IDs and IP header on top.
//!   Both are sans-IO state machines (MADs and time in; MADs, events and deadlines out) that
//!   a verbs driver runs with its GSI QP; see [`ib`] for the contract. They are checked byte
//!   for byte against rxe's rdma_cm captures.
//! - **The out-of-band TCP exchanges** the standard tools use instead, so softrdma's tools can
//!   pair with them: [`pingpong`], rdma-core's `ibv_rc_pingpong` family (`LID:QPN:PSN:GID`,
//!   52 bytes), and [`perftest`], perftest's `ib_*_bw` / `ib_*_lat` (versions, sys data, MTU,
//!   108-byte keys, bandwidth reports, `done`). Both are byte-compatible with the real
//!   programs (rdma-core 44, perftest 4.5-0.17): the tests replay the TCP payloads captured
//!   between two Linux Soft-RoCE hosts.
//!
//! This crate depends on no verbs code: it carries plain numbers, [`Gid`]s and the transport
//! engine's QP attribute type, and the caller moves its QP through RESET → INIT → RTR → RTS
//! between the steps.
//!
//! Nothing here panics on network input: the out-of-band formats return [`ParseError`]s
//! wrapped in [`Error::Malformed`] and every blocking step has a timeout; a malformed or
//! unexpected MAD is counted ([`ib::CmStats`]) and dropped.
//!
//! `examples/perftest_probe.rs` and `examples/pingpong_probe.rs` run the client (and, for
//! pingpong, the server) side against the real programs on Linux rxe, with made-up QP values
//! and no RDMA traffic; with passive perftest servers (`ib_write_bw`, `ib_read_bw`,
//! `ib_atomic_bw`, `ib_read_lat`, `ib_atomic_lat`) the real server completes, exits 0 and
//! prints the report the probe sent. `examples/rdma_cm_probe.rs` runs [`rdma`] with a GSI QP
//! of its own on UDP 4791 against rdma-core's `ucmatose -C 0` in both roles
//! (`scripts/lab/cm.sh`).

#![forbid(unsafe_code)]

mod error;
mod gid;
pub mod ib;
mod net;
pub mod perftest;
pub mod pingpong;
pub mod rdma;
mod rng;
mod text;

pub use error::{Error, FormatError, ParseError, Result};
pub use gid::Gid;
pub use net::{connect, listen, listen_any, DEFAULT_PORT};
