//! NVMe over Fabrics on softrdma: the NVMe-oF RDMA transport as the NVMe-oF 1.1 and NVMe
//! base specifications define it and as Linux speaks it — its `nvme-rdma` host connects to
//! [`transport::Target`], and [`host::RemoteController`] drives Linux's `nvmet-rdma` target —
//! over softrdma's verbs and rdma_cm API, so a disk can be served over RoCEv2 from any
//! container, with no RDMA NIC and no root.
//!
//! The layers, each usable (and tested) without the ones above it:
//!
//! | module | what |
//! |---|---|
//! | [`wire`] | the bytes as pure types: commands (SQE), SGL descriptors, completions (CQE) and statuses, Fabrics Connect and properties, rdma_cm private data, Identify structures, log pages |
//! | [`backend`] | where a namespace's blocks live: memory (sparse) or a file |
//! | [`controller`] | the controller without a network: subsystems, Connect, admin and I/O commands, keep alive, the error log |
//! | [`transport`] | the target's RDMA transport: rdma_cm, capsules, RDMA READ/WRITE of keyed data, SEND with Invalidate |
//! | [`host`] | a host: queues, Connect, Identify, discovery, I/O, a benchmark |
//!
//! # Example: a target and a host on loopback
//!
//! ```no_run
//! use std::sync::Arc;
//! use softrdma_nvmf::backend::MemoryBackend;
//! use softrdma_nvmf::controller::{Namespace, Subsystem};
//! use softrdma_nvmf::host::{HostConfig, RemoteController};
//! use softrdma_nvmf::transport::{Target, TargetConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let nqn = "nqn.2026-12.io.softrdma:example";
//! let ns = Namespace::new(1, Arc::new(MemoryBackend::new(64 << 20)), 512, nqn)?;
//! let subsystem = Subsystem::new(nqn, vec![Arc::new(ns)], Vec::new())?;
//! let target = Target::start(TargetConfig::new("127.0.0.1:4420".parse()?, vec![subsystem]))?;
//!
//! let mut host = HostConfig::new(target.local_addr());
//! host.source = Some("127.0.0.2".parse()?);
//! let ctrl = RemoteController::connect(&host, nqn, 1)?;
//! let ns = ctrl.namespace(1)?;
//! let mut q = ctrl.io_queue(1)?;
//! q.write(&ns, 0, &[7u8; 4096])?;
//! assert_eq!(q.read(&ns, 0, 8)?, vec![7u8; 4096]);
//! q.disconnect();
//! ctrl.shutdown()?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod backend;
pub mod controller;
pub mod host;
pub mod transport;
pub mod wire;
