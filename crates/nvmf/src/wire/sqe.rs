//! The 64-byte submission queue entry (an NVMe command, the head of every command capsule):
//! opcode, flags, command identifier, namespace, the data pointer (an SGL descriptor over
//! fabrics) and command dwords 10 to 15. Fabrics commands (opcode 7Fh) put their command
//! type in byte 4, where other commands have the low byte of the namespace identifier.

use super::sgl::{SglDescriptor, SGL_LEN};
use super::{array, le16, le32, le64, need, put, DecodeError};

/// Bytes in a submission queue entry.
pub const SQE_LEN: usize = 64;

/// Admin command opcodes (NVMe base spec, "Admin Command Set").
pub mod admin {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0a;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT: u8 = 0x0c;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// NVM command set I/O opcodes.
pub mod io {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DSM: u8 = 0x09;
}

/// The Fabrics command opcode; the command type is in byte 4 ([`fctype`]).
pub const FABRICS: u8 = 0x7f;

/// Fabrics command types (NVMe-oF 1.1, "Fabrics Command Set").
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
}

/// PSDT (flags bits 7:6) 01b: SGLs for data, the metadata pointer a buffer; what NVMe-oF
/// requires of every command.
pub const PSDT_SGL: u8 = 0x40;
/// The PSDT bits of the flags.
pub const PSDT_MASK: u8 = 0xc0;
/// The FUSE bits of the flags (fused operations are not offered).
pub const FUSE_MASK: u8 = 0x03;

/// Offsets of fields in the entry, for an error's "parameter error location" and the
/// Connect response's invalid parameter offset.
pub mod offset {
    /// The flags byte.
    pub const FLAGS: u16 = 1;
    /// The namespace identifier.
    pub const NSID: u16 = 4;
    /// The data pointer.
    pub const DPTR: u16 = 24;
    /// Command dword 10.
    pub const CDW10: u16 = 40;
    /// Connect: the queue identifier.
    pub const CONNECT_QID: u16 = 42;
    /// Connect: the submission queue size.
    pub const CONNECT_SQSIZE: u16 = 44;
}

/// Which way a command moves data (opcode bits 1:0; a fabrics command's type bits 1:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDirection {
    /// No data.
    None,
    /// Host to controller (a write).
    HostToController,
    /// Controller to host (a read).
    ControllerToHost,
    /// Both (not used by the commands offered).
    Bidirectional,
}

/// A submission queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sqe {
    /// Opcode.
    pub opcode: u8,
    /// FUSE (bits 1:0) and PSDT (bits 7:6).
    pub flags: u8,
    /// Command identifier, echoed in the completion.
    pub cid: u16,
    /// Namespace identifier (bytes 4..8; a fabrics command's type is its low byte).
    pub nsid: u32,
    /// Command dword 2.
    pub cdw2: u32,
    /// Command dword 3.
    pub cdw3: u32,
    /// Metadata pointer.
    pub mptr: u64,
    /// Data pointer.
    pub dptr: SglDescriptor,
    /// Command dwords 10 to 15 (`cdw[0]` is dword 10).
    pub cdw: [u32; 6],
}

impl Sqe {
    /// A command with SGL data pointer `dptr` and everything else zero but `opcode` and `cid`.
    pub fn new(opcode: u8, cid: u16, dptr: SglDescriptor) -> Sqe {
        Sqe {
            opcode,
            flags: PSDT_SGL,
            cid,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            mptr: 0,
            dptr,
            cdw: [0; 6],
        }
    }

    /// A fabrics command of type `fctype`.
    pub fn fabrics(fctype: u8, cid: u16, dptr: SglDescriptor) -> Sqe {
        Sqe {
            nsid: u32::from(fctype),
            ..Sqe::new(FABRICS, cid, dptr)
        }
    }

    /// Reads the first [`SQE_LEN`] bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Sqe, DecodeError> {
        need("submission queue entry", b, SQE_LEN)?;
        let dptr: [u8; SGL_LEN] = array(b, 24);
        let mut cdw = [0u32; 6];
        for (i, d) in cdw.iter_mut().enumerate() {
            *d = le32(b, 40 + 4 * i);
        }
        Ok(Sqe {
            opcode: b[0],
            flags: b[1],
            cid: le16(b, 2),
            nsid: le32(b, 4),
            cdw2: le32(b, 8),
            cdw3: le32(b, 12),
            mptr: le64(b, 16),
            dptr: SglDescriptor::parse(&dptr),
            cdw,
        })
    }

    /// Its 64 bytes.
    pub fn emit(&self) -> [u8; SQE_LEN] {
        let mut out = [0u8; SQE_LEN];
        out[0] = self.opcode;
        out[1] = self.flags;
        put(&mut out, 2, &self.cid.to_le_bytes());
        put(&mut out, 4, &self.nsid.to_le_bytes());
        put(&mut out, 8, &self.cdw2.to_le_bytes());
        put(&mut out, 12, &self.cdw3.to_le_bytes());
        put(&mut out, 16, &self.mptr.to_le_bytes());
        put(&mut out, 24, &self.dptr.emit());
        for (i, d) in self.cdw.iter().enumerate() {
            put(&mut out, 40 + 4 * i, &d.to_le_bytes());
        }
        out
    }

    /// Whether this is a fabrics command (opcode 7Fh).
    pub fn is_fabrics(&self) -> bool {
        self.opcode == FABRICS
    }

    /// A fabrics command's type (byte 4).
    pub fn fctype(&self) -> u8 {
        self.nsid.to_le_bytes()[0]
    }

    /// Command dword `dword` (10 to 15; any other reads as 0).
    pub fn cdw(&self, dword: usize) -> u32 {
        self.cdw.get(dword.wrapping_sub(10)).copied().unwrap_or(0)
    }

    /// Which way the command moves data.
    pub fn direction(&self) -> DataDirection {
        let code = if self.is_fabrics() {
            self.fctype()
        } else {
            self.opcode
        };
        match code & 3 {
            0 => DataDirection::None,
            1 => DataDirection::HostToController,
            2 => DataDirection::ControllerToHost,
            _ => DataDirection::Bidirectional,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame 4 of `nvmf_rdma.pcap`: the kernel host's admin Connect to the discovery
    /// controller.
    const KERNEL_CONNECT: [u8; 64] = [
        0x7f, 0x40, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7c, 0x09, 0x06, 0x80, 0x88,
        0xff, 0xff, 0x00, 0x04, 0x00, 0xec, 0x03, 0x00, 0x00, 0x4f, 0x00, 0x00, 0x00, 0x00, 0x1f,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn test_kernel_connect_parses_and_round_trips() {
        let sqe = Sqe::parse(&KERNEL_CONNECT).unwrap();
        assert!(sqe.is_fabrics());
        assert_eq!(sqe.fctype(), fctype::CONNECT);
        assert_eq!(sqe.flags, PSDT_SGL);
        assert_eq!(sqe.cid, 0);
        assert_eq!(sqe.direction(), DataDirection::HostToController);
        assert_eq!(
            sqe.dptr,
            SglDescriptor::keyed(0xffff_8880_0609_7c00, 1024, 0x3ec, true)
        );
        // recfmt 0, qid 0 in dword 10; sqsize 31 in dword 11.
        assert_eq!((sqe.cdw(10), sqe.cdw(11), sqe.cdw(12)), (0, 31, 0));
        assert_eq!(sqe.emit(), KERNEL_CONNECT);
    }

    #[test]
    fn test_directions_follow_the_opcode_bits() {
        let d = |op| Sqe::new(op, 0, SglDescriptor::NONE).direction();
        assert_eq!(d(io::READ), DataDirection::ControllerToHost);
        assert_eq!(d(io::WRITE), DataDirection::HostToController);
        assert_eq!(d(io::FLUSH), DataDirection::None);
        assert_eq!(d(io::DSM), DataDirection::HostToController);
        assert_eq!(d(admin::IDENTIFY), DataDirection::ControllerToHost);
        assert_eq!(d(admin::GET_LOG_PAGE), DataDirection::ControllerToHost);
        let f = |t| Sqe::fabrics(t, 0, SglDescriptor::NONE).direction();
        assert_eq!(f(fctype::PROPERTY_GET), DataDirection::None);
        assert_eq!(f(fctype::PROPERTY_SET), DataDirection::None);
        assert_eq!(f(fctype::CONNECT), DataDirection::HostToController);
    }

    #[test]
    fn test_short_entries_are_an_error_not_a_panic() {
        for n in [0, 1, 40, 63] {
            assert!(matches!(
                Sqe::parse(&vec![0xff; n]),
                Err(DecodeError::Truncated { need: 64, .. })
            ));
        }
    }

    #[test]
    fn test_every_field_round_trips() {
        let mut sqe = Sqe::new(io::WRITE, 0xbeef, SglDescriptor::in_capsule(0, 512));
        sqe.nsid = 7;
        sqe.cdw2 = 0x1111_2222;
        sqe.cdw3 = 0x3333_4444;
        sqe.mptr = 0x5555_6666_7777_8888;
        sqe.cdw = [1, 2, 3, 4, 5, 6];
        assert_eq!(Sqe::parse(&sqe.emit()).unwrap(), sqe);
        assert_eq!(sqe.cdw(15), 6);
        assert_eq!(sqe.cdw(9), 0);
    }
}
