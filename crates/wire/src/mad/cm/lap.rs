//! Path migration: LAP, "load this alternate path" (IBTA 12.8.1, Table 115), and APR, its
//! answer (Table 116). Linux's CM ignores both on RoCE ports; they are here so a capture that
//! contains them decodes and so the CM can recognise (and drop) them.

use core::fmt;

use crate::bytes::{be24, be32, put24, put32};
use crate::mad::cm::fields::private_data_len;
use crate::mad::cm::path::CmPath;
use crate::mad::header::{MadError, PrivateData, MAD_DATA_LEN};

/// Length of the APR additional information field.
pub const APR_INFO_LEN: usize = 72;

/// LoadAlternatePath.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lap {
    /// The sender's communication ID (0).
    pub local_comm_id: u32,
    /// The receiver's communication ID (4).
    pub remote_comm_id: u32,
    /// The receiver's QP (12, 24 bits).
    pub remote_qpn: u32,
    /// How long the receiver may take to answer (15, 5 bits).
    pub remote_cm_response_timeout: u8,
    /// The new alternate path (20).
    pub alternate_path: CmPath,
    /// Private data (64).
    pub private_data: PrivateData<{ private_data_len::LAP }>,
}

impl Lap {
    /// Bytes of MAD data the message occupies.
    pub const LEN: usize = MAD_DATA_LEN;

    /// Parses the 232 data bytes of a LAP.
    pub fn parse(b: &[u8]) -> Result<Lap, MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(Lap {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            remote_qpn: be24(b, 12),
            remote_cm_response_timeout: b[15] >> 3,
            alternate_path: CmPath::parse_lap(&b[20..64]),
            private_data: PrivateData::read(&b[64..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`Lap::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put32(b, 8, 0);
        put24(b, 12, self.remote_qpn);
        b[15] = self.remote_cm_response_timeout << 3;
        put32(b, 16, 0);
        self.alternate_path.emit_lap(&mut b[20..64]);
        b[64..Self::LEN].copy_from_slice(self.private_data.as_bytes());
    }
}

/// The outcome of a LAP (Linux's `enum ib_cm_apr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApStatus {
    /// 0: path loaded.
    Success,
    /// 1: invalid communication ID.
    InvalidCommId,
    /// 2: unsupported.
    Unsupported,
    /// 3: rejected.
    Reject,
    /// 4: redirect.
    Redirect,
    /// 5: that path is already the current one.
    IsCurrent,
    /// 6: invalid QPN/EECN.
    InvalidQpnEecn,
    /// 7: invalid LID.
    InvalidLid,
    /// 8: invalid GID.
    InvalidGid,
    /// 9: invalid flow label.
    InvalidFlowLabel,
    /// 10: invalid traffic class.
    InvalidTrafficClass,
    /// 11: invalid hop limit.
    InvalidHopLimit,
    /// 12: invalid packet rate.
    InvalidPacketRate,
    /// 13: invalid SL.
    InvalidSl,
    /// Any other value.
    Unknown(u8),
}

impl ApStatus {
    /// Decodes the status byte.
    pub const fn from_code(v: u8) -> ApStatus {
        use ApStatus::*;
        match v {
            0 => Success,
            1 => InvalidCommId,
            2 => Unsupported,
            3 => Reject,
            4 => Redirect,
            5 => IsCurrent,
            6 => InvalidQpnEecn,
            7 => InvalidLid,
            8 => InvalidGid,
            9 => InvalidFlowLabel,
            10 => InvalidTrafficClass,
            11 => InvalidHopLimit,
            12 => InvalidPacketRate,
            13 => InvalidSl,
            other => Unknown(other),
        }
    }

    /// The status byte.
    pub const fn code(self) -> u8 {
        use ApStatus::*;
        match self {
            Success => 0,
            InvalidCommId => 1,
            Unsupported => 2,
            Reject => 3,
            Redirect => 4,
            IsCurrent => 5,
            InvalidQpnEecn => 6,
            InvalidLid => 7,
            InvalidGid => 8,
            InvalidFlowLabel => 9,
            InvalidTrafficClass => 10,
            InvalidHopLimit => 11,
            InvalidPacketRate => 12,
            InvalidSl => 13,
            Unknown(v) => v,
        }
    }
}

impl fmt::Display for ApStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApStatus::Unknown(v) => write!(f, "status {v}"),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// AlternatePathResponse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Apr {
    /// The sender's communication ID (0).
    pub local_comm_id: u32,
    /// The receiver's communication ID (4).
    pub remote_comm_id: u32,
    /// Bytes of `info` in use (8).
    pub info_len: u8,
    /// Outcome (9).
    pub status: ApStatus,
    /// Additional information (12).
    pub info: [u8; APR_INFO_LEN],
    /// Private data (84).
    pub private_data: PrivateData<{ private_data_len::APR }>,
}

impl Default for Apr {
    fn default() -> Apr {
        Apr {
            local_comm_id: 0,
            remote_comm_id: 0,
            info_len: 0,
            status: ApStatus::Success,
            info: [0; APR_INFO_LEN],
            private_data: PrivateData::ZERO,
        }
    }
}

impl Apr {
    /// Bytes of MAD data the message occupies.
    pub const LEN: usize = MAD_DATA_LEN;

    /// Parses the 232 data bytes of an APR.
    pub fn parse(b: &[u8]) -> Result<Apr, MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(Apr {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            info_len: b[8],
            status: ApStatus::from_code(b[9]),
            info: b[12..84].try_into().expect("72 bytes"),
            private_data: PrivateData::read(&b[84..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`Apr::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[8] = self.info_len;
        b[9] = self.status.code();
        b[10] = 0;
        b[11] = 0;
        b[12..84].copy_from_slice(&self.info);
        b[84..Self::LEN].copy_from_slice(self.private_data.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::cm::connect::tests::data;

    #[test]
    fn test_construct() {
        let lap = Lap {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn: 0x11,
            remote_cm_response_timeout: 20,
            alternate_path: CmPath {
                local_lid: 3,
                remote_lid: 4,
                flow_label: 0xfffff,
                traffic_class: 0xab,
                hop_limit: 9,
                packet_rate: 3,
                sl: 1,
                local_ack_timeout: 19,
                ..CmPath::default()
            },
            private_data: PrivateData::ZERO,
        };
        let mut b = [0xffu8; MAD_DATA_LEN];
        lap.emit(&mut b);
        let mut want = data("00000001 00000002 00000000 000011a0 00000000 00030004");
        want[56..64].copy_from_slice(&[0xff, 0xff, 0xf0, 0xab, 9, 3, 0x10, 0x98]);
        assert_eq!(b, want);
        assert_eq!(Lap::parse(&b).unwrap(), lap);
    }

    #[test]
    fn test_deconstruct() {
        let apr = Apr {
            local_comm_id: 2,
            remote_comm_id: 1,
            info_len: 16,
            status: ApStatus::InvalidGid,
            info: [0x11; APR_INFO_LEN],
            private_data: PrivateData::from_slice(b"no").unwrap(),
        };
        let mut b = [0u8; MAD_DATA_LEN];
        apr.emit(&mut b);
        assert_eq!(&b[8..12], &[16, 8, 0, 0]);
        assert_eq!(Apr::parse(&b).unwrap(), apr);
        for v in 0..=255 {
            assert_eq!(ApStatus::from_code(v).code(), v);
        }
        assert_eq!(Apr::parse(&b[..83]), Err(MadError::Truncated));
    }
}
