//! Writes the seed corpus of the `packet_parse` fuzz target from the bundled captures: one IP
//! packet and one bare RoCEv2 payload per distinct (opcode, length), a few dozen small files.
//! The corpus is generated, not committed (`/fuzz/corpus` is in .gitignore).
//!
//! `cargo run -p softrdma-wire --example fuzz_seed_corpus [DIR]` (default `fuzz/corpus/packet_parse`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/packet_parse")
        });
    std::fs::create_dir_all(&dir)?;
    let mut seen = BTreeSet::new();
    let mut written = 0;
    for name in common::CAPTURES {
        for p in common::roce_packets(name) {
            let key = (p.transport()[0], p.ip.len());
            if !seen.insert(key) {
                continue;
            }
            let stem = format!("{}-{:02x}-{}", name.trim_end_matches(".pcap"), key.0, key.1);
            std::fs::write(dir.join(format!("{stem}-ip")), &p.ip)?;
            std::fs::write(dir.join(format!("{stem}-bth")), p.transport())?;
            written += 2;
        }
    }
    println!("wrote {written} seeds to {}", dir.display());
    Ok(())
}
