//! cargo-fuzz target: capture files through the CLI's capture reader and `softrdma decode`.
//! The checks live in `../body/pcap_read.rs`, shared with the stable-toolchain harness; the
//! reader and decoder are compiled from the CLI's sources (a binary crate has no library to
//! link against).
#![no_main]
#![allow(dead_code)]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/cli/src/decode/mod.rs"]
mod decode;

#[path = "../body/pcap_read.rs"]
mod body;

fuzz_target!(|data: &[u8]| body::pcap_read(data));
