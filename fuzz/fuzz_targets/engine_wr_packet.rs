//! cargo-fuzz target: two transport engines driven by a script of hostile work requests and
//! damaged, forged, dropped and duplicated packets. The checks live in
//! `../body/engine_wr_packet.rs`, shared with the stable-toolchain harness.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../body/engine_wr_packet.rs"]
mod body;

fuzz_target!(|data: &[u8]| body::engine_wr_packet(data));
