//! Identify data structures (4096 bytes each): the controller (CNS 01h), a namespace
//! (CNS 00h), the active namespace list (CNS 02h), a namespace's identification descriptors
//! (CNS 03h), and the NVM command set's controller structure (CNS 06h, all limits zero =
//! none reported). Only the fields a fabrics controller fills are typed; the rest is zero.

use super::{array, byte, cstr, le16, le32, le64, need, padded_str, put, put_str, DecodeError};

/// Bytes of every Identify structure.
pub const IDENTIFY_LEN: usize = 4096;

/// CNS values.
pub mod cns {
    /// Identify Namespace.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list.
    pub const NS_DESCRIPTORS: u8 = 0x03;
    /// I/O Command Set specific Identify Controller.
    pub const CSI_CONTROLLER: u8 = 0x06;
}

/// Controller type (CNTRLTYPE).
pub mod cntrltype {
    /// An I/O controller.
    pub const IO: u8 = 1;
    /// A discovery controller.
    pub const DISCOVERY: u8 = 2;
}

/// Identify Controller: the fields a fabrics controller sets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentifyController {
    /// Serial number (20 ASCII characters, space padded).
    pub sn: String,
    /// Model number (40).
    pub mn: String,
    /// Firmware revision (8).
    pub fr: String,
    /// Recommended arbitration burst.
    pub rab: u8,
    /// Multi-path I/O and namespace sharing (bit 1: more than one controller).
    pub cmic: u8,
    /// Maximum data transfer size, a power of two in units of 4 KiB (0: no limit).
    pub mdts: u8,
    /// The controller id.
    pub cntlid: u16,
    /// Version (major << 16 | minor << 8 | tertiary).
    pub ver: u32,
    /// Optional asynchronous events supported.
    pub oaes: u32,
    /// Controller attributes (bit 0: 128-bit host id; bit 6: traffic based keep alive).
    pub ctratt: u32,
    /// I/O or discovery controller ([`cntrltype`]).
    pub cntrltype: u8,
    /// Abort command limit, 0's based.
    pub acl: u8,
    /// Asynchronous event request limit, 0's based.
    pub aerl: u8,
    /// Firmware updates (slots).
    pub frmw: u8,
    /// Log page attributes (bit 2: offsets in Get Log Page).
    pub lpa: u8,
    /// Error log page entries, 0's based.
    pub elpe: u8,
    /// Keep alive support: granularity in 100 ms units (0: none).
    pub kas: u16,
    /// Submission queue entry sizes (required 6, maximum 6: 64 bytes).
    pub sqes: u8,
    /// Completion queue entry sizes (4: 16 bytes).
    pub cqes: u8,
    /// Commands outstanding at most per queue.
    pub maxcmd: u16,
    /// Number of namespaces (the largest nsid).
    pub nn: u32,
    /// Optional NVM commands (bit 2: Dataset Management, bit 3: Write Zeroes).
    pub oncs: u16,
    /// Volatile write cache (bit 0 present; bits 2:1 = 11b: flush of all namespaces).
    pub vwc: u8,
    /// SGL support (bit 0; bit 2 keyed data blocks; bit 20 offsets for in-capsule data).
    pub sgls: u32,
    /// Maximum number of allowed namespaces.
    pub mnan: u32,
    /// The subsystem NQN.
    pub subnqn: String,
    /// I/O queue command capsule size in 16-byte units (64-byte command + in-capsule data).
    pub ioccsz: u32,
    /// I/O queue response capsule size in 16-byte units.
    pub iorcsz: u32,
    /// In-capsule data offset in 16-byte units (0 over RDMA).
    pub icdoff: u16,
    /// Maximum SGL data block descriptors per command.
    pub msdbd: u8,
}

impl IdentifyController {
    /// Its 4096 bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_LEN];
        put_str(&mut b, 4, 20, &self.sn, b' ');
        put_str(&mut b, 24, 40, &self.mn, b' ');
        put_str(&mut b, 64, 8, &self.fr, b' ');
        b[72] = self.rab;
        b[76] = self.cmic;
        b[77] = self.mdts;
        put(&mut b, 78, &self.cntlid.to_le_bytes());
        put(&mut b, 80, &self.ver.to_le_bytes());
        put(&mut b, 92, &self.oaes.to_le_bytes());
        put(&mut b, 96, &self.ctratt.to_le_bytes());
        b[111] = self.cntrltype;
        b[258] = self.acl;
        b[259] = self.aerl;
        b[260] = self.frmw;
        b[261] = self.lpa;
        b[262] = self.elpe;
        put(&mut b, 320, &self.kas.to_le_bytes());
        b[512] = self.sqes;
        b[513] = self.cqes;
        put(&mut b, 514, &self.maxcmd.to_le_bytes());
        put(&mut b, 516, &self.nn.to_le_bytes());
        put(&mut b, 520, &self.oncs.to_le_bytes());
        b[525] = self.vwc;
        put(&mut b, 536, &self.sgls.to_le_bytes());
        put(&mut b, 540, &self.mnan.to_le_bytes());
        put_str(&mut b, 768, 256, &self.subnqn, 0);
        put(&mut b, 1792, &self.ioccsz.to_le_bytes());
        put(&mut b, 1796, &self.iorcsz.to_le_bytes());
        put(&mut b, 1800, &self.icdoff.to_le_bytes());
        b[1803] = self.msdbd;
        b
    }

    /// Reads the structure.
    pub fn parse(b: &[u8]) -> Result<IdentifyController, DecodeError> {
        need("identify controller", b, IDENTIFY_LEN)?;
        Ok(IdentifyController {
            sn: padded_str(b, 4, 20),
            mn: padded_str(b, 24, 40),
            fr: padded_str(b, 64, 8),
            rab: b[72],
            cmic: b[76],
            mdts: b[77],
            cntlid: le16(b, 78),
            ver: le32(b, 80),
            oaes: le32(b, 92),
            ctratt: le32(b, 96),
            cntrltype: b[111],
            acl: b[258],
            aerl: b[259],
            frmw: b[260],
            lpa: b[261],
            elpe: b[262],
            kas: le16(b, 320),
            sqes: b[512],
            cqes: b[513],
            maxcmd: le16(b, 514),
            nn: le32(b, 516),
            oncs: le16(b, 520),
            vwc: b[525],
            sgls: le32(b, 536),
            mnan: le32(b, 540),
            subnqn: cstr("subsystem NQN", b, 768, 256)?,
            ioccsz: le32(b, 1792),
            iorcsz: le32(b, 1796),
            icdoff: le16(b, 1800),
            msdbd: b[1803],
        })
    }

    /// The most data one command moves, in bytes (`None`: no limit).
    pub fn max_transfer(&self) -> Option<u64> {
        (self.mdts != 0).then(|| 4096u64 << self.mdts.min(40))
    }

    /// In-capsule data an I/O command may carry, in bytes.
    pub fn in_capsule_len(&self) -> usize {
        (self.ioccsz as usize * 16).saturating_sub(64)
    }
}

/// An LBA format: metadata bytes, data size as a power of two, relative performance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LbaFormat {
    /// Metadata bytes per block.
    pub ms: u16,
    /// Block size: 2^lbads bytes.
    pub lbads: u8,
    /// Relative performance.
    pub rp: u8,
}

/// Identify Namespace: the fields a namespace without metadata fills.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentifyNamespace {
    /// Size in blocks.
    pub nsze: u64,
    /// Capacity in blocks.
    pub ncap: u64,
    /// Blocks in use.
    pub nuse: u64,
    /// Features (bit 0: thin provisioning).
    pub nsfeat: u8,
    /// Number of LBA formats, 0's based.
    pub nlbaf: u8,
    /// The format in use (bits 3:0).
    pub flbas: u8,
    /// Multi-path and sharing (bit 0: the namespace may be attached to several controllers).
    pub nmic: u8,
    /// Deallocate features: bits 2:0 = 001b, deallocated blocks read as zeros; bit 3, Write
    /// Zeroes may deallocate.
    pub dlfeat: u8,
    /// Namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// IEEE extended unique identifier.
    pub eui64: [u8; 8],
    /// LBA format 0 (the only one).
    pub lbaf0: LbaFormat,
}

impl IdentifyNamespace {
    /// Its 4096 bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_LEN];
        put(&mut b, 0, &self.nsze.to_le_bytes());
        put(&mut b, 8, &self.ncap.to_le_bytes());
        put(&mut b, 16, &self.nuse.to_le_bytes());
        b[24] = self.nsfeat;
        b[25] = self.nlbaf;
        b[26] = self.flbas;
        b[30] = self.nmic;
        b[33] = self.dlfeat;
        put(&mut b, 104, &self.nguid);
        put(&mut b, 120, &self.eui64);
        put(&mut b, 128, &self.lbaf0.ms.to_le_bytes());
        b[130] = self.lbaf0.lbads;
        b[131] = self.lbaf0.rp;
        b
    }

    /// Reads the structure.
    pub fn parse(b: &[u8]) -> Result<IdentifyNamespace, DecodeError> {
        need("identify namespace", b, IDENTIFY_LEN)?;
        Ok(IdentifyNamespace {
            nsze: le64(b, 0),
            ncap: le64(b, 8),
            nuse: le64(b, 16),
            nsfeat: b[24],
            nlbaf: b[25],
            flbas: b[26],
            nmic: b[30],
            dlfeat: b[33],
            nguid: array(b, 104),
            eui64: array(b, 120),
            lbaf0: LbaFormat {
                ms: le16(b, 128),
                lbads: b[130],
                rp: b[131],
            },
        })
    }

    /// Bytes per block of the format in use (format 0 is the only one offered; others
    /// read as format 0's).
    pub fn block_size(&self) -> u64 {
        1u64 << self.lbaf0.lbads.min(31)
    }
}

/// The active namespace list: namespace ids in increasing order, at most 1024.
pub fn emit_ns_list(nsids: &[u32]) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    for (i, id) in nsids.iter().take(IDENTIFY_LEN / 4).enumerate() {
        put(&mut b, 4 * i, &id.to_le_bytes());
    }
    b
}

/// Reads a namespace list (up to the first zero).
pub fn parse_ns_list(b: &[u8]) -> Vec<u32> {
    (0..b.len() / 4)
        .map(|i| le32(b, 4 * i))
        .take_while(|&id| id != 0)
        .collect()
}

/// A namespace identification descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsId {
    /// Type 1: IEEE EUI-64.
    Eui64([u8; 8]),
    /// Type 2: NGUID.
    Nguid([u8; 16]),
    /// Type 3: UUID.
    Uuid([u8; 16]),
    /// Type 4: command set identifier (0: NVM).
    Csi(u8),
}

/// The descriptor list: type, length, two reserved bytes, the value; a zero type ends it.
pub fn emit_ns_descriptors(ids: &[NsId]) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    let mut at = 0;
    for id in ids {
        let (t, v): (u8, &[u8]) = match id {
            NsId::Eui64(v) => (1, v),
            NsId::Nguid(v) => (2, v),
            NsId::Uuid(v) => (3, v),
            NsId::Csi(v) => (4, std::slice::from_ref(v)),
        };
        put(&mut b, at, &[t, v.len() as u8, 0, 0]);
        put(&mut b, at + 4, v);
        at += 4 + v.len();
    }
    b
}

/// Reads a descriptor list (unknown types are skipped by their length).
pub fn parse_ns_descriptors(b: &[u8]) -> Vec<NsId> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= b.len() {
        let (t, len) = (byte(b, at), usize::from(byte(b, at + 1)));
        if t == 0 || at + 4 + len > b.len() {
            break;
        }
        let v = &b[at + 4..at + 4 + len];
        match (t, len) {
            (1, 8) => out.push(NsId::Eui64(array(v, 0))),
            (2, 16) => out.push(NsId::Nguid(array(v, 0))),
            (3, 16) => out.push(NsId::Uuid(array(v, 0))),
            (4, 1) => out.push(NsId::Csi(v[0])),
            _ => {}
        }
        at += 4 + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller() -> IdentifyController {
        IdentifyController {
            sn: "0123456789abcdef".into(),
            mn: "softrdma".into(),
            fr: "0.1.0".into(),
            rab: 6,
            cmic: 2,
            mdts: 8,
            cntlid: 5,
            ver: 0x0001_0300,
            oaes: 0,
            ctratt: 0x41,
            cntrltype: cntrltype::IO,
            acl: 3,
            aerl: 3,
            frmw: 3,
            lpa: 4,
            elpe: 63,
            kas: 10,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 128,
            nn: 1,
            oncs: 0x0c,
            vwc: 7,
            sgls: 0x0010_0005,
            mnan: 1,
            subnqn: "nqn.2026-12.io.softrdma:disk".into(),
            ioccsz: 516,
            iorcsz: 1,
            icdoff: 0,
            msdbd: 1,
        }
    }

    /// The offsets of the NVMe base spec's Figure "Identify Controller Data Structure", as
    /// the kernel target's answer in `nvmf_rdma.pcap` has them (MDTS at 77, CNTLID at 78,
    /// VER at 80, KAS at 320, SQES at 512, SGLS at 536, SUBNQN at 768, IOCCSZ at 1792).
    #[test]
    fn test_controller_field_offsets() {
        let b = controller().emit();
        assert_eq!(b.len(), 4096);
        assert_eq!(&b[4..24], b"0123456789abcdef    ");
        assert_eq!(b[77], 8);
        assert_eq!(&b[78..80], &[5, 0]);
        assert_eq!(&b[80..84], &[0, 3, 1, 0]);
        assert_eq!(&b[320..322], &[10, 0]);
        assert_eq!(&b[512..516], &[0x66, 0x44, 128, 0]);
        assert_eq!(&b[536..540], &[5, 0, 0x10, 0]);
        assert_eq!(&b[768..796], b"nqn.2026-12.io.softrdma:disk");
        assert_eq!(b[796], 0);
        assert_eq!(&b[1792..1800], &[4, 2, 0, 0, 1, 0, 0, 0]);
    }

    #[test]
    fn test_controller_round_trip() {
        let c = controller();
        let parsed = IdentifyController::parse(&c.emit()).unwrap();
        assert_eq!(parsed, c);
        assert_eq!(parsed.max_transfer(), Some(1 << 20));
        assert_eq!(parsed.in_capsule_len(), 8192);
    }

    #[test]
    fn test_namespace_round_trip() {
        let ns = IdentifyNamespace {
            nsze: 2048,
            ncap: 2048,
            nuse: 2048,
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            nmic: 1,
            dlfeat: 9,
            nguid: [0xab; 16],
            eui64: [0xcd; 8],
            lbaf0: LbaFormat {
                ms: 0,
                lbads: 9,
                rp: 0,
            },
        };
        let b = ns.emit();
        assert_eq!(&b[0..8], &2048u64.to_le_bytes());
        assert_eq!(b[130], 9);
        let parsed = IdentifyNamespace::parse(&b).unwrap();
        assert_eq!(parsed, ns);
        assert_eq!(parsed.block_size(), 512);
    }

    #[test]
    fn test_ns_list_and_descriptors() {
        let b = emit_ns_list(&[1, 2, 7]);
        assert_eq!(&b[..12], &[1, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0]);
        assert_eq!(parse_ns_list(&b), vec![1, 2, 7]);
        let ids = [NsId::Nguid([1; 16]), NsId::Uuid([2; 16]), NsId::Csi(0)];
        let b = emit_ns_descriptors(&ids);
        assert_eq!(&b[..4], &[2, 16, 0, 0]);
        assert_eq!(&b[20..24], &[3, 16, 0, 0]);
        assert_eq!(&b[40..45], &[4, 1, 0, 0, 0]);
        assert_eq!(parse_ns_descriptors(&b), ids.to_vec());
        // A descriptor running past the end stops the list instead of panicking.
        let mut bad = vec![0u8; 8];
        bad[..4].copy_from_slice(&[2, 16, 0, 0]);
        assert!(parse_ns_descriptors(&bad).is_empty());
    }

    #[test]
    fn test_short_structures_are_errors() {
        assert!(IdentifyController::parse(&[0; 100]).is_err());
        assert!(IdentifyNamespace::parse(&[0; 4095]).is_err());
    }
}
