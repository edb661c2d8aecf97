//! The transport's decision about a command's data (NVMe-oF 1.1 section 7.3.2, and
//! nvmet-rdma's `nvmet_rdma_map_sgl`): none, in the capsule, or in host memory under a key;
//! pure, so it is tested without a network.

use crate::controller::Response;
use crate::wire::cqe::Status;
use crate::wire::sgl::{SglDescriptor, SUBTYPE_ADDRESS, SUBTYPE_INVALIDATE, SUBTYPE_OFFSET};
use crate::wire::sqe::{offset, DataDirection, Sqe};

/// Where a command's data is, as its SGL and direction say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPlan {
    /// No data.
    None,
    /// In the capsule, `len` bytes at `offset` of the data after the command.
    InCapsule {
        /// Offset into the in-capsule data.
        offset: usize,
        /// Bytes.
        len: usize,
    },
    /// In host memory: RDMA READ it (host to controller) or WRITE it (controller to host).
    Keyed {
        /// Remote address.
        addr: u64,
        /// Bytes.
        len: u32,
        /// The rkey.
        key: u32,
        /// Respond with SEND with Invalidate of `key`.
        invalidate: bool,
    },
}

impl DataPlan {
    /// Bytes the SGL describes.
    pub fn len(&self) -> u32 {
        match *self {
            DataPlan::None => 0,
            DataPlan::InCapsule { len, .. } => len as u32,
            DataPlan::Keyed { len, .. } => len,
        }
    }

    /// Whether the SGL describes nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key to invalidate with the response, if the host asked.
    pub fn invalidate(&self) -> Option<u32> {
        match *self {
            DataPlan::Keyed {
                key,
                invalidate: true,
                ..
            } => Some(key),
            _ => None,
        }
    }
}

/// Maps a command's SGL, as nvmet-rdma's `nvmet_rdma_map_sgl` does: in-capsule data only for
/// host-to-controller commands and within `in_capsule_max` (SGL Offset Invalid past it), keyed
/// descriptors of subtype 0 or Fh (invalidate), and no other type (SGL Descriptor Type
/// Invalid). `received` is how many bytes followed the command in the capsule. A command that
/// moves no data but describes some gets Data SGL Length Invalid.
pub fn map_sgl(sqe: &Sqe, received: usize, in_capsule_max: usize) -> Result<DataPlan, Response> {
    let direction = sqe.direction();
    let plan = match sqe.dptr {
        SglDescriptor::DataBlock {
            address,
            length,
            subtype: SUBTYPE_OFFSET,
        } => {
            if direction != DataDirection::HostToController {
                return Err(Response::invalid(Status::INVALID_FIELD.dnr(), 0));
            }
            let end = address.checked_add(u64::from(length));
            match end {
                Some(end) if end <= in_capsule_max as u64 => {}
                _ => {
                    return Err(Response::invalid(
                        Status::SGL_OFFSET_INVALID.dnr(),
                        offset::DPTR,
                    ))
                }
            }
            if end.unwrap_or(u64::MAX) > received as u64 {
                // The descriptor promises more than the capsule brought.
                return Err(Response::invalid(
                    Status::SGL_DATA_LENGTH_INVALID.dnr(),
                    offset::DPTR,
                ));
            }
            match length {
                0 => DataPlan::None,
                _ => DataPlan::InCapsule {
                    offset: address as usize,
                    len: length as usize,
                },
            }
        }
        SglDescriptor::DataBlock { .. } => {
            return Err(Response::invalid(Status::INVALID_FIELD.dnr(), offset::DPTR))
        }
        SglDescriptor::Keyed {
            address,
            length,
            key,
            subtype: subtype @ (SUBTYPE_ADDRESS | SUBTYPE_INVALIDATE),
        } => match length {
            0 => DataPlan::None,
            _ => DataPlan::Keyed {
                addr: address,
                len: length,
                key,
                invalidate: subtype == SUBTYPE_INVALIDATE,
            },
        },
        SglDescriptor::Keyed { .. } => {
            return Err(Response::invalid(Status::INVALID_FIELD.dnr(), offset::DPTR))
        }
        SglDescriptor::Other(_) => {
            return Err(Response::invalid(
                Status::SGL_TYPE_INVALID.dnr(),
                offset::DPTR,
            ))
        }
    };
    if direction == DataDirection::None && !plan.is_empty() {
        return Err(Response::invalid(
            Status::SGL_DATA_LENGTH_INVALID.dnr(),
            offset::DPTR,
        ));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::sqe::io;

    fn sqe(opcode: u8, dptr: SglDescriptor) -> Sqe {
        Sqe::new(opcode, 1, dptr)
    }

    #[test]
    fn test_keyed_descriptors() {
        let read = sqe(io::READ, SglDescriptor::keyed(0x1000, 4096, 0x77, true));
        assert_eq!(
            map_sgl(&read, 0, 8192).unwrap(),
            DataPlan::Keyed {
                addr: 0x1000,
                len: 4096,
                key: 0x77,
                invalidate: true
            }
        );
        assert_eq!(map_sgl(&read, 0, 8192).unwrap().invalidate(), Some(0x77));
        let write = sqe(io::WRITE, SglDescriptor::keyed(0x1000, 512, 0x77, false));
        assert_eq!(map_sgl(&write, 0, 8192).unwrap().invalidate(), None);
        // The kernel's "no data" descriptor.
        let flush = sqe(io::FLUSH, SglDescriptor::NONE);
        assert_eq!(map_sgl(&flush, 0, 8192).unwrap(), DataPlan::None);
    }

    #[test]
    fn test_in_capsule_data() {
        let write = sqe(io::WRITE, SglDescriptor::in_capsule(0, 4096));
        assert_eq!(
            map_sgl(&write, 4096, 8192).unwrap(),
            DataPlan::InCapsule {
                offset: 0,
                len: 4096
            }
        );
        // Past the in-capsule limit: SGL Offset Invalid; past what arrived: length invalid.
        let big = sqe(io::WRITE, SglDescriptor::in_capsule(4096, 8192));
        let e = map_sgl(&big, 16384, 8192).unwrap_err();
        assert_eq!(e.status, Status::SGL_OFFSET_INVALID.dnr());
        let e = map_sgl(&write, 100, 8192).unwrap_err();
        assert_eq!(e.status, Status::SGL_DATA_LENGTH_INVALID.dnr());
        let wrap = sqe(io::WRITE, SglDescriptor::in_capsule(u64::MAX, 2));
        let e = map_sgl(&wrap, 100, 8192).unwrap_err();
        assert_eq!(e.status, Status::SGL_OFFSET_INVALID.dnr(), "no overflow");
        // In-capsule data for a read: Invalid Field.
        let read = sqe(io::READ, SglDescriptor::in_capsule(0, 512));
        let e = map_sgl(&read, 512, 8192).unwrap_err();
        assert_eq!(e.status, Status::INVALID_FIELD.dnr());
    }

    #[test]
    fn test_bad_descriptors() {
        let mut seg = [0u8; 16];
        seg[15] = 0x20; // Segment
        let e = map_sgl(&sqe(io::READ, SglDescriptor::parse(&seg)), 0, 8192).unwrap_err();
        assert_eq!(e.status, Status::SGL_TYPE_INVALID.dnr());
        let keyed_offset = SglDescriptor::Keyed {
            address: 0,
            length: 512,
            key: 1,
            subtype: SUBTYPE_OFFSET,
        };
        let e = map_sgl(&sqe(io::READ, keyed_offset), 0, 8192).unwrap_err();
        assert_eq!(e.status, Status::INVALID_FIELD.dnr());
        let data_address = SglDescriptor::DataBlock {
            address: 0,
            length: 512,
            subtype: SUBTYPE_ADDRESS,
        };
        let e = map_sgl(&sqe(io::WRITE, data_address), 512, 8192).unwrap_err();
        assert_eq!(e.status, Status::INVALID_FIELD.dnr());
        // A Flush describing 4 KiB of data.
        let flush = sqe(io::FLUSH, SglDescriptor::keyed(0x1000, 4096, 1, false));
        let e = map_sgl(&flush, 0, 8192).unwrap_err();
        assert_eq!(e.status, Status::SGL_DATA_LENGTH_INVALID.dnr());
    }
}
