//! The transport a tool runs on, as the real tools name it: `pingpong --transport` picks
//! between rdma-core's `ibv_rc_pingpong`, `ibv_uc_pingpong` and `ibv_ud_pingpong`, and `perf
//! -c` is perftest's `--connection` (`RC`, `UC`, `UD`; perftest's XRC, DC, SRD and RawEth need
//! hardware softrdma does not model).

use clap::ValueEnum;
use softrdma::QpType;

/// RC, UC or UD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(clippy::upper_case_acronyms)]
pub(crate) enum Transport {
    /// Reliable Connected.
    #[value(name = "RC")]
    RC,
    /// Unreliable Connected: SEND and RDMA WRITE, no acknowledgements.
    #[value(name = "UC")]
    UC,
    /// Unreliable Datagram: one-packet SENDs through an address handle.
    #[value(name = "UD")]
    UD,
}

impl Transport {
    /// The queue pair type it runs on.
    pub(crate) fn qp_type(self) -> QpType {
        match self {
            Transport::RC => QpType::Rc,
            Transport::UC => QpType::Uc,
            Transport::UD => QpType::Ud,
        }
    }

    /// The name as the tools print it (perftest's `connStr`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::RC => "RC",
            Transport::UC => "UC",
            Transport::UD => "UD",
        }
    }
}
