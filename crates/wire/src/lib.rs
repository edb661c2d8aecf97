//! RoCEv2 packet formats: the InfiniBand transport headers as they travel over UDP/IP.
//!
//! This crate knows bytes, nothing else: no queues, no I/O, no allocation on any parse or emit
//! path. Each header is a small `Copy` type with the same contract:
//!
//! - `LEN`: its size on the wire;
//! - `parse(&[u8]) -> Result<Self, ParseError>`: reads the first `LEN` bytes, returns
//!   [`ParseError::Truncated`] if there are fewer, and never panics;
//! - `emit(&self, &mut [u8])`: writes the first `LEN` bytes (reserved bits as zero) and panics
//!   only if the buffer is shorter than `LEN` — emit paths size buffers from `LEN` and
//!   [`PacketRepr::buffer_len`], they do not re-validate.
//!
//! [`PacketRepr`] ties them together through the [opcode table](opcode), which alone decides
//! which extension headers a packet carries and where. The [`icrc`] module computes and checks
//! the invariant CRC, including for datagrams whose IPv4 identification the receiver cannot see.
//! The [`pcap`] module writes datagrams to capture files with synthesized IP/UDP headers.
//! The [`mad`] module reads and writes the management datagrams that UD packets to QP 1 carry:
//! the communication manager's messages and rdma_cm's addressing inside them.
//!
//! | header | module | on |
//! |---|---|---|
//! | [`Bth`] | [`bth`] | every packet |
//! | [`Reth`] | [`reth`] | WRITE first/only, READ request |
//! | [`Aeth`] | [`aeth`] | ACK/NAK, READ response first/last/only, atomic ACK |
//! | [`AtomicEth`], [`AtomicAckEth`] | [`atomic_eth`] | CMP_SWAP, FETCH_ADD; ATOMIC_ACK |
//! | [`Deth`] | [`deth`] | UD |
//! | [`ImmDt`] | [`imm_dt`] | "with immediate" |
//! | [`Ieth`] | [`ieth`] | "with invalidate" |
//! | [`Feth`] | [`feth`] | FLUSH |
//! | [`Xrceth`] | [`xrceth`] | every XRC request |
//!
//! [`GrhArea`] is the 40-byte header area a UD receive buffer starts with.

#![forbid(unsafe_code)]

pub mod aeth;
pub mod atomic_eth;
pub mod bth;
mod bytes;
pub mod deth;
mod error;
pub mod feth;
pub mod gid;
pub mod grh;
pub mod icrc;
pub mod ieth;
pub mod imm_dt;
pub mod ip;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pcap;
mod pretty;
pub mod psn;
pub mod reth;
pub mod xrceth;

pub use aeth::{rnr_timer_us, Aeth, NakCode, Syndrome};
pub use atomic_eth::{AtomicAckEth, AtomicEth};
pub use bth::{Bth, DEFAULT_PKEY, QPN_MASK};
pub use deth::Deth;
pub use error::{ParseError, Result};
pub use feth::Feth;
pub use gid::{eui64, Gid, GidParseError};
pub use grh::{GrhArea, GRH_LEN};
pub use icrc::{crc32_update, IcrcContext, RecoveredIpv4};
pub use ieth::Ieth;
pub use imm_dt::ImmDt;
pub use ip::{IpHeader, IpPacket, Ipv4Header, Ipv6Header, UdpHeader, ROCEV2_UDP_PORT};
pub use opcode::{Headers, OpKind, Opcode, OpcodeInfo, Payload, Position, Transport};
pub use packet::{
    emit_headers, packet_len, pad_for, ExtHeaders, PacketRepr, CNP_RESERVED_LEN, ICRC_LEN,
};
pub use psn::{Psn, PSN_MODULUS};
pub use reth::Reth;
pub use xrceth::Xrceth;
