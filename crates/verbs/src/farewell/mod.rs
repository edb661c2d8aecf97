//! Farewells: what a process's connection manager would send if the process ended now, kept
//! where another process finds it, so that a peer of a process that is killed learns at once
//! that its connections are gone — as the kernel's CM tells it, which destroys a dead
//! process's ids (one DREQ for an established connection, a REJ for one in its handshake).
//! softrdma's CM lives in the process, so without this a peer waits for a DREQ nobody sends.
//!
//! # The file
//! A device's connection manager keeps one file in the [run directory](crate::run_directory)
//! while it has something to say (`farewell-<ip>-<pid>-<n>`), and holds an
//! open-file-description lock on its first byte for as long as the process lives: the kernel
//! drops that lock when the process dies, however it dies. The file is text, one fixed-width
//! line per connection (`cat` it):
//!
//! ```text
//! softrdma-farewells 1 ip 127.0.0.1  net 4026531840  boot 3f2b…  pid 4711
//! mad ::ffff:127.0.0.2  000001 0107…   (destination, its QP, the 256-byte MAD in hex)
//! ---                                   (a free line)
//! ```
//!
//! # Who speaks
//! [`speak_for_the_dead`] finds files whose lock nobody holds, takes the lock, sends each MAD
//! as a UD SEND to the destination's QP 1 from the dead device's address, and removes the
//! file. Two callers: `softrdma exec`, which waits for its program and speaks for it when it
//! ends (so even a process alone on its address has someone), and every device sharing an
//! address, whose upkeep thread speaks for the members it finds dead (within 50 ms). Whoever
//! takes the lock first speaks; the others find the file gone.
//!
//! Not covered: a process whose `softrdma exec` was killed too (`kill -9` of the exec process
//! takes its program with it), and that had no living neighbour on its address; a program
//! using the Rust API without `exec` and alone on its address. Their files stay until the
//! next `exec` program ends or a device on their address finds them, and are said then (a
//! DREQ for a connection the peer no longer knows is answered and forgotten). Files of other
//! network namespaces and of earlier boots are never said: the first are left to a process
//! there, the second are removed.

pub(crate) mod file;
mod supervise;

pub use file::{speak_for_the_dead, Farewell, Farewells};
pub use supervise::{exit_as, run_and_speak};
