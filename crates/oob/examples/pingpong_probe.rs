//! Interop probe: the `ibv_rc_pingpong` out-of-band exchange against the real program, with
//! made-up QP values and no RDMA traffic (the real peer then waits for traffic or fails on
//! it, but prints the remote address it received — which is what this checks).
//!
//! `pingpong_probe client SERVER LOCAL_IP` / `pingpong_probe server LOCAL_IP`

use std::time::{Duration, Instant};

use softrdma_oob::pingpong::{exchange_as_client, Listener, PingpongDest};
use softrdma_oob::{Gid, DEFAULT_PORT};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: pingpong_probe client SERVER LOCAL_IP | server LOCAL_IP";
    let local_ip = args.last().ok_or(usage)?.parse()?;
    let local = PingpongDest {
        lid: 0,
        qpn: 0x4242,
        psn: 0x12_3456,
        gid: Gid::from_ip(local_ip),
    };
    match args.get(1).map(String::as_str) {
        Some("client") if args.len() == 4 => {
            let deadline = Instant::now() + Duration::from_secs(120);
            let remote = loop {
                match exchange_as_client((args[2].as_str(), DEFAULT_PORT), &local) {
                    Ok(r) => break r,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(300));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            println!("client: remote {remote:?}");
        }
        Some("server") if args.len() == 3 => {
            let l = Listener::bind((local_ip, DEFAULT_PORT))?;
            let pending = l.accept()?;
            println!(
                "server: remote {:?} from {}",
                pending.remote(),
                pending.peer_addr()
            );
            pending.reply(&local)?.wait_done()?;
            println!("server: done received");
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
