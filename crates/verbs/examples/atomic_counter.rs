//! A counter in one server's memory, incremented by several clients with RDMA FETCH_ADD:
//! every increment lands exactly once and no server code runs. Each client is its own device
//! (127.0.0.11, .12, ...) on its own thread; the server is 127.0.0.10.
//!
//! `cargo run --release -p softrdma --example atomic_counter -- [CLIENTS] [ADDS_PER_CLIENT]`

use std::time::Duration;

use softrdma::{wr, AccessFlags, ConnectOptions, Device, DeviceConfig, QpInitAttr, WcStatus};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse::<u64>().ok());
    let clients = args.next().unwrap_or(4);
    let adds = args.next().unwrap_or(1000);

    let server = Device::open(DeviceConfig::new("127.0.0.10".parse()?))?;
    let pd = server.alloc_pd();
    let counter = pd.reg_mr(8, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC)?;
    let cq = server.create_cq(16)?;

    let mut threads = Vec::new();
    let mut server_qps = Vec::new();
    for c in 0..clients {
        let dev = Device::open(DeviceConfig::new(format!("127.0.0.{}", 11 + c).parse()?))?;
        let c_pd = dev.alloc_pd();
        let result = c_pd.reg_mr(8, AccessFlags::LOCAL_WRITE)?;
        let c_cq = dev.create_cq(16)?;
        let qp = c_pd.create_qp(&QpInitAttr::rc(&c_cq))?;
        let s_qp = pd.create_qp(&QpInitAttr::rc(&cq))?;
        qp.connect(&s_qp.endpoint(), &ConnectOptions::default())?;
        s_qp.connect(&qp.endpoint(), &ConnectOptions::default())?;
        server_qps.push(s_qp);
        let remote = counter.remote();
        threads.push(std::thread::spawn(move || {
            let mut seen = Vec::new();
            for i in 0..adds {
                qp.post_send([wr::fetch_add(
                    i,
                    result.sge(0, 8),
                    remote.addr,
                    remote.rkey,
                    1,
                )])
                .expect("post");
                let wc = loop {
                    if let Some(wc) = c_cq.poll_one() {
                        break wc;
                    }
                    c_cq.wait(Some(Duration::from_secs(5)));
                };
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                seen.push(result.read_u64(0).unwrap()); // the value before our add
            }
            seen
        }));
    }
    let mut all: Vec<u64> = Vec::new();
    for t in threads {
        all.extend(t.join().expect("client thread"));
    }
    let total = counter.read_u64(0)?;
    all.sort_unstable();
    println!("{clients} clients x {adds} adds: counter = {total}");
    assert_eq!(total, clients * adds);
    // Every client saw a distinct previous value: 0, 1, ..., total - 1.
    assert!(all.iter().copied().eq(0..total));
    println!("every fetch-and-add returned a distinct value: atomic");
    Ok(())
}
