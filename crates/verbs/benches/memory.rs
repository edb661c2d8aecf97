//! What the sound region memory model costs per byte. A remote peer may write a region while
//! the application reads it, so every copy in or out of a region is a loop of 8-byte atomic
//! loads or stores (see the `memory` module), which the compiler cannot turn into vector
//! moves. The engine pays one such copy per payload byte on each side: the gather of what it
//! sends, the scatter of what it receives. The plain slice copy beside it is what a
//! `memcpy` does with the same bytes. Run with `cargo bench -p softrdma --bench memory`
//! (it opens a device on 127.0.0.98, so it needs a free UDP port 4791 there).
#![allow(missing_docs)] // criterion macros generate undocumented items

use std::net::{IpAddr, Ipv4Addr};

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use softrdma::{AccessFlags, Device, DeviceConfig};

fn bench(c: &mut Criterion) {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 98));
    let device = Device::open(DeviceConfig::new(ip)).expect("a device on 127.0.0.98");
    let pd = device.alloc_pd();
    let mut g = c.benchmark_group("region_copy");
    for len in [4096usize, 65536] {
        let mr = pd
            .reg_mr(len, AccessFlags::LOCAL_WRITE)
            .expect("register the region");
        let src: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut dst = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("read/{len}"), |b| {
            b.iter(|| mr.read(0, black_box(&mut dst)).unwrap())
        });
        g.bench_function(format!("write/{len}"), |b| {
            b.iter(|| mr.write(0, black_box(&src)).unwrap())
        });
        g.bench_function(format!("memcpy/{len}"), |b| {
            b.iter(|| black_box(&mut dst).copy_from_slice(black_box(&src)))
        });
        // The application's own memory (`reg_mr_raw`, every `ibv_reg_mr`): copied through
        // the fault-catching primitives, so that memory unmapped under its registration gives
        // an access error instead of a crash.
        let mut own = vec![0u64; len / 8];
        // SAFETY: `own` outlives `raw` (dropped at the end of this iteration, before it) and
        // is touched only through it meanwhile.
        let raw = unsafe { pd.reg_mr_raw(own.as_mut_ptr().cast(), len, AccessFlags::LOCAL_WRITE) }
            .expect("register the application's memory");
        g.bench_function(format!("raw_read/{len}"), |b| {
            b.iter(|| raw.read(0, black_box(&mut dst)).unwrap())
        });
        g.bench_function(format!("raw_write/{len}"), |b| {
            b.iter(|| raw.write(0, black_box(&src)).unwrap())
        });
        drop(raw);
    }
    g.finish();
    // The CRC-32 of a payload on each side, as the data path pays it: gathered and hashed in
    // one pass on the way out (`read_crc32`), checked where the kernel placed it on the way
    // in (`crc32`, no copy); beside them the two passes the data path made before (copy,
    // then crc32fast over the copy; crc32fast over the received bytes, then the copy in),
    // and crc32fast alone over a plain slice.
    let mut g = c.benchmark_group("region_crc");
    for len in [4096usize, 65536] {
        let mr = pd
            .reg_mr(len, AccessFlags::LOCAL_WRITE)
            .expect("register the region");
        let src: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        mr.write(0, &src).unwrap();
        let mut dst = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("send_gather_and_crc/{len}"), |b| {
            b.iter(|| mr.read_crc32(0, black_box(&mut dst)).unwrap())
        });
        g.bench_function(format!("send_read_then_crc32fast/{len}"), |b| {
            b.iter(|| {
                mr.read(0, black_box(&mut dst)).unwrap();
                crc32fast::hash(black_box(&dst))
            })
        });
        g.bench_function(format!("receive_check_in_place/{len}"), |b| {
            b.iter(|| mr.crc32(0, black_box(len)).unwrap())
        });
        g.bench_function(format!("receive_crc32fast_then_write/{len}"), |b| {
            b.iter(|| {
                let c = crc32fast::hash(black_box(&src));
                mr.write(0, black_box(&src)).unwrap();
                c
            })
        });
        g.bench_function(format!("crc32fast_slice/{len}"), |b| {
            b.iter(|| crc32fast::hash(black_box(&src)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
