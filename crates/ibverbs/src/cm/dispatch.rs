//! The library's thread that turns softrdma's rdma_cm events into C events: every id's Rust
//! side delivers to one channel, and this thread hands each event to the C channel its id is
//! on when it arrives (see `channel.rs`).

use std::sync::{Once, OnceLock};

use softrdma_rdmacm::EventChannel;

/// The Rust channel every id of the library is created on.
pub(crate) fn rust_channel() -> &'static EventChannel {
    static CH: OnceLock<EventChannel> = OnceLock::new();
    CH.get_or_init(EventChannel::new)
}

/// Starts the thread (once per process).
pub(crate) fn start() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("softrdma-rdmacm".into())
            .spawn(|| loop {
                if let Some(e) = rust_channel().get_event(None) {
                    super::id::deliver(e);
                }
            });
        if let Err(e) = spawned {
            eprintln!("softrdma: cannot start the rdma_cm event thread: {e}");
        }
    });
}
