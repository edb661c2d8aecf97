//! Any CM message by attribute ID, and a whole CM MAD (common header plus message).

use crate::mad::class_port_info::ClassPortInfo;
use crate::mad::cm::connect::{Rep, Req, Rtu};
use crate::mad::cm::disconnect::{Drep, Dreq};
use crate::mad::cm::fields::attr;
use crate::mad::cm::lap::{Apr, Lap};
use crate::mad::cm::reply::{Mra, Rej};
use crate::mad::cm::sidr::{SidrRep, SidrReq};
use crate::mad::header::{
    Mad, MadError, MadHeader, MgmtClass, CM_CLASS_VERSION as CLASS_VERSION, MAD_DATA_LEN,
    MAD_HEADER_LEN, MAD_LEN,
};

/// Any CM message, by attribute.
#[allow(clippy::large_enum_variant)] // no allocation in this crate: messages are plain values
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMessage {
    /// ClassPortInfo (in a Get response, say).
    ClassPortInfo(ClassPortInfo),
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
            attr::CLASS_PORT_INFO => CmMessage::ClassPortInfo(ClassPortInfo::parse(data)?),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::cm::fields::{MsgResponse, TransportType};

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
