//! Protection domains as the engine sees them: a number that memory regions, memory windows,
//! queue pairs and shared receive queues carry, and that every access check compares.

/// A protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdHandle(pub u32);
