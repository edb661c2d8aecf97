//! Counters: Linux's four per-attribute groups (`cm_tx_msgs`, `cm_tx_retries`, `cm_rx_msgs`,
//! `cm_rx_duplicates` under `/sys/class/infiniband/*/ports/*/cm_*`) and a counter per reason a
//! received MAD was dropped.

use softrdma_wire::mad::cm::attr;

/// Why a received MAD did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmDrop {
    /// Not a MAD, or a CM attribute that does not parse.
    Malformed,
    /// A management class other than the CM's.
    NotCm,
    /// A CM class version other than 2.
    ClassVersion,
    /// A method the CM does not take (only Send; Get/Set are answered "unsupported").
    Method,
    /// A CM attribute with no message (or ClassPortInfo sent with Send).
    UnknownAttribute,
    /// No connection matches the communication IDs (a stray or late message).
    NoSuchConnection,
    /// The connection is in a state where the message means nothing.
    WrongState,
    /// A DREQ naming a QP that is not this connection's.
    WrongQpn,
    /// No room for another connection.
    NoResources,
    /// LAP / APR: alternate paths are not supported on RoCE (as in Linux).
    AlternatePath,
    /// A connection request for a service another device on a shared address listens on,
    /// which reached this one through a steering table gone wrong (see
    /// [`IbCm::unlistened_request`](crate::ib::IbCm::unlistened_request)): dropped, not
    /// rejected, so the requester's retransmission reaches the listener.
    Misdirected,
}

impl CmDrop {
    /// Every reason, in counter order.
    pub const ALL: [CmDrop; 11] = [
        CmDrop::Malformed,
        CmDrop::NotCm,
        CmDrop::ClassVersion,
        CmDrop::Method,
        CmDrop::UnknownAttribute,
        CmDrop::NoSuchConnection,
        CmDrop::WrongState,
        CmDrop::WrongQpn,
        CmDrop::NoResources,
        CmDrop::AlternatePath,
        CmDrop::Misdirected,
    ];

    /// Counter name.
    pub fn name(self) -> &'static str {
        match self {
            CmDrop::Malformed => "malformed",
            CmDrop::NotCm => "not_cm",
            CmDrop::ClassVersion => "class_version",
            CmDrop::Method => "method",
            CmDrop::UnknownAttribute => "unknown_attribute",
            CmDrop::NoSuchConnection => "no_such_connection",
            CmDrop::WrongState => "wrong_state",
            CmDrop::WrongQpn => "wrong_qpn",
            CmDrop::NoResources => "no_resources",
            CmDrop::AlternatePath => "alternate_path",
            CmDrop::Misdirected => "misdirected",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Counts per CM message (REQ … APR), indexed like Linux's `CM_*_COUNTER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrCounters([u64; 11]);

impl AttrCounters {
    /// The attribute IDs counted, in order.
    pub const ATTRS: [u16; 11] = [
        attr::REQ,
        attr::MRA,
        attr::REJ,
        attr::REP,
        attr::RTU,
        attr::DREQ,
        attr::DREP,
        attr::SIDR_REQ,
        attr::SIDR_REP,
        attr::LAP,
        attr::APR,
    ];

    /// The count for attribute `attr_id` (zero for attributes not counted).
    pub fn get(&self, attr_id: u16) -> u64 {
        Self::slot(attr_id).map_or(0, |i| self.0[i])
    }

    fn slot(attr_id: u16) -> Option<usize> {
        let i = usize::from(attr_id.checked_sub(attr::REQ)?);
        (i < 11).then_some(i)
    }

    pub(crate) fn bump(&mut self, attr_id: u16) {
        if let Some(i) = Self::slot(attr_id) {
            self.0[i] += 1;
        }
    }

    /// The sum over all attributes.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// All CM counters of one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmStats {
    /// MADs sent, first transmissions and responses (`cm_tx_msgs` minus retries).
    pub tx: AttrCounters,
    /// Retransmissions (`cm_tx_retries`).
    pub tx_retries: AttrCounters,
    /// MADs received and parsed (`cm_rx_msgs`).
    pub rx: AttrCounters,
    /// Duplicates recognised (`cm_rx_duplicates`).
    pub rx_duplicates: AttrCounters,
    drops: [u64; CmDrop::ALL.len()],
}

impl CmStats {
    /// Received MADs dropped for `reason`.
    pub fn drops(&self, reason: CmDrop) -> u64 {
        self.drops[reason.index()]
    }

    pub(crate) fn drop(&mut self, reason: CmDrop) {
        self.drops[reason.index()] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_counters() {
        let mut s = CmStats::default();
        s.rx.bump(attr::REQ);
        s.rx.bump(attr::APR);
        s.rx.bump(attr::CLASS_PORT_INFO);
        assert_eq!((s.rx.get(attr::REQ), s.rx.get(attr::APR)), (1, 1));
        assert_eq!(s.rx.total(), 2);
        s.drop(CmDrop::WrongQpn);
        assert_eq!(s.drops(CmDrop::WrongQpn), 1);
        for (i, d) in CmDrop::ALL.iter().enumerate() {
            assert_eq!(d.index(), i);
        }
    }
}
