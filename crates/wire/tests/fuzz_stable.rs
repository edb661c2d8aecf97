//! The `packet_parse` fuzz target's body run on the stable toolchain, so `cargo test` covers it
//! without cargo-fuzz or nightly: over the seed corpus (if generated), every RoCEv2 packet of
//! the captures, mutations of them, and pseudo-random inputs. Set `SOFTRDMA_FUZZ_ITERS` to run
//! more random iterations (default 20000) and `SOFTRDMA_FUZZ_SEED` to vary them.

mod common;

#[allow(unreachable_pub)] // `pub` for the fuzz binary
#[path = "../../../fuzz/body/packet_parse.rs"]
mod body;

#[allow(unreachable_pub)]
#[path = "../../../fuzz/body/stable.rs"]
mod stable;
use stable::{env_u64, Rng};

#[test]
fn fuzz_body_on_corpus_captures_and_random_inputs() {
    // The seed corpus, if `cargo run -p softrdma-wire --example fuzz_seed_corpus` made one.
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/packet_parse");
    if let Ok(dir) = std::fs::read_dir(&corpus) {
        for entry in dir.flatten() {
            if let Ok(bytes) = std::fs::read(entry.path()) {
                body::packet_parse(&bytes);
            }
        }
    }
    let seeds: Vec<Vec<u8>> = common::CAPTURES
        .iter()
        .flat_map(|name| common::roce_packets(name))
        .map(|p| p.ip)
        .collect();
    for s in &seeds {
        body::packet_parse(s);
        body::packet_parse(&s[20 + 8..]);
    }
    let mut rng = Rng(env_u64("SOFTRDMA_FUZZ_SEED", 0x5eed_50f7_4d3a) | 1);
    for _ in 0..env_u64("SOFTRDMA_FUZZ_ITERS", 20_000) {
        let mut input = if rng.below(4) == 0 {
            let len = rng.below(200);
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            let start = if rng.below(2) == 0 { 0 } else { 28 };
            seed[start..].to_vec()
        };
        for _ in 0..=rng.below(4) {
            if input.is_empty() {
                break;
            }
            let at = rng.below(input.len());
            match rng.below(3) {
                0 => input[at] ^= 1 << rng.below(8),
                1 => input[at] = rng.next() as u8,
                _ => input.truncate(at),
            }
        }
        body::packet_parse(&input);
    }
}
