//! Counters for everything the engine does, so that every drop and every retry is visible
//! (rxe's hw_counters, with a reason per drop).

use softrdma_wire::ParseError;

/// Why an incoming datagram was discarded without effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Not a parseable RoCEv2 packet.
    Malformed,
    /// ICRC mismatch.
    BadIcrc,
    /// No QP with the destination QPN.
    UnknownQp,
    /// The QP's state does not accept this packet.
    BadState,
    /// Opcode of another transport than the QP's.
    WrongTransport,
    /// The packet came from an address other than the QP's peer.
    WrongSource,
    /// A response that matches no outstanding request (stale or duplicate).
    UnexpectedResponse,
    /// A request with a PSN after the expected one (a NAK may have been sent).
    OutOfSequence,
    /// A duplicate request answered from history or re-ACKed.
    Duplicate,
    /// P_Key mismatch.
    BadPkey,
    /// Q_Key mismatch (UD).
    BadQkey,
    /// A UD or UC message arrived and no receive WQE was posted (RC answers RNR instead).
    NoReceiveWqe,
    /// A UD or UC message longer than the port MTU or the posted receive buffer.
    TooLong,
    /// A UC WRITE whose R_Key, bounds or rights do not allow it (RC NAKs instead).
    RemoteAccess,
    /// A UC packet that does not continue the message in progress (RC NAKs instead).
    InvalidRequest,
}

impl DropReason {
    /// All reasons, for reporting.
    pub const ALL: [DropReason; 15] = [
        DropReason::Malformed,
        DropReason::BadIcrc,
        DropReason::UnknownQp,
        DropReason::BadState,
        DropReason::WrongTransport,
        DropReason::WrongSource,
        DropReason::UnexpectedResponse,
        DropReason::OutOfSequence,
        DropReason::Duplicate,
        DropReason::BadPkey,
        DropReason::BadQkey,
        DropReason::NoReceiveWqe,
        DropReason::TooLong,
        DropReason::RemoteAccess,
        DropReason::InvalidRequest,
    ];

    /// A stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::BadIcrc => "bad_icrc",
            DropReason::UnknownQp => "unknown_qp",
            DropReason::BadState => "bad_state",
            DropReason::WrongTransport => "wrong_transport",
            DropReason::WrongSource => "wrong_source",
            DropReason::UnexpectedResponse => "unexpected_response",
            DropReason::OutOfSequence => "out_of_sequence",
            DropReason::Duplicate => "duplicate",
            DropReason::BadPkey => "bad_pkey",
            DropReason::BadQkey => "bad_qkey",
            DropReason::NoReceiveWqe => "no_receive_wqe",
            DropReason::TooLong => "too_long",
            DropReason::RemoteAccess => "remote_access",
            DropReason::InvalidRequest => "invalid_request",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl From<ParseError> for DropReason {
    fn from(e: ParseError) -> DropReason {
        match e {
            ParseError::BadIcrc => DropReason::BadIcrc,
            _ => DropReason::Malformed,
        }
    }
}

/// NAK kinds, for the sent/received counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakKind {
    /// PSN sequence error.
    PsnSequence,
    /// RNR.
    Rnr,
    /// Invalid request.
    InvalidRequest,
    /// Remote access error.
    RemoteAccess,
    /// Remote operational error.
    RemoteOperational,
}

impl NakKind {
    /// All kinds.
    pub const ALL: [NakKind; 5] = [
        NakKind::PsnSequence,
        NakKind::Rnr,
        NakKind::InvalidRequest,
        NakKind::RemoteAccess,
        NakKind::RemoteOperational,
    ];
    /// A stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            NakKind::PsnSequence => "psn_sequence",
            NakKind::Rnr => "rnr",
            NakKind::InvalidRequest => "invalid_request",
            NakKind::RemoteAccess => "remote_access",
            NakKind::RemoteOperational => "remote_operational",
        }
    }
}

/// Engine-wide counters. All monotonic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams handed to the engine.
    pub rx_packets: u64,
    /// Payload+header bytes received (accepted packets).
    pub rx_bytes: u64,
    /// Packets produced for transmission.
    pub tx_packets: u64,
    /// Bytes produced for transmission.
    pub tx_bytes: u64,
    /// Received packets by opcode byte.
    pub rx_by_opcode: Vec<u64>,
    /// Transmitted packets by opcode byte.
    pub tx_by_opcode: Vec<u64>,
    /// Drops by [`DropReason`] (indexed by the enum order).
    pub drops: [u64; DropReason::ALL.len()],
    /// NAKs sent, by [`NakKind`].
    pub naks_sent: [u64; 5],
    /// NAKs received, by [`NakKind`].
    pub naks_received: [u64; 5],
    /// Request packets sent again (timeouts, NAKs, implicit NAKs).
    pub retransmitted_packets: u64,
    /// Retransmit timer expirations.
    pub retransmit_timeouts: u64,
    /// Duplicate requests received (answered or re-ACKed).
    pub duplicate_requests: u64,
    /// Atomic operations executed (never twice for one request).
    pub atomics_executed: u64,
    /// Atomic ACKs replayed from responder resources for duplicate atomics.
    pub atomics_replayed: u64,
    /// READ requests answered.
    pub reads_served: u64,
    /// Work completions generated.
    pub completions: u64,
    /// Completions dropped because a CQ was full.
    pub cq_overruns: u64,
    /// Requests an RC responder kept because they arrived ahead of a missing one.
    pub requests_held: u64,
    /// Kept requests run once the missing one arrived.
    pub reordered_requests: u64,
    /// Sequence NAKs answered by resending the missing packet alone (selective repeat).
    pub selective_repeats: u64,
    /// Tail-loss probes sent: the newest packet again, a few round trips into a silence.
    pub tail_probes: u64,
    /// Times a QP held a new packet back for the device's in-flight budget.
    pub budget_waits: u64,
    /// SEND_WITH_INV messages whose rkey could not be invalidated (no bound type 2 window):
    /// the receive completed with a remote invalid request error.
    pub invalid_invalidations: u64,
    /// Received packets marked ECN Congestion Experienced.
    pub ecn_ce_received: u64,
    /// Congestion notification packets sent (the notification point).
    pub cnps_sent: u64,
    /// Congestion notification packets received.
    pub cnps_received: u64,
    /// Rate cuts the reaction points made (DCQCN: CNPs applied; TIMELY: rising round trips).
    pub cc_rate_cuts: u64,
    /// Times a QP's request waited for its pacer.
    pub paced_waits: u64,
}

impl Stats {
    /// Counts a drop.
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason.index()] += 1;
    }
    /// Drops counted for `reason`.
    pub fn drops_for(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }
    /// Total drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
    pub(crate) fn count_opcode(v: &mut Vec<u64>, opcode: u8) {
        if v.len() < 256 {
            v.resize(256, 0);
        }
        v[usize::from(opcode)] += 1;
    }
    /// Counts a NAK sent.
    pub fn nak_sent(&mut self, kind: NakKind) {
        self.naks_sent[kind as usize] += 1;
    }
    /// Counts a NAK received.
    pub fn nak_received(&mut self, kind: NakKind) {
        self.naks_received[kind as usize] += 1;
    }
    /// NAKs sent of a kind.
    pub fn naks_sent_of(&self, kind: NakKind) -> u64 {
        self.naks_sent[kind as usize]
    }
    /// NAKs received of a kind.
    pub fn naks_received_of(&self, kind: NakKind) -> u64 {
        self.naks_received[kind as usize]
    }
}
