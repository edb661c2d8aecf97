//! Log pages: the discovery log (70h: a 1024-byte header, then one 1024-byte entry per
//! subsystem a host may connect to), the error information log (01h: 64-byte entries,
//! newest first) and the SMART / health information log (02h: 512 bytes).

use super::cqe::Status;
use super::{byte, cstr, le128, le16, le32, le64, need, put, put_str, DecodeError};

/// Log page identifiers.
pub mod lid {
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Discovery.
    pub const DISCOVERY: u8 = 0x70;
}

/// Bytes of the discovery log header, and of each entry.
pub const DISCOVERY_RECORD_LEN: usize = 1024;
/// Bytes of an error log entry.
pub const ERROR_ENTRY_LEN: usize = 64;
/// Bytes of the SMART log.
pub const SMART_LEN: usize = 512;

/// Subsystem types in a discovery entry.
pub mod subtype {
    /// A referral to another discovery service.
    pub const REFERRAL: u8 = 1;
    /// An NVM subsystem.
    pub const NVM: u8 = 2;
    /// The discovery subsystem answering (TP 8013's "current discovery subsystem").
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// TRTYPE: RDMA.
pub const TRTYPE_RDMA: u8 = 1;
/// ADRFAM: IPv4.
pub const ADRFAM_IPV4: u8 = 1;
/// ADRFAM: IPv6.
pub const ADRFAM_IPV6: u8 = 2;
/// TREQ bit 2: the host may disable SQ flow control (nvmet-rdma sets it; so does softrdma).
pub const TREQ_DISABLE_SQFLOW: u8 = 1 << 2;

/// The RDMA transport specific address subtype of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaTsas {
    /// QP service type (1: reliable connected).
    pub qptype: u8,
    /// Provider type (1: none specified, as nvmet-rdma sends).
    pub prtype: u8,
    /// Connection management service (1: RDMA_CM).
    pub cms: u8,
    /// Partition key (0).
    pub pkey: u16,
}

impl RdmaTsas {
    /// What nvmet-rdma advertises: reliable connected, no provider specified, RDMA_CM.
    pub const RC_RDMA_CM: RdmaTsas = RdmaTsas {
        qptype: 1,
        prtype: 1,
        cms: 1,
        pkey: 0,
    };
}

/// One discovery log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// Transport type ([`TRTYPE_RDMA`]).
    pub trtype: u8,
    /// Address family.
    pub adrfam: u8,
    /// Subsystem type ([`subtype`]).
    pub subtype: u8,
    /// Transport requirements.
    pub treq: u8,
    /// Port id.
    pub portid: u16,
    /// Controller id (FFFFh: dynamic).
    pub cntlid: u16,
    /// Admin queue size at most.
    pub asqsz: u16,
    /// Transport service id: the port, as text.
    pub trsvcid: String,
    /// The subsystem's NQN.
    pub subnqn: String,
    /// Transport address: the IP, as text.
    pub traddr: String,
    /// RDMA specifics.
    pub tsas: RdmaTsas,
}

impl DiscoveryEntry {
    fn emit_into(&self, b: &mut [u8]) {
        b[0] = self.trtype;
        b[1] = self.adrfam;
        b[2] = self.subtype;
        b[3] = self.treq;
        put(b, 4, &self.portid.to_le_bytes());
        put(b, 6, &self.cntlid.to_le_bytes());
        put(b, 8, &self.asqsz.to_le_bytes());
        put_str(b, 32, 32, &self.trsvcid, 0);
        put_str(b, 256, 256, &self.subnqn, 0);
        put_str(b, 512, 256, &self.traddr, 0);
        b[768] = self.tsas.qptype;
        b[769] = self.tsas.prtype;
        b[770] = self.tsas.cms;
        put(b, 776, &self.tsas.pkey.to_le_bytes());
    }

    fn parse(b: &[u8]) -> Result<DiscoveryEntry, DecodeError> {
        need("discovery log entry", b, DISCOVERY_RECORD_LEN)?;
        Ok(DiscoveryEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: le16(b, 4),
            cntlid: le16(b, 6),
            asqsz: le16(b, 8),
            trsvcid: text(b, 32, 32),
            subnqn: cstr("discovery entry NQN", b, 256, 256)?,
            traddr: text(b, 512, 256),
            tsas: RdmaTsas {
                qptype: b[768],
                prtype: b[769],
                cms: b[770],
                pkey: le16(b, 776),
            },
        })
    }
}

/// A text field that may fill its whole width (TRSVCID, TRADDR are space or NUL padded).
fn text(b: &[u8], at: usize, len: usize) -> String {
    let field = b.get(at..at + len).unwrap_or(&[]);
    let end = field.iter().position(|&c| c == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end])
        .trim_end()
        .to_string()
}

/// The discovery log page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryLog {
    /// Generation counter: changes whenever the log does.
    pub genctr: u64,
    /// The entries.
    pub entries: Vec<DiscoveryEntry>,
}

impl DiscoveryLog {
    /// The whole page: header and entries.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; DISCOVERY_RECORD_LEN * (1 + self.entries.len())];
        put(&mut b, 0, &self.genctr.to_le_bytes());
        put(&mut b, 8, &(self.entries.len() as u64).to_le_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            let at = DISCOVERY_RECORD_LEN * (1 + i);
            e.emit_into(&mut b[at..at + DISCOVERY_RECORD_LEN]);
        }
        b
    }

    /// The header's generation counter and record count.
    pub fn parse_header(b: &[u8]) -> Result<(u64, u64), DecodeError> {
        need("discovery log header", b, 16)?;
        Ok((le64(b, 0), le64(b, 8)))
    }

    /// Reads a page holding the header and every entry the header counts.
    pub fn parse(b: &[u8]) -> Result<DiscoveryLog, DecodeError> {
        let (genctr, numrec) = DiscoveryLog::parse_header(b)?;
        let n = usize::try_from(numrec).unwrap_or(usize::MAX);
        let need_len = n
            .checked_add(1)
            .and_then(|r| r.checked_mul(DISCOVERY_RECORD_LEN))
            .unwrap_or(usize::MAX);
        need("discovery log", b, need_len)?;
        let entries = (0..n)
            .map(|i| {
                let at = DISCOVERY_RECORD_LEN * (1 + i);
                DiscoveryEntry::parse(&b[at..at + DISCOVERY_RECORD_LEN])
            })
            .collect::<Result<_, _>>()?;
        Ok(DiscoveryLog { genctr, entries })
    }
}

/// An error information log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorEntry {
    /// A count unique to this error (the controller's errors so far, 1 for the first).
    pub error_count: u64,
    /// The submission queue of the failed command.
    pub sqid: u16,
    /// Its command id.
    pub cid: u16,
    /// Its status.
    pub status: Status,
    /// Where in the command the error was: byte (bits 7:0) and bit (10:8); FFFFh unknown.
    pub param_loc: u16,
    /// The first LBA in error (0 when none).
    pub lba: u64,
    /// The namespace (0 when none).
    pub nsid: u32,
}

impl ErrorEntry {
    /// Its 64 bytes.
    pub fn emit(&self) -> [u8; ERROR_ENTRY_LEN] {
        let mut b = [0u8; ERROR_ENTRY_LEN];
        put(&mut b, 0, &self.error_count.to_le_bytes());
        put(&mut b, 8, &self.sqid.to_le_bytes());
        put(&mut b, 10, &self.cid.to_le_bytes());
        put(&mut b, 12, &self.status.to_field().to_le_bytes());
        put(&mut b, 14, &self.param_loc.to_le_bytes());
        put(&mut b, 16, &self.lba.to_le_bytes());
        put(&mut b, 24, &self.nsid.to_le_bytes());
        b[29] = TRTYPE_RDMA;
        b
    }

    /// Reads an entry.
    pub fn parse(b: &[u8]) -> Result<ErrorEntry, DecodeError> {
        need("error log entry", b, ERROR_ENTRY_LEN)?;
        Ok(ErrorEntry {
            error_count: le64(b, 0),
            sqid: le16(b, 8),
            cid: le16(b, 10),
            status: Status::from_field(le16(b, 12)),
            param_loc: le16(b, 14),
            lba: le64(b, 16),
            nsid: le32(b, 24),
        })
    }
}

/// The SMART / health information log (counters as the NVMe base spec defines them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartLog {
    /// Critical warnings (0: none).
    pub critical_warning: u8,
    /// Composite temperature in kelvins (0: not reported).
    pub temperature: u16,
    /// Available spare, percent.
    pub avail_spare: u8,
    /// Available spare threshold, percent.
    pub spare_thresh: u8,
    /// Percentage of life used.
    pub percent_used: u8,
    /// Data read, in thousands of 512-byte units, rounded up.
    pub data_units_read: u128,
    /// Data written, likewise.
    pub data_units_written: u128,
    /// Read commands completed.
    pub host_reads: u128,
    /// Write commands completed.
    pub host_writes: u128,
    /// Power cycles.
    pub power_cycles: u128,
    /// Hours powered on.
    pub power_on_hours: u128,
    /// Unsafe shutdowns (controllers lost without a shutdown notification).
    pub unsafe_shutdowns: u128,
    /// Media and data integrity errors.
    pub media_errors: u128,
    /// Error log entries over the controller's life.
    pub num_err_log_entries: u128,
}

impl SmartLog {
    /// Its 512 bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; SMART_LEN];
        b[0] = self.critical_warning;
        put(&mut b, 1, &self.temperature.to_le_bytes());
        b[3] = self.avail_spare;
        b[4] = self.spare_thresh;
        b[5] = self.percent_used;
        let counters = [
            self.data_units_read,
            self.data_units_written,
            self.host_reads,
            self.host_writes,
            0, // controller busy time
            self.power_cycles,
            self.power_on_hours,
            self.unsafe_shutdowns,
            self.media_errors,
            self.num_err_log_entries,
        ];
        for (i, c) in counters.iter().enumerate() {
            put(&mut b, 32 + 16 * i, &c.to_le_bytes());
        }
        b
    }

    /// Reads the log.
    pub fn parse(b: &[u8]) -> Result<SmartLog, DecodeError> {
        need("SMART log", b, SMART_LEN)?;
        let c = |i: usize| le128(b, 32 + 16 * i);
        Ok(SmartLog {
            critical_warning: byte(b, 0),
            temperature: le16(b, 1),
            avail_spare: b[3],
            spare_thresh: b[4],
            percent_used: b[5],
            data_units_read: c(0),
            data_units_written: c(1),
            host_reads: c(2),
            host_writes: c(3),
            power_cycles: c(5),
            power_on_hours: c(6),
            unsafe_shutdowns: c(7),
            media_errors: c(8),
            num_err_log_entries: c(9),
        })
    }

    /// Bytes as data units: thousands of 512-byte units, rounded up.
    pub fn data_units(bytes: u64) -> u128 {
        u128::from(bytes.div_ceil(512)).div_ceil(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NVM subsystem entry of `nvmf_rdma.pcap` (frame 72, nvmet-rdma's answer): its
    /// first 16 bytes and the fields at 32, 256, 512 and 768.
    #[test]
    fn test_entry_layout_matches_the_kernel_target() {
        let e = DiscoveryEntry {
            trtype: TRTYPE_RDMA,
            adrfam: ADRFAM_IPV4,
            subtype: subtype::NVM,
            treq: TREQ_DISABLE_SQFLOW,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            trsvcid: "4420".into(),
            subnqn: "nqn.2026-12.lab:rxe".into(),
            traddr: "10.88.0.11".into(),
            tsas: RdmaTsas::RC_RDMA_CM,
        };
        let log = DiscoveryLog {
            genctr: 2,
            entries: vec![e.clone()],
        };
        let b = log.emit();
        assert_eq!(b.len(), 2048);
        assert_eq!(&b[..16], &[2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        let r = &b[1024..];
        assert_eq!(&r[..10], &[1, 1, 2, 4, 1, 0, 0xff, 0xff, 0x20, 0]);
        assert_eq!(&r[32..37], b"4420\0");
        assert_eq!(&r[256..276], b"nqn.2026-12.lab:rxe\0");
        assert_eq!(&r[512..523], b"10.88.0.11\0");
        assert_eq!(&r[768..771], &[1, 1, 1]);
        assert_eq!(DiscoveryLog::parse(&b).unwrap(), log);
    }

    #[test]
    fn test_truncated_discovery_logs_are_errors() {
        let mut b = vec![0u8; 1024];
        b[8] = 3; // three records announced, none present
        assert!(DiscoveryLog::parse(&b).is_err());
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(
            DiscoveryLog::parse(&b).is_err(),
            "no overflow on a huge count"
        );
        assert_eq!(DiscoveryLog::parse_header(&b).unwrap().1, u64::MAX);
    }

    #[test]
    fn test_error_entry_round_trip() {
        let e = ErrorEntry {
            error_count: 3,
            sqid: 1,
            cid: 0x42,
            status: Status::LBA_OUT_OF_RANGE.dnr(),
            param_loc: 0xffff,
            lba: 99,
            nsid: 1,
        };
        let b = e.emit();
        assert_eq!(&b[12..14], &(0x4080u16 << 1).to_le_bytes());
        assert_eq!(ErrorEntry::parse(&b).unwrap(), e);
    }

    #[test]
    fn test_smart_round_trip_and_units() {
        let s = SmartLog {
            avail_spare: 100,
            spare_thresh: 10,
            data_units_read: SmartLog::data_units(512_000),
            data_units_written: SmartLog::data_units(512_001),
            host_reads: 7,
            host_writes: 8,
            power_cycles: 1,
            num_err_log_entries: 2,
            ..SmartLog::default()
        };
        assert_eq!((s.data_units_read, s.data_units_written), (1, 2));
        let b = s.emit();
        assert_eq!(b.len(), 512);
        assert_eq!(b[32], 1);
        assert_eq!(b[64], 7);
        assert_eq!(SmartLog::parse(&b).unwrap(), s);
    }
}
