//! The C types of rdma-core 44's `<infiniband/verbs.h>` that cross the library boundary,
//! written from the header's semantics as `#[repr(C)]` Rust (x86-64 / LP64 layout). Field
//! order and types must match the header exactly: programs read these structs and jump
//! through their function tables directly (the inline verbs). `tests/abi.rs` compiles a C
//! program (`tests/c/layout.c`) against the system header and compares every size and offset
//! listed in [`crate::layout`] with it.
//!
//! Function-pointer slots softrdma does not fill are `Option<unsafe extern "C" fn()>`: the same
//! size, null when `None`, which is what the header's inline wrappers test before calling.
//!
//! The parts build on each other in one direction: `device` (attributes, ports, events)
//! below `context` (the context, its inline table and what that table passes), below the
//! attributes of extended CQs (`cq`), memory and domains (`memory`) and QPs (`qp`), with
//! `extended` (`struct verbs_context`), which names them all, on top; `kernel` (GRH, path
//! records, the kernel's forms) stands apart. Everything is re-exported here, so the crate
//! names each type `crate::abi::…` whichever part holds it.
#![allow(non_camel_case_types)]

mod context;
mod cq;
mod device;
mod extended;
mod kernel;
mod memory;
mod qp;

pub(crate) use context::*;
pub(crate) use cq::*;
pub(crate) use device::*;
pub(crate) use extended::*;
pub(crate) use kernel::*;
pub(crate) use memory::*;
pub(crate) use qp::*;
