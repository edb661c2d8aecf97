//! NVMe over Fabrics on softrdma.
#![forbid(unsafe_code)]

pub mod backend;
pub mod controller;
pub mod wire;
pub mod transport;
pub mod host;
