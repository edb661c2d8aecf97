//! Every RoCEv2 packet of the bundled Linux rxe captures (testdata/conformance) against the
//! wire crate: parse, byte-exact emit of the whole packet and of each extension header, ICRC
//! computation from raw headers and from an [`IcrcContext`], and recovery of the sender's IPv4
//! identification. These are the interoperability ground truth: if rxe wrote it, we must read
//! and reproduce it bit for bit.

mod common;

use std::collections::BTreeMap;

use common::{roce_packets, CAPTURES};
use softrdma_wire::packet::stored_icrc;
use softrdma_wire::{
    icrc, Aeth, AtomicAckEth, AtomicEth, Deth, Feth, Headers, Ieth, ImmDt, PacketRepr, Reth,
    UdpHeader, ICRC_LEN,
};

/// RoCEv2 packets per capture (testdata/conformance/INDEX.md).
const ROCE_COUNTS: [usize; 17] = [
    100, 108, 20, 100, 100, 100, 41, 60, 73, 20, 44, 60, 40, 20, 50, 124, 104,
];

#[test]
fn test_capture_counts() {
    for (name, want) in CAPTURES.iter().zip(ROCE_COUNTS) {
        assert_eq!(roce_packets(name).len(), want, "{name}");
    }
}

#[test]
fn test_parse_emit_round_trip() {
    let mut opcodes: BTreeMap<&str, usize> = BTreeMap::new();
    for name in CAPTURES {
        for p in roce_packets(name) {
            let at = format!("{} #{}", p.capture, p.index);
            let bytes = p.transport();
            let udp = UdpHeader::parse(&p.ip[p.ip_header_len..]).unwrap();
            assert_eq!(usize::from(udp.len), bytes.len() + UdpHeader::LEN, "{at}");
            let repr = PacketRepr::parse(bytes).unwrap_or_else(|e| panic!("{at}: {e}"));
            *opcodes.entry(repr.bth.opcode.name()).or_default() += 1;

            // The whole packet, ICRC slot aside, is reproduced exactly.
            assert_eq!(repr.buffer_len(), bytes.len(), "{at}");
            let mut out = vec![0xa5; repr.buffer_len()];
            assert_eq!(repr.emit(&mut out), bytes.len(), "{at}");
            let n = bytes.len() - ICRC_LEN;
            assert_eq!(out[..n], bytes[..n], "{at}: emit differs");
            assert_eq!(out[n..], [0; ICRC_LEN], "{at}: ICRC slot not zeroed");

            // ...and so is each extension header on its own.
            let headers = repr.bth.opcode.info().unwrap().headers;
            for (which, len) in Headers::ORDER {
                let Some(off) = headers.offset_of(which) else {
                    continue;
                };
                let mut slot = vec![0u8; len];
                match which {
                    Headers::DETH => repr.ext.deth.map(|h: Deth| h.emit(&mut slot)),
                    Headers::FETH => repr.ext.feth.map(|h: Feth| h.emit(&mut slot)),
                    Headers::RETH => repr.ext.reth.map(|h: Reth| h.emit(&mut slot)),
                    Headers::ATOMIC_ETH => {
                        repr.ext.atomic_eth.map(|h: AtomicEth| h.emit(&mut slot))
                    }
                    Headers::AETH => repr.ext.aeth.map(|h: Aeth| h.emit(&mut slot)),
                    Headers::ATOMIC_ACK_ETH => repr
                        .ext
                        .atomic_ack_eth
                        .map(|h: AtomicAckEth| h.emit(&mut slot)),
                    Headers::IMM_DT => repr.ext.imm_dt.map(|h: ImmDt| h.emit(&mut slot)),
                    Headers::IETH => repr.ext.ieth.map(|h: Ieth| h.emit(&mut slot)),
                    _ => Some(()),
                }
                .unwrap_or_else(|| panic!("{at}: {which:?} missing"));
                assert_eq!(slot, bytes[off..off + len], "{at}: {which:?}");
            }

            // The ICRC from the context reproduces the stored trailer...
            p.ctx.fill(&mut out).unwrap();
            assert_eq!(out, bytes, "{at}: ICRC from context");
            p.ctx.verify(bytes).unwrap();
            // ...as does the ICRC over the raw captured headers.
            let ip_header = &p.ip[..p.ip_header_len];
            let raw = icrc::compute_raw(ip_header, p.udp_header(), &bytes[..n]).unwrap();
            assert_eq!(Some(raw), stored_icrc(bytes), "{at}: raw ICRC");

            // A receiver that cannot see the IP header recovers the real identification.
            assert_eq!(p.ctx.verify_unknown_id(bytes), Ok(p.ctx.ipv4_id), "{at}");
        }
    }
    // The captures cover these opcodes; a change in what they contain should be noticed.
    for op in [
        "RC_SEND_FIRST",
        "RC_SEND_MIDDLE",
        "RC_SEND_LAST",
        "RC_SEND_ONLY",
        "RC_RDMA_WRITE_FIRST",
        "RC_RDMA_WRITE_MIDDLE",
        "RC_RDMA_WRITE_LAST",
        "RC_RDMA_READ_REQUEST",
        "RC_RDMA_READ_RESPONSE_FIRST",
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        "RC_RDMA_READ_RESPONSE_LAST",
        "RC_ACKNOWLEDGE",
        "RC_ATOMIC_ACKNOWLEDGE",
        "RC_FETCH_ADD",
        "UD_SEND_ONLY",
    ] {
        assert!(opcodes.contains_key(op), "{op} not seen; seen: {opcodes:?}");
    }
}

#[test]
fn test_single_bit_flips_are_detected() {
    // Every bit of one packet of each capture, flipped alone, breaks the ICRC — except the
    // bits the ICRC masks (BTH byte 4: FECN, BECN, reserved), which must not.
    for name in CAPTURES {
        let p = &roce_packets(name)[0];
        let bytes = p.transport();
        for bit in 0..(bytes.len() - ICRC_LEN) * 8 {
            let mut copy = bytes.to_vec();
            copy[bit / 8] ^= 1 << (bit % 8);
            let masked = bit / 8 == softrdma_wire::Bth::FECN_BECN_OFFSET;
            assert_eq!(p.ctx.verify(&copy).is_ok(), masked, "{name} bit {bit}");
        }
    }
}
