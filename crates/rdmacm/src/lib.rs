//! rdma_cm for softrdma devices, in the shape of librdmacm: [`EventChannel`]s deliver
//! [`CmEvent`]s about [`CmId`]s, which resolve addresses and routes, connect, listen,
//! accept, reject and disconnect — over the real IB CM protocol (MADs on each device's
//! QP 1, REQ/REP/RTU, DREQ/DREP, REJ, retransmissions, time-wait), so the peer may be
//! Linux's rdma_cm on rxe or a RoCE NIC as well as another softrdma device.
//!
//! The protocol is `softrdma_cm::rdma` (sans-IO); this crate runs it for a device: it opens
//! the device's GSI QP, carries MADs between the two on a thread of its own, and does for
//! the program what librdmacm does inside the library (the active side's QP goes to RTR and
//! RTS when the REP arrives, and the RTU leaves at once; a disconnected QP goes to ERR).
//!
//! # Example: a connection between two devices on loopback
//!
//! ```no_run
//! use softrdma_rdmacm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RdmaQpType};
//! use softrdma::QpInitAttr;
//!
//! let ch = EventChannel::new();
//! let server = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
//! server.bind_addr("127.0.0.2:7471".parse().unwrap()).unwrap();
//! server.listen().unwrap();
//!
//! let client = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
//! client
//!     .resolve_addr(Some("127.0.0.1:0".parse().unwrap()), "127.0.0.2:7471".parse().unwrap())
//!     .unwrap();
//! client.resolve_route().unwrap();
//! let pd = client.pd().unwrap();
//! let cq = client.device().unwrap().create_cq(16).unwrap();
//! client.create_qp(&pd, &QpInitAttr::rc(&cq)).unwrap();
//! client.connect(&ConnParam::rc(0)).unwrap();
//! // Dropping an id's last handle destroys it (`rdma_destroy_id`): keep the accepted one.
//! let mut accepted = Vec::new();
//! while let Some(e) = ch.get_event(None) {
//!     match e.kind {
//!         CmEventKind::ConnectRequest { .. } => {
//!             let pd = e.id.pd().unwrap();
//!             let cq = e.id.device().unwrap().create_cq(16).unwrap();
//!             e.id.create_qp(&pd, &QpInitAttr::rc(&cq)).unwrap();
//!             e.id.accept(&ConnParam::rc(0)).unwrap();
//!             accepted.push(e.id);
//!         }
//!         CmEventKind::Established { .. } if e.id == client => break,
//!         _ => {}
//!     }
//! }
//! ```

#![forbid(unsafe_code)]

mod error;
mod event;
mod fabric;
mod id;
mod service;
mod simple;

pub use error::CmError;
pub use event::CmEventKind;
pub use fabric::FabricHosts;
pub use id::{CmEvent, CmId, EventChannel};
pub use service::CmService;
pub use simple::{connect, Connection, Listener};
pub use softrdma_cm::rdma::{ConnParam, RdmaQpType, Route, UdParam};
pub use softrdma_wire::mad::cm::RejectReason;
pub use softrdma_wire::mad::cma::PortSpace;
