//! RC ping-pong of SENDs between two devices in one process (127.0.0.1 <-> 127.0.0.2), like
//! `ibv_rc_pingpong`: each side posts a receive, the client sends, the server answers.
//!
//! `cargo run --release -p softrdma --example pingpong -- [ITERS] [SIZE] [--busy-poll]`

use std::time::{Duration, Instant};

use softrdma::{wr, AccessFlags, ConnectOptions, Device, DeviceConfig, QpInitAttr, WcStatus};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let busy = args.iter().any(|a| a == "--busy-poll");
    let mut nums = args.iter().filter_map(|a| a.parse::<usize>().ok());
    let iters = nums.next().unwrap_or(10_000);
    let size = nums.next().unwrap_or(8);

    let open = |ip: &str| Device::open(DeviceConfig::new(ip.parse().unwrap()).busy_poll(busy));
    let (client, server) = (open("127.0.0.1")?, open("127.0.0.2")?);
    let mut sides = Vec::new();
    for dev in [&client, &server] {
        let pd = dev.alloc_pd();
        let mr = pd.reg_mr(2 * size.max(1), AccessFlags::LOCAL_WRITE)?;
        let cq = dev.create_cq(64)?;
        let qp = pd.create_qp(&QpInitAttr::rc(&cq))?;
        sides.push((mr, cq, qp));
    }
    let (s_mr, s_cq, s_qp) = sides.pop().unwrap();
    let (c_mr, c_cq, c_qp) = sides.pop().unwrap();
    c_qp.connect(&s_qp.endpoint(), &ConnectOptions::default())?;
    s_qp.connect(&c_qp.endpoint(), &ConnectOptions::default())?;
    let len = size as u32;

    // The server: receive, answer, repeat.
    s_qp.post_recv([wr::recv(0, vec![s_mr.sge(0, len)])])?;
    let server_thread = std::thread::spawn(move || -> Result<(), String> {
        let mut wcs = Vec::new();
        for _ in 0..iters {
            let mut got_recv = false;
            while !got_recv {
                wcs.clear();
                s_cq.poll_blocking(8, &mut wcs, Some(Duration::from_secs(5)));
                for wc in &wcs {
                    if wc.status != WcStatus::Success {
                        return Err(format!("server completion {wc:?}"));
                    }
                    got_recv |= wc.opcode == softrdma::WcOpcode::Recv;
                }
                if wcs.is_empty() {
                    return Err("server timed out".into());
                }
            }
            s_qp.post_recv([wr::recv(0, vec![s_mr.sge(0, len)])])
                .map_err(|e| e.to_string())?;
            s_qp.post_send([wr::send(1, vec![s_mr.sge(size, len)])])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    });

    let mut wcs = Vec::new();
    let mut rtts = Vec::with_capacity(iters);
    let start = Instant::now();
    for _ in 0..iters {
        let t0 = Instant::now();
        c_qp.post_recv([wr::recv(0, vec![c_mr.sge(0, len)])])?;
        c_qp.post_send([wr::send(1, vec![c_mr.sge(size, len)])])?;
        let mut done = 0;
        while done < 2 {
            wcs.clear();
            if busy {
                c_cq.poll(8, &mut wcs);
            } else {
                c_cq.poll_blocking(8, &mut wcs, Some(Duration::from_secs(5)));
            }
            for wc in &wcs {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                done += 1;
            }
        }
        rtts.push(t0.elapsed());
    }
    let total = start.elapsed();
    server_thread.join().unwrap()?;
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    println!(
        "{iters} round trips of {size} bytes: median RTT {:.1} us, one-way {:.1} us, p99 RTT {:.1} us, {:.0} round trips/s",
        median.as_secs_f64() * 1e6,
        median.as_secs_f64() * 1e6 / 2.0,
        rtts[rtts.len() * 99 / 100].as_secs_f64() * 1e6,
        iters as f64 / total.as_secs_f64()
    );
    Ok(())
}
