//! Interop probe: runs perftest's whole out-of-band client sequence against a real perftest
//! server, without any RDMA traffic. For tests where the server is passive (`ib_write_bw`,
//! `ib_read_bw`, `ib_atomic_bw`, `ib_read_lat`, `ib_atomic_lat`) the real server then
//! completes and exits 0, printing the report we sent — proof that every step, byte count
//! and order matches.
//!
//! `cargo run -p softrdma-cm --example perftest_probe -- 10.88.0.11 write_bw 10.88.0.1`

use std::time::{Duration, Instant};

use softrdma_oob::perftest::{BwReport, PerftestDest, PerftestSession, SysData, Test};
use softrdma_oob::Gid;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!(
            "usage: perftest_probe SERVER write_bw|read_bw|atomic_bw|read_lat|atomic_lat LOCAL_IP"
        );
        std::process::exit(2);
    }
    let test = match args[2].as_str() {
        "write_bw" => Test::WriteBw,
        "read_bw" => Test::ReadBw,
        "atomic_bw" => Test::AtomicBw,
        "read_lat" => Test::ReadLat,
        "atomic_lat" => Test::AtomicLat,
        t => return Err(format!("unsupported test {t}").into()),
    };
    let gid = Gid::from_ip(args[3].parse()?);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut s = loop {
        match PerftestSession::connect((args[1].as_str(), softrdma_oob::DEFAULT_PORT)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let v = s.exchange_versions()?;
    println!("remote version {v}");
    let sys = s.exchange_sys_data(SysData::default())?;
    println!("sys data {sys:?} (remote {:?})", s.remote_sys_data());
    let mtu = s.exchange_mtu(3)?;
    println!("mtu {mtu}");
    let out_reads = match test {
        Test::WriteBw => 1,
        _ => 128,
    };
    let local = PerftestDest {
        lid: 0,
        out_reads,
        qpn: 0x4242,
        psn: 0x12_3456,
        rkey: 0x1234,
        vaddr: 0x7f00_0000_0000,
        gid,
        srqn: 0,
    };
    let sched = test.schedule(1, false);
    for i in 0..sched.keys_before_traffic() {
        let r = s.exchange_keys(&local)?;
        println!("keys #{i}: remote {r:?} gid {}", r.gid);
    }
    if sched.bw_report {
        s.exchange_keys(&local)?;
        let r = s.exchange_bw_report(&BwReport {
            size: 64,
            iters: 5,
            bw_peak: 1.25,
            bw_avg: 1.0,
            msg_rate_avg: 0.015625,
        })?;
        println!("server report (garbage by design): {r:?}");
    }
    if sched.close {
        s.finish(&local)?;
    }
    println!("probe done");
    Ok(())
}
