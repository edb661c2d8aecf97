//! Where a device's datagrams go: the network below the engine, as the progress code sees it.
//!
//! A device moves RoCEv2 datagrams through one [`Backend`]: the kernel's UDP stack (a
//! [`RoceSocket`](softrdma_udp::RoceSocket), what every device uses unless told otherwise) or a [`LocalFabric`], a
//! network inside the process. The engine above knows neither; the progress code
//! (`crate::progress`) batches sends, receives into its arena and sleeps on the backend's
//! readiness descriptor the same way over both, so everything from the verbs API up — rdma_cm,
//! the C libraries — runs unchanged over either.

mod fabric;
mod network;
mod udp;

pub(crate) use fabric::AttachError;
pub use fabric::{FabricStats, LocalFabric};
pub(crate) use network::Backend;
