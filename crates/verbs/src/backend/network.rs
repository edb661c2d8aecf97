//! What the progress code asks of the network below it.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::time::Duration;

use softrdma_udp::{
    MulticastError, RecvArena, RecvError, RecvMeta, RecvPiece, SendError, Transmit,
};

/// A datagram network a device sends on and receives from: the operations of
/// [`RoceSocket`](softrdma_udp::RoceSocket) the progress code uses, with its semantics (see there): sends take a batch of
/// [`Transmit`]s and report how many went, a GSO transmit arrives as one message whose stride
/// is its segment size (as GRO delivers it), receives never wait.
pub(crate) trait Backend: Send + std::fmt::Debug {
    /// The address datagrams are sent from and received on.
    fn local_addr(&self) -> SocketAddr;
    /// Most segments one GSO transmit may carry (1: no GSO).
    fn max_gso_segments(&self) -> usize;
    /// A descriptor that is readable while datagrams wait to be received (for `ppoll`); it
    /// lives as long as the backend.
    fn readiness_fd(&self) -> RawFd;
    /// Receives what waits, up to the arena's limit, without waiting.
    fn try_recv(&mut self, arena: &mut RecvArena) -> Result<usize, RecvError>;
    /// Whether [`Backend::try_recv_scattered`] can receive straight into registered memory:
    /// only the kernel's copy may write there while Rust code reads it atomically (see
    /// `progress/core/placed.rs`), so only a socket can.
    fn scatters(&self) -> bool;
    /// Receives one message scattered over `pieces` (see
    /// [`RoceSocket::try_recv_scattered`](softrdma_udp::RoceSocket::try_recv_scattered)).
    ///
    /// # Safety
    /// As [`RoceSocket::try_recv_scattered`](softrdma_udp::RoceSocket::try_recv_scattered)'s.
    unsafe fn try_recv_scattered(
        &mut self,
        pieces: &[RecvPiece],
    ) -> Result<Option<RecvMeta>, RecvError>;
    /// Sends a batch; returns how many transmits went (0: no room now).
    fn send(&mut self, transmits: &[Transmit<'_>]) -> Result<usize, SendError>;
    /// Waits until a send from `src_port` would find room, at most `timeout`.
    fn wait_writable(
        &mut self,
        src_port: u16,
        timeout: Option<Duration>,
    ) -> Result<bool, SendError>;
    /// Makes `sport` usable as a UDP source port; returns the port really used.
    fn prepare_source_port(&mut self, sport: u16) -> u16;
    /// Gives up source port `sport`.
    fn release_source_port(&mut self, sport: u16);
    /// Source ports held besides the main one.
    #[cfg(test)]
    fn source_ports(&self) -> usize;
    /// Receives datagrams sent to multicast `group` from now on.
    fn join_multicast(&mut self, group: IpAddr) -> Result<(), MulticastError>;
    /// Stops receiving `group`'s datagrams.
    fn leave_multicast(&mut self, group: IpAddr);
    /// Whether any multicast group is joined.
    fn has_multicast_groups(&self) -> bool;
}
