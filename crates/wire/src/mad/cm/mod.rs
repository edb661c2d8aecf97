//! The communication manager class (IBTA Vol. 1 ch. 12, management class 0x07): the messages
//! two CMs exchange to set up, tear down and look up connections, field for field.
//!
//! | attribute | type | file |
//! |---|---|---|
//! | REQ 0x10, REP 0x13, RTU 0x14 | [`Req`], [`Rep`], [`Rtu`] | [`connect`] |
//! | MRA 0x11, REJ 0x12 | [`Mra`], [`Rej`] | [`reply`] |
//! | DREQ 0x15, DREP 0x16 | [`Dreq`], [`Drep`] | [`disconnect`] |
//! | SIDR_REQ 0x17, SIDR_REP 0x18 | [`SidrReq`], [`SidrRep`] | [`sidr`] |
//! | LAP 0x19, APR 0x1A | [`Lap`], [`Apr`] | [`lap`] |
//!
//! Offsets in the per-message docs count from the start of the MAD data (after the 24-byte
//! common header), as IBTA's tables and Linux's `ibta_vol1_c12.h` do. Each message type has the
//! usual `LEN`, `parse`, `emit`; [`CmMessage`] dispatches on the attribute ID and [`CmMad`]
//! adds the common header. Reserved bits are ignored on parse and written as zero; every
//! other bit survives parse → emit, which the tests check against rxe's MADs byte for byte.

pub mod connect;
pub mod disconnect;
pub(crate) mod fields;
pub mod lap;
pub(crate) mod message;
pub mod path;
pub mod reply;
pub mod sidr;

pub use crate::mad::header::CM_CLASS_VERSION as CLASS_VERSION;
pub use connect::{Rep, Req, Rtu};
pub use disconnect::{Drep, Dreq};
pub use fields::{attr, private_data_len, MsgResponse, TransportType};
pub use lap::{ApStatus, Apr, Lap};
pub use message::{CmMad, CmMessage};
pub use path::CmPath;
pub use reply::{Mra, Rej, RejectReason};
pub use sidr::{SidrRep, SidrReq, SidrStatus};
