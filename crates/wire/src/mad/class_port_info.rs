//! ClassPortInfo (IBTA 13.4.8.1, attribute 0x0001): what every management class reports about
//! itself — versions, capabilities, its response time, and where to redirect or send traps.
//! rdma_cm asks the SA for it on InfiniBand; on RoCE nobody sends it, but a GSI agent must be
//! able to read and answer it.

use crate::bytes::{be16, be24, be32, check_len, put16, put24, put32};
use crate::mad::header::MadError;
use crate::Gid;

/// The attribute ID.
pub const ATTR_ID: u16 = 0x0001;

/// Where a redirect or trap points: an address vector reduced to its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortInfoTarget {
    /// GID.
    pub gid: Gid,
    /// Traffic class.
    pub traffic_class: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// LID.
    pub lid: u16,
    /// P_Key.
    pub pkey: u16,
    /// Queue pair (24 bits).
    pub qpn: u32,
    /// Q_Key.
    pub qkey: u32,
}

/// A parsed ClassPortInfo (72 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ClassPortInfo {
    /// Base version of MADs the class supports.
    pub base_version: u8,
    /// Class version.
    pub class_version: u8,
    /// Class-specific capabilities.
    pub capability_mask: u16,
    /// More capabilities (27 bits).
    pub capability_mask2: u32,
    /// Response time: 4.096 µs × 2^value (5 bits).
    pub resp_time_value: u8,
    /// Where requests should go instead.
    pub redirect: PortInfoTarget,
    /// Where traps go.
    pub trap: PortInfoTarget,
    /// Hop limit for traps.
    pub trap_hop_limit: u8,
}

impl ClassPortInfo {
    /// Attribute length in bytes.
    pub const LEN: usize = 72;

    /// Parses the first 72 bytes of the MAD data `b`.
    pub fn parse(b: &[u8]) -> Result<ClassPortInfo, MadError> {
        check_len(b, Self::LEN).map_err(|_| MadError::Truncated)?;
        let target = |at: usize, qp_at: usize, qkey_at: usize| {
            let word = be32(b, at + 16);
            PortInfoTarget {
                gid: Gid(b[at..at + 16].try_into().expect("16 bytes")),
                traffic_class: (word >> 24) as u8,
                sl: ((word >> 20) & 0xf) as u8,
                flow_label: word & 0xf_ffff,
                lid: be16(b, at + 20),
                pkey: be16(b, at + 22),
                qpn: be24(b, qp_at + 1),
                qkey: be32(b, qkey_at),
            }
        };
        let mask2 = be32(b, 4);
        Ok(ClassPortInfo {
            base_version: b[0],
            class_version: b[1],
            capability_mask: be16(b, 2),
            capability_mask2: mask2 >> 5,
            resp_time_value: (mask2 & 0x1f) as u8,
            redirect: target(8, 32, 36),
            trap: target(40, 64, 68),
            trap_hop_limit: b[64],
        })
    }

    /// Writes the attribute into the first 72 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`ClassPortInfo::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.base_version;
        b[1] = self.class_version;
        put16(b, 2, self.capability_mask);
        put32(
            b,
            4,
            (self.capability_mask2 << 5) | u32::from(self.resp_time_value & 0x1f),
        );
        let mut target = |t: &PortInfoTarget, at: usize, qp_at: usize, qkey_at: usize| {
            b[at..at + 16].copy_from_slice(&t.gid.0);
            let word = (u32::from(t.traffic_class) << 24)
                | (u32::from(t.sl & 0xf) << 20)
                | (t.flow_label & 0xf_ffff);
            put32(b, at + 16, word);
            put16(b, at + 20, t.lid);
            put16(b, at + 22, t.pkey);
            put24(b, qp_at + 1, t.qpn);
            put32(b, qkey_at, t.qkey);
        };
        target(&self.redirect, 8, 32, 36);
        target(&self.trap, 40, 64, 68);
        b[32] = 0;
        b[64] = self.trap_hop_limit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClassPortInfo {
        ClassPortInfo {
            base_version: 1,
            class_version: 2,
            capability_mask: 0x0100,
            capability_mask2: 0x7ff_ffff,
            resp_time_value: 20,
            redirect: PortInfoTarget {
                gid: "::ffff:10.88.0.11".parse().unwrap(),
                traffic_class: 0x12,
                sl: 3,
                flow_label: 0xabcde,
                lid: 0xffff,
                pkey: 0xffff,
                qpn: 1,
                qkey: 0x8001_0000,
            },
            trap: PortInfoTarget {
                qpn: 0xff_fffe,
                ..PortInfoTarget::default()
            },
            trap_hop_limit: 64,
        }
    }

    #[test]
    fn test_construct() {
        let mut b = [0xffu8; 72];
        sample().emit(&mut b);
        assert_eq!(&b[..8], &[1, 2, 0x01, 0x00, 0xff, 0xff, 0xff, 0xf4]);
        assert_eq!(
            &b[24..32],
            &[0x12, 0x3a, 0xbc, 0xde, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(&b[32..40], &[0, 0, 0, 1, 0x80, 0x01, 0, 0]);
        assert_eq!(&b[64..68], &[64, 0xff, 0xff, 0xfe]);
    }

    #[test]
    fn test_deconstruct() {
        let mut b = [0u8; 72];
        sample().emit(&mut b);
        assert_eq!(ClassPortInfo::parse(&b).unwrap(), sample());
        assert_eq!(ClassPortInfo::parse(&b[..71]), Err(MadError::Truncated));
    }
}
