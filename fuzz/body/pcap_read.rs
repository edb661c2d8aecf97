//! The body of the `pcap_read` fuzz target, shared by cargo-fuzz (`fuzz_targets/`) and the
//! stable-toolchain harness in `crates/cli/src/fuzz_stable.rs`.
//!
//! The input is a capture file. It goes through the capture reader on its own, then through
//! `softrdma decode` exactly as the command runs it (with and without `--oob`), and the
//! reader's and the decoder's contracts are checked: no panic; no record larger than
//! `MAX_RECORD_LEN`; records numbered without gaps; the summary line is always the last line
//! written once the file header was read; its counts are consistent (`roce <= packets`,
//! `icrc_ok + icrc_bad <= roce`, `malformed <= packets`); damage after the file header is
//! reported as one malformed record, never as a failure to decode.

use crate::decode::decode;
use softrdma_wire::pcap::{CaptureError, CaptureReader, MAX_RECORD_LEN};

/// Runs the checks on one input. Panics only if a contract above is broken.
pub fn pcap_read(data: &[u8]) {
    let readable = match CaptureReader::new(data) {
        Ok(mut reader) => {
            let mut records = 0u64;
            loop {
                match reader.next_record() {
                    Ok(Some(r)) => {
                        records += 1;
                        assert!(r.data.len() <= MAX_RECORD_LEN);
                        // A record shorter than captured is reported, never an error.
                        let _ = r.is_truncated();
                        let _ = r.link.network_layer(r.data);
                        let _ = r.ts.to_string();
                    }
                    Ok(None) => break,
                    Err(e) => {
                        assert!(
                            !matches!(e, CaptureError::Io(_)),
                            "in-memory input cannot fail with I/O errors: {e}"
                        );
                        let _ = e.to_string();
                        break;
                    }
                }
                // Every record consumes at least its header: a bound on the loop.
                assert!(
                    records <= data.len() as u64 / 12 + 1,
                    "records out of nothing"
                );
            }
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    };
    for oob in [false, true] {
        let mut out = Vec::new();
        match decode(data, oob, false, &mut out) {
            Ok(d) => {
                assert!(readable, "decode read a file the reader refused");
                let s = d.summary;
                assert!(s.roce <= s.packets && s.malformed <= s.packets, "{s}");
                assert!(s.icrc_ok + s.icrc_bad <= s.roce, "{s}");
                if d.damage.is_some() {
                    assert!(s.malformed >= 1, "{s}");
                }
                let text = String::from_utf8(out).expect("decode writes UTF-8");
                let last = text.lines().last().expect("a summary line");
                assert_eq!(last, s.to_string());
                assert!(text.lines().count() as u64 <= s.packets + 1);
            }
            Err(_) => assert!(!readable, "decode refused a file the reader read"),
        }
    }
}
