//! Declares the `softrdma_udp_fallback` cfg, which builds the portable backend on Linux too
//! (`RUSTFLAGS="--cfg softrdma_udp_fallback"`), so the fallback is compiled and tested here.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(softrdma_udp_fallback)");
}
