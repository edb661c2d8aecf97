//! The 16-byte completion queue entry (the whole of a response capsule over RDMA) and its
//! status field: Status Code (SC), Status Code Type (SCT), More, Do Not Retry (DNR).

use std::fmt;

use super::{le16, le32, need, put, DecodeError};

/// Bytes in a completion queue entry.
pub const CQE_LEN: usize = 16;

/// The status field: the upper 15 bits of the entry's last 16 (bit 0 there is the phase tag,
/// which fabrics leave 0). Laid out as Linux's `NVME_SC_*` values: SC in bits 7:0, SCT in
/// 10:8, CRD in 12:11, More in 13, DNR in 14.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub u16);

/// Status code types.
pub mod sct {
    /// Generic Command Status.
    pub const GENERIC: u8 = 0;
    /// Command Specific Status.
    pub const COMMAND_SPECIFIC: u8 = 1;
    /// Media and Data Integrity Errors.
    pub const MEDIA: u8 = 2;
}

impl Status {
    /// Successful Completion.
    pub const SUCCESS: Status = Status(0);
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: Status = Status::generic(0x01);
    /// Invalid Field in Command.
    pub const INVALID_FIELD: Status = Status::generic(0x02);
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: Status = Status::generic(0x04);
    /// Internal Error.
    pub const INTERNAL: Status = Status::generic(0x06);
    /// Invalid Namespace or Format.
    pub const INVALID_NAMESPACE: Status = Status::generic(0x0b);
    /// Command Sequence Error.
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::generic(0x0c);
    /// Data SGL Length Invalid.
    pub const SGL_DATA_LENGTH_INVALID: Status = Status::generic(0x0f);
    /// SGL Descriptor Type Invalid.
    pub const SGL_TYPE_INVALID: Status = Status::generic(0x11);
    /// SGL Offset Invalid.
    pub const SGL_OFFSET_INVALID: Status = Status::generic(0x16);
    /// LBA Out of Range.
    pub const LBA_OUT_OF_RANGE: Status = Status::generic(0x80);
    /// Asynchronous Event Request Limit Exceeded.
    pub const AER_LIMIT_EXCEEDED: Status = Status::specific(0x05);
    /// Invalid Log Page.
    pub const INVALID_LOG_PAGE: Status = Status::specific(0x09);
    /// Feature Identifier Not Saveable.
    pub const FEATURE_NOT_SAVEABLE: Status = Status::specific(0x0d);
    /// Feature Not Changeable.
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::specific(0x0e);
    /// Connect: Incompatible Format.
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::specific(0x80);
    /// Connect: Controller Busy.
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::specific(0x81);
    /// Connect: Invalid Parameters (the response's DW0 says which).
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::specific(0x82);
    /// Connect: Invalid Host.
    pub const CONNECT_INVALID_HOST: Status = Status::specific(0x84);
    /// Write Fault.
    pub const WRITE_FAULT: Status = Status::media(0x80);
    /// Unrecovered Read Error.
    pub const UNRECOVERED_READ_ERROR: Status = Status::media(0x81);

    const DNR: u16 = 0x4000;
    const MORE: u16 = 0x2000;

    /// A generic status code.
    pub const fn generic(sc: u8) -> Status {
        Status(sc as u16)
    }

    /// A command specific status code.
    pub const fn specific(sc: u8) -> Status {
        Status((sct::COMMAND_SPECIFIC as u16) << 8 | sc as u16)
    }

    /// A media and data integrity status code.
    pub const fn media(sc: u8) -> Status {
        Status((sct::MEDIA as u16) << 8 | sc as u16)
    }

    /// The same status with Do Not Retry set: retrying the command as sent fails again.
    pub const fn dnr(self) -> Status {
        Status(self.0 | Status::DNR)
    }

    /// The status code.
    pub fn sc(self) -> u8 {
        self.0.to_le_bytes()[0]
    }

    /// The status code type.
    pub fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }

    /// Do Not Retry.
    pub fn is_dnr(self) -> bool {
        self.0 & Status::DNR != 0
    }

    /// More information in the error log.
    pub fn is_more(self) -> bool {
        self.0 & Status::MORE != 0
    }

    /// SCT and SC without the flags (compare kinds of failure).
    pub fn code(self) -> Status {
        Status(self.0 & 0x07ff)
    }

    /// Successful Completion.
    pub fn is_success(self) -> bool {
        self.code() == Status::SUCCESS
    }

    /// The status as the field's 16 bits (phase tag 0).
    pub fn to_field(self) -> u16 {
        self.0 << 1
    }

    /// From the field's 16 bits (the phase tag dropped).
    pub fn from_field(field: u16) -> Status {
        Status(field >> 1)
    }

    /// The specification's name of the code.
    pub fn name(self) -> &'static str {
        const NAMES: [(Status, &str); 22] = [
            (Status::SUCCESS, "Successful Completion"),
            (Status::INVALID_OPCODE, "Invalid Command Opcode"),
            (Status::INVALID_FIELD, "Invalid Field in Command"),
            (Status::DATA_TRANSFER_ERROR, "Data Transfer Error"),
            (Status::INTERNAL, "Internal Error"),
            (Status::INVALID_NAMESPACE, "Invalid Namespace or Format"),
            (Status::COMMAND_SEQUENCE_ERROR, "Command Sequence Error"),
            (Status::SGL_DATA_LENGTH_INVALID, "Data SGL Length Invalid"),
            (Status::SGL_TYPE_INVALID, "SGL Descriptor Type Invalid"),
            (Status::SGL_OFFSET_INVALID, "SGL Offset Invalid"),
            (Status::LBA_OUT_OF_RANGE, "LBA Out of Range"),
            (
                Status::AER_LIMIT_EXCEEDED,
                "Asynchronous Event Request Limit Exceeded",
            ),
            (Status::INVALID_LOG_PAGE, "Invalid Log Page"),
            (
                Status::FEATURE_NOT_SAVEABLE,
                "Feature Identifier Not Saveable",
            ),
            (Status::FEATURE_NOT_CHANGEABLE, "Feature Not Changeable"),
            (
                Status::CONNECT_INCOMPATIBLE_FORMAT,
                "Connect Incompatible Format",
            ),
            (Status::CONNECT_CONTROLLER_BUSY, "Connect Controller Busy"),
            (
                Status::CONNECT_INVALID_PARAMETERS,
                "Connect Invalid Parameters",
            ),
            (Status::CONNECT_INVALID_HOST, "Connect Invalid Host"),
            (Status::WRITE_FAULT, "Write Fault"),
            (Status::UNRECOVERED_READ_ERROR, "Unrecovered Read Error"),
            (Status::specific(0x02), "Invalid Queue Size"),
        ];
        let code = self.code();
        NAMES
            .iter()
            .find(|(s, _)| *s == code)
            .map_or("(unnamed status)", |(_, n)| n)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// `SCT/SC name` and the flags: `1/82h Connect Invalid Parameters, DNR`.
impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{:02x}h {}", self.sct(), self.sc(), self.name())?;
        if self.is_dnr() {
            write!(f, ", DNR")?;
        }
        if self.is_more() {
            write!(f, ", More")?;
        }
        Ok(())
    }
}

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// Dword 0: command-specific result (a property's value, the Connect's controller id).
    pub dw0: u32,
    /// Dword 1: command-specific (a 64-bit property's upper half).
    pub dw1: u32,
    /// Submission queue head pointer.
    pub sqhd: u16,
    /// Submission queue identifier.
    pub sqid: u16,
    /// The command's identifier.
    pub cid: u16,
    /// The outcome.
    pub status: Status,
}

impl Cqe {
    /// Reads the first [`CQE_LEN`] bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Cqe, DecodeError> {
        need("completion queue entry", b, CQE_LEN)?;
        Ok(Cqe {
            dw0: le32(b, 0),
            dw1: le32(b, 4),
            sqhd: le16(b, 8),
            sqid: le16(b, 10),
            cid: le16(b, 12),
            status: Status::from_field(le16(b, 14)),
        })
    }

    /// Its 16 bytes.
    pub fn emit(&self) -> [u8; CQE_LEN] {
        let mut out = [0u8; CQE_LEN];
        put(&mut out, 0, &self.dw0.to_le_bytes());
        put(&mut out, 4, &self.dw1.to_le_bytes());
        put(&mut out, 8, &self.sqhd.to_le_bytes());
        put(&mut out, 10, &self.sqid.to_le_bytes());
        put(&mut out, 12, &self.cid.to_le_bytes());
        put(&mut out, 14, &self.status.to_field().to_le_bytes());
        out
    }

    /// The 64-bit result (a Property Get of an 8-byte property).
    pub fn result64(&self) -> u64 {
        u64::from(self.dw0) | u64::from(self.dw1) << 32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame 49 of `nvmf_rdma.pcap`: nvmet-rdma's response to Set Features (cid 0x0b,
    /// SQHD 0x0a, DW0 0x80000000, success).
    #[test]
    fn test_kernel_response_parses_and_round_trips() {
        let bytes = [0, 0, 0, 0x80, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0x0b, 0, 0, 0];
        let cqe = Cqe::parse(&bytes).unwrap();
        assert_eq!(
            cqe,
            Cqe {
                dw0: 0x8000_0000,
                dw1: 0,
                sqhd: 0x0a,
                sqid: 0,
                cid: 0x0b,
                status: Status::SUCCESS
            }
        );
        assert_eq!(cqe.emit(), bytes);
    }

    #[test]
    fn test_status_field_layout() {
        // Connect Invalid Parameters with DNR: SCT 1, SC 82h, DNR: Linux's 0x4182, shifted
        // past the phase tag on the wire.
        let s = Status::CONNECT_INVALID_PARAMETERS.dnr();
        assert_eq!(s.0, 0x4182);
        assert_eq!(s.to_field(), 0x8304);
        assert_eq!((s.sct(), s.sc(), s.is_dnr()), (1, 0x82, true));
        assert_eq!(Status::from_field(0x8305), s, "the phase tag is dropped");
        assert_eq!(s.to_string(), "1/82h Connect Invalid Parameters, DNR");
        assert_eq!(s.code(), Status::CONNECT_INVALID_PARAMETERS);
        assert!(!s.is_success());
    }

    #[test]
    fn test_truncated_entries_are_errors() {
        assert!(Cqe::parse(&[0u8; 15]).is_err());
    }
}
