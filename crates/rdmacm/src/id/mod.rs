//! Event channels and CM ids: librdmacm's `rdma_event_channel` and `rdma_cm_id`.
//!
//! `channel` holds the channel and the id's state and lifetime, which refer to each other;
//! the rest build on it: the service's side of an id (`endpoint`) and the verbs of `CmId` by
//! concept — binding and resolution (`address`), its QP (`qp`), the connection
//! (`connection`) and its attributes and options (`attrs`).

mod address;
mod attrs;
mod channel;
mod connection;
mod endpoint;
mod qp;

pub use channel::{CmEvent, CmId, EventChannel};
