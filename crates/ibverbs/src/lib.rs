//! `libibverbs.so.1` for softrdma: unmodified C, C++ and Python programs written against
//! rdma-core's libibverbs run on a softrdma device with nothing but a library path.
//!
//! The library is ABI-compatible with rdma-core 44 (Debian bookworm): the same soname, the
//! same symbol versions (`IBVERBS_1.0` … `IBVERBS_1.14`, and `IBVERBS_PRIVATE_34` for the
//! one private symbol perftest and `ibv_devinfo` import), and the same struct layouts, because
//! programs jump through the function tables inside `struct ibv_context` and
//! `struct verbs_context` directly (the inline `ibv_post_send`, `ibv_poll_cq`, `ibv_wr_*`, …).
//! `ABI.md` next to this crate records the facts this rests on; `tests/` proves the layouts
//! with a C program compiled against the system headers and runs Debian's unmodified
//! binaries (ibverbs-utils, perftest, pyverbs) through the library.
//!
//! It is a thin skin: every verb translates its arguments into the `softrdma` Rust API and
//! its result back into rdma-core's return conventions (`NULL` + `errno`, an errno value, or
//! -1 + `errno`, verb by verb as rdma-core documents them). No protocol logic lives here.
//!
//! # The device
//! A process sees one device, `softrdma0`, bound to one IP address:
//! - `SOFTRDMA_IP`: the address (IPv4 or IPv6). Without it, the first IPv4 address of an
//!   interface that is up and not loopback, else 127.0.0.1. Any number of processes of one
//!   user share an address (see `softrdma::DeviceConfig::share_address`).
//! - `SOFTRDMA_SHARE=0`: the device has its address alone (a second process on it fails to
//!   open its device).
//! - `SOFTRDMA_BUSY_POLL=1`: the device's progress thread spins instead of sleeping.
//! - `SOFTRDMA_ADAPTIVE_SPIN=0`: the progress thread never spins before it sleeps (by
//!   default it does, briefly, while requests come in quick succession; see
//!   `softrdma::DeviceConfig::adaptive_spin`).
//! - `SOFTRDMA_GSO=0`: no UDP GSO batching to loopback peers (on by default; see
//!   `softrdma::DeviceConfig::gso`).
//! - `SOFTRDMA_PCAP=FILE`: the device writes every packet it sends and receives to FILE.
//! - `SOFTRDMA_FAULTS=loss=P,dup=P,reorder=P,delay-us=N,corrupt=P,seed=S`: the device injects
//!   these faults into its own traffic, each way (see `softrdma::FaultConfig`).
//! - `SOFTRDMA_COUNTERS=1`: when the program closes the device, its non-zero counters go to
//!   stderr.
//!
//! `softrdma exec [--ip ADDR] -- PROGRAM ARGS…` sets these and `LD_LIBRARY_PATH`, and
//! preloads `libsoftrdma-devnode.so` (`preload/devnode.c`): the device node
//! `/dev/infiniband/softrdma0` (the device's `dev_name`), which UCX requires to exist before
//! it uses a device, seen by `stat`/`access` as `/dev/null`.
//!
//! # Provider libraries
//! Debian's perftest, UCX's `libuct_ib.so` and pyverbs' vendor modules also link
//! `libmlx5.so.1` and `libefa.so.1` (vendor extensions), some with BIND_NOW. The build places
//! stand-ins for both next to `libibverbs.so.1` (`providers/*.c`, written by
//! `providers/gen.py`): every function and version node of rdma-core 44's libraries is there,
//! and every entry point answers truthfully that the device is not an mlx5 or EFA device, so
//! the program loads and takes its generic path.
//!
//! # What is not there
//! TSO, flow steering, counters, tag matching and the other vendor-leaning verbs:
//! they fail with `EOPNOTSUPP`, or their function-table slots are NULL, which the header's
//! inline wrappers turn into `EOPNOTSUPP`. RC, UC, UD and XRC queue pairs, SRQs (basic and
//! XRC), address handles, multicast, memory windows and on-demand paging (explicit and
//! implicit regions, `ibv_advise_mr`) are there.

mod abi;
mod ah;
mod cm;
mod context;
mod cq;
mod device;
mod dm;
mod domain;
mod exports;
mod import;
mod layout;
mod mapping;
mod misc;
mod mw;
mod pd;
mod post;
mod qp;
mod qp_object;
mod query;
mod srq;
mod tables;
mod util;
mod wr;
mod xrc;
mod xrcd;
