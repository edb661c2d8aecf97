//! The RDMA transport's rdma_cm private data (NVMe-oF 1.1 section 7.3.x, Linux's
//! `include/linux/nvme-rdma.h`): the host's connect request names the queue and the sizes
//! of its receive and send queues, the target's accept names its receive queue size, and a
//! reject carries one of the transport's status codes. All little-endian, record format 0.

use super::{le16, need, put, DecodeError};

/// Bytes of the request and accept private data Linux sends (fields plus reserved).
pub const CM_PRIVATE_LEN: usize = 32;
/// Bytes of the reject private data.
pub const CM_REJECT_LEN: usize = 4;

/// The host's connect request (`struct nvme_rdma_cm_req`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRequest {
    /// Record format (0).
    pub recfmt: u16,
    /// The queue: 0 for the admin queue.
    pub qid: u16,
    /// The host's receive queue size: how many responses it can take.
    pub hrqsize: u16,
    /// The host's send queue size, 0's based: commands in flight at most, less one.
    pub hsqsize: u16,
}

impl CmRequest {
    /// Reads the first 8 bytes (the rest is reserved).
    pub fn parse(b: &[u8]) -> Result<CmRequest, DecodeError> {
        need("rdma_cm request private data", b, 8)?;
        Ok(CmRequest {
            recfmt: le16(b, 0),
            qid: le16(b, 2),
            hrqsize: le16(b, 4),
            hsqsize: le16(b, 6),
        })
    }

    /// The 32 bytes Linux sends.
    pub fn emit(&self) -> [u8; CM_PRIVATE_LEN] {
        let mut out = [0u8; CM_PRIVATE_LEN];
        put(&mut out, 0, &self.recfmt.to_le_bytes());
        put(&mut out, 2, &self.qid.to_le_bytes());
        put(&mut out, 4, &self.hrqsize.to_le_bytes());
        put(&mut out, 6, &self.hsqsize.to_le_bytes());
        out
    }
}

/// The target's accept (`struct nvme_rdma_cm_rep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReply {
    /// Record format (0).
    pub recfmt: u16,
    /// The controller's receive queue size: commands it can hold.
    pub crqsize: u16,
}

impl CmReply {
    /// Reads the first 4 bytes.
    pub fn parse(b: &[u8]) -> Result<CmReply, DecodeError> {
        need("rdma_cm reply private data", b, 4)?;
        Ok(CmReply {
            recfmt: le16(b, 0),
            crqsize: le16(b, 2),
        })
    }

    /// The 32 bytes nvmet-rdma sends.
    pub fn emit(&self) -> [u8; CM_PRIVATE_LEN] {
        let mut out = [0u8; CM_PRIVATE_LEN];
        put(&mut out, 0, &self.recfmt.to_le_bytes());
        put(&mut out, 2, &self.crqsize.to_le_bytes());
        out
    }
}

/// Why a target rejects a connect request (`enum nvme_rdma_cm_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectStatus {
    /// 01h: the private data is missing or too short.
    InvalidLength,
    /// 02h: an unknown record format.
    InvalidRecfmt,
    /// 03h: a queue the controller cannot have.
    InvalidQid,
    /// 04h: the host's send queue size is out of range.
    InvalidHsqsize,
    /// 05h: the host's receive queue size is out of range.
    InvalidHrqsize,
    /// 06h: the target is out of resources.
    NoResources,
    /// 07h: the host offers no RDMA READ resources (IRD).
    InvalidIrd,
    /// 08h: invalid ORD.
    InvalidOrd,
    /// Any other value.
    Other(u16),
}

impl RejectStatus {
    /// Its code.
    pub fn code(self) -> u16 {
        match self {
            RejectStatus::InvalidLength => 1,
            RejectStatus::InvalidRecfmt => 2,
            RejectStatus::InvalidQid => 3,
            RejectStatus::InvalidHsqsize => 4,
            RejectStatus::InvalidHrqsize => 5,
            RejectStatus::NoResources => 6,
            RejectStatus::InvalidIrd => 7,
            RejectStatus::InvalidOrd => 8,
            RejectStatus::Other(c) => c,
        }
    }

    /// The status of `code`.
    pub fn from_code(code: u16) -> RejectStatus {
        match code {
            1 => RejectStatus::InvalidLength,
            2 => RejectStatus::InvalidRecfmt,
            3 => RejectStatus::InvalidQid,
            4 => RejectStatus::InvalidHsqsize,
            5 => RejectStatus::InvalidHrqsize,
            6 => RejectStatus::NoResources,
            7 => RejectStatus::InvalidIrd,
            8 => RejectStatus::InvalidOrd,
            c => RejectStatus::Other(c),
        }
    }
}

/// The target's reject (`struct nvme_rdma_cm_rej`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReject {
    /// Record format (0).
    pub recfmt: u16,
    /// Why.
    pub status: RejectStatus,
}

impl CmReject {
    /// Reads the first 4 bytes.
    pub fn parse(b: &[u8]) -> Result<CmReject, DecodeError> {
        need("rdma_cm reject private data", b, CM_REJECT_LEN)?;
        Ok(CmReject {
            recfmt: le16(b, 0),
            status: RejectStatus::from_code(le16(b, 2)),
        })
    }

    /// Its 4 bytes.
    pub fn emit(&self) -> [u8; CM_REJECT_LEN] {
        let mut out = [0u8; CM_REJECT_LEN];
        put(&mut out, 0, &self.recfmt.to_le_bytes());
        put(&mut out, 2, &self.status.code().to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame 1 of `nvmf_rdma.pcap`: the kernel host's request for the admin queue (the
    /// consumer private data after rdma_cm's header): recfmt 0, qid 0, hrqsize 32, hsqsize 31.
    #[test]
    fn test_kernel_admin_request() {
        let mut b = [0u8; 56];
        b[..8].copy_from_slice(&[0, 0, 0, 0, 0x20, 0, 0x1f, 0]);
        let r = CmRequest::parse(&b).unwrap();
        assert_eq!(
            r,
            CmRequest {
                recfmt: 0,
                qid: 0,
                hrqsize: 32,
                hsqsize: 31
            }
        );
        assert_eq!(&r.emit()[..], &b[..32]);
    }

    /// Frame 166: nvmet-rdma's accept of an I/O queue, crqsize 128.
    #[test]
    fn test_kernel_io_reply() {
        let mut b = [0u8; 32];
        b[2] = 0x80;
        let r = CmReply::parse(&b).unwrap();
        assert_eq!(
            r,
            CmReply {
                recfmt: 0,
                crqsize: 128
            }
        );
        assert_eq!(r.emit(), b);
    }

    #[test]
    fn test_reject_codes_round_trip() {
        for code in 0..=9u16 {
            let rej = CmReject {
                recfmt: 0,
                status: RejectStatus::from_code(code),
            };
            assert_eq!(rej.status.code(), code);
            assert_eq!(CmReject::parse(&rej.emit()).unwrap(), rej);
        }
        assert_eq!(
            CmReject::parse(&[0, 0, 4, 0]).unwrap().status,
            RejectStatus::InvalidHsqsize
        );
    }

    #[test]
    fn test_short_private_data_is_an_error() {
        assert!(CmRequest::parse(&[0; 7]).is_err());
        assert!(CmReply::parse(&[0; 3]).is_err());
        assert!(CmReject::parse(&[]).is_err());
    }
}
