//! The kernel's UDP stack as a backend: a [`RoceSocket`] does what [`Backend`] asks.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use softrdma_udp::{
    MulticastError, RecvArena, RecvError, RecvMeta, RecvPiece, RoceSocket, SendError, Transmit,
};

use super::network::Backend;

impl Backend for RoceSocket {
    fn local_addr(&self) -> SocketAddr {
        RoceSocket::local_addr(self)
    }

    fn max_gso_segments(&self) -> usize {
        RoceSocket::max_gso_segments(self)
    }

    fn readiness_fd(&self) -> RawFd {
        RoceSocket::readiness_fd(self).as_raw_fd()
    }

    fn try_recv(&mut self, arena: &mut RecvArena) -> Result<usize, RecvError> {
        RoceSocket::try_recv(self, arena)
    }

    fn scatters(&self) -> bool {
        true
    }

    unsafe fn try_recv_scattered(
        &mut self,
        pieces: &[RecvPiece],
    ) -> Result<Option<RecvMeta>, RecvError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { RoceSocket::try_recv_scattered(self, pieces) }
    }

    fn send(&mut self, transmits: &[Transmit<'_>]) -> Result<usize, SendError> {
        RoceSocket::send(self, transmits)
    }

    fn wait_writable(
        &mut self,
        src_port: u16,
        timeout: Option<Duration>,
    ) -> Result<bool, SendError> {
        RoceSocket::wait_writable(self, src_port, timeout)
    }

    fn prepare_source_port(&mut self, sport: u16) -> u16 {
        RoceSocket::prepare_source_port(self, sport)
    }

    fn release_source_port(&mut self, sport: u16) {
        RoceSocket::release_source_port(self, sport);
    }

    #[cfg(test)]
    fn source_ports(&self) -> usize {
        RoceSocket::source_ports(self)
    }

    fn join_multicast(&mut self, group: IpAddr) -> Result<(), MulticastError> {
        RoceSocket::join_multicast(self, group)
    }

    fn leave_multicast(&mut self, group: IpAddr) {
        RoceSocket::leave_multicast(self, group);
    }

    fn has_multicast_groups(&self) -> bool {
        self.multicast_groups().next().is_some()
    }
}
