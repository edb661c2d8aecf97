//! NVMe over Fabrics on softrdma.
#![forbid(unsafe_code)]

pub mod wire;
