//! The common MAD header and what every management class shares: sizes, the GSI's QP and
//! Q_Key, management class and method codes, private data buffers, and the reply to a MAD
//! nobody handles.

use core::fmt;

use crate::bytes::{be16, be32, be64, check_len, put16, put32, put64};

/// Every MAD on the wire is this long (no RMPP on the CM class).
pub const MAD_LEN: usize = 256;
/// The common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// Class-specific data after the common header.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The General Services Interface queue pair.
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP 1 (IBTA 13.5.3.1; rxe's DETH in every CM MAD of the captures).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The only base version IBTA defines (OPA's 0x80 is not RoCE).
pub const BASE_VERSION: u8 = 1;
/// The status Linux's MAD layer puts in its reply to an unhandled Get/Set: "unsupported
/// method/attribute combination" (IBTA Table 120 bits 2-4, code 3).
pub const STATUS_UNSUPPORTED_METHOD_ATTR: u16 = 0x000c;

/// The CM class version Linux speaks (IBTA 1.2: `IB_CM_CLASS_VERSION`); the header's, since
/// [`MadHeader::cm`] writes it.
pub const CM_CLASS_VERSION: u8 = 2;

/// Why a byte sequence is not a MAD this crate understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MadError {
    /// Fewer than [`MAD_LEN`] bytes.
    Truncated,
    /// Base version other than [`BASE_VERSION`] (the MAD layer drops these).
    BadBaseVersion(u8),
    /// Not the management class the caller asked for.
    WrongClass(u8),
    /// The class version of a CM MAD is not 2 (Linux's `IB_CM_CLASS_VERSION`).
    BadClassVersion(u8),
    /// A CM attribute ID with no message behind it.
    UnknownAttribute(u16),
}

impl fmt::Display for MadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MadError::Truncated => write!(f, "MAD shorter than {MAD_LEN} bytes"),
            MadError::BadBaseVersion(v) => write!(f, "unsupported MAD base version {v}"),
            MadError::WrongClass(c) => write!(f, "unexpected management class {c:#04x}"),
            MadError::BadClassVersion(v) => write!(f, "unsupported CM class version {v}"),
            MadError::UnknownAttribute(a) => write!(f, "unknown CM attribute {a:#06x}"),
        }
    }
}

impl std::error::Error for MadError {}

/// A management class (IBTA Table 114).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MgmtClass(pub u8);

impl MgmtClass {
    /// Subnet management, LID routed (QP 0 only).
    pub const SUBN_LID_ROUTED: MgmtClass = MgmtClass(0x01);
    /// Subnet administration.
    pub const SUBN_ADM: MgmtClass = MgmtClass(0x03);
    /// Performance management.
    pub const PERF: MgmtClass = MgmtClass(0x04);
    /// Baseboard management.
    pub const BM: MgmtClass = MgmtClass(0x05);
    /// Device management.
    pub const DEVICE_MGT: MgmtClass = MgmtClass(0x06);
    /// Communication management: the class of every rdma_cm MAD.
    pub const CM: MgmtClass = MgmtClass(0x07);
    /// SNMP tunnelling.
    pub const SNMP: MgmtClass = MgmtClass(0x08);
    /// Subnet management, directed route (QP 0 only).
    pub const SUBN_DIRECTED_ROUTE: MgmtClass = MgmtClass(0x81);

    /// The IBTA name, or `None` for vendor and reserved classes.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "SubnMgmt",
            0x03 => "SubnAdm",
            0x04 => "PerfMgmt",
            0x05 => "BM",
            0x06 => "DevMgt",
            0x07 => "CM",
            0x08 => "SNMP",
            0x81 => "SubnMgmtDR",
            _ => return None,
        })
    }
}

impl fmt::Debug for MgmtClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "class {:#04x}", self.0),
        }
    }
}

impl fmt::Display for MgmtClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A MAD method (IBTA Table 115); bit 7 marks a response.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Method(pub u8);

impl Method {
    /// Get an attribute.
    pub const GET: Method = Method(0x01);
    /// Set an attribute.
    pub const SET: Method = Method(0x02);
    /// A datagram that expects no response: every CM message uses it.
    pub const SEND: Method = Method(0x03);
    /// Trap.
    pub const TRAP: Method = Method(0x05);
    /// Report.
    pub const REPORT: Method = Method(0x06);
    /// Trap repress.
    pub const TRAP_REPRESS: Method = Method(0x07);
    /// Response to a Get or Set.
    pub const GET_RESP: Method = Method(0x81);
    /// The response bit.
    pub const RESPONSE: u8 = 0x80;

    /// True for a response method (the MAD layer matches those to outstanding requests).
    pub const fn is_response(self) -> bool {
        self.0 & Method::RESPONSE != 0
    }

    /// The IBTA name, or `None` for class-specific methods.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "Get",
            0x02 => "Set",
            0x03 => "Send",
            0x05 => "Trap",
            0x06 => "Report",
            0x07 => "TrapRepress",
            0x81 => "GetResp",
            0x86 => "ReportResp",
            _ => return None,
        })
    }
}

impl fmt::Debug for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "method {:#04x}", self.0),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The common MAD header (IBTA 13.4.3, 24 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// Format of the MAD (1).
    pub base_version: u8,
    /// Management class.
    pub mgmt_class: MgmtClass,
    /// Version of the class (2 for the CM).
    pub class_version: u8,
    /// Method (with the response bit).
    pub method: Method,
    /// Status of a response; zero in requests.
    pub status: u16,
    /// Class-specific field (zero for the CM).
    pub class_specific: u16,
    /// Transaction ID: the requester's, echoed in responses. Linux's CM puts its MAD agent's
    /// number in the high 32 bits and the sender's local communication ID in the low 32.
    pub tid: u64,
    /// Attribute the data carries.
    pub attr_id: u16,
    /// Attribute modifier (Linux's CM carries ECE options here; rxe sends zero).
    pub attr_mod: u32,
}

impl MadHeader {
    /// Header length in bytes.
    pub const LEN: usize = MAD_HEADER_LEN;

    /// The header of a CM message as Linux formats it: base version 1, class 0x07, class
    /// version 2, method Send, status zero.
    pub const fn cm(attr_id: u16, tid: u64) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: MgmtClass::CM,
            class_version: CM_CLASS_VERSION,
            method: Method::SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }

    /// Parses the first 24 bytes of `b`. The two reserved bytes after the attribute ID are
    /// ignored; no field is validated (see [`Mad::parse`]).
    pub fn parse(b: &[u8]) -> Result<MadHeader, MadError> {
        check_len(b, Self::LEN).map_err(|_| MadError::Truncated)?;
        Ok(MadHeader {
            base_version: b[0],
            mgmt_class: MgmtClass(b[1]),
            class_version: b[2],
            method: Method(b[3]),
            status: be16(b, 4),
            class_specific: be16(b, 6),
            tid: be64(b, 8),
            attr_id: be16(b, 16),
            attr_mod: be32(b, 20),
        })
    }

    /// Writes the header into the first 24 bytes of `b`.
    ///
    /// # Panics
    /// If `b` is shorter than [`MadHeader::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.base_version;
        b[1] = self.mgmt_class.0;
        b[2] = self.class_version;
        b[3] = self.method.0;
        put16(b, 4, self.status);
        put16(b, 6, self.class_specific);
        put64(b, 8, self.tid);
        put16(b, 16, self.attr_id);
        put16(b, 18, 0);
        put32(b, 20, self.attr_mod);
    }
}

/// A MAD: its header and the 232 bytes of class data, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mad<'a> {
    /// The common header.
    pub header: MadHeader,
    /// The class-specific data ([`MAD_DATA_LEN`] bytes).
    pub data: &'a [u8],
}

impl<'a> Mad<'a> {
    /// Parses a MAD from the payload of a GSI datagram. The payload must hold at least
    /// [`MAD_LEN`] bytes (what follows is ignored, as Linux's MAD layer ignores it) and the
    /// base version must be 1.
    pub fn parse(b: &'a [u8]) -> Result<Mad<'a>, MadError> {
        let b = b.get(..MAD_LEN).ok_or(MadError::Truncated)?;
        let header = MadHeader::parse(b)?;
        if header.base_version != BASE_VERSION {
            return Err(MadError::BadBaseVersion(header.base_version));
        }
        Ok(Mad {
            header,
            data: &b[MAD_HEADER_LEN..],
        })
    }
}

/// What Linux's MAD layer sends back for a Get or Set that no agent registered for: the same
/// MAD with method GetResp and status [`STATUS_UNSUPPORTED_METHOD_ATTR`] (plus the direction
/// bit for directed-route SMPs). Any other method gets no answer (`None`), as does anything
/// that is not a MAD.
pub fn unmatched_response(mad: &[u8]) -> Option<[u8; MAD_LEN]> {
    let parsed = Mad::parse(mad).ok()?;
    let h = parsed.header;
    if h.method != Method::GET && h.method != Method::SET {
        return None;
    }
    let mut out = [0u8; MAD_LEN];
    out.copy_from_slice(&mad[..MAD_LEN]);
    let mut status = STATUS_UNSUPPORTED_METHOD_ATTR;
    if h.mgmt_class == MgmtClass::SUBN_DIRECTED_ROUTE {
        // IB_SMP_DIRECTION: the D bit of a directed-route SMP's status.
        status |= 0x8000;
    }
    out[3] = Method::GET_RESP.0;
    put16(&mut out, 4, status);
    Some(out)
}

/// Private data as it travels: always the attribute's full field, zero-padded. The CM carries
/// no length, so a receiver gets all `N` bytes (rdma_cm hands them all to the application).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrivateData<const N: usize>(pub [u8; N]);

impl<const N: usize> PrivateData<N> {
    /// Size of the field.
    pub const LEN: usize = N;

    /// All zero.
    pub const ZERO: PrivateData<N> = PrivateData([0; N]);

    /// `data` followed by zeros; `None` if it does not fit (Linux's CM answers `-EINVAL`).
    pub fn from_slice(data: &[u8]) -> Option<PrivateData<N>> {
        let mut out = [0u8; N];
        out.get_mut(..data.len())?.copy_from_slice(data);
        Some(PrivateData(out))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }

    /// Length without trailing zero bytes (for display only: zeros may be meaningful).
    pub fn used_len(&self) -> usize {
        self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
    }

    pub(crate) fn read(b: &[u8]) -> PrivateData<N> {
        let mut out = [0u8; N];
        out.copy_from_slice(&b[..N]);
        PrivateData(out)
    }
}

impl<const N: usize> Default for PrivateData<N> {
    fn default() -> Self {
        PrivateData([0; N])
    }
}

impl<const N: usize> core::ops::Deref for PrivateData<N> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl<const N: usize> fmt::Debug for PrivateData<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateData<{N}>[")?;
        for b in &self.0[..self.used_len()] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::{class_port_info, cm};

    // The header of rxe's REQ in rdma_cm.pcap (rping): CM, class version 2, Send, TID with
    // hi_tid 2 and the byte-swapped local comm ID 0x823b9cb1 below it, attribute REQ.
    static HEADER_BYTES: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xb1, 0x9c, 0x3b,
        0x82, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn test_parse() {
        let h = MadHeader::parse(&HEADER_BYTES).unwrap();
        assert_eq!(h, MadHeader::cm(cm::attr::REQ, 0x0000_0002_b19c_3b82));
        assert_eq!(h.mgmt_class.to_string(), "CM");
        assert_eq!(h.method.to_string(), "Send");
    }

    #[test]
    fn test_emit() {
        let mut out = [0xaa; 24];
        MadHeader::cm(cm::attr::REQ, 0x0000_0002_b19c_3b82).emit(&mut out);
        assert_eq!(out, HEADER_BYTES);
    }

    #[test]
    fn test_truncated() {
        assert_eq!(
            MadHeader::parse(&HEADER_BYTES[..23]),
            Err(MadError::Truncated)
        );
        assert_eq!(Mad::parse(&[0u8; 255]), Err(MadError::Truncated));
    }

    #[test]
    fn test_parse_bad_version() {
        let mut mad = [0u8; MAD_LEN];
        mad[..24].copy_from_slice(&HEADER_BYTES);
        mad[0] = 0x80;
        assert_eq!(Mad::parse(&mad), Err(MadError::BadBaseVersion(0x80)));
    }

    #[test]
    fn test_unmatched_response() {
        let mut mad = [0u8; MAD_LEN];
        MadHeader {
            method: Method::GET,
            attr_id: class_port_info::ATTR_ID,
            ..MadHeader::cm(0, 7)
        }
        .emit(&mut mad);
        mad[100] = 0x5a;
        let resp = unmatched_response(&mad).unwrap();
        let h = MadHeader::parse(&resp).unwrap();
        assert_eq!(h.method, Method::GET_RESP);
        assert_eq!(h.status, STATUS_UNSUPPORTED_METHOD_ATTR);
        assert_eq!((h.tid, h.attr_id), (7, class_port_info::ATTR_ID));
        assert_eq!(resp[24..], mad[24..]);
        // Send, Trap and responses get nothing back; neither does a short MAD.
        for m in [Method::SEND, Method::TRAP, Method::GET_RESP] {
            mad[3] = m.0;
            assert_eq!(unmatched_response(&mad), None, "{m}");
        }
        assert_eq!(unmatched_response(&mad[..100]), None);
    }

    #[test]
    fn test_private_data() {
        let p = PrivateData::<8>::from_slice(b"abc").unwrap();
        assert_eq!(p.0, *b"abc\0\0\0\0\0");
        assert_eq!(p.used_len(), 3);
        assert_eq!(format!("{p:?}"), "PrivateData<8>[616263]");
        assert!(PrivateData::<2>::from_slice(b"abc").is_none());
    }
}
