//! The path a connection takes, as the REQ (primary and alternate) and the LAP (alternate)
//! carry it: 44 bytes of LIDs, GIDs and GRH fields.
//!
//! On RoCE the "path" is the IP route: the GIDs are the two IP addresses (IPv4-mapped for
//! IPv4), the LIDs are the permissive LID 0xffff (Linux writes it when the hop limit exceeds
//! one, which a RoCEv2 route always does), the flow label is rdma_cm's hash of the two ports,
//! and the hop limit is the IP TTL. The REQ and the LAP order the fields differently after the
//! GIDs, so each has its own parse/emit pair.

use crate::bytes::{be16, be32, put16, put32};
use crate::Gid;

/// The permissive LID: what Linux puts in both LID fields of a routed (RoCE) path.
pub const PERMISSIVE_LID: u16 = 0xffff;

/// One path of a connection, seen from the sender of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmPath {
    /// The sender's LID.
    pub local_lid: u16,
    /// The receiver's LID.
    pub remote_lid: u16,
    /// The sender's GID.
    pub local_gid: Gid,
    /// The receiver's GID.
    pub remote_gid: Gid,
    /// GRH flow label (20 bits).
    pub flow_label: u32,
    /// Static rate (6 bits, IBTA encoding; rxe leaves 0).
    pub packet_rate: u8,
    /// GRH traffic class (the DSCP/ECN byte of the IP header on RoCEv2).
    pub traffic_class: u8,
    /// GRH hop limit (IP TTL).
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// The path stays in the subnet (no GRH needed); zero on RoCE.
    pub subnet_local: bool,
    /// Local ACK timeout the sender's QP will use on this path: 4.096 µs × 2^value (5 bits).
    pub local_ack_timeout: u8,
}

impl CmPath {
    /// Bytes the path occupies.
    pub const LEN: usize = 44;

    /// True if the alternate path fields of a REQ are in use: Linux tests a non-zero local LID
    /// (`cm_req_has_alt_path`; OPA GIDs aside).
    pub fn is_present(&self) -> bool {
        self.local_lid != 0
    }

    fn parse_common(b: &[u8]) -> CmPath {
        let gid = |at: usize| Gid(b[at..at + 16].try_into().expect("16 bytes"));
        CmPath {
            local_lid: be16(b, 0),
            remote_lid: be16(b, 2),
            local_gid: gid(4),
            remote_gid: gid(20),
            sl: b[42] >> 4,
            subnet_local: b[42] & 0x08 != 0,
            local_ack_timeout: b[43] >> 3,
            ..CmPath::default()
        }
    }

    fn emit_common(&self, b: &mut [u8]) {
        put16(b, 0, self.local_lid);
        put16(b, 2, self.remote_lid);
        b[4..20].copy_from_slice(&self.local_gid.0);
        b[20..36].copy_from_slice(&self.remote_gid.0);
        b[42] = (self.sl << 4) | (u8::from(self.subnet_local) << 3);
        b[43] = self.local_ack_timeout << 3;
    }

    /// Parses the REQ layout from the first 44 bytes of `b` (the caller checked the length):
    /// flow label, 6 reserved bits and packet rate in one word, then traffic class, hop limit.
    pub(crate) fn parse_req(b: &[u8]) -> CmPath {
        let word = be32(b, 36);
        CmPath {
            flow_label: word >> 12,
            packet_rate: (word & 0x3f) as u8,
            traffic_class: b[40],
            hop_limit: b[41],
            ..CmPath::parse_common(b)
        }
    }

    /// Writes the REQ layout into the first 44 bytes of `b`.
    pub(crate) fn emit_req(&self, b: &mut [u8]) {
        self.emit_common(b);
        put32(
            b,
            36,
            ((self.flow_label & 0xf_ffff) << 12) | u32::from(self.packet_rate & 0x3f),
        );
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
    }

    /// Parses the LAP layout: flow label, 4 reserved bits and traffic class in one word, then
    /// hop limit, then 2 reserved bits and the packet rate.
    pub(crate) fn parse_lap(b: &[u8]) -> CmPath {
        let word = be32(b, 36);
        CmPath {
            flow_label: word >> 12,
            traffic_class: (word & 0xff) as u8,
            hop_limit: b[40],
            packet_rate: b[41] & 0x3f,
            ..CmPath::parse_common(b)
        }
    }

    /// Writes the LAP layout into the first 44 bytes of `b`.
    pub(crate) fn emit_lap(&self, b: &mut [u8]) {
        self.emit_common(b);
        put32(
            b,
            36,
            ((self.flow_label & 0xf_ffff) << 12) | u32::from(self.traffic_class),
        );
        b[40] = self.hop_limit;
        b[41] = self.packet_rate & 0x3f;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CmPath {
        CmPath {
            local_lid: PERMISSIVE_LID,
            remote_lid: PERMISSIVE_LID,
            local_gid: "::ffff:10.88.0.12".parse().unwrap(),
            remote_gid: "::ffff:10.88.0.11".parse().unwrap(),
            flow_label: 0x0_6070,
            packet_rate: 0x2a,
            traffic_class: 0x20,
            hop_limit: 64,
            sl: 5,
            subnet_local: true,
            local_ack_timeout: 19,
        }
    }

    #[test]
    fn test_construct() {
        let mut req = [0xffu8; 44];
        sample().emit_req(&mut req);
        assert_eq!(
            &req[36..44],
            &[0x06, 0x07, 0x00, 0x2a, 0x20, 64, 0x58, 0x98]
        );
        let mut lap = [0xffu8; 44];
        sample().emit_lap(&mut lap);
        assert_eq!(
            &lap[36..44],
            &[0x06, 0x07, 0x00, 0x20, 64, 0x2a, 0x58, 0x98]
        );
        assert_eq!(req[..36], lap[..36]);
    }

    #[test]
    fn test_deconstruct() {
        let mut b = [0u8; 44];
        sample().emit_req(&mut b);
        assert_eq!(CmPath::parse_req(&b), sample());
        sample().emit_lap(&mut b);
        assert_eq!(CmPath::parse_lap(&b), sample());
    }
}
