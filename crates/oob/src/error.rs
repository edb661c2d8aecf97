//! Error types: every failure is a value, no input (bytes from the network included) panics.

use std::io;

/// A message that did not have the shape the tools produce.
///
/// Returned by the pure `parse` functions and wrapped in [`Error::Malformed`] by the sessions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The message has the wrong size (the tools use fixed-size messages).
    #[error("expected {expected} bytes, got {got}")]
    Length {
        /// Size the format requires.
        expected: usize,
        /// Size received.
        got: usize,
    },
    /// No NUL byte terminates the text (the tools send C strings including the NUL).
    #[error("missing NUL terminator")]
    MissingNul,
    /// Not the number of `:`-separated fields the format has.
    #[error("expected {expected} ':'-separated fields, found {found}")]
    FieldCount {
        /// Fields the format has.
        expected: usize,
        /// Fields found.
        found: usize,
    },
    /// A field is empty or contains a non-hex character.
    #[error("field `{field}` is not a hex number")]
    BadHex {
        /// Name of the field.
        field: &'static str,
    },
    /// A field's value does not fit its type (e.g. a QPN above 24 bits).
    #[error("field `{field}` is out of range")]
    OutOfRange {
        /// Name of the field.
        field: &'static str,
    },
    /// The GID is not 32 hex digits.
    #[error("GID is not 32 hex digits")]
    BadGid,
    /// The MTU message is not a decimal `enum ibv_mtu` value 1..=5.
    #[error("MTU field is not a decimal ibv_mtu value 1..=5")]
    BadMtu,
    /// The text is not ASCII.
    #[error("message is not ASCII text")]
    NotAscii,
}

/// A value that cannot be written in the fixed-width field the format gives it: the C tools
/// would print a longer field and break the fixed message size, so it is refused up front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {value:#x} is wider than its field (max {max:#x})")]
pub struct FormatError {
    /// Name of the field.
    pub field: &'static str,
    /// The value given.
    pub value: u64,
    /// The largest value the field holds.
    pub max: u64,
}

/// Everything that can go wrong while establishing a connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A socket operation failed (`op` says which: bind, connect, accept, read, write...).
    #[error("{op} failed: {source}")]
    Io {
        /// What was being done, including the protocol step.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The peer did not answer within the configured timeout.
    #[error("timed out during {step}")]
    Timeout {
        /// Protocol step.
        step: &'static str,
    },
    /// The peer closed the connection in the middle of a step.
    #[error("peer closed the connection during {step} ({got} of {expected} bytes received)")]
    PeerClosed {
        /// Protocol step.
        step: &'static str,
        /// Bytes received of the message.
        got: usize,
        /// Message size.
        expected: usize,
    },
    /// The peer sent bytes that are not a valid message for this step.
    #[error("malformed {step} message from peer: {source}")]
    Malformed {
        /// Protocol step.
        step: &'static str,
        /// What was wrong.
        #[source]
        source: ParseError,
    },
    /// The peer's closing message was not `done\0`.
    #[error("expected \"done\\0\" from peer, got {got:02x?}")]
    BadDone {
        /// The bytes received instead.
        got: [u8; 5],
    },
    /// A local value does not fit the wire format.
    #[error("cannot encode local values: {0}")]
    Format(#[from] FormatError),
    /// Name resolution gave no address to connect to.
    #[error("no address to connect to")]
    NoAddress,
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Maps an I/O error of a protocol step, turning the socket-timeout kinds into
    /// [`Error::Timeout`] so callers need not know how std reports `SO_RCVTIMEO`.
    pub(crate) fn io(op: &'static str, source: io::Error) -> Error {
        match source.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout { step: op },
            _ => Error::Io { op, source },
        }
    }

    /// True if the peer went away (EOF, reset, broken pipe) rather than misbehaving.
    pub fn is_peer_gone(&self) -> bool {
        match self {
            Error::PeerClosed { .. } => true,
            Error::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            ),
            _ => false,
        }
    }
}
