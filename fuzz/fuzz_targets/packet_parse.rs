//! cargo-fuzz target: arbitrary bytes through the RoCEv2 parsers, printer and ICRC code.
//! The checks live in `../body/packet_parse.rs`, shared with the stable-toolchain harness.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/packet_parse.rs"]
mod body;

fuzz_target!(|data: &[u8]| body::packet_parse(data));
