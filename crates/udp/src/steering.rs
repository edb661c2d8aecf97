//! Steering in a shared address: which socket of a `SO_REUSEPORT` group
//! ([`Config::reuse_port`](crate::Config::reuse_port)) gets an arriving datagram.
//!
//! The kernel keeps a group's sockets in an array and runs the group's classic BPF program on
//! each datagram, with the packet starting after the UDP header; the program's result is an
//! index into that array (an index past its end falls back to the flow hash). A member joins at
//! the end of the array; when one closes, the last member moves into its place. Which program
//! to run, and how to know the indices, is the caller's business: this crate carries opaque
//! datagrams, and only attaches what it is given.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::fork::Uninherited;
use crate::{imp, RoceSocket};

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteeringInsn {
    /// Opcode (`BPF_LD | BPF_B | BPF_ABS`, ...).
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// The constant operand.
    pub k: u32,
}

/// A handle on a socket's membership in its `SO_REUSEPORT` group: a duplicate of the main
/// socket's descriptor, so the socket stays in the group until both are closed. Whoever holds
/// it decides when the socket leaves (closing the last descriptor is what removes it).
#[derive(Debug)]
pub struct SteeringHandle {
    fd: Uninherited<OwnedFd>,
}

impl SteeringHandle {
    /// Makes `program` the group's steering program, for every member.
    pub fn attach(&self, program: &[SteeringInsn]) -> io::Result<()> {
        imp::attach_reuseport_cbpf(self.fd.as_raw_fd(), program)
    }
}

impl RoceSocket {
    /// A [`SteeringHandle`] on this socket (bound with
    /// [`Config::reuse_port`](crate::Config::reuse_port)).
    pub fn steering_handle(&self) -> io::Result<SteeringHandle> {
        Ok(SteeringHandle {
            fd: Uninherited::new(self.main.try_clone()?.into()),
        })
    }
}
