//! The Fabrics commands (NVMe-oF 1.1 section 3.3 and 3.4): Connect with its 1024-byte data
//! (host identifier, controller id, subsystem and host NQNs), Property Get and Set, and the
//! controller properties a host reads and writes through them (CAP, VS, CC, CSTS).

use super::sgl::SglDescriptor;
use super::sqe::{fctype, Sqe};
use super::{array, cstr, le16, need, put, put_str, DecodeError};

/// Bytes of Connect data.
pub const CONNECT_DATA_LEN: usize = 1024;
/// Bytes of an NQN field (with its NUL).
pub const NQN_LEN: usize = 256;
/// The controller id a host sends to ask for any controller (the dynamic controller model).
pub const CNTLID_DYNAMIC: u16 = 0xffff;
/// The well-known NQN of discovery controllers.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Offsets in the Connect data, for the response's invalid parameter offset.
pub mod data_offset {
    /// The host identifier.
    pub const HOSTID: u16 = 0;
    /// The controller id.
    pub const CNTLID: u16 = 16;
    /// The subsystem NQN.
    pub const SUBNQN: u16 = 256;
    /// The host NQN.
    pub const HOSTNQN: u16 = 512;
}

/// The fields of a Connect command (dwords 10 to 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// Record format (0).
    pub recfmt: u16,
    /// Queue: 0 the admin queue, else an I/O queue.
    pub qid: u16,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Connect attributes (bit 2: the host disables SQ flow control).
    pub cattr: u8,
    /// Keep alive timeout in milliseconds (admin queue).
    pub kato: u32,
}

/// Connect attribute: SQ flow control disabled (SQHD not reported).
pub const CATTR_DISABLE_SQ_FLOW: u8 = 1 << 2;

impl Connect {
    /// The Connect fields of `sqe` (whatever its type; the caller checked it is a Connect).
    pub fn from_sqe(sqe: &Sqe) -> Connect {
        let (c10, c11) = (sqe.cdw(10), sqe.cdw(11));
        Connect {
            recfmt: c10 as u16,
            qid: (c10 >> 16) as u16,
            sqsize: c11 as u16,
            cattr: (c11 >> 16) as u8,
            kato: sqe.cdw(12),
        }
    }

    /// The command, with `cid` and its data where `dptr` says.
    pub fn to_sqe(&self, cid: u16, dptr: SglDescriptor) -> Sqe {
        let mut sqe = Sqe::fabrics(fctype::CONNECT, cid, dptr);
        sqe.cdw[0] = u32::from(self.recfmt) | u32::from(self.qid) << 16;
        sqe.cdw[1] = u32::from(self.sqsize) | u32::from(self.cattr) << 16;
        sqe.cdw[2] = self.kato;
        sqe
    }
}

/// The Connect command's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectData {
    /// The host identifier (a UUID).
    pub hostid: [u8; 16],
    /// [`CNTLID_DYNAMIC`] on the admin queue; the admin Connect's answer on I/O queues.
    pub cntlid: u16,
    /// The subsystem the host connects to.
    pub subnqn: String,
    /// The host's NQN.
    pub hostnqn: String,
}

impl ConnectData {
    /// Reads the data: each NQN must be NUL-terminated ASCII within its 256 bytes.
    pub fn parse(b: &[u8]) -> Result<ConnectData, DecodeError> {
        need("connect data", b, CONNECT_DATA_LEN)?;
        Ok(ConnectData {
            hostid: array(b, 0),
            cntlid: le16(b, 16),
            subnqn: cstr("subsystem NQN", b, 256, NQN_LEN)?,
            hostnqn: cstr("host NQN", b, 512, NQN_LEN)?,
        })
    }

    /// Its 1024 bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut out = vec![0u8; CONNECT_DATA_LEN];
        put(&mut out, 0, &self.hostid);
        put(&mut out, 16, &self.cntlid.to_le_bytes());
        put_str(&mut out, 256, NQN_LEN, &self.subnqn, 0);
        put_str(&mut out, 512, NQN_LEN, &self.hostnqn, 0);
        out
    }
}

/// The Connect response's dword 0 for Connect Invalid Parameters: the offending field's
/// byte offset (bits 15:0) and whether it is in the command (0) or its data (1, bit 16).
pub fn invalid_parameter(in_data: bool, offset: u16) -> u32 {
    u32::from(in_data) << 16 | u32::from(offset)
}

/// Controller properties (the registers of a PCIe controller), by offset.
pub mod property {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1c;
}

/// CC.EN: enable.
pub const CC_EN: u32 = 1;
/// CC.SHN: shutdown notification (bits 15:14).
pub const CC_SHN_MASK: u32 = 3 << 14;
/// CC.SHN normal shutdown.
pub const CC_SHN_NORMAL: u32 = 1 << 14;
/// CSTS.RDY: ready.
pub const CSTS_RDY: u32 = 1;
/// CSTS.CFS: controller fatal status.
pub const CSTS_CFS: u32 = 1 << 1;
/// CSTS.SHST: shutdown status (bits 3:2).
pub const CSTS_SHST_MASK: u32 = 3 << 2;
/// CSTS.SHST shutdown processing complete.
pub const CSTS_SHST_COMPLETE: u32 = 2 << 2;
/// The CC a host writes to enable a controller: EN, NVM command set, 4 KiB pages,
/// round-robin, 64-byte SQ and 16-byte CQ entries (IOSQES 6, IOCQES 4).
pub const CC_ENABLE_NVM: u32 = CC_EN | 6 << 16 | 4 << 20;

/// A Property Get or Set (dwords 10 to 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Property {
    /// 8-byte property (ATTRIB bits 2:0 = 1) rather than 4-byte (0).
    pub eight_bytes: bool,
    /// Offset ([`property`]).
    pub offset: u32,
    /// The value to set (Property Set).
    pub value: u64,
}

impl Property {
    /// The fields of `sqe`.
    pub fn from_sqe(sqe: &Sqe) -> Property {
        Property {
            eight_bytes: sqe.cdw(10) & 7 == 1,
            offset: sqe.cdw(11),
            value: u64::from(sqe.cdw(12)) | u64::from(sqe.cdw(13)) << 32,
        }
    }

    /// A Property Get (`set` false) or Set command.
    pub fn to_sqe(&self, set: bool, cid: u16) -> Sqe {
        let t = if set {
            fctype::PROPERTY_SET
        } else {
            fctype::PROPERTY_GET
        };
        let mut sqe = Sqe::fabrics(t, cid, SglDescriptor::NONE);
        sqe.cdw[0] = u32::from(self.eight_bytes);
        sqe.cdw[1] = self.offset;
        sqe.cdw[2] = self.value as u32;
        sqe.cdw[3] = (self.value >> 32) as u32;
        sqe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_connect_fields_round_trip() {
        let c = Connect {
            recfmt: 0,
            qid: 3,
            sqsize: 127,
            cattr: CATTR_DISABLE_SQ_FLOW,
            kato: 5000,
        };
        let sqe = c.to_sqe(9, SglDescriptor::in_capsule(0, 1024));
        let b = sqe.emit();
        assert_eq!(&b[40..52], &[0, 0, 3, 0, 127, 0, 4, 0, 0x88, 0x13, 0, 0]);
        assert_eq!(Connect::from_sqe(&Sqe::parse(&b).unwrap()), c);
    }

    /// The connect data of frame 7 of `nvmf_rdma.pcap` (the kernel host's discovery
    /// connect): host id, controller id FFFFh, the discovery NQN.
    #[test]
    fn test_kernel_connect_data() {
        let mut b = vec![0u8; 1024];
        b[..16].copy_from_slice(&[
            0x0d, 0xbf, 0x7e, 0x38, 0xdf, 0x3d, 0x4d, 0xfd, 0xb7, 0x8a, 0x26, 0x6e, 0x02, 0x7d,
            0x6d, 0x82,
        ]);
        b[16..18].copy_from_slice(&[0xff, 0xff]);
        b[256..256 + DISCOVERY_NQN.len()].copy_from_slice(DISCOVERY_NQN.as_bytes());
        let host = "nqn.2014-08.org.nvmexpress:uuid:0dbf7e38";
        b[512..512 + host.len()].copy_from_slice(host.as_bytes());
        let d = ConnectData::parse(&b).unwrap();
        assert_eq!(d.cntlid, CNTLID_DYNAMIC);
        assert_eq!(d.subnqn, DISCOVERY_NQN);
        assert_eq!(d.hostnqn, host);
        assert_eq!(d.hostid[0], 0x0d);
        assert_eq!(d.emit(), b);
    }

    #[test]
    fn test_an_nqn_without_its_nul_is_refused() {
        let mut b = vec![0u8; 1024];
        b[256..512].fill(b'a');
        assert_eq!(
            ConnectData::parse(&b),
            Err(DecodeError::BadString {
                what: "subsystem NQN"
            })
        );
        assert!(ConnectData::parse(&b[..1000]).is_err());
    }

    #[test]
    fn test_property_commands() {
        let get = Property {
            eight_bytes: true,
            offset: property::CAP,
            value: 0,
        };
        let sqe = get.to_sqe(false, 1);
        assert_eq!(sqe.fctype(), fctype::PROPERTY_GET);
        assert_eq!(Property::from_sqe(&sqe), get);
        let set = Property {
            eight_bytes: false,
            offset: property::CC,
            value: u64::from(CC_ENABLE_NVM),
        };
        let sqe = set.to_sqe(true, 2);
        assert_eq!(sqe.fctype(), fctype::PROPERTY_SET);
        assert_eq!(&sqe.emit()[44..52], &[0x14, 0, 0, 0, 0x01, 0, 0x46, 0]);
        assert_eq!(Property::from_sqe(&sqe), set);
    }

    #[test]
    fn test_invalid_parameter_offsets() {
        assert_eq!(invalid_parameter(true, data_offset::SUBNQN), 0x0001_0100);
        assert_eq!(invalid_parameter(false, 42), 42);
    }
}
