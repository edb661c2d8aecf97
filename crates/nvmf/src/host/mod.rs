//! A small NVMe-oF host over RDMA: connects to a target's discovery or NVM subsystem as
//! Linux's `nvme connect` does (admin queue, Connect, CC.EN, Identify, Number of Queues,
//! I/O queues), reads the discovery log, identifies namespaces, reads and writes blocks,
//! keeps the controller alive, and shuts it down cleanly. It is the target's client in the
//! tests and the `softrdma nvmf` command, and drives Linux's nvmet-rdma target as well.

mod bench;
mod config;
mod controller;
mod error;
mod queue;

pub use bench::{random_bytes, run_bench, BenchReport, BenchSpec, Latency, Pattern};
pub use config::HostConfig;
pub use controller::{IoQueue, NamespaceInfo, RemoteController};
pub use error::HostError;
pub use queue::{Completion, Data, HostQueue};
