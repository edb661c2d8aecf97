//! Property tests of the wire format: any well-formed packet survives emit → parse unchanged,
//! its ICRC verifies and yields the identification it was filled with, and no byte sequence —
//! random, or a real packet with damage — makes a parser or the ICRC code panic.

mod common;

use proptest::prelude::*;
use softrdma_wire::ip::parse_ethernet;
use softrdma_wire::{
    icrc, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ExtHeaders, Feth, Headers, IcrcContext, Ieth,
    ImmDt, IpPacket, Opcode, PacketRepr, Payload, Psn, Reth, Syndrome, Xrceth, QPN_MASK,
};

fn known_opcodes() -> Vec<Opcode> {
    (0..=255u8)
        .map(Opcode)
        .filter(|op| op.info().is_some())
        .collect()
}

/// Every extension header with arbitrary (in-range) field values.
fn arb_ext_all() -> impl Strategy<Value = ExtHeaders> {
    (
        (any::<u32>(), any::<u32>(), any::<u8>(), any::<u8>()),
        (any::<u64>(), any::<u32>(), any::<u32>()),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()),
        (any::<u8>(), any::<u32>(), any::<u64>()),
        (any::<u32>(), any::<u32>()),
    )
        .prop_map(|(d, r, a, k, i)| ExtHeaders {
            deth: Some(Deth {
                qkey: d.0,
                src_qpn: d.1 & QPN_MASK,
            }),
            xrceth: Some(Xrceth {
                srqn: d.1.rotate_left(8) & QPN_MASK,
            }),
            feth: Some(Feth {
                selectivity: d.2 & 0x3,
                placement: d.3 & 0xf,
            }),
            reth: Some(Reth {
                va: r.0,
                rkey: r.1,
                dma_len: r.2,
            }),
            atomic_eth: Some(AtomicEth {
                va: a.0,
                rkey: a.1,
                swap_add: a.2,
                compare: a.3,
            }),
            aeth: Some(Aeth {
                syndrome: Syndrome::from_byte(k.0),
                msn: k.1 & QPN_MASK,
            }),
            atomic_ack_eth: Some(AtomicAckEth { orig: k.2 }),
            imm_dt: Some(ImmDt { imm: i.0 }),
            ieth: Some(Ieth { rkey: i.1 }),
        })
}

/// A packet of a known opcode: exactly the headers its opcode carries, a payload that its
/// payload rule allows, and a BTH whose pad count matches (as emit writes it).
fn arb_packet() -> impl Strategy<Value = (Bth, ExtHeaders, Vec<u8>)> {
    (
        prop::sample::select(known_opcodes()),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (any::<u16>(), any::<u32>(), any::<u32>()),
        arb_ext_all(),
        prop::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(|(opcode, flags, (pkey, qpn, psn), all, mut payload)| {
            let info = opcode.info().expect("known opcode");
            match info.payload {
                Payload::None => payload.clear(),
                Payload::Fixed(n) => payload.resize(n, 0x5a),
                Payload::Variable => {}
            }
            let h = info.headers;
            let ext = ExtHeaders {
                deth: all.deth.filter(|_| h.contains(Headers::DETH)),
                xrceth: all.xrceth.filter(|_| h.contains(Headers::XRCETH)),
                feth: all.feth.filter(|_| h.contains(Headers::FETH)),
                reth: all.reth.filter(|_| h.contains(Headers::RETH)),
                atomic_eth: all.atomic_eth.filter(|_| h.contains(Headers::ATOMIC_ETH)),
                aeth: all.aeth.filter(|_| h.contains(Headers::AETH)),
                atomic_ack_eth: all
                    .atomic_ack_eth
                    .filter(|_| h.contains(Headers::ATOMIC_ACK_ETH)),
                imm_dt: all.imm_dt.filter(|_| h.contains(Headers::IMM_DT)),
                ieth: all.ieth.filter(|_| h.contains(Headers::IETH)),
            };
            let mut bth = Bth::new(opcode, qpn, Psn::new(psn));
            (bth.solicited, bth.migreq, bth.fecn, bth.becn, bth.ack_req) = flags;
            bth.pkey = pkey;
            bth.pad_count = softrdma_wire::pad_for(payload.len());
            (bth, ext, payload)
        })
}

fn arb_ctx() -> impl Strategy<Value = IcrcContext> {
    (
        any::<bool>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u16>(),
        any::<u16>(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(v6, s, d, sport, dport, id, df)| {
            let (src, dst) = if v6 {
                (
                    std::net::Ipv6Addr::from(s).into(),
                    std::net::Ipv6Addr::from(d).into(),
                )
            } else {
                (
                    std::net::Ipv4Addr::new(s[0], s[1], s[2], s[3]).into(),
                    std::net::Ipv4Addr::new(d[0], d[1], d[2], d[3]).into(),
                )
            };
            IcrcContext {
                src,
                dst,
                src_port: sport,
                dst_port: dport,
                ipv4_id: if v6 { 0 } else { id },
                ipv4_dont_fragment: df,
            }
        })
}

/// Real packets from the captures, as seeds for damage.
fn capture_packets() -> Vec<Vec<u8>> {
    common::CAPTURES
        .iter()
        .flat_map(|name| common::roce_packets(name))
        .map(|p| p.ip)
        .collect()
}

/// Runs every parser and the ICRC code over `bytes` read as a frame, an IP packet and a
/// RoCEv2 UDP payload. Only panics matter; results are ignored.
fn exercise(bytes: &[u8], ctx: &IcrcContext) {
    if let Ok((_, rest)) = parse_ethernet(bytes) {
        let _ = IpPacket::parse(rest);
    }
    if let Ok(ip) = IpPacket::parse(bytes) {
        if let Ok((_, hdr, payload)) = ip.udp() {
            let _ = icrc::compute_raw(ip.ip_header, hdr, payload);
            let _ = PacketRepr::parse(payload).map(|p| p.to_string());
        }
    }
    if let Ok(p) = PacketRepr::parse(bytes) {
        let _ = p.to_string();
    }
    let _ = ctx.verify_unknown_id(bytes);
    let _ = ctx.verify(bytes);
    let split = bytes.len() / 3;
    let _ = icrc::compute_raw(bytes, &bytes[split..], &bytes[2 * split..]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn emit_then_parse_is_identity((bth, ext, payload) in arb_packet(), ctx in arb_ctx()) {
        let repr = PacketRepr { bth, ext, payload: &payload };
        let mut buf = vec![0xee; repr.buffer_len()];
        prop_assert_eq!(repr.emit(&mut buf), buf.len());
        prop_assert_eq!(buf.len() % 4, 0);
        prop_assert_eq!(PacketRepr::parse(&buf), Ok(repr));
        // The ICRC fills, verifies, and gives back the identification it was filled with.
        ctx.fill(&mut buf).unwrap();
        prop_assert_eq!(ctx.verify(&buf), Ok(()));
        prop_assert_eq!(ctx.verify_unknown_id(&buf), Ok(ctx.ipv4_id));
        prop_assert_eq!(PacketRepr::parse(&buf), Ok(repr));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1600), ctx in arb_ctx()) {
        exercise(&bytes, &ctx);
    }

    #[test]
    fn arbitrary_bytes_after_valid_prefix_never_panic(
        opcode in any::<u8>(),
        rest in prop::collection::vec(any::<u8>(), 0..128),
        ctx in arb_ctx(),
    ) {
        // A plausible BTH (TVer 0) so parsing reaches the extension headers and payload rules.
        let mut bytes = vec![opcode, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1];
        bytes[1] = rest.first().copied().unwrap_or(0) & 0xf0;
        bytes.extend(&rest);
        exercise(&bytes, &ctx);
    }
}

#[test]
fn damaged_capture_packets_never_panic() {
    // Deterministic damage to real packets: every truncation point, and byte overwrites at
    // every header offset, read as IP packets (so the length fields disagree in every way).
    let ctx = IcrcContext::new(
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        0xc000,
        4791,
    );
    let mut seen = std::collections::HashSet::new();
    for ip in capture_packets() {
        // One of each length is enough: the headers are what differ.
        if !seen.insert((ip.len(), ip[20 + 8])) {
            continue;
        }
        for cut in 0..ip.len().min(120) {
            exercise(&ip[..cut], &ctx);
            exercise(&ip[cut..], &ctx);
        }
        for at in 0..ip.len().min(90) {
            for v in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut copy = ip.clone();
                copy[at] = v;
                exercise(&copy, &ctx);
            }
        }
    }
}
