//! The two answers that do not advance a handshake: MRA, "message received, wait" (IBTA
//! 12.6.6, Table 107), and REJ, "no" (12.6.7, Table 108, reasons in Table 109).

use core::fmt;

use crate::bytes::{be16, be32, put16, put32};
use crate::mad::cm::fields::{private_data_len, MsgResponse};
use crate::mad::header::{MadError, PrivateData, MAD_DATA_LEN};

/// Length of the additional rejection information (ARI) field.
pub const ARI_LEN: usize = 72;

/// MsgRcptAck: the receiver got the message but needs `service_timeout` to act on it; the
/// sender stops retransmitting for that long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mra {
    /// The MRA sender's communication ID (0).
    pub local_comm_id: u32,
    /// The other side's communication ID (4).
    pub remote_comm_id: u32,
    /// Which message is acknowledged (8, 2 bits).
    pub msg_mraed: MsgResponse,
    /// Extra time needed, 4.096 µs × 2^value (9, 5 bits; rdma_cm sends 24, ~69 s).
    pub service_timeout: u8,
    /// Private data (10).
    pub private_data: PrivateData<{ private_data_len::MRA }>,
}

impl Default for Mra {
    fn default() -> Mra {
        Mra {
            local_comm_id: 0,
            remote_comm_id: 0,
            msg_mraed: MsgResponse::Req,
            service_timeout: 0,
            private_data: PrivateData::ZERO,
        }
    }
}

impl Mra {
    /// Bytes of MAD data the message occupies.
    pub const LEN: usize = MAD_DATA_LEN;

    /// Parses the 232 data bytes of an MRA.
    pub fn parse(b: &[u8]) -> Result<Mra, MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(Mra {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            msg_mraed: MsgResponse::from_bits(b[8] >> 6),
            service_timeout: b[9] >> 3,
            private_data: PrivateData::read(&b[10..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`Mra::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[8] = self.msg_mraed.bits() << 6;
        b[9] = self.service_timeout << 3;
        b[10..Self::LEN].copy_from_slice(self.private_data.as_bytes());
    }
}

/// Why a connection was refused (IBTA Table 109; Linux's `enum ib_cm_rej_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// 1: no QP available.
    NoQp,
    /// 2: no EE context available.
    NoEec,
    /// 3: no resources.
    NoResources,
    /// 4: the active side gave up waiting (ARI: its CA GUID).
    Timeout,
    /// 5: unsupported request.
    Unsupported,
    /// 6: invalid communication ID.
    InvalidCommId,
    /// 7: invalid communication instance.
    InvalidCommInstance,
    /// 8: nobody listens on the service ID.
    InvalidServiceId,
    /// 9: invalid transport type.
    InvalidTransportType,
    /// 10: a connection with this QP already exists.
    StaleConnection,
    /// 11: RDC does not exist.
    RdcNotExist,
    /// 12: invalid primary GID (ARI: a GID to use).
    InvalidGid,
    /// 13: invalid primary LID.
    InvalidLid,
    /// 14: invalid primary SL.
    InvalidSl,
    /// 15: invalid primary traffic class.
    InvalidTrafficClass,
    /// 16: invalid primary hop limit.
    InvalidHopLimit,
    /// 17: invalid primary packet rate.
    InvalidPacketRate,
    /// 18: invalid alternate GID.
    InvalidAltGid,
    /// 19: invalid alternate LID.
    InvalidAltLid,
    /// 20: invalid alternate SL.
    InvalidAltSl,
    /// 21: invalid alternate traffic class.
    InvalidAltTrafficClass,
    /// 22: invalid alternate hop limit.
    InvalidAltHopLimit,
    /// 23: invalid alternate packet rate.
    InvalidAltPacketRate,
    /// 24: port CM redirect.
    PortCmRedirect,
    /// 25: port redirect.
    PortRedirect,
    /// 26: invalid path MTU.
    InvalidMtu,
    /// 27: insufficient responder resources.
    InsufficientRespResources,
    /// 28: the application said no (rdma_reject); private data is the application's.
    ConsumerDefined,
    /// 29: invalid RNR retry count.
    InvalidRnrRetry,
    /// 30: duplicate local communication ID.
    DuplicateLocalCommId,
    /// 31: unsupported class version.
    InvalidClassVersion,
    /// 32: invalid primary flow label.
    InvalidFlowLabel,
    /// 33: invalid alternate flow label.
    InvalidAltFlowLabel,
    /// 35: ECE vendor option not supported (`rdma_reject_ece`).
    VendorOptionNotSupported,
    /// Any other value, kept so it re-emits unchanged.
    Unknown(u16),
}

impl RejectReason {
    /// Decodes the 16-bit reason; every value decodes.
    pub const fn from_code(code: u16) -> RejectReason {
        use RejectReason::*;
        match code {
            1 => NoQp,
            2 => NoEec,
            3 => NoResources,
            4 => Timeout,
            5 => Unsupported,
            6 => InvalidCommId,
            7 => InvalidCommInstance,
            8 => InvalidServiceId,
            9 => InvalidTransportType,
            10 => StaleConnection,
            11 => RdcNotExist,
            12 => InvalidGid,
            13 => InvalidLid,
            14 => InvalidSl,
            15 => InvalidTrafficClass,
            16 => InvalidHopLimit,
            17 => InvalidPacketRate,
            18 => InvalidAltGid,
            19 => InvalidAltLid,
            20 => InvalidAltSl,
            21 => InvalidAltTrafficClass,
            22 => InvalidAltHopLimit,
            23 => InvalidAltPacketRate,
            24 => PortCmRedirect,
            25 => PortRedirect,
            26 => InvalidMtu,
            27 => InsufficientRespResources,
            28 => ConsumerDefined,
            29 => InvalidRnrRetry,
            30 => DuplicateLocalCommId,
            31 => InvalidClassVersion,
            32 => InvalidFlowLabel,
            33 => InvalidAltFlowLabel,
            35 => VendorOptionNotSupported,
            other => Unknown(other),
        }
    }

    /// The 16-bit code.
    pub const fn code(self) -> u16 {
        use RejectReason::*;
        match self {
            NoQp => 1,
            NoEec => 2,
            NoResources => 3,
            Timeout => 4,
            Unsupported => 5,
            InvalidCommId => 6,
            InvalidCommInstance => 7,
            InvalidServiceId => 8,
            InvalidTransportType => 9,
            StaleConnection => 10,
            RdcNotExist => 11,
            InvalidGid => 12,
            InvalidLid => 13,
            InvalidSl => 14,
            InvalidTrafficClass => 15,
            InvalidHopLimit => 16,
            InvalidPacketRate => 17,
            InvalidAltGid => 18,
            InvalidAltLid => 19,
            InvalidAltSl => 20,
            InvalidAltTrafficClass => 21,
            InvalidAltHopLimit => 22,
            InvalidAltPacketRate => 23,
            PortCmRedirect => 24,
            PortRedirect => 25,
            InvalidMtu => 26,
            InsufficientRespResources => 27,
            ConsumerDefined => 28,
            InvalidRnrRetry => 29,
            DuplicateLocalCommId => 30,
            InvalidClassVersion => 31,
            InvalidFlowLabel => 32,
            InvalidAltFlowLabel => 33,
            VendorOptionNotSupported => 35,
            Unknown(code) => code,
        }
    }

    /// Linux's wording (`ibcm_reject_msg`), e.g. "invalid service ID".
    pub const fn message(self) -> &'static str {
        use RejectReason::*;
        match self {
            NoQp => "no QP",
            NoEec => "no EEC",
            NoResources => "no resources",
            Timeout => "timeout",
            Unsupported => "unsupported",
            InvalidCommId => "invalid comm ID",
            InvalidCommInstance => "invalid comm instance",
            InvalidServiceId => "invalid service ID",
            InvalidTransportType => "invalid transport type",
            StaleConnection => "stale conn",
            RdcNotExist => "RDC not exist",
            InvalidGid => "invalid GID",
            InvalidLid => "invalid LID",
            InvalidSl => "invalid SL",
            InvalidTrafficClass => "invalid traffic class",
            InvalidHopLimit => "invalid hop limit",
            InvalidPacketRate => "invalid packet rate",
            InvalidAltGid => "invalid alt GID",
            InvalidAltLid => "invalid alt LID",
            InvalidAltSl => "invalid alt SL",
            InvalidAltTrafficClass => "invalid alt traffic class",
            InvalidAltHopLimit => "invalid alt hop limit",
            InvalidAltPacketRate => "invalid alt packet rate",
            PortCmRedirect => "port CM redirect",
            PortRedirect => "port redirect",
            InvalidMtu => "invalid MTU",
            InsufficientRespResources => "insufficient resp resources",
            ConsumerDefined => "consumer defined",
            InvalidRnrRetry => "invalid RNR retry",
            DuplicateLocalCommId => "duplicate local comm ID",
            InvalidClassVersion => "invalid class version",
            InvalidFlowLabel => "invalid flow label",
            InvalidAltFlowLabel => "invalid alt flow label",
            VendorOptionNotSupported => "vendor option not supported",
            Unknown(_) => "unrecognized reason",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.code(), self.message())
    }
}

/// ConnectReject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rej {
    /// The rejecting side's communication ID, zero if it never had one (0).
    pub local_comm_id: u32,
    /// The other side's communication ID (4).
    pub remote_comm_id: u32,
    /// Which message is rejected (8, 2 bits).
    pub msg_rejected: MsgResponse,
    /// Bytes of `ari` in use (9, 7 bits).
    pub ari_len: u8,
    /// Why (10).
    pub reason: RejectReason,
    /// Additional rejection information (12): a GUID for `Timeout`, a GID for `InvalidGid`.
    pub ari: [u8; ARI_LEN],
    /// Private data (84).
    pub private_data: PrivateData<{ private_data_len::REJ }>,
}

impl Default for Rej {
    fn default() -> Rej {
        Rej {
            local_comm_id: 0,
            remote_comm_id: 0,
            msg_rejected: MsgResponse::Req,
            ari_len: 0,
            reason: RejectReason::ConsumerDefined,
            ari: [0; ARI_LEN],
            private_data: PrivateData::ZERO,
        }
    }
}

impl Rej {
    /// Bytes of MAD data the message occupies.
    pub const LEN: usize = MAD_DATA_LEN;

    /// The used part of the ARI (its length field is clamped to the field's size).
    pub fn ari(&self) -> &[u8] {
        &self.ari[..usize::from(self.ari_len).min(ARI_LEN)]
    }

    /// Parses the 232 data bytes of a REJ.
    pub fn parse(b: &[u8]) -> Result<Rej, MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(Rej {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            msg_rejected: MsgResponse::from_bits(b[8] >> 6),
            ari_len: b[9] >> 1,
            reason: RejectReason::from_code(be16(b, 10)),
            ari: b[12..84].try_into().expect("72 bytes"),
            private_data: PrivateData::read(&b[84..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`Rej::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[8] = self.msg_rejected.bits() << 6;
        b[9] = self.ari_len << 1;
        put16(b, 10, self.reason.code());
        b[12..84].copy_from_slice(&self.ari);
        b[84..Self::LEN].copy_from_slice(self.private_data.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::cm::connect::tests::data;

    // What Linux's cm_issue_rej sends for a REQ to a service nobody listens on (from the REQ
    // of rdma_cm.pcap): local comm ID 0, remote = the REQ's, REQ rejected, reason 8.
    const REJ_HEX: &str = "00000000 823b9cb1 00000008";

    #[test]
    fn test_parse() {
        let rej = Rej::parse(&data(REJ_HEX)).unwrap();
        assert_eq!(rej.remote_comm_id, 0x823b_9cb1);
        assert_eq!(rej.msg_rejected, MsgResponse::Req);
        assert_eq!(rej.reason, RejectReason::InvalidServiceId);
        assert_eq!(rej.reason.to_string(), "8 (invalid service ID)");
        assert!(rej.ari().is_empty());
    }

    #[test]
    fn test_emit() {
        let mut b = [0xffu8; MAD_DATA_LEN];
        Rej {
            remote_comm_id: 0x823b_9cb1,
            reason: RejectReason::InvalidServiceId,
            ..Rej::default()
        }
        .emit(&mut b);
        assert_eq!(b, data(REJ_HEX));
    }

    #[test]
    fn test_timeout_rej_carries_guid() {
        // cm_destroy_id in REQ_SENT: reason 4 (timeout), ARI = the 8-byte node GUID.
        let mut ari = [0u8; ARI_LEN];
        ari[..8].copy_from_slice(&0x5054_00ff_fe58_000cu64.to_be_bytes());
        let rej = Rej {
            local_comm_id: 1,
            remote_comm_id: 2,
            msg_rejected: MsgResponse::Other,
            ari_len: 8,
            reason: RejectReason::Timeout,
            ari,
            private_data: PrivateData::from_slice(b"bye").unwrap(),
        };
        let mut b = [0u8; MAD_DATA_LEN];
        rej.emit(&mut b);
        assert_eq!(&b[8..12], &[0x80, 0x10, 0x00, 0x04]);
        assert_eq!(Rej::parse(&b).unwrap(), rej);
        assert_eq!(rej.ari(), &ari[..8]);
    }

    #[test]
    fn test_reject_reason_codes() {
        for code in 0..=u16::MAX {
            assert_eq!(RejectReason::from_code(code).code(), code);
        }
        assert_eq!(RejectReason::from_code(28), RejectReason::ConsumerDefined);
        assert_eq!(RejectReason::from_code(10), RejectReason::StaleConnection);
        assert_eq!(RejectReason::from_code(34), RejectReason::Unknown(34));
    }

    #[test]
    fn test_mra() {
        let mra = Mra {
            local_comm_id: 0x5ed9_9b66,
            remote_comm_id: 0x823b_9cb1,
            msg_mraed: MsgResponse::Rep,
            service_timeout: 24,
            private_data: PrivateData::ZERO,
        };
        let mut b = [0u8; MAD_DATA_LEN];
        mra.emit(&mut b);
        assert_eq!(b, data("5ed99b66 823b9cb1 40c0"));
        assert_eq!(Mra::parse(&b).unwrap(), mra);
        assert_eq!(Mra::parse(&b[..200]), Err(MadError::Truncated));
    }
}
