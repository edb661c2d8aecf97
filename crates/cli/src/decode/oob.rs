//! Rendering of the TCP out-of-band exchanges that existing RDMA tools use to meet: rdma-core's
//! `ibv_rc_pingpong` / `ibv_ud_pingpong` and perftest, both on TCP port 18515.
//!
//! Each application message travels in its own segment in practice (every write is a small
//! `write(2)` on an idle connection), so recognition works per segment and by length: cheap,
//! and wrong only in ways that are harmless for a display (a coalesced segment is shown as text
//! or hex). The formats are described in `shared/rxe-lab/README.md`, "Out-of-band exchange
//! formats".

use std::fmt::Write as _;
use std::net::Ipv6Addr;

/// The TCP port both `ibv_rc_pingpong` and perftest listen on by default.
pub(crate) const OOB_TCP_PORT: u16 = 18515;

/// Longest payload prefix shown as hex or text; the length is always printed in full.
const SHOW_MAX: usize = 120;

/// One line describing a TCP payload: a recognised message with its fields, printable text as a
/// quoted string, or hex.
pub(crate) fn describe(payload: &[u8]) -> String {
    if let Some(s) = pingpong_dest(payload) {
        return s;
    }
    if let Some(s) = perftest_key(payload) {
        return s;
    }
    match payload {
        b"done\0" => return "done (close)".to_owned(),
        [d, 0] if d.is_ascii_digit() => {
            let mtu = match d - b'0' {
                1 => "256",
                2 => "512",
                3 => "1024",
                4 => "2048",
                5 => "4096",
                _ => "?",
            };
            return format!("perftest-mtu {} ({mtu})", char::from(*d));
        }
        _ => {}
    }
    if payload.len() == 16 {
        let text_len = payload.iter().position(|&b| b == 0).unwrap_or(16);
        let (text, pad) = payload.split_at(text_len);
        let versionish = !text.is_empty()
            && text.iter().all(|b| b.is_ascii_digit() || *b == b'.')
            && pad.iter().all(|&b| b == 0);
        if versionish {
            return format!("perftest-version {}", quoted(text));
        }
    }
    if let Ok(b) = <[u8; 4]>::try_from(payload) {
        // perftest's check_sys_data: page size, then cache-line size.
        return format!("be32 {}", u32::from_be_bytes(b));
    }
    if let Ok(b) = <[u8; 8]>::try_from(payload) {
        // perftest's bw report: size and iterations as u64, then three doubles, all big-endian.
        let v = u64::from_be_bytes(b);
        let f = f64::from_bits(v);
        return if v < 1 << 32 {
            format!("be64 {v}")
        } else if f.is_normal() && (1e-9..1e15).contains(&f.abs()) {
            format!("be64 f64 {f}")
        } else {
            format!("be64 {v:#018x}")
        };
    }
    if is_text(payload) {
        quoted(payload)
    } else {
        hex(payload)
    }
}

/// Printable ASCII, allowing NUL terminators and padding.
fn is_text(b: &[u8]) -> bool {
    let end = b.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
    end > 0
        && b[..end]
            .iter()
            .all(|&c| c.is_ascii_graphic() || c == b' ' || c == b'\n' || c == b'\r' || c == b'\t')
}

fn quoted(b: &[u8]) -> String {
    let shown = &b[..b.len().min(SHOW_MAX)];
    let mut s = String::with_capacity(shown.len() + 8);
    s.push('"');
    for &c in shown {
        match c {
            0 => s.push_str("\\0"),
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            c if c.is_ascii_graphic() || c == b' ' => s.push(char::from(c)),
            c => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s.push('"');
    if shown.len() < b.len() {
        s.push('…');
    }
    s
}

fn hex(b: &[u8]) -> String {
    let shown = &b[..b.len().min(SHOW_MAX)];
    let mut s = String::with_capacity(2 * shown.len() + 1);
    for c in shown {
        let _ = write!(s, "{c:02x}");
    }
    if shown.len() < b.len() {
        s.push('…');
    }
    s
}

/// Parses `len` lowercase-or-uppercase hex digits exactly.
fn hex_field(s: &str, len: usize) -> Option<u64> {
    (s.len() == len && s.bytes().all(|c| c.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

/// The text of a fixed-size, NUL-terminated message of `len` bytes.
fn nul_terminated(payload: &[u8], len: usize) -> Option<&str> {
    if payload.len() != len || payload[len - 1] != 0 {
        return None;
    }
    std::str::from_utf8(&payload[..len - 1]).ok()
}

/// `ibv_*_pingpong`: 52 bytes, `"%04x:%06x:%06x:%s"` of LID, QPN, PSN and the 32-hex-digit GID.
fn pingpong_dest(payload: &[u8]) -> Option<String> {
    let text = nul_terminated(payload, 52)?;
    let mut parts = text.split(':');
    let lid = hex_field(parts.next()?, 4)?;
    let qpn = hex_field(parts.next()?, 6)?;
    let psn = hex_field(parts.next()?, 6)?;
    let gid = u128::from_str_radix(parts.next().filter(|g| g.len() == 32)?, 16).ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some(format!(
        "pingpong-dest lid={lid:#x} qpn={qpn:#x} psn={psn:#08x} gid={}",
        Ipv6Addr::from(gid)
    ))
}

/// perftest `ctx_hand_shake` keys: 108 bytes,
/// `lid:out_reads:qpn:psn:rkey:vaddr:` + 16 GID bytes + `srqn:`.
fn perftest_key(payload: &[u8]) -> Option<String> {
    let text = nul_terminated(payload, 108)?;
    let f: Vec<&str> = text.split(':').collect();
    if f.len() != 6 + 16 + 2 || !f[23].is_empty() {
        return None;
    }
    let lid = hex_field(f[0], 4)?;
    let out_reads = hex_field(f[1], 4)?;
    let qpn = hex_field(f[2], 6)?;
    let psn = hex_field(f[3], 6)?;
    let rkey = hex_field(f[4], 8)?;
    let vaddr = hex_field(f[5], 16)?;
    let mut gid = [0u8; 16];
    for (byte, text) in gid.iter_mut().zip(&f[6..22]) {
        *byte = u8::try_from(hex_field(text, 2)?).ok()?;
    }
    let srqn = hex_field(f[22], 8)?;
    Some(format!(
        "perftest-key lid={lid:#x} out_reads={out_reads} qpn={qpn:#x} psn={psn:#08x} \
         rkey={rkey:#x} vaddr={vaddr:#x} gid={} srqn={srqn:#x}",
        Ipv6Addr::from(gid)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_pingpong() {
        let msg = b"0000:000011:c2dac6:00000000000000000000ffff0a58000c\0";
        assert_eq!(
            describe(msg),
            "pingpong-dest lid=0x0 qpn=0x11 psn=0xc2dac6 gid=::ffff:10.88.0.12"
        );
    }

    #[test]
    fn test_perftest() {
        let key = b"0000:0080:000011:928761:00000202:000055fa6b64b000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:58:00:0c:00000000:\0";
        assert_eq!(key.len(), 108);
        assert_eq!(
            describe(key),
            "perftest-key lid=0x0 out_reads=128 qpn=0x11 psn=0x928761 rkey=0x202 \
             vaddr=0x55fa6b64b000 gid=::ffff:10.88.0.12 srqn=0x0"
        );
        assert_eq!(
            describe(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"),
            "perftest-version \"6.06\""
        );
        assert_eq!(describe(b"3\0"), "perftest-mtu 3 (1024)");
        assert_eq!(describe(&[0, 0, 0x10, 0]), "be32 4096");
        assert_eq!(describe(&0x14u64.to_be_bytes()), "be64 20");
        assert_eq!(describe(&5.25f64.to_be_bytes()), "be64 f64 5.25");
        assert_eq!(describe(b"done\0"), "done (close)");
    }

    #[test]
    fn test_fallbacks() {
        assert_eq!(describe(b"hello \"x\"\n"), "\"hello \\\"x\\\"\\n\"");
        assert_eq!(describe(&[0xde, 0xad, 0xbe]), "deadbe");
        assert_eq!(describe(&[0; 3]), "000000");
        assert!(describe(&[0x41; 500]).ends_with('…'));
        // Almost a key, but a field is not hex: shown as text.
        let mut key = *b"0000:0080:000011:928761:00000202:000055fa6b64b000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:58:00:0c:00000000:\0";
        key[0] = b'g';
        assert!(describe(&key).starts_with("\"g000:"));
    }
}
