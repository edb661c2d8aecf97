//! Throughput of the per-packet wire work: ICRC computation, parse, and emit.
#![allow(missing_docs)] // criterion macros generate undocumented items
//! Run with `cargo bench -p softrdma-wire`; criterion reports bytes/s.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use softrdma_wire::{Bth, ExtHeaders, IcrcContext, Opcode, PacketRepr, Psn, Reth};

fn packet(payload_len: usize) -> Vec<u8> {
    let payload = vec![0x5a; payload_len];
    let repr = PacketRepr {
        bth: Bth::new(Opcode::RC_RDMA_WRITE_FIRST, 0x11, Psn::new(7)),
        ext: ExtHeaders {
            reth: Some(Reth {
                va: 0x1000,
                rkey: 0x200,
                dma_len: 1 << 20,
            }),
            ..Default::default()
        },
        payload: &payload,
    };
    let mut buf = vec![0; repr.buffer_len()];
    repr.emit(&mut buf);
    buf
}

fn ctx() -> IcrcContext {
    IcrcContext::new(
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        0xc000,
        4791,
    )
}

fn bench_icrc(c: &mut Criterion) {
    let mut g = c.benchmark_group("icrc");
    // Built once: parsing its addresses took half of what a short packet's ICRC was timed at.
    let ctx = ctx();
    for len in [8usize, 64, 1024, 4096] {
        let mut p = packet(len);
        g.throughput(Throughput::Bytes(p.len() as u64));
        g.bench_function(format!("fill/{len}"), |b| {
            b.iter(|| ctx.fill(black_box(&mut p)))
        });
        ctx.fill(&mut p).unwrap();
        g.bench_function(format!("verify_unknown_id/{len}"), |b| {
            b.iter(|| ctx.verify_unknown_id(black_box(&p)))
        });
        let rxe = IcrcContext {
            ipv4_id: 0x1f88,
            ..ctx
        };
        let mut q = p.clone();
        rxe.fill(&mut q).unwrap();
        g.bench_function(format!("verify_unknown_id_nonzero/{len}"), |b| {
            b.iter(|| ctx.verify_unknown_id(black_box(&q)))
        });
    }
    g.finish();
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("packet");
    for len in [0usize, 1024, 4096] {
        let p = packet(len);
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("parse/{len}"), |b| {
            b.iter(|| PacketRepr::parse(black_box(&p)))
        });
        let repr = PacketRepr::parse(&p).unwrap();
        let mut out = vec![0; p.len()];
        g.bench_function(format!("emit/{len}"), |b| {
            b.iter(|| black_box(&repr).emit(&mut out))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_icrc, bench_parse);
criterion_main!(benches);
