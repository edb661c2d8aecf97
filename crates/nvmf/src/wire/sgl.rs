//! SGL descriptors (NVMe base spec, "Scatter Gather List"): the 16-byte data pointer of an
//! NVMe-oF command. Over RDMA a command's data is either in the capsule (a Data Block
//! descriptor whose subtype is "offset") or in host memory the target reaches with RDMA READ
//! and WRITE (a Keyed Data Block descriptor: address, 24-bit length, rkey); Linux's host
//! asks the target to invalidate the key with its response by the transport-specific
//! subtype Fh, and a command without data carries an all-zero keyed descriptor.

use super::{le32, le64, put};

/// Bytes in a descriptor.
pub const SGL_LEN: usize = 16;
/// Descriptor type 0: Data Block.
pub const TYPE_DATA_BLOCK: u8 = 0x0;
/// Descriptor type 4: Keyed Data Block.
pub const TYPE_KEYED_DATA_BLOCK: u8 = 0x4;
/// Subtype 0: the address is a memory address.
pub const SUBTYPE_ADDRESS: u8 = 0x0;
/// Subtype 1: the address is an offset (into the capsule's data, for in-capsule data).
pub const SUBTYPE_OFFSET: u8 = 0x1;
/// Subtype Fh of a Keyed Data Block over RDMA: an address whose key the target invalidates
/// with its response (SEND with Invalidate; Linux's `NVME_SGL_FMT_INVALIDATE`).
pub const SUBTYPE_INVALIDATE: u8 = 0xf;
/// Largest length a keyed descriptor carries (24 bits).
pub const KEYED_MAX_LEN: u32 = 0x00ff_ffff;

/// A descriptor as it travels; [`SglDescriptor::parse`] accepts any 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SglDescriptor {
    /// Type 0, Data Block: `subtype` [`SUBTYPE_ADDRESS`] or [`SUBTYPE_OFFSET`] (in-capsule).
    DataBlock {
        /// Address, or offset into the in-capsule data.
        address: u64,
        /// Bytes.
        length: u32,
        /// Descriptor subtype.
        subtype: u8,
    },
    /// Type 4, Keyed Data Block: `length` bytes of remote memory at `address` under `key`.
    Keyed {
        /// Remote virtual address.
        address: u64,
        /// Bytes (24 bits).
        length: u32,
        /// The rkey.
        key: u32,
        /// Descriptor subtype ([`SUBTYPE_ADDRESS`] or [`SUBTYPE_INVALIDATE`]).
        subtype: u8,
    },
    /// Any other type, kept as its bytes.
    Other([u8; SGL_LEN]),
}

impl SglDescriptor {
    /// The descriptor of a command without data, as Linux sends it (keyed, all zero).
    pub const NONE: SglDescriptor = SglDescriptor::Keyed {
        address: 0,
        length: 0,
        key: 0,
        subtype: SUBTYPE_ADDRESS,
    };

    /// A keyed descriptor; `invalidate` asks for the key's remote invalidation.
    pub fn keyed(address: u64, length: u32, key: u32, invalidate: bool) -> SglDescriptor {
        SglDescriptor::Keyed {
            address,
            length: length & KEYED_MAX_LEN,
            key,
            subtype: if invalidate {
                SUBTYPE_INVALIDATE
            } else {
                SUBTYPE_ADDRESS
            },
        }
    }

    /// An in-capsule data descriptor: `length` bytes at `offset` of the capsule's data.
    pub fn in_capsule(offset: u64, length: u32) -> SglDescriptor {
        SglDescriptor::DataBlock {
            address: offset,
            length,
            subtype: SUBTYPE_OFFSET,
        }
    }

    /// Reads a descriptor.
    pub fn parse(b: &[u8; SGL_LEN]) -> SglDescriptor {
        let id = b[15];
        let (kind, subtype) = (id >> 4, id & 0xf);
        match kind {
            // Bytes 12..15 are reserved, and ignored: Linux's host leaves the key of the
            // command slot's previous keyed descriptor there when it sends in-capsule data.
            TYPE_DATA_BLOCK => SglDescriptor::DataBlock {
                address: le64(b, 0),
                length: le32(b, 8),
                subtype,
            },
            TYPE_KEYED_DATA_BLOCK => SglDescriptor::Keyed {
                address: le64(b, 0),
                length: u32::from_le_bytes([b[8], b[9], b[10], 0]),
                key: le32(b, 11),
                subtype,
            },
            _ => SglDescriptor::Other(*b),
        }
    }

    /// Its 16 bytes.
    pub fn emit(&self) -> [u8; SGL_LEN] {
        let mut out = [0u8; SGL_LEN];
        match *self {
            SglDescriptor::DataBlock {
                address,
                length,
                subtype,
            } => {
                put(&mut out, 0, &address.to_le_bytes());
                put(&mut out, 8, &length.to_le_bytes());
                out[15] = TYPE_DATA_BLOCK << 4 | (subtype & 0xf);
            }
            SglDescriptor::Keyed {
                address,
                length,
                key,
                subtype,
            } => {
                put(&mut out, 0, &address.to_le_bytes());
                put(&mut out, 8, &length.to_le_bytes()[..3]);
                put(&mut out, 11, &key.to_le_bytes());
                out[15] = TYPE_KEYED_DATA_BLOCK << 4 | (subtype & 0xf);
            }
            SglDescriptor::Other(b) => out = b,
        }
        out
    }

    /// The descriptor's type (the high nibble of its identifier byte).
    pub fn sgl_type(&self) -> u8 {
        self.emit()[15] >> 4
    }

    /// The descriptor's raw identifier byte.
    pub fn identifier(&self) -> u8 {
        self.emit()[15]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Connect command of `nvmf_rdma.pcap` (the kernel host): a keyed descriptor of 1024
    /// bytes at 0xffff888006097c00, key 0x3ec, subtype Fh (invalidate).
    #[test]
    fn test_keyed_descriptor_of_the_kernel_hosts_connect() {
        let bytes = [
            0x00, 0x7c, 0x09, 0x06, 0x80, 0x88, 0xff, 0xff, 0x00, 0x04, 0x00, 0xec, 0x03, 0x00,
            0x00, 0x4f,
        ];
        let d = SglDescriptor::parse(&bytes);
        assert_eq!(
            d,
            SglDescriptor::keyed(0xffff_8880_0609_7c00, 1024, 0x3ec, true)
        );
        assert_eq!(d.emit(), bytes);
    }

    #[test]
    fn test_no_data_is_an_all_zero_keyed_descriptor() {
        let mut bytes = [0u8; 16];
        bytes[15] = 0x40;
        assert_eq!(SglDescriptor::parse(&bytes), SglDescriptor::NONE);
        assert_eq!(SglDescriptor::NONE.emit(), bytes);
    }

    #[test]
    fn test_in_capsule_descriptor_round_trip() {
        let d = SglDescriptor::in_capsule(0, 4096);
        let b = d.emit();
        assert_eq!(b[15], 0x01);
        assert_eq!(&b[8..12], &4096u32.to_le_bytes());
        assert_eq!(SglDescriptor::parse(&b), d);
    }

    /// An in-capsule write of Linux's host (from a capture of it writing to softrdma's
    /// target): 8 KiB at offset 0, with a stale key byte in the reserved bytes.
    #[test]
    fn test_in_capsule_descriptor_with_dirty_reserved_bytes() {
        let bytes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0xe5, 0, 0, 0x01];
        assert_eq!(
            SglDescriptor::parse(&bytes),
            SglDescriptor::in_capsule(0, 8192)
        );
    }

    #[test]
    fn test_other_types_keep_their_bytes() {
        let mut b = [7u8; 16];
        b[15] = 0x20; // a Segment descriptor
        let d = SglDescriptor::parse(&b);
        assert_eq!(d, SglDescriptor::Other(b));
        assert_eq!(d.sgl_type(), 2);
        assert_eq!(d.emit(), b);
    }

    #[test]
    fn test_keyed_length_is_24_bits() {
        let d = SglDescriptor::keyed(1, 0x0123_4567, 9, false);
        let SglDescriptor::Keyed { length, .. } = SglDescriptor::parse(&d.emit()) else {
            panic!("keyed");
        };
        assert_eq!(length, 0x0023_4567);
    }
}
