//! The three-way handshake: REQ (IBTA 12.6.5, Table 106), REP (12.6.8, Table 110) and RTU
//! (12.6.9, Table 111).

use crate::bytes::{be24, be32, be64, put24, put32, put64};
use crate::mad::cm::fields::{private_data_len, TransportType};
use crate::mad::cm::path::CmPath;
use crate::mad::header::{MadError, PrivateData, MAD_DATA_LEN};
use crate::Psn;

fn check(b: &[u8]) -> Result<(), MadError> {
    if b.len() < MAD_DATA_LEN {
        Err(MadError::Truncated)
    } else {
        Ok(())
    }
}

/// ConnectRequest: everything the passive side needs to set up its end of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Req {
    /// The active side's communication ID (0).
    pub local_comm_id: u32,
    /// ECE vendor ID (24 bits at 5; zero from rxe).
    pub vendor_id: u32,
    /// The service the active side connects to (8): rdma_cm's port space and port.
    pub service_id: u64,
    /// The active CA's node GUID (16).
    pub local_ca_guid: u64,
    /// The active QP's Q_Key (28; RD only).
    pub local_qkey: u32,
    /// The active side's QP number (32, 24 bits).
    pub local_qpn: u32,
    /// READ/atomic requests the active side will accept (35).
    pub responder_resources: u8,
    /// Local EE context (36, 24 bits; RD only).
    pub local_eecn: u32,
    /// READ/atomic requests the active side will issue (39).
    pub initiator_depth: u8,
    /// Remote EE context (40, 24 bits; RD only).
    pub remote_eecn: u32,
    /// How long the passive CM may take to answer, 4.096 µs × 2^value (43, 5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service (43, 2 bits).
    pub transport: TransportType,
    /// End-to-end flow control (43, 1 bit).
    pub end_to_end_flow_control: bool,
    /// The PSN the active QP starts sending with (44, 24 bits).
    pub starting_psn: Psn,
    /// How long the active CM takes to answer, 4.096 µs × 2^value (47, 5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retries (47, 3 bits).
    pub retry_count: u8,
    /// Partition key (48).
    pub pkey: u16,
    /// Path MTU, IBTA encoding 1 = 256 … 5 = 4096 (50, 4 bits).
    pub path_mtu: u8,
    /// RD only (50, 1 bit).
    pub rdc_exists: bool,
    /// RNR retries, 7 = infinite (50, 3 bits).
    pub rnr_retry_count: u8,
    /// How often the active CM retries a message (51, 4 bits).
    pub max_cm_retries: u8,
    /// The active QP uses an SRQ (51, 1 bit).
    pub srq: bool,
    /// Extended transport type (51, 3 bits; 1 = XRC when `transport` is `Extended`).
    pub extended_transport_type: u8,
    /// Primary path (52).
    pub primary_path: CmPath,
    /// Alternate path (96); all zero when there is none.
    pub alternate_path: CmPath,
    /// Supports the alternate path protocol (139, bit 5).
    pub sap_supported: bool,
    /// Private data (140): for rdma_cm, its IP header then the application's bytes.
    pub private_data: PrivateData<{ private_data_len::REQ }>,
}

impl Req {
    /// Bytes of MAD data the message occupies (all of it).
    pub const LEN: usize = MAD_DATA_LEN;

    /// Parses the 232 data bytes of a REQ.
    pub fn parse(b: &[u8]) -> Result<Req, MadError> {
        check(b)?;
        Ok(Req {
            local_comm_id: be32(b, 0),
            vendor_id: be24(b, 5),
            service_id: be64(b, 8),
            local_ca_guid: be64(b, 16),
            local_qkey: be32(b, 28),
            local_qpn: be24(b, 32),
            responder_resources: b[35],
            local_eecn: be24(b, 36),
            initiator_depth: b[39],
            remote_eecn: be24(b, 40),
            remote_cm_response_timeout: b[43] >> 3,
            transport: TransportType::from_bits(b[43] >> 1),
            end_to_end_flow_control: b[43] & 1 != 0,
            starting_psn: Psn::new(be24(b, 44)),
            local_cm_response_timeout: b[47] >> 3,
            retry_count: b[47] & 7,
            pkey: u16::from_be_bytes([b[48], b[49]]),
            path_mtu: b[50] >> 4,
            rdc_exists: b[50] & 0x08 != 0,
            rnr_retry_count: b[50] & 7,
            max_cm_retries: b[51] >> 4,
            srq: b[51] & 0x08 != 0,
            extended_transport_type: b[51] & 7,
            primary_path: CmPath::parse_req(&b[52..96]),
            alternate_path: CmPath::parse_req(&b[96..140]),
            sap_supported: b[139] & 0x04 != 0,
            private_data: PrivateData::read(&b[140..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`Req::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..Self::LEN];
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.vendor_id & 0xff_ffff);
        put64(b, 8, self.service_id);
        put64(b, 16, self.local_ca_guid);
        put32(b, 24, 0);
        put32(b, 28, self.local_qkey);
        put24(b, 32, self.local_qpn);
        b[35] = self.responder_resources;
        put24(b, 36, self.local_eecn);
        b[39] = self.initiator_depth;
        put24(b, 40, self.remote_eecn);
        b[43] = (self.remote_cm_response_timeout << 3)
            | (self.transport.bits() << 1)
            | u8::from(self.end_to_end_flow_control);
        put24(b, 44, self.starting_psn.value());
        b[47] = (self.local_cm_response_timeout << 3) | (self.retry_count & 7);
        b[48..50].copy_from_slice(&self.pkey.to_be_bytes());
        b[50] =
            (self.path_mtu << 4) | (u8::from(self.rdc_exists) << 3) | (self.rnr_retry_count & 7);
        b[51] = (self.max_cm_retries << 4)
            | (u8::from(self.srq) << 3)
            | (self.extended_transport_type & 7);
        self.primary_path.emit_req(&mut b[52..96]);
        self.alternate_path.emit_req(&mut b[96..140]);
        b[139] |= u8::from(self.sap_supported) << 2;
        b[140..].copy_from_slice(self.private_data.as_bytes());
    }
}

/// ConnectReply: the passive side's acceptance and its half of the parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rep {
    /// The passive side's communication ID (0).
    pub local_comm_id: u32,
    /// The REQ's local communication ID (4).
    pub remote_comm_id: u32,
    /// The passive QP's Q_Key (8; RD only).
    pub local_qkey: u32,
    /// The passive side's QP number (12, 24 bits).
    pub local_qpn: u32,
    /// Local EE context, or the XRC target SRQ number (16, 24 bits).
    pub local_eecn: u32,
    /// The PSN the passive QP starts sending with (20, 24 bits).
    pub starting_psn: Psn,
    /// ECE vendor ID, split over bytes 15, 19 and 23 (24 bits; zero from rxe).
    pub vendor_id: u32,
    /// READ/atomic requests the passive side will accept (24).
    pub responder_resources: u8,
    /// READ/atomic requests the passive side will issue (25).
    pub initiator_depth: u8,
    /// The passive CA's ACK delay, 4.096 µs × 2^value (26, 5 bits; rxe: 15).
    pub target_ack_delay: u8,
    /// Failover (26, 2 bits: 0 accepted, 1 rejected, 2 unsupported).
    pub failover_accepted: u8,
    /// End-to-end flow control (26, 1 bit).
    pub end_to_end_flow_control: bool,
    /// RNR retries the passive side asks for (27, 3 bits).
    pub rnr_retry_count: u8,
    /// The passive QP uses an SRQ (27, 1 bit).
    pub srq: bool,
    /// The passive CA's node GUID (28).
    pub local_ca_guid: u64,
    /// Private data (36).
    pub private_data: PrivateData<{ private_data_len::REP }>,
}

impl Rep {
    /// Bytes of MAD data the message occupies.
    pub const LEN: usize = MAD_DATA_LEN;

    /// Parses the 232 data bytes of a REP.
    pub fn parse(b: &[u8]) -> Result<Rep, MadError> {
        check(b)?;
        Ok(Rep {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            local_qkey: be32(b, 8),
            local_qpn: be24(b, 12),
            local_eecn: be24(b, 16),
            starting_psn: Psn::new(be24(b, 20)),
            vendor_id: (u32::from(b[15]) << 16) | (u32::from(b[19]) << 8) | u32::from(b[23]),
            responder_resources: b[24],
            initiator_depth: b[25],
            target_ack_delay: b[26] >> 3,
            failover_accepted: (b[26] >> 1) & 3,
            end_to_end_flow_control: b[26] & 1 != 0,
            rnr_retry_count: b[27] >> 5,
            srq: b[27] & 0x10 != 0,
            local_ca_guid: be64(b, 28),
            private_data: PrivateData::read(&b[36..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`Rep::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..Self::LEN];
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put32(b, 8, self.local_qkey);
        put24(b, 12, self.local_qpn);
        b[15] = (self.vendor_id >> 16) as u8;
        put24(b, 16, self.local_eecn);
        b[19] = (self.vendor_id >> 8) as u8;
        put24(b, 20, self.starting_psn.value());
        b[23] = self.vendor_id as u8;
        b[24] = self.responder_resources;
        b[25] = self.initiator_depth;
        b[26] = (self.target_ack_delay << 3)
            | ((self.failover_accepted & 3) << 1)
            | u8::from(self.end_to_end_flow_control);
        b[27] = (self.rnr_retry_count << 5) | (u8::from(self.srq) << 4);
        put64(b, 28, self.local_ca_guid);
        b[36..].copy_from_slice(self.private_data.as_bytes());
    }
}

crate::mad::cm::fields::ids_and_data_message! {
    /// ReadyToUse: the active side has its QP in RTS; the passive side may send.
    Rtu, "an RTU", private data private_data_len::RTU,
    local: "The active side's communication ID (0).",
    remote: "The passive side's communication ID (4)."
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::mad::cm::path::PERMISSIVE_LID;

    /// Hex digits (whitespace ignored) to bytes, zero-padded to a MAD's data.
    pub(crate) fn data(hex: &str) -> [u8; MAD_DATA_LEN] {
        let digits: Vec<u8> = hex.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
        let mut out = [0u8; MAD_DATA_LEN];
        for (i, pair) in digits.chunks(2).enumerate() {
            out[i] = u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap();
        }
        out
    }

    // rping's REQ from rdma_cm.pcap (10.88.0.12 → 10.88.0.11): rxe's QP 0x11, PSN 0x2b5620,
    // service ID TCP port 7174, timeouts 20, retries 7/7, 15 CM retries, MTU 1024, the RoCE
    // primary path, and rdma_cm's 36-byte IP header as private data.
    pub(crate) const REQ_HEX: &str = "823b9cb1 00000000 0000000001061c06 505400fffe58000c
        00000000 00000000 00001101 00000001 000000a0 2b5620a7 ffff37f0 ffffffff
        00000000000000000000ffff0a58000c 00000000000000000000ffff0a58000b 06070000 00400098
        0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
        00408656 000000000000000000000000 0a58000c 000000000000000000000000 0a58000b";

    // rxe's REP to it: QP 0x11, PSN 0xf52293, 1/1 resources, ACK delay 15, RNR retry 7.
    pub(crate) const REP_HEX: &str =
        "5ed99b66 823b9cb1 00000000 00001100 00000000 f5229300 010178e0 505400fffe58000b";

    pub(crate) fn rping_req() -> Req {
        let mut private_data = [0u8; 92];
        private_data[..4].copy_from_slice(&[0x00, 0x40, 0x86, 0x56]);
        private_data[16..20].copy_from_slice(&[10, 88, 0, 12]);
        private_data[32..36].copy_from_slice(&[10, 88, 0, 11]);
        Req {
            local_comm_id: 0x823b_9cb1,
            service_id: 0x0106_1c06,
            local_ca_guid: 0x5054_00ff_fe58_000c,
            local_qpn: 0x11,
            responder_resources: 1,
            initiator_depth: 1,
            remote_cm_response_timeout: 20,
            transport: TransportType::Rc,
            starting_psn: Psn::new(0x2b_5620),
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: 3,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            primary_path: CmPath {
                local_lid: PERMISSIVE_LID,
                remote_lid: PERMISSIVE_LID,
                local_gid: "::ffff:10.88.0.12".parse().unwrap(),
                remote_gid: "::ffff:10.88.0.11".parse().unwrap(),
                flow_label: 0x6070,
                hop_limit: 64,
                local_ack_timeout: 19,
                ..CmPath::default()
            },
            private_data: PrivateData(private_data),
            ..Req::default()
        }
    }

    #[test]
    fn test_parse() {
        assert_eq!(Req::parse(&data(REQ_HEX)).unwrap(), rping_req());
        let rep = Rep::parse(&data(REP_HEX)).unwrap();
        assert_eq!(
            rep,
            Rep {
                local_comm_id: 0x5ed9_9b66,
                remote_comm_id: 0x823b_9cb1,
                local_qpn: 0x11,
                starting_psn: Psn::new(0xf5_2293),
                responder_resources: 1,
                initiator_depth: 1,
                target_ack_delay: 15,
                rnr_retry_count: 7,
                local_ca_guid: 0x5054_00ff_fe58_000b,
                ..Rep::default()
            }
        );
        let rtu = Rtu::parse(&data("823b9cb1 5ed99b66")).unwrap();
        assert_eq!(
            (rtu.local_comm_id, rtu.remote_comm_id),
            (0x823b_9cb1, 0x5ed9_9b66)
        );
        assert_eq!(rtu.private_data.used_len(), 0);
    }

    #[test]
    fn test_emit() {
        let mut out = [0xa5u8; MAD_DATA_LEN];
        rping_req().emit(&mut out);
        assert_eq!(out, data(REQ_HEX));
        Rep::parse(&data(REP_HEX)).unwrap().emit(&mut out);
        assert_eq!(out, data(REP_HEX));
    }

    #[test]
    fn test_every_field_survives() {
        // All-ones bit patterns in every field, ECE vendor IDs and the alternate path included.
        let mut req = rping_req();
        req.vendor_id = 0xab_cdef;
        req.local_qkey = 0xdead_beef;
        req.local_eecn = 0xff_ffff;
        req.remote_eecn = 0x12_3456;
        req.transport = TransportType::Extended;
        req.extended_transport_type = 1;
        req.end_to_end_flow_control = true;
        req.rdc_exists = true;
        req.srq = true;
        req.sap_supported = true;
        req.alternate_path = CmPath {
            local_lid: 7,
            packet_rate: 0x3f,
            sl: 15,
            subnet_local: true,
            local_ack_timeout: 31,
            ..req.primary_path
        };
        let mut b = [0u8; MAD_DATA_LEN];
        req.emit(&mut b);
        assert_eq!(Req::parse(&b).unwrap(), req);
        assert_eq!(b[139], (31 << 3) | 0x04);
        let rep = Rep {
            vendor_id: 0x12_3456,
            local_eecn: 0xab_cdef,
            failover_accepted: 2,
            end_to_end_flow_control: true,
            srq: true,
            ..Rep::parse(&data(REP_HEX)).unwrap()
        };
        rep.emit(&mut b);
        assert_eq!(Rep::parse(&b).unwrap(), rep);
        assert_eq!((b[15], b[19], b[23]), (0x12, 0x34, 0x56));
    }

    #[test]
    fn test_truncated() {
        let b = data(REQ_HEX);
        assert_eq!(Req::parse(&b[..231]), Err(MadError::Truncated));
        assert_eq!(Rep::parse(&b[..100]), Err(MadError::Truncated));
        assert_eq!(Rtu::parse(&b[..8]), Err(MadError::Truncated));
    }
}
