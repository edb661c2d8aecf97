//! What the CM messages share: the class version, attribute IDs, private data sizes, the
//! message and transport codes several messages carry, and the RTU/DREP layout.

use core::fmt;

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

/// Defines a message of the layout RTU and DREP share — the two communication IDs, then 224
/// bytes of private data — as a type of its own: an RTU is not a DREP, though their bytes
/// look alike, so each is a struct, and the layout is written once, here.
macro_rules! ids_and_data_message {
    (
        $(#[$doc:meta])*
        $name:ident, $a_name:literal, private data $len:path,
        local: $local:literal, remote: $remote:literal
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            #[doc = $local]
            pub local_comm_id: u32,
            #[doc = $remote]
            pub remote_comm_id: u32,
            /// Private data (8).
            pub private_data: $crate::mad::header::PrivateData<{ $len }>,
        }

        impl $name {
            /// Bytes of MAD data the message occupies.
            pub const LEN: usize = $crate::mad::header::MAD_DATA_LEN;

            #[doc = concat!("Parses the 232 data bytes of ", $a_name, ".")]
            pub fn parse(b: &[u8]) -> Result<$name, $crate::mad::header::MadError> {
                if b.len() < Self::LEN {
                    return Err($crate::mad::header::MadError::Truncated);
                }
                Ok($name {
                    local_comm_id: $crate::bytes::be32(b, 0),
                    remote_comm_id: $crate::bytes::be32(b, 4),
                    private_data: $crate::mad::header::PrivateData::read(&b[8..]),
                })
            }

            /// Writes the 232 data bytes.
            ///
            /// # Panics
            #[doc = concat!("If `b` is shorter than [`", stringify!($name), "::LEN`].")]
            pub fn emit(&self, b: &mut [u8]) {
                $crate::bytes::put32(b, 0, self.local_comm_id);
                $crate::bytes::put32(b, 4, self.remote_comm_id);
                b[8..Self::LEN].copy_from_slice(self.private_data.as_bytes());
            }
        }
    };
}
pub(crate) use ids_and_data_message;

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
