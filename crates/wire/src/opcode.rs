//! The BTH opcode table: one `const` table says, for every opcode, its transport, what it does,
//! where in a message it stands, and which extension headers follow the BTH.
//!
//! Parsing, building and the transport's sequence checks all derive from this table (the rxe
//! `rxe_opcode[]` idea), so "which headers does WRITE_ONLY_WITH_IMM carry and at what offset" has
//! exactly one answer. Opcodes outside the table stay representable as [`Opcode`] values; only
//! [`Opcode::info`] returns `None` for them.

use core::fmt;

use crate::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Feth, Ieth, ImmDt, Reth, Xrceth, CNP_RESERVED_LEN,
};

/// A BTH opcode byte: the high 3 bits select the transport, the low 5 the operation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

/// The transport service an opcode belongs to (opcode bits 7..5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Reliable datagram (not implemented; opcodes are unknown to the table).
    Rd,
    /// Unreliable datagram.
    Ud,
    /// Congestion notification packet (RoCEv2 Annex A17).
    Cnp,
    /// Extended reliable connected (IBTA Annex A14): RC's operations, with an XRCETH naming
    /// the target's shared receive queue in every request.
    Xrc,
    /// Reserved / manufacturer specific transport codes.
    Other,
}

/// What an opcode does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// SEND (consumes a receive WQE at the responder).
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// Acknowledge (ACK or NAK).
    Acknowledge,
    /// Atomic acknowledge (carries the original remote value).
    AtomicAcknowledge,
    /// Atomic compare and swap.
    CompareSwap,
    /// Atomic fetch and add.
    FetchAdd,
    /// FLUSH (IBTA 1.5 persistent memory extension).
    Flush,
    /// ATOMIC WRITE (IBTA 1.5): an 8-byte write that is atomic at the responder.
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

/// Where a packet stands within a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// A middle packet.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The message is this single packet.
    Only,
}

impl Position {
    /// This packet starts a message (FIRST or ONLY).
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// This packet ends a message (LAST or ONLY).
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// A set of extension headers, as bit flags. Headers are laid out after the BTH in the order of
/// [`Headers::ORDER`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u16);

impl Headers {
    /// No extension header.
    pub const NONE: Headers = Headers(0);
    /// Datagram extended transport header (UD).
    pub const DETH: Headers = Headers(1 << 0);
    /// Flush extended transport header.
    pub const FETH: Headers = Headers(1 << 1);
    /// RDMA extended transport header.
    pub const RETH: Headers = Headers(1 << 2);
    /// Atomic extended transport header.
    pub const ATOMIC_ETH: Headers = Headers(1 << 3);
    /// ACK extended transport header.
    pub const AETH: Headers = Headers(1 << 4);
    /// Atomic acknowledge extended transport header.
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 5);
    /// Immediate data.
    pub const IMM_DT: Headers = Headers(1 << 6);
    /// Invalidate extended transport header.
    pub const IETH: Headers = Headers(1 << 7);
    /// The 16 reserved bytes that follow the BTH of a CNP.
    pub const CNP_RESERVED: Headers = Headers(1 << 8);
    /// XRC extended transport header (every XRC request).
    pub const XRCETH: Headers = Headers(1 << 9);

    /// Wire order of the extension headers and their lengths (IBTA 9.2: an XRCETH follows
    /// the datagram header's place and precedes the RETH or AtomicETH).
    pub const ORDER: [(Headers, usize); 10] = [
        (Headers::DETH, Deth::LEN),
        (Headers::XRCETH, Xrceth::LEN),
        (Headers::FETH, Feth::LEN),
        (Headers::RETH, Reth::LEN),
        (Headers::ATOMIC_ETH, AtomicEth::LEN),
        (Headers::AETH, Aeth::LEN),
        (Headers::ATOMIC_ACK_ETH, AtomicAckEth::LEN),
        (Headers::IMM_DT, ImmDt::LEN),
        (Headers::IETH, Ieth::LEN),
        (Headers::CNP_RESERVED, CNP_RESERVED_LEN),
    ];

    /// Union of two sets.
    pub const fn union(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }

    /// Whether every header of `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }

    /// Byte offset of header `which` from the start of the BTH, if the set contains it.
    pub const fn offset_of(self, which: Headers) -> Option<usize> {
        if !self.contains(which) || which.0 == 0 {
            return None;
        }
        let mut offset = Bth::LEN;
        let mut i = 0;
        while i < Headers::ORDER.len() {
            let (h, len) = Headers::ORDER[i];
            if h.0 == which.0 {
                return Some(offset);
            }
            if self.contains(h) {
                offset += len;
            }
            i += 1;
        }
        None
    }

    /// Total length of the BTH plus these extension headers.
    pub const fn header_len(self) -> usize {
        let mut len = Bth::LEN;
        let mut i = 0;
        while i < Headers::ORDER.len() {
            let (h, l) = Headers::ORDER[i];
            if self.contains(h) {
                len += l;
            }
            i += 1;
        }
        len
    }
}

impl core::ops::BitOr for Headers {
    type Output = Headers;
    fn bitor(self, rhs: Headers) -> Headers {
        self.union(rhs)
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 10] = [
            "DETH",
            "XRCETH",
            "FETH",
            "RETH",
            "AtomicETH",
            "AETH",
            "AtomicAckETH",
            "ImmDt",
            "IETH",
            "CNP",
        ];
        let mut set = f.debug_set();
        for (i, (h, _)) in Headers::ORDER.iter().enumerate() {
            if self.contains(*h) {
                set.entry(&format_args!("{}", NAMES[i]));
            }
        }
        set.finish()
    }
}

/// Payload rule of an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload {
    /// No payload allowed (ACK, READ request, atomics, FLUSH).
    None,
    /// A payload of 0 to path-MTU bytes (SEND, WRITE, READ response).
    Variable,
    /// Exactly this many payload bytes (ATOMIC_WRITE: 8).
    Fixed(usize),
}

/// Everything the table says about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Name as rxe and Wireshark spell it, e.g. `RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE`.
    pub name: &'static str,
    /// The transport service.
    pub transport: Transport,
    /// What the packet does.
    pub kind: OpKind,
    /// Where in its message the packet stands.
    pub position: Position,
    /// Extension headers that follow the BTH.
    pub headers: Headers,
    /// Payload rule.
    pub payload: Payload,
}

impl OpcodeInfo {
    /// The packet is a request (travels requester → responder).
    pub const fn is_request(&self) -> bool {
        !matches!(
            self.kind,
            OpKind::ReadResponse | OpKind::Acknowledge | OpKind::AtomicAcknowledge | OpKind::Cnp
        )
    }

    /// The packet carries immediate data.
    pub const fn has_immediate(&self) -> bool {
        self.headers.contains(Headers::IMM_DT)
    }

    /// The packet carries an invalidate rkey.
    pub const fn has_invalidate(&self) -> bool {
        self.headers.contains(Headers::IETH)
    }

    /// Length of BTH plus extension headers.
    pub const fn header_len(&self) -> usize {
        self.headers.header_len()
    }
}

// Operation codes (low 5 bits) shared by RC and UC (IBTA Table 38).
const SEND_FIRST: u8 = 0x00;
const SEND_MIDDLE: u8 = 0x01;
const SEND_LAST: u8 = 0x02;
const SEND_LAST_WITH_IMMEDIATE: u8 = 0x03;
const SEND_ONLY: u8 = 0x04;
const SEND_ONLY_WITH_IMMEDIATE: u8 = 0x05;
const RDMA_WRITE_FIRST: u8 = 0x06;
const RDMA_WRITE_MIDDLE: u8 = 0x07;
const RDMA_WRITE_LAST: u8 = 0x08;
const RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = 0x09;
const RDMA_WRITE_ONLY: u8 = 0x0a;
const RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x0b;
const RDMA_READ_REQUEST: u8 = 0x0c;
const RDMA_READ_RESPONSE_FIRST: u8 = 0x0d;
const RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0e;
const RDMA_READ_RESPONSE_LAST: u8 = 0x0f;
const RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
const ACKNOWLEDGE: u8 = 0x11;
const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
const COMPARE_SWAP: u8 = 0x13;
const FETCH_ADD: u8 = 0x14;
const SEND_LAST_WITH_INVALIDATE: u8 = 0x16;
const SEND_ONLY_WITH_INVALIDATE: u8 = 0x17;
const FLUSH: u8 = 0x1c;
const ATOMIC_WRITE: u8 = 0x1d;

const RC: u8 = 0x00;
const UC: u8 = 0x20;
const UD: u8 = 0x60;
const XRC: u8 = 0xa0;

#[allow(missing_docs)] // the names are the documentation: IBTA opcode names
impl Opcode {
    pub const RC_SEND_FIRST: Opcode = Opcode(RC | SEND_FIRST);
    pub const RC_SEND_MIDDLE: Opcode = Opcode(RC | SEND_MIDDLE);
    pub const RC_SEND_LAST: Opcode = Opcode(RC | SEND_LAST);
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(RC | SEND_LAST_WITH_IMMEDIATE);
    pub const RC_SEND_ONLY: Opcode = Opcode(RC | SEND_ONLY);
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(RC | SEND_ONLY_WITH_IMMEDIATE);
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(RC | RDMA_WRITE_FIRST);
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(RC | RDMA_WRITE_MIDDLE);
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(RC | RDMA_WRITE_LAST);
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode =
        Opcode(RC | RDMA_WRITE_LAST_WITH_IMMEDIATE);
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(RC | RDMA_WRITE_ONLY);
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode =
        Opcode(RC | RDMA_WRITE_ONLY_WITH_IMMEDIATE);
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(RC | RDMA_READ_REQUEST);
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(RC | RDMA_READ_RESPONSE_FIRST);
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(RC | RDMA_READ_RESPONSE_MIDDLE);
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(RC | RDMA_READ_RESPONSE_LAST);
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(RC | RDMA_READ_RESPONSE_ONLY);
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(RC | ACKNOWLEDGE);
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(RC | ATOMIC_ACKNOWLEDGE);
    pub const RC_COMPARE_SWAP: Opcode = Opcode(RC | COMPARE_SWAP);
    pub const RC_FETCH_ADD: Opcode = Opcode(RC | FETCH_ADD);
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(RC | SEND_LAST_WITH_INVALIDATE);
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(RC | SEND_ONLY_WITH_INVALIDATE);
    pub const RC_FLUSH: Opcode = Opcode(RC | FLUSH);
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(RC | ATOMIC_WRITE);

    pub const UC_SEND_FIRST: Opcode = Opcode(UC | SEND_FIRST);
    pub const UC_SEND_MIDDLE: Opcode = Opcode(UC | SEND_MIDDLE);
    pub const UC_SEND_LAST: Opcode = Opcode(UC | SEND_LAST);
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(UC | SEND_LAST_WITH_IMMEDIATE);
    pub const UC_SEND_ONLY: Opcode = Opcode(UC | SEND_ONLY);
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(UC | SEND_ONLY_WITH_IMMEDIATE);
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(UC | RDMA_WRITE_FIRST);
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(UC | RDMA_WRITE_MIDDLE);
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(UC | RDMA_WRITE_LAST);
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode =
        Opcode(UC | RDMA_WRITE_LAST_WITH_IMMEDIATE);
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(UC | RDMA_WRITE_ONLY);
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode =
        Opcode(UC | RDMA_WRITE_ONLY_WITH_IMMEDIATE);

    pub const UD_SEND_ONLY: Opcode = Opcode(UD | SEND_ONLY);
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(UD | SEND_ONLY_WITH_IMMEDIATE);

    pub const XRC_SEND_FIRST: Opcode = Opcode(XRC | SEND_FIRST);
    pub const XRC_SEND_MIDDLE: Opcode = Opcode(XRC | SEND_MIDDLE);
    pub const XRC_SEND_LAST: Opcode = Opcode(XRC | SEND_LAST);
    pub const XRC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(XRC | SEND_LAST_WITH_IMMEDIATE);
    pub const XRC_SEND_ONLY: Opcode = Opcode(XRC | SEND_ONLY);
    pub const XRC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(XRC | SEND_ONLY_WITH_IMMEDIATE);
    pub const XRC_RDMA_WRITE_FIRST: Opcode = Opcode(XRC | RDMA_WRITE_FIRST);
    pub const XRC_RDMA_WRITE_MIDDLE: Opcode = Opcode(XRC | RDMA_WRITE_MIDDLE);
    pub const XRC_RDMA_WRITE_LAST: Opcode = Opcode(XRC | RDMA_WRITE_LAST);
    pub const XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode =
        Opcode(XRC | RDMA_WRITE_LAST_WITH_IMMEDIATE);
    pub const XRC_RDMA_WRITE_ONLY: Opcode = Opcode(XRC | RDMA_WRITE_ONLY);
    pub const XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode =
        Opcode(XRC | RDMA_WRITE_ONLY_WITH_IMMEDIATE);
    pub const XRC_RDMA_READ_REQUEST: Opcode = Opcode(XRC | RDMA_READ_REQUEST);
    pub const XRC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(XRC | RDMA_READ_RESPONSE_FIRST);
    pub const XRC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(XRC | RDMA_READ_RESPONSE_MIDDLE);
    pub const XRC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(XRC | RDMA_READ_RESPONSE_LAST);
    pub const XRC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(XRC | RDMA_READ_RESPONSE_ONLY);
    pub const XRC_ACKNOWLEDGE: Opcode = Opcode(XRC | ACKNOWLEDGE);
    pub const XRC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(XRC | ATOMIC_ACKNOWLEDGE);
    pub const XRC_COMPARE_SWAP: Opcode = Opcode(XRC | COMPARE_SWAP);
    pub const XRC_FETCH_ADD: Opcode = Opcode(XRC | FETCH_ADD);
    pub const XRC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(XRC | SEND_LAST_WITH_INVALIDATE);
    pub const XRC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(XRC | SEND_ONLY_WITH_INVALIDATE);

    pub const CNP: Opcode = Opcode(0x81);
}

impl Opcode {
    /// The transport bits of the opcode.
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Other,
        }
    }

    /// The table entry, or `None` for an opcode softrdma does not know.
    pub const fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// The opcode's name, or `"UNKNOWN"`.
    pub const fn name(self) -> &'static str {
        match self.info() {
            Some(info) => info.name,
            None => "UNKNOWN",
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(info) => f.write_str(info.name),
            None => write!(f, "UNKNOWN(0x{:02x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

const fn entry(
    name: &'static str,
    transport: Transport,
    kind: OpKind,
    position: Position,
    headers: Headers,
    payload: Payload,
) -> Option<OpcodeInfo> {
    Some(OpcodeInfo {
        name,
        transport,
        kind,
        position,
        headers,
        payload,
    })
}

/// Fills the send/write entries shared by RC, UC and XRC; `req` is what every request of
/// the transport carries besides (XRC: the XRCETH).
const fn connected(
    table: &mut [Option<OpcodeInfo>; 256],
    base: u8,
    t: Transport,
    req: Headers,
    names: &[&'static str; 12],
) {
    use Headers as H;
    use OpKind::{Send, Write};
    use Payload::Variable as V;
    use Position::{First, Last, Middle, Only};
    let b = base as usize;
    let imm = req.union(H::IMM_DT);
    let reth = req.union(H::RETH);
    table[b + SEND_FIRST as usize] = entry(names[0], t, Send, First, req, V);
    table[b + SEND_MIDDLE as usize] = entry(names[1], t, Send, Middle, req, V);
    table[b + SEND_LAST as usize] = entry(names[2], t, Send, Last, req, V);
    table[b + SEND_LAST_WITH_IMMEDIATE as usize] = entry(names[3], t, Send, Last, imm, V);
    table[b + SEND_ONLY as usize] = entry(names[4], t, Send, Only, req, V);
    table[b + SEND_ONLY_WITH_IMMEDIATE as usize] = entry(names[5], t, Send, Only, imm, V);
    table[b + RDMA_WRITE_FIRST as usize] = entry(names[6], t, Write, First, reth, V);
    table[b + RDMA_WRITE_MIDDLE as usize] = entry(names[7], t, Write, Middle, req, V);
    table[b + RDMA_WRITE_LAST as usize] = entry(names[8], t, Write, Last, req, V);
    table[b + RDMA_WRITE_LAST_WITH_IMMEDIATE as usize] = entry(names[9], t, Write, Last, imm, V);
    table[b + RDMA_WRITE_ONLY as usize] = entry(names[10], t, Write, Only, reth, V);
    table[b + RDMA_WRITE_ONLY_WITH_IMMEDIATE as usize] =
        entry(names[11], t, Write, Only, reth.union(H::IMM_DT), V);
}

/// Fills the entries RC and XRC share beyond SEND and WRITE: READ, its responses, the
/// acknowledgements, the atomics and SEND with invalidate (responses carry no XRCETH).
const fn reliable(
    t: &mut [Option<OpcodeInfo>; 256],
    base: u8,
    transport: Transport,
    req: Headers,
    names: &[&'static str; 11],
) {
    use Headers as H;
    use OpKind::*;
    use Payload::{None as NoPayload, Variable as V};
    use Position::{First, Last, Middle, Only};
    let b = base as usize;
    let tr = transport;
    t[b + RDMA_READ_REQUEST as usize] = entry(
        names[0],
        tr,
        ReadRequest,
        Only,
        req.union(H::RETH),
        NoPayload,
    );
    t[b + RDMA_READ_RESPONSE_FIRST as usize] = entry(names[1], tr, ReadResponse, First, H::AETH, V);
    t[b + RDMA_READ_RESPONSE_MIDDLE as usize] =
        entry(names[2], tr, ReadResponse, Middle, H::NONE, V);
    t[b + RDMA_READ_RESPONSE_LAST as usize] = entry(names[3], tr, ReadResponse, Last, H::AETH, V);
    t[b + RDMA_READ_RESPONSE_ONLY as usize] = entry(names[4], tr, ReadResponse, Only, H::AETH, V);
    t[b + ACKNOWLEDGE as usize] = entry(names[5], tr, Acknowledge, Only, H::AETH, NoPayload);
    t[b + ATOMIC_ACKNOWLEDGE as usize] = entry(
        names[6],
        tr,
        AtomicAcknowledge,
        Only,
        H::AETH.union(H::ATOMIC_ACK_ETH),
        NoPayload,
    );
    let atomic = req.union(H::ATOMIC_ETH);
    t[b + COMPARE_SWAP as usize] = entry(names[7], tr, CompareSwap, Only, atomic, NoPayload);
    t[b + FETCH_ADD as usize] = entry(names[8], tr, FetchAdd, Only, atomic, NoPayload);
    let inv = req.union(H::IETH);
    t[b + SEND_LAST_WITH_INVALIDATE as usize] = entry(names[9], tr, Send, Last, inv, V);
    t[b + SEND_ONLY_WITH_INVALIDATE as usize] = entry(names[10], tr, Send, Only, inv, V);
}

const fn build_table() -> [Option<OpcodeInfo>; 256] {
    use Headers as H;
    use OpKind::*;
    use Payload::{Fixed, None as NoPayload, Variable as V};
    use Position::Only;
    use Transport::{Rc, Ud};
    let mut t: [Option<OpcodeInfo>; 256] = [None; 256];
    connected(
        &mut t,
        RC,
        Rc,
        H::NONE,
        &[
            "RC_SEND_FIRST",
            "RC_SEND_MIDDLE",
            "RC_SEND_LAST",
            "RC_SEND_LAST_WITH_IMMEDIATE",
            "RC_SEND_ONLY",
            "RC_SEND_ONLY_WITH_IMMEDIATE",
            "RC_RDMA_WRITE_FIRST",
            "RC_RDMA_WRITE_MIDDLE",
            "RC_RDMA_WRITE_LAST",
            "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            "RC_RDMA_WRITE_ONLY",
            "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        ],
    );
    connected(
        &mut t,
        UC,
        Transport::Uc,
        H::NONE,
        &[
            "UC_SEND_FIRST",
            "UC_SEND_MIDDLE",
            "UC_SEND_LAST",
            "UC_SEND_LAST_WITH_IMMEDIATE",
            "UC_SEND_ONLY",
            "UC_SEND_ONLY_WITH_IMMEDIATE",
            "UC_RDMA_WRITE_FIRST",
            "UC_RDMA_WRITE_MIDDLE",
            "UC_RDMA_WRITE_LAST",
            "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            "UC_RDMA_WRITE_ONLY",
            "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        ],
    );
    reliable(
        &mut t,
        RC,
        Rc,
        H::NONE,
        &[
            "RC_RDMA_READ_REQUEST",
            "RC_RDMA_READ_RESPONSE_FIRST",
            "RC_RDMA_READ_RESPONSE_MIDDLE",
            "RC_RDMA_READ_RESPONSE_LAST",
            "RC_RDMA_READ_RESPONSE_ONLY",
            "RC_ACKNOWLEDGE",
            "RC_ATOMIC_ACKNOWLEDGE",
            "RC_COMPARE_SWAP",
            "RC_FETCH_ADD",
            "RC_SEND_LAST_WITH_INVALIDATE",
            "RC_SEND_ONLY_WITH_INVALIDATE",
        ],
    );
    t[FLUSH as usize] = entry(
        "RC_FLUSH",
        Rc,
        Flush,
        Only,
        H::FETH.union(H::RETH),
        NoPayload,
    );
    t[ATOMIC_WRITE as usize] = entry("RC_ATOMIC_WRITE", Rc, AtomicWrite, Only, H::RETH, Fixed(8));
    t[(UD | SEND_ONLY) as usize] = entry("UD_SEND_ONLY", Ud, Send, Only, H::DETH, V);
    t[(UD | SEND_ONLY_WITH_IMMEDIATE) as usize] = entry(
        "UD_SEND_ONLY_WITH_IMMEDIATE",
        Ud,
        Send,
        Only,
        H::DETH.union(H::IMM_DT),
        V,
    );
    t[0x81] = entry("CNP", Transport::Cnp, Cnp, Only, H::CNP_RESERVED, NoPayload);
    connected(
        &mut t,
        XRC,
        Transport::Xrc,
        H::XRCETH,
        &[
            "XRC_SEND_FIRST",
            "XRC_SEND_MIDDLE",
            "XRC_SEND_LAST",
            "XRC_SEND_LAST_WITH_IMMEDIATE",
            "XRC_SEND_ONLY",
            "XRC_SEND_ONLY_WITH_IMMEDIATE",
            "XRC_RDMA_WRITE_FIRST",
            "XRC_RDMA_WRITE_MIDDLE",
            "XRC_RDMA_WRITE_LAST",
            "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            "XRC_RDMA_WRITE_ONLY",
            "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        ],
    );
    reliable(
        &mut t,
        XRC,
        Transport::Xrc,
        H::XRCETH,
        &[
            "XRC_RDMA_READ_REQUEST",
            "XRC_RDMA_READ_RESPONSE_FIRST",
            "XRC_RDMA_READ_RESPONSE_MIDDLE",
            "XRC_RDMA_READ_RESPONSE_LAST",
            "XRC_RDMA_READ_RESPONSE_ONLY",
            "XRC_ACKNOWLEDGE",
            "XRC_ATOMIC_ACKNOWLEDGE",
            "XRC_COMPARE_SWAP",
            "XRC_FETCH_ADD",
            "XRC_SEND_LAST_WITH_INVALIDATE",
            "XRC_SEND_ONLY_WITH_INVALIDATE",
        ],
    );
    t
}

static TABLE: [Option<OpcodeInfo>; 256] = build_table();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_table_invariants() {
        let mut known = 0;
        for op in 0..=255u8 {
            let opcode = Opcode(op);
            let Some(info) = opcode.info() else { continue };
            known += 1;
            // The transport bits agree with the entry.
            assert_eq!(opcode.transport(), info.transport, "{info:?}");
            // Offsets are ascending and the last header ends at header_len.
            let mut prev_end = Bth::LEN;
            for (h, len) in Headers::ORDER {
                if let Some(off) = info.headers.offset_of(h) {
                    assert_eq!(off, prev_end, "{}", info.name);
                    prev_end = off + len;
                }
            }
            assert_eq!(prev_end, info.header_len(), "{}", info.name);
            // Names carry the transport prefix.
            let prefix = match info.transport {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
                Transport::Cnp => "CNP",
                Transport::Xrc => "XRC_",
                _ => unreachable!(),
            };
            assert!(info.name.starts_with(prefix), "{}", info.name);
            // Immediate data only ends a message.
            if info.has_immediate() || info.has_invalidate() {
                assert!(info.position.ends());
            }
            // A RETH always starts a message.
            if info.headers.contains(Headers::RETH) {
                assert!(info.position.starts(), "{}", info.name);
            }
            // Every XRC request names its SRQ, and nothing else does.
            assert_eq!(
                info.headers.contains(Headers::XRCETH),
                info.transport == Transport::Xrc && info.is_request(),
                "{}",
                info.name
            );
            // XRC is RC with an XRCETH: the same operation and headers at the same low bits.
            if info.transport == Transport::Xrc {
                let rc = Opcode(op & 0x1f).info().unwrap();
                assert_eq!(&info.name[4..], &rc.name[3..]);
                assert_eq!((info.kind, info.position), (rc.kind, rc.position));
                let xrceth = if info.is_request() {
                    Headers::XRCETH
                } else {
                    Headers::NONE
                };
                assert_eq!(info.headers, rc.headers.union(xrceth), "{}", info.name);
            }
        }
        // RC: 12 SEND/WRITE, READ request, 4 READ responses, ACK, ATOMIC ACK, 2 atomics,
        // 2 SEND with invalidate, FLUSH, ATOMIC_WRITE = 25; UC: 12; UD: 2; CNP: 1; XRC: RC's
        // but FLUSH and ATOMIC_WRITE, 23.
        assert_eq!(known, 25 + 12 + 2 + 1 + 23);
    }

    #[test]
    fn test_offsets() {
        let info = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(info.headers.offset_of(Headers::RETH), Some(12));
        assert_eq!(info.headers.offset_of(Headers::IMM_DT), Some(28));
        assert_eq!(info.header_len(), 32);
        let info = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(info.headers.offset_of(Headers::ATOMIC_ACK_ETH), Some(16));
        assert_eq!(info.header_len(), 24);
        let info = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(info.headers.offset_of(Headers::IMM_DT), Some(20));
        assert_eq!(
            Opcode::RC_FLUSH
                .info()
                .unwrap()
                .headers
                .offset_of(Headers::RETH),
            Some(16)
        );
        assert_eq!(Opcode::RC_COMPARE_SWAP.info().unwrap().header_len(), 40);
        assert_eq!(Opcode::CNP.info().unwrap().header_len(), 28);
        // XRC: the XRCETH right after the BTH, then RETH / AtomicETH / ImmDt.
        let info = Opcode::XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(info.headers.offset_of(Headers::XRCETH), Some(12));
        assert_eq!(info.headers.offset_of(Headers::RETH), Some(16));
        assert_eq!(info.headers.offset_of(Headers::IMM_DT), Some(32));
        assert_eq!(Opcode::XRC_COMPARE_SWAP.info().unwrap().header_len(), 44);
        assert_eq!(Opcode::XRC_ACKNOWLEDGE.info().unwrap().header_len(), 16);
        assert_eq!(Opcode::XRC_SEND_ONLY.0, 0xa4);
    }

    #[test]
    fn test_unknown() {
        assert!(Opcode(0x15).info().is_none());
        assert!(Opcode(0x40).info().is_none()); // RD
        assert_eq!(Opcode(0xff).name(), "UNKNOWN");
        assert_eq!(format!("{:?}", Opcode(0x15)), "UNKNOWN(0x15)");
    }
}
