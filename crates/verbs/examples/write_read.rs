//! One-sided RDMA: the client WRITEs into the server's memory and READs it back; the server
//! application only registers memory and then does nothing. Also prints a quick bandwidth.
//!
//! `cargo run --release -p softrdma --example write_read -- [MSG_BYTES] [MESSAGES]`

use std::time::{Duration, Instant};

use softrdma::{wr, AccessFlags, ConnectOptions, Device, DeviceConfig, QpInitAttr, WcStatus};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse::<usize>().ok());
    let size = args.next().unwrap_or(65536);
    let count = args.next().unwrap_or(4096);
    let depth = 16; // WRs in flight
                    // `--gso`: batch packets into UDP GSO sends (see DeviceConfig::gso).
    let gso = std::env::args().any(|a| a == "--gso");

    let server = Device::open(DeviceConfig::new("127.0.0.2".parse()?).gso(gso))?;
    let client = Device::open(DeviceConfig::new("127.0.0.1".parse()?).gso(gso))?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;

    // Server: memory, a QP, and nothing else.
    let s_pd = server.alloc_pd();
    let s_mr = s_pd.reg_mr(size, access)?;
    let s_cq = server.create_cq(16)?;
    let s_qp = s_pd.create_qp(&QpInitAttr::rc(&s_cq))?;

    // Client.
    let c_pd = client.alloc_pd();
    let c_mr = c_pd.reg_mr(2 * size, access)?;
    let c_cq = client.create_cq(depth as u32 * 2)?;
    let mut init = QpInitAttr::rc(&c_cq);
    init.cap.max_send_wr = depth as u32 * 2;
    let c_qp = c_pd.create_qp(&init)?;

    // The out-of-band exchange: endpoints and the server region's (addr, rkey).
    c_qp.connect(&s_qp.endpoint(), &ConnectOptions::default())?;
    s_qp.connect(&c_qp.endpoint(), &ConnectOptions::default())?;
    let remote = s_mr.remote();

    // WRITE a pattern, READ it back into the second half, compare.
    let pattern: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    c_mr.write(0, &pattern)?;
    let len = size as u32;
    c_qp.post_send([wr::write(
        1,
        vec![c_mr.sge(0, len)],
        remote.addr,
        remote.rkey,
    )])?;
    c_qp.post_send([wr::read(
        2,
        vec![c_mr.sge(size, len)],
        remote.addr,
        remote.rkey,
    )])?;
    let mut wcs = Vec::new();
    while wcs.len() < 2 {
        c_cq.poll_blocking(2, &mut wcs, Some(Duration::from_secs(5)));
    }
    assert!(
        wcs.iter().all(|wc| wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    assert_eq!(c_mr.read_vec(size, size)?, pattern);
    assert_eq!(s_mr.to_vec()?, pattern);
    println!("WRITE + READ of {size} bytes: data verified");

    // Bandwidth: `count` WRITEs, `depth` in flight.
    for (name, read) in [("WRITE", false), ("READ", true)] {
        let start = Instant::now();
        let (mut posted, mut done) = (0, 0);
        while done < count {
            while posted < count && posted - done < depth {
                let sge = vec![c_mr.sge(0, len)];
                let w = if read {
                    wr::read(posted as u64, sge, remote.addr, remote.rkey)
                } else {
                    wr::write(posted as u64, sge, remote.addr, remote.rkey)
                };
                c_qp.post_send([w])?;
                posted += 1;
            }
            wcs.clear();
            c_cq.poll_blocking(depth, &mut wcs, Some(Duration::from_secs(5)));
            for wc in &wcs {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            }
            done += wcs.len();
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{name}: {count} x {size} bytes in {:.3} s = {:.2} GB/s",
            secs,
            (count * size) as f64 / secs / 1e9
        );
    }
    let stats = client.stats();
    println!(
        "client: {} packets out, {} retransmitted",
        stats.engine.tx_packets, stats.engine.retransmitted_packets
    );
    Ok(())
}
