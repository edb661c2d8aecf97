//! What this machine's kernel lets any UDP-socket transport do on loopback: the ceiling under
//! softrdma's data path, measured with this crate's own socket and nothing above it (no
//! engine, no ICRC, no copy into registered memory).
//!
//! ```text
//! cargo run --release -p softrdma-udp --example ceiling              # bandwidth
//! cargo run --release -p softrdma-udp --example ceiling -- pingpong  # one-way latency
//! ```
//!
//! - `bandwidth`: one thread sends GSO datagrams of 15 segments of 4112 bytes (a RoCEv2
//!   middle packet at path MTU 4096: BTH, 4096 bytes of payload, ICRC) as fast as the socket
//!   takes them; another receives them with GRO into an arena, as a device's progress thread
//!   does. The receiving core is the bottleneck, so the sender overruns it and the kernel
//!   drops the excess; the figure that matters is what the receiver took out of the kernel
//!   per second, in RoCE payload bytes. A RoCE write or read over UDP sockets on this machine
//!   cannot move payload faster than that.
//! - `pingpong`: two threads bounce one 20-byte datagram (the size of an 8-byte RoCEv2 SEND's
//!   BTH, payload and ICRC), both spinning on `try_recv`, as `softrdma perf send-lat` spins.
//!   Half the median round trip is the one-way floor of a loopback ping-pong over UDP. A
//!   datagram lost on the way (not expected on loopback) ends the run with an error.
//!
//! Both are the ceiling of one flow into one receiving thread, which is what a device's
//! progress thread is.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use softrdma_udp::{Config, Ecn, RecvArena, RoceSocket, Transmit};

/// A RoCEv2 packet of the middle of a message at path MTU 4096: BTH (12) + payload + ICRC (4).
const SEGMENT: usize = 12 + 4096 + 4;
const SEGMENTS: usize = 15;
const PAYLOAD_PER_SEGMENT: f64 = 4096.0;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::args().nth(1).as_deref() {
        None | Some("bandwidth") => bandwidth(Duration::from_secs(2)),
        Some("pingpong") => pingpong(100_000),
        Some(other) => Err(format!("unknown mode {other:?}: bandwidth or pingpong").into()),
    }
}

fn open(last_octet: u8) -> Result<RoceSocket, Box<dyn std::error::Error>> {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last_octet));
    Ok(RoceSocket::open(Config::new(ip).port(0))?)
}

fn bandwidth(run: Duration) -> Result<(), Box<dyn std::error::Error>> {
    let mut tx = open(1)?;
    let rx = open(1)?;
    let dst = rx.local_addr();
    let gso = tx.max_gso_segments().min(SEGMENTS);
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut arena = RecvArena::for_socket(&rx, 32);
            let (mut bytes, mut first, mut last) = (0usize, None, Instant::now());
            loop {
                let n = rx.try_recv(&mut arena).expect("receive");
                if n == 0 {
                    if stop.load(Ordering::Acquire) && last.elapsed() > Duration::from_millis(200) {
                        break;
                    }
                    continue;
                }
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                bytes += arena.datagrams().map(|(_, d)| d.len()).sum::<usize>();
            }
            (bytes, first.map_or(Duration::ZERO, |f| last - f))
        })
    };
    let datagram = vec![0x5au8; SEGMENT * gso];
    let batch: Vec<Transmit<'_>> = (0..4)
        .map(|_| Transmit {
            dst,
            src_port: 0,
            ecn: Ecn::NotEct,
            segment_size: (gso > 1).then_some(SEGMENT),
            contents: &datagram,
        })
        .collect();
    let start = Instant::now();
    let mut sent = 0usize;
    while start.elapsed() < run {
        match tx.send(&batch)? {
            0 => {
                tx.wait_writable(0, Some(Duration::from_millis(1)))?;
            }
            n => sent += n * datagram.len(),
        }
    }
    let sending = start.elapsed();
    stop.store(true, Ordering::Release);
    let (received, receiving) = receiver.join().expect("receiver thread");
    if received == 0 || receiving.is_zero() {
        return Err("the receiving thread got nothing: is loopback up?".into());
    }
    let payload = |bytes: usize, t: Duration| {
        bytes as f64 / SEGMENT as f64 * PAYLOAD_PER_SEGMENT / t.as_secs_f64() / 1e9
    };
    println!(
        "loopback UDP, GSO {gso} x {SEGMENT} bytes, GRO receiver: sent {:.2} GB/s, received {:.2} GB/s \
         of RoCE payload ({:.1} % of what was sent was dropped by the kernel)",
        payload(sent, sending),
        payload(received, receiving),
        100.0 * (1.0 - received as f64 / sent.max(1) as f64),
    );
    Ok(())
}

fn pingpong(rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let mut a = open(1)?;
    let mut b = open(1)?;
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    let packet = [0u8; 20];
    let bounce = move |sock: &mut RoceSocket, to, serve: bool| {
        let mut arena = RecvArena::for_socket(sock, 8);
        let t = Transmit {
            dst: to,
            src_port: 0,
            ecn: Ecn::NotEct,
            segment_size: None,
            contents: &packet,
        };
        let send = |sock: &mut RoceSocket| match sock.send(&[t]) {
            Ok(1) => Ok(()),
            Ok(_) => Err("the socket took no datagram".to_string()),
            Err(e) => Err(e.to_string()),
        };
        let mut rtts = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let sent_at = Instant::now();
            if !serve {
                send(sock)?;
            }
            while sock.try_recv(&mut arena).map_err(|e| e.to_string())? == 0 {
                if sent_at.elapsed() > Duration::from_secs(1) {
                    return Err(format!("round {round}: no datagram for a second (lost?)"));
                }
            }
            if serve {
                send(sock)?;
            } else {
                rtts.push(sent_at.elapsed());
            }
        }
        Ok(rtts)
    };
    let server = thread::spawn(move || bounce(&mut b, a_addr, true));
    let mut rtts = bounce(&mut a, b_addr, false)?;
    server.join().expect("server thread")?;
    rtts.sort_unstable();
    let one_way = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6 / 2.0;
    println!(
        "loopback UDP ping-pong of one 20-byte datagram, both sides spinning: one-way min {:.2} us, \
         median {:.2} us, p99 {:.2} us, p99.9 {:.2} us, max {:.2} us",
        one_way(0.0),
        one_way(0.5),
        one_way(0.99),
        one_way(0.999),
        one_way(1.0),
    );
    Ok(())
}
