//! Service ID resolution for UD services: SIDR_REQ (IBTA 12.11.1, Table 119) asks which QP and
//! Q_Key serve a service ID, SIDR_REP (Table 120) answers. rdma_cm uses it for the UDP and IB
//! port spaces (`udaddy`).

use core::fmt;

use crate::bytes::{be16, be24, be32, be64, put16, put24, put32, put64};
use crate::mad::cm::fields::private_data_len;
use crate::mad::header::{MadError, PrivateData, MAD_DATA_LEN};

/// Length of the SIDR_REP additional information field.
pub const SIDR_INFO_LEN: usize = 72;

/// ServiceIDResReq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SidrReq {
    /// The requester's ID, echoed in the reply (0; Linux: its local comm ID).
    pub request_id: u32,
    /// Partition key (4).
    pub pkey: u16,
    /// The service to resolve (8).
    pub service_id: u64,
    /// Private data (16): for rdma_cm, its IP header then the application's bytes.
    pub private_data: PrivateData<{ private_data_len::SIDR_REQ }>,
}

impl SidrReq {
    /// Bytes of MAD data the message occupies.
    pub const LEN: usize = MAD_DATA_LEN;

    /// Parses the 232 data bytes of a SIDR_REQ.
    pub fn parse(b: &[u8]) -> Result<SidrReq, MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(SidrReq {
            request_id: be32(b, 0),
            pkey: be16(b, 4),
            service_id: be64(b, 8),
            private_data: PrivateData::read(&b[16..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`SidrReq::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.request_id);
        put16(b, 4, self.pkey);
        put16(b, 6, 0);
        put64(b, 8, self.service_id);
        b[16..Self::LEN].copy_from_slice(self.private_data.as_bytes());
    }
}

/// The outcome of a service ID resolution (Linux's `enum ib_cm_sidr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SidrStatus {
    /// 0: resolved.
    Success,
    /// 1: no such service (Linux answers this when nobody listens).
    Unsupported,
    /// 2: the service refused (rdma_reject on a UD id).
    Reject,
    /// 3: no QP.
    NoQp,
    /// 4: ask elsewhere (info: ClassPortInfo).
    Redirect,
    /// 5: unsupported version.
    UnsupportedVersion,
    /// Any other value.
    Unknown(u8),
}

impl SidrStatus {
    /// Decodes the status byte.
    pub const fn from_code(v: u8) -> SidrStatus {
        match v {
            0 => SidrStatus::Success,
            1 => SidrStatus::Unsupported,
            2 => SidrStatus::Reject,
            3 => SidrStatus::NoQp,
            4 => SidrStatus::Redirect,
            5 => SidrStatus::UnsupportedVersion,
            other => SidrStatus::Unknown(other),
        }
    }

    /// The status byte.
    pub const fn code(self) -> u8 {
        match self {
            SidrStatus::Success => 0,
            SidrStatus::Unsupported => 1,
            SidrStatus::Reject => 2,
            SidrStatus::NoQp => 3,
            SidrStatus::Redirect => 4,
            SidrStatus::UnsupportedVersion => 5,
            SidrStatus::Unknown(v) => v,
        }
    }
}

impl fmt::Display for SidrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SidrStatus::Unknown(v) => write!(f, "status {v}"),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// ServiceIDResReqResp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrRep {
    /// The SIDR_REQ's request ID (0).
    pub request_id: u32,
    /// Outcome (4).
    pub status: SidrStatus,
    /// Bytes of `info` in use (5).
    pub info_len: u8,
    /// ECE vendor ID: high 16 bits at 6, low 8 bits at 11 (24 bits).
    pub vendor_id: u32,
    /// The UD QP serving the service (8, 24 bits).
    pub qpn: u32,
    /// The service ID (12).
    pub service_id: u64,
    /// The Q_Key to send with (20).
    pub qkey: u32,
    /// Additional information (24).
    pub info: [u8; SIDR_INFO_LEN],
    /// Private data (96).
    pub private_data: PrivateData<{ private_data_len::SIDR_REP }>,
}

impl Default for SidrRep {
    fn default() -> SidrRep {
        SidrRep {
            request_id: 0,
            status: SidrStatus::Success,
            info_len: 0,
            vendor_id: 0,
            qpn: 0,
            service_id: 0,
            qkey: 0,
            info: [0; SIDR_INFO_LEN],
            private_data: PrivateData::ZERO,
        }
    }
}

impl SidrRep {
    /// Bytes of MAD data the message occupies.
    pub const LEN: usize = MAD_DATA_LEN;

    /// Parses the 232 data bytes of a SIDR_REP.
    pub fn parse(b: &[u8]) -> Result<SidrRep, MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(SidrRep {
            request_id: be32(b, 0),
            status: SidrStatus::from_code(b[4]),
            info_len: b[5],
            vendor_id: (u32::from(be16(b, 6)) << 8) | u32::from(b[11]),
            qpn: be24(b, 8),
            service_id: be64(b, 12),
            qkey: be32(b, 20),
            info: b[24..96].try_into().expect("72 bytes"),
            private_data: PrivateData::read(&b[96..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`SidrRep::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.request_id);
        b[4] = self.status.code();
        b[5] = self.info_len;
        put16(b, 6, (self.vendor_id >> 8) as u16);
        put24(b, 8, self.qpn);
        b[11] = self.vendor_id as u8;
        put64(b, 12, self.service_id);
        put32(b, 20, self.qkey);
        b[24..96].copy_from_slice(&self.info);
        b[96..Self::LEN].copy_from_slice(self.private_data.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::cm::connect::tests::data;

    #[test]
    fn test_construct() {
        // udaddy's lookup of UDP port 7174: rdma_cm's service ID 0x0111 << 16 | port.
        let req = SidrReq {
            request_id: 0x1234_5678,
            pkey: 0xffff,
            service_id: 0x0111_1c06,
            private_data: PrivateData::from_slice(&[0x00, 0x40, 0x12, 0x34]).unwrap(),
        };
        let mut b = [0xffu8; MAD_DATA_LEN];
        req.emit(&mut b);
        assert_eq!(b, data("12345678 ffff0000 0000000001111c06 00401234"));
        assert_eq!(SidrReq::parse(&b).unwrap(), req);
    }

    #[test]
    fn test_deconstruct() {
        let rep = SidrRep {
            request_id: 0x1234_5678,
            status: SidrStatus::Success,
            vendor_id: 0xab_cdef,
            qpn: 0x12,
            service_id: 0x0111_1c06,
            qkey: 0x0123_4567,
            ..SidrRep::default()
        };
        let mut b = [0xffu8; MAD_DATA_LEN];
        rep.emit(&mut b);
        assert_eq!(
            b,
            data("12345678 0000abcd 000012ef 0000000001111c06 01234567")
        );
        assert_eq!(SidrRep::parse(&b).unwrap(), rep);
        assert_eq!(SidrRep::parse(&b[..95]), Err(MadError::Truncated));
    }

    #[test]
    fn test_status_codes() {
        for v in 0..=255 {
            assert_eq!(SidrStatus::from_code(v).code(), v);
        }
        assert_eq!(SidrStatus::from_code(1).to_string(), "Unsupported");
    }
}
