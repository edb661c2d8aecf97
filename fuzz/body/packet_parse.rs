//! The body of the `packet_parse` fuzz target, shared by cargo-fuzz (`fuzz_targets/`) and the
//! stable-toolchain harness in `crates/wire/tests/fuzz_stable.rs`, so both run the same checks.
//!
//! Input bytes are read three ways — an Ethernet frame, an IP packet, a bare RoCEv2 UDP
//! payload — and driven through every parser, the pretty printer and the ICRC code. Beyond
//! "does not panic", it asserts the invariants that must hold for any input that parses:
//! re-emitting a parsed packet and parsing again gives the same packet (pad count normalised:
//! emit derives it from the payload length), and an ICRC filled in by us verifies and yields
//! back the IPv4 identification it was computed with. Payloads (and raw inputs) are also
//! read as management datagrams: a CM MAD that parses re-emits to one that parses the same.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use softrdma_wire::ip::parse_ethernet;
use softrdma_wire::mad::cm::CmMad;
use softrdma_wire::mad::cma::CmaHeader;
use softrdma_wire::{icrc, pad_for, IcrcContext, IpHeader, IpPacket, PacketRepr};

/// Runs the checks on one input. Panics only if an invariant of `softrdma-wire` is broken.
pub fn packet_parse(data: &[u8]) {
    if let Ok((_, rest)) = parse_ethernet(data) {
        ip_packet(rest);
    }
    ip_packet(data);
    let v4 = IcrcContext::new(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        0xc000,
        4791,
    );
    transport(
        data,
        IcrcContext {
            ipv4_id: 0x1f88,
            ..v4
        },
    );
    let v6 = IcrcContext::new(
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        0xc001,
        4791,
    );
    transport(data, v6);
    mad(data);
}

/// The MAD parsers and printer: no panic, and emit → parse is the identity on what parsed.
fn mad(data: &[u8]) {
    let _ = softrdma_wire::mad::describe(data).to_string();
    let _ = softrdma_wire::mad::unmatched_response(data);
    let _ = CmaHeader::parse(data);
    let Ok(parsed) = CmMad::parse(data) else {
        return;
    };
    let again = CmMad::parse(&parsed.to_bytes()).expect("an emitted CM MAD parses");
    assert_eq!(
        again, parsed,
        "parse(emit(parse(x))) == parse(x) for CM MADs"
    );
}

fn ip_packet(data: &[u8]) {
    let Ok(ip) = IpPacket::parse(data) else {
        return;
    };
    let _ = ip.ip.ecn();
    let Ok((udp, udp_header, payload)) = ip.udp() else {
        return;
    };
    if payload.len() >= 4 {
        let _ = icrc::compute_raw(ip.ip_header, udp_header, &payload[..payload.len() - 4]);
    }
    let mut ctx = IcrcContext::new(ip.ip.src(), ip.ip.dst(), udp.src_port, udp.dst_port);
    if let IpHeader::V4(h) = ip.ip {
        ctx.ipv4_id = h.id;
        ctx.ipv4_dont_fragment = h.dont_fragment;
    }
    transport(payload, ctx);
}

fn transport(data: &[u8], ctx: IcrcContext) {
    let _ = ctx.verify(data);
    let _ = ctx.verify_unknown_id(data);
    let Ok(repr) = PacketRepr::parse(data) else {
        return;
    };
    let mut line = String::new();
    write!(line, "{repr}").expect("Display of a parsed packet");
    assert!(!line.is_empty());
    mad(repr.payload);

    let mut buf = vec![0xa5; repr.buffer_len()];
    assert_eq!(
        repr.emit(&mut buf),
        buf.len(),
        "emit writes buffer_len bytes"
    );
    let again = PacketRepr::parse(&buf).expect("an emitted packet parses");
    let mut expected = repr;
    expected.bth.pad_count = pad_for(repr.payload.len());
    assert_eq!(again, expected, "parse(emit(parse(x))) == parse(x)");

    let ipv4 = matches!(ctx.src, IpAddr::V4(_)) && matches!(ctx.dst, IpAddr::V4(_));
    if ctx.fill(&mut buf).is_ok() {
        assert_eq!(ctx.verify(&buf), Ok(()), "a filled ICRC verifies");
        let id = if ipv4 { ctx.ipv4_id } else { 0 };
        assert_eq!(
            ctx.verify_unknown_id(&buf),
            Ok(id),
            "identification recovered"
        );
    }
}
