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

use core::fmt;

use crate::mad::{Mad, MadError, MadHeader, MgmtClass, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN};

pub mod connect;
pub mod disconnect;
pub mod lap;
pub mod path;
pub mod reply;
pub mod sidr;

pub use connect::{Rep, Req, Rtu};
pub use disconnect::{Drep, Dreq};
pub use lap::{ApStatus, Apr, Lap};
pub use path::CmPath;
pub use reply::{Mra, Rej, RejectReason};
pub use sidr::{SidrRep, SidrReq, SidrStatus};

/// The CM class version Linux speaks (IBTA 1.2: `IB_CM_CLASS_VERSION`).
pub const CLASS_VERSION: u8 = 2;

/// CM attribute IDs (IBTA Table 104).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = crate::mad::class_port_info::ATTR_ID;
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResReq.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResReqResp.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath.
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse.
    pub const APR: u16 = 0x001a;

    /// The short name of a CM attribute (`REQ`, `RTU`, ...), `None` if unknown.
    pub const fn name(id: u16) -> Option<&'static str> {
        Some(match id {
            CLASS_PORT_INFO => "ClassPortInfo",
            REQ => "REQ",
            MRA => "MRA",
            REJ => "REJ",
            REP => "REP",
            RTU => "RTU",
            DREQ => "DREQ",
            DREP => "DREP",
            SIDR_REQ => "SIDR_REQ",
            SIDR_REP => "SIDR_REP",
            LAP => "LAP",
            APR => "APR",
            _ => return None,
        })
    }
}

/// Private data bytes per message (IBTA Table 103; Linux's `IB_CM_*_PRIVATE_DATA_SIZE`).
pub mod private_data_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP (224, like RTU: the DREP has no QPN field).
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
    /// LAP.
    pub const LAP: usize = 168;
    /// APR.
    pub const APR: usize = 148;
}

/// Which message an MRA or REJ answers (the 2-bit "message MRAed/REJected" field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgResponse {
    /// The REQ.
    Req,
    /// The REP.
    Rep,
    /// Anything else (LAP for an MRA; a REJ after the handshake).
    Other,
    /// The reserved value 3, kept so it re-emits unchanged.
    Reserved,
}

impl MsgResponse {
    pub(crate) const fn from_bits(v: u8) -> MsgResponse {
        match v & 3 {
            0 => MsgResponse::Req,
            1 => MsgResponse::Rep,
            2 => MsgResponse::Other,
            _ => MsgResponse::Reserved,
        }
    }

    pub(crate) const fn bits(self) -> u8 {
        match self {
            MsgResponse::Req => 0,
            MsgResponse::Rep => 1,
            MsgResponse::Other => 2,
            MsgResponse::Reserved => 3,
        }
    }
}

/// The transport service a REQ asks for (2 bits; Linux reads XRC from the extended type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportType {
    /// Reliable connected.
    #[default]
    Rc,
    /// Unreliable connected.
    Uc,
    /// Reliable datagram.
    Rd,
    /// See the extended transport type (1 = XRC).
    Extended,
}

impl TransportType {
    pub(crate) const fn from_bits(v: u8) -> TransportType {
        match v & 3 {
            0 => TransportType::Rc,
            1 => TransportType::Uc,
            2 => TransportType::Rd,
            _ => TransportType::Extended,
        }
    }

    pub(crate) const fn bits(self) -> u8 {
        match self {
            TransportType::Rc => 0,
            TransportType::Uc => 1,
            TransportType::Rd => 2,
            TransportType::Extended => 3,
        }
    }
}

/// The layout RTU and DREP share: the two communication IDs, then 224 bytes of private data.
pub(crate) fn parse_ids_and_data(
    b: &[u8],
) -> Result<(u32, u32, crate::mad::PrivateData<{ private_data_len::RTU }>), MadError> {
    if b.len() < MAD_DATA_LEN {
        return Err(MadError::Truncated);
    }
    let ids = (crate::bytes::be32(b, 0), crate::bytes::be32(b, 4));
    Ok((ids.0, ids.1, crate::mad::PrivateData::read(&b[8..])))
}

/// Writes the RTU/DREP layout.
pub(crate) fn emit_ids_and_data(
    b: &mut [u8],
    local: u32,
    remote: u32,
    data: &crate::mad::PrivateData<{ private_data_len::RTU }>,
) {
    crate::bytes::put32(b, 0, local);
    crate::bytes::put32(b, 4, remote);
    b[8..MAD_DATA_LEN].copy_from_slice(data.as_bytes());
}

/// Any CM message, by attribute.
#[allow(clippy::large_enum_variant)] // no allocation in this crate: messages are plain values
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMessage {
    /// ClassPortInfo (in a Get response, say).
    ClassPortInfo(crate::mad::ClassPortInfo),
    /// REQ.
    Req(Req),
    /// MRA.
    Mra(Mra),
    /// REJ.
    Rej(Rej),
    /// REP.
    Rep(Rep),
    /// RTU.
    Rtu(Rtu),
    /// DREQ.
    Dreq(Dreq),
    /// DREP.
    Drep(Drep),
    /// SIDR_REQ.
    SidrReq(SidrReq),
    /// SIDR_REP.
    SidrRep(SidrRep),
    /// LAP.
    Lap(Lap),
    /// APR.
    Apr(Apr),
}

impl CmMessage {
    /// The attribute ID this message travels under.
    pub const fn attr_id(&self) -> u16 {
        match self {
            CmMessage::ClassPortInfo(_) => attr::CLASS_PORT_INFO,
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
            CmMessage::Lap(_) => attr::LAP,
            CmMessage::Apr(_) => attr::APR,
        }
    }

    /// The short attribute name (`REQ`, ...).
    pub fn name(&self) -> &'static str {
        attr::name(self.attr_id()).unwrap_or("?")
    }

    /// Parses the 232 data bytes of a CM MAD carrying attribute `attr_id`.
    pub fn parse(attr_id: u16, data: &[u8]) -> Result<CmMessage, MadError> {
        if data.len() < MAD_DATA_LEN {
            return Err(MadError::Truncated);
        }
        Ok(match attr_id {
            attr::CLASS_PORT_INFO => {
                CmMessage::ClassPortInfo(crate::mad::ClassPortInfo::parse(data)?)
            }
            attr::REQ => CmMessage::Req(Req::parse(data)?),
            attr::MRA => CmMessage::Mra(Mra::parse(data)?),
            attr::REJ => CmMessage::Rej(Rej::parse(data)?),
            attr::REP => CmMessage::Rep(Rep::parse(data)?),
            attr::RTU => CmMessage::Rtu(Rtu::parse(data)?),
            attr::DREQ => CmMessage::Dreq(Dreq::parse(data)?),
            attr::DREP => CmMessage::Drep(Drep::parse(data)?),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq::parse(data)?),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep::parse(data)?),
            attr::LAP => CmMessage::Lap(Lap::parse(data)?),
            attr::APR => CmMessage::Apr(Apr::parse(data)?),
            other => return Err(MadError::UnknownAttribute(other)),
        })
    }

    /// Writes all 232 data bytes (unused tail zeroed).
    ///
    /// # Panics
    /// If `data` is shorter than [`MAD_DATA_LEN`].
    pub fn emit(&self, data: &mut [u8]) {
        let data = &mut data[..MAD_DATA_LEN];
        data.fill(0);
        match self {
            CmMessage::ClassPortInfo(m) => m.emit(data),
            CmMessage::Req(m) => m.emit(data),
            CmMessage::Mra(m) => m.emit(data),
            CmMessage::Rej(m) => m.emit(data),
            CmMessage::Rep(m) => m.emit(data),
            CmMessage::Rtu(m) => m.emit(data),
            CmMessage::Dreq(m) => m.emit(data),
            CmMessage::Drep(m) => m.emit(data),
            CmMessage::SidrReq(m) => m.emit(data),
            CmMessage::SidrRep(m) => m.emit(data),
            CmMessage::Lap(m) => m.emit(data),
            CmMessage::Apr(m) => m.emit(data),
        }
    }
}

/// A whole CM MAD: the common header and the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmMad {
    /// The common header (its `attr_id` names the message).
    pub header: MadHeader,
    /// The message.
    pub msg: CmMessage,
}

impl CmMad {
    /// A Send MAD as Linux's CM formats it, for `msg` with transaction ID `tid`.
    pub fn new(tid: u64, msg: CmMessage) -> CmMad {
        CmMad {
            header: MadHeader::cm(msg.attr_id(), tid),
            msg,
        }
    }

    /// Parses a MAD of the CM class. Checks base version, class and class version (what
    /// Linux's MAD layer matches before the CM sees anything); the method is left to the
    /// caller (the CM only takes Send).
    pub fn parse(b: &[u8]) -> Result<CmMad, MadError> {
        let mad = Mad::parse(b)?;
        let h = mad.header;
        if h.mgmt_class != MgmtClass::CM {
            return Err(MadError::WrongClass(h.mgmt_class.0));
        }
        if h.class_version != CLASS_VERSION {
            return Err(MadError::BadClassVersion(h.class_version));
        }
        Ok(CmMad {
            header: h,
            msg: CmMessage::parse(h.attr_id, mad.data)?,
        })
    }

    /// The 256 bytes of the MAD. The header's attribute ID is taken from the message.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut out = [0u8; MAD_LEN];
        self.emit(&mut out);
        out
    }

    /// Writes the MAD into the first 256 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`MAD_LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        MadHeader {
            attr_id: self.msg.attr_id(),
            ..self.header
        }
        .emit(b);
        self.msg.emit(&mut b[MAD_HEADER_LEN..MAD_LEN]);
    }
}

impl fmt::Display for MsgResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MsgResponse::Req => "REQ",
            MsgResponse::Rep => "REP",
            MsgResponse::Other => "other",
            MsgResponse::Reserved => "reserved",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_attribute_names() {
        assert_eq!(attr::name(0x10), Some("REQ"));
        assert_eq!(attr::name(0x1a), Some("APR"));
        assert_eq!(attr::name(0x1b), None);
    }

    #[test]
    fn test_parse_unknown_attribute() {
        let mut mad = CmMad::new(1, CmMessage::Rtu(Rtu::default())).to_bytes();
        mad[17] = 0x30;
        assert_eq!(CmMad::parse(&mad), Err(MadError::UnknownAttribute(0x30)));
        mad[17] = 0x14;
        mad[2] = 1;
        assert_eq!(CmMad::parse(&mad), Err(MadError::BadClassVersion(1)));
        mad[1] = 3;
        assert_eq!(CmMad::parse(&mad), Err(MadError::WrongClass(3)));
    }

    #[test]
    fn test_msg_response_bits() {
        for v in 0..4 {
            assert_eq!(MsgResponse::from_bits(v).bits(), v);
            assert_eq!(TransportType::from_bits(v).bits(), v);
        }
    }
}
