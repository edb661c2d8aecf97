//! NVMe over Fabrics on softrdma.
#![forbid(unsafe_code)]

pub mod backend;
pub mod controller;
pub mod host;
pub mod transport;
pub mod wire;
