//! The NVMe-oF controller, without a network: subsystems and their namespaces, the
//! controllers hosts create with Fabrics Connect, and the execution of every admin and I/O
//! command a host sends ([`Session::execute`]). The RDMA transport (`crate::transport`) feeds
//! it commands with their data and sends back what it returns; the tests here feed it
//! directly.
//!
//! One [`Registry`] per target holds the discovery subsystem, the NVM subsystems and the
//! live controllers; one [`Session`] per queue (admin or I/O) holds the queue's state and its
//! controller once connected.

mod admin;
mod io;
mod registry;
mod request;
mod session;
mod state;
mod subsystem;

pub use registry::Registry;
pub use request::{Outcome, Request, Response};
pub use session::Session;
pub use state::{Controller, QueueHandle, TeardownReason};
pub(crate) use subsystem::{lock, stable_id};
pub use subsystem::{
    ConfigError, IoCounters, Limits, Namespace, Subsystem, ADMIN_QUEUE_SIZE, DISCOVERY_KATO_MS,
    MAX_QUEUE_SIZE,
};

#[cfg(test)]
mod tests;
