//! Management datagrams (IBTA Vol. 1 ch. 13.4): the 256-byte messages that the General Services
//! Interface carries on UD queue pair 1, and the communication manager's use of them.
//!
//! On RoCEv2 a MAD is the payload of a UD SEND_ONLY packet to QP 1 whose DETH carries the GSI
//! Q_Key [`GSI_QKEY`]; the MAD itself is always [`MAD_LEN`] bytes: a 24-byte common header
//! ([`MadHeader`]) and 232 bytes of class-specific data. This module reads and writes those
//! bytes and nothing else:
//!
//! - [`MadHeader`], [`Mad`]: the common header and a parsed MAD borrowing its data;
//! - [`cm`]: the communication manager class (0x07) and every attribute of IBTA ch. 12 (REQ,
//!   MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP, LAP, APR);
//! - [`cma`]: what Linux's rdma_cm adds inside CM private data (the IP addressing header) and
//!   how it forms service IDs from port spaces and ports;
//! - [`ClassPortInfo`]: the attribute every class shares;
//! - [`unmatched_response`]: the reply Linux's MAD layer sends for a Get/Set nobody handles;
//! - [`gsi_packet`]: a MAD as the UD packet from QP 1 that carries it.
//!
//! The same contract as the packet headers holds: parsing never panics and checks the length
//! first, emitting writes exactly the bytes a parser reads (reserved bits as zero).

mod header;

pub mod class_port_info;
pub mod cm;
pub mod cma;
mod pretty;

pub use class_port_info::ClassPortInfo;
pub use header::{
    unmatched_response, Mad, MadError, MadHeader, Method, MgmtClass, PrivateData, BASE_VERSION,
    GSI_QKEY, GSI_QPN, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN, STATUS_UNSUPPORTED_METHOD_ATTR,
};
pub use pretty::describe;

use crate::{Bth, Deth, ExtHeaders, Opcode, PacketRepr, Psn};

/// `mad` as a UD SEND_ONLY from QP 1 to `dst_qpn` with the GSI Q_Key: the packet a CM sends
/// (emit it, then fill the ICRC once the IP and UDP headers are known).
pub fn gsi_packet(dst_qpn: u32, psn: Psn, mad: &[u8; MAD_LEN]) -> PacketRepr<'_> {
    PacketRepr {
        bth: Bth::new(Opcode::UD_SEND_ONLY, dst_qpn, psn),
        ext: ExtHeaders {
            deth: Some(Deth {
                qkey: GSI_QKEY,
                src_qpn: GSI_QPN,
            }),
            ..ExtHeaders::default()
        },
        payload: mad,
    }
}
