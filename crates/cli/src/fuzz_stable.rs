//! The `pcap_read` fuzz target's body run on the stable toolchain (`cargo test`), over the
//! bundled captures, mutations of them (bit flips, extreme length and type fields, cuts,
//! spliced records) and pseudo-random files with valid magic numbers. `SOFTRDMA_FUZZ_ITERS`
//! sets the number of mutated inputs (default 3000), `SOFTRDMA_FUZZ_SEED` varies them.

use std::path::Path;

use crate::fuzz_pcap_read::pcap_read;

#[allow(unreachable_pub)]
#[path = "../../../fuzz/body/stable.rs"]
mod stable;
use stable::{env_u64, Rng};

/// File headers of every format and link type the reader knows, and some it does not.
fn headers() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for (magic, link) in [
        (0xa1b2_c3d4u32, 1u32),
        (0xa1b2_3c4d, 101),
        (0xa1b2_c3d4, 113),
        (0xa1b2_c3d4, 276),
        (0xa1b2_c3d4, 0),
        (0xa1b2_c3d4, 147),
    ] {
        let mut h = Vec::new();
        for x in [magic, 0x0004_0002, 0, 0, 65535, link] {
            h.extend(x.to_le_bytes());
        }
        v.push(h.clone());
        // The same, big-endian.
        let mut be = Vec::new();
        for x in [magic, 0x0002_0004, 0, 0, 65535, link] {
            be.extend(x.to_be_bytes());
        }
        v.push(be);
    }
    // A pcapng section header block.
    let mut shb = Vec::new();
    for x in [
        0x0a0d_0d0au32,
        28,
        0x1a2b_3c4d,
        0x0000_0001,
        0xffff_ffff,
        0xffff_ffff,
        28,
    ] {
        shb.extend(x.to_le_bytes());
    }
    v.push(shb);
    v
}

#[test]
fn fuzz_body_on_captures_mutations_and_random_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance");
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .expect("testdata/conformance")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pcap"))
        .map(|e| std::fs::read(e.path()).expect("capture"))
        .collect();
    assert!(seeds.len() >= 5);
    for s in &seeds {
        pcap_read(s);
    }
    // The cargo-fuzz corpus, if a run left one.
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/pcap_read");
    if let Ok(dir) = std::fs::read_dir(&corpus) {
        for entry in dir.flatten() {
            if let Ok(bytes) = std::fs::read(entry.path()) {
                pcap_read(&bytes);
            }
        }
    }
    let heads = headers();
    let seed = env_u64("SOFTRDMA_FUZZ_SEED", 0x9ca9_f00d) | 1;
    let mut rng = Rng(seed);
    for n in 0..env_u64("SOFTRDMA_FUZZ_ITERS", 3000) {
        let mut input = match rng.below(4) {
            0 => {
                let mut f = heads[rng.below(heads.len())].clone();
                let len = rng.below(400);
                f.extend((0..len).map(|_| rng.next() as u8));
                f
            }
            _ => {
                // A piece of a real capture: its file header and a window of records.
                let s = &seeds[rng.below(seeds.len())];
                let start = 24 + rng.below(s.len().saturating_sub(24) / 2);
                let len = rng.below(4000);
                let mut f = s[..24].to_vec();
                f.extend_from_slice(&s[start.min(s.len())..(start + len).min(s.len())]);
                f
            }
        };
        for _ in 0..=rng.below(6) {
            if input.is_empty() {
                break;
            }
            let at = rng.below(input.len());
            match rng.below(5) {
                0 => input[at] ^= 1 << rng.below(8),
                1 => input[at] = rng.next() as u8,
                2 => {
                    let v = [0u32, 0xffff_ffff, 0x7fff_ffff, 262_145, 16, 3][rng.below(6)];
                    for (k, b) in v.to_le_bytes().iter().enumerate() {
                        if let Some(x) = input.get_mut(at + k) {
                            *x = *b;
                        }
                    }
                }
                3 => input.truncate(at),
                _ => {
                    let s = &seeds[rng.below(seeds.len())];
                    let from = rng.below(s.len());
                    let piece = s[from..(from + rng.below(200)).min(s.len())].to_vec();
                    input.splice(at..at, piece);
                }
            }
        }
        let r = std::panic::catch_unwind(|| pcap_read(&input));
        if let Err(e) = r {
            let path = std::env::temp_dir().join(format!("pcap_read-crash-{seed:x}-{n}"));
            let _ = std::fs::write(&path, &input);
            eprintln!(
                "input {n} (seed {seed:#x}) failed; saved to {}",
                path.display()
            );
            std::panic::resume_unwind(e);
        }
    }
}
