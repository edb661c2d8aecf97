//! Connection establishment for softrdma: the out-of-band exchanges by which the standard
//! RDMA tools meet, so softrdma's tools can pair with them.
//!
//! Two RC endpoints must learn each other's QPN, PSN and GID (and, for one-sided operations,
//! rkey and buffer address) before any RoCEv2 packet can flow. The tools do it over a plain
//! TCP connection on port 18515, each with its own text format:
//!
//! - [`pingpong`]: rdma-core's `ibv_rc_pingpong` family (`LID:QPN:PSN:GID`, 52 bytes);
//! - [`perftest`]: perftest's `ib_*_bw` / `ib_*_lat` (versions, sys data, MTU, 108-byte keys,
//!   bandwidth reports, `done`).
//!
//! Both are byte-compatible with the real programs (rdma-core 44, perftest 4.5-0.17): the
//! tests replay the TCP payloads captured between two Linux Soft-RoCE hosts. This crate
//! depends on no verbs code: it carries plain numbers and a [`Gid`], and the caller moves
//! its QP through RESET → INIT → RTR → RTS between the steps.
//!
//! Nothing here panics on network input; malformed messages are [`ParseError`]s wrapped in
//! [`Error::Malformed`], and every blocking step has a timeout.
//!
//! `examples/perftest_probe.rs` and `examples/pingpong_probe.rs` run the client (and, for
//! pingpong, the server) side against the real programs on Linux rxe, with made-up QP values
//! and no RDMA traffic; with passive perftest servers (`ib_write_bw`, `ib_read_bw`,
//! `ib_atomic_bw`, `ib_read_lat`, `ib_atomic_lat`) the real server completes, exits 0 and
//! prints the report the probe sent.

#![forbid(unsafe_code)]

mod error;
mod gid;
mod net;
pub mod perftest;
pub mod pingpong;
mod text;

pub use error::{Error, FormatError, ParseError, Result};
pub use gid::Gid;
pub use net::{connect, listen, listen_any, DEFAULT_PORT};
