//! The `engine_wr_packet` fuzz target's body run on the stable toolchain, so `cargo test`
//! covers it without cargo-fuzz or nightly: pseudo-random scripts (and the cargo-fuzz corpus,
//! if one was kept) drive two engines with hostile work requests and damaged or forged
//! packets (see `fuzz/body/engine_wr_packet.rs`). `SOFTRDMA_FUZZ_ITERS` sets the number of
//! scripts (default 300), `SOFTRDMA_FUZZ_SEED` varies them.

#[allow(unreachable_pub)] // `pub` for the fuzz binary
#[path = "../../../fuzz/body/engine_wr_packet.rs"]
mod body;

#[allow(unreachable_pub)]
#[path = "../../../fuzz/body/stable.rs"]
mod stable;
use stable::{env_u64, Rng};

#[test]
fn fuzz_body_on_corpus_and_random_scripts() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/engine_wr_packet");
    if let Ok(dir) = std::fs::read_dir(&corpus) {
        for entry in dir.flatten() {
            if let Ok(bytes) = std::fs::read(entry.path()) {
                body::engine_wr_packet(&bytes);
            }
        }
    }
    let seed = env_u64("SOFTRDMA_FUZZ_SEED", 0x0e61_1e5c_41b7) | 1;
    let mut rng = Rng(seed);
    for n in 0..env_u64("SOFTRDMA_FUZZ_ITERS", 300) {
        let len = 64 + (rng.next() % 2048) as usize;
        let input: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let r = std::panic::catch_unwind(|| body::engine_wr_packet(&input));
        if let Err(e) = r {
            let path = std::env::temp_dir().join(format!("engine_wr_packet-crash-{seed:x}-{n}"));
            let _ = std::fs::write(&path, &input);
            eprintln!(
                "input {n} (seed {seed:#x}) failed; saved to {}",
                path.display()
            );
            std::panic::resume_unwind(e);
        }
    }
}
