//! The out-of-band TCP exchanges the standard RDMA tools use to learn each other's QPN, PSN,
//! GID and keys before any RoCEv2 packet flows, so softrdma's tools can pair with them:
//! [`pingpong`], rdma-core's `ibv_rc_pingpong` family (`LID:QPN:PSN:GID`, 52 bytes), and
//! [`perftest`], perftest's `ib_*_bw` / `ib_*_lat` (versions, sys data, MTU, 108-byte keys,
//! bandwidth reports, `done`). Both are byte-compatible with the real programs (rdma-core 44,
//! perftest 4.5-0.17): the tests replay the TCP payloads captured between two Linux Soft-RoCE
//! hosts.
//!
//! Each format is a pure `format`/`parse` pair; the sessions over them block on a stream (a
//! `TcpStream`, or any `Read + Write`) with timeouts. Kept apart from `softrdma-cm`, whose
//! connection managers are sans-IO state machines.
//!
//! Nothing here panics on network input: the formats return [`ParseError`]s wrapped in
//! [`Error::Malformed`], and every blocking step has a timeout.
//!
//! `examples/perftest_probe.rs` and `examples/pingpong_probe.rs` run the client (and, for
//! pingpong, the server) side against the real programs on Linux rxe, with made-up QP values
//! and no RDMA traffic; with passive perftest servers (`ib_write_bw`, `ib_read_bw`,
//! `ib_atomic_bw`, `ib_read_lat`, `ib_atomic_lat`) the real server completes, exits 0 and
//! prints the report the probe sent.

#![forbid(unsafe_code)]

mod error;
mod net;
pub mod perftest;
pub mod pingpong;
mod text;

pub use error::{Error, FormatError, ParseError, Result};
pub use net::{connect, listen, listen_any, DEFAULT_PORT};
pub use softrdma_wire::Gid;
