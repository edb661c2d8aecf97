//! `softrdma nvmf`: a small NVMe over Fabrics host (RDMA transport) in the spirit of
//! nvme-cli — `discover`, `identify`, `read`, `write`, `verify` and a fio-like `bench` —
//! against `softrdma nvmf-target`, Linux's nvmet-rdma or any NVMe-oF RDMA target.

use std::io::{Read as _, Write as _};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};
use softrdma::{Device, DeviceConfig};
use softrdma_nvmf::host::{
    random_bytes, run_bench, BenchSpec, HostConfig, HostError, NamespaceInfo, Pattern,
    RemoteController,
};
use softrdma_nvmf::transport::NVMF_PORT;
use softrdma_nvmf::wire::fabrics::DISCOVERY_NQN;
use softrdma_nvmf::wire::log::subtype;

use crate::nvmf::target::{parse_size, DEFAULT_NQN};

/// Arguments of `softrdma nvmf`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Cmd,
}

/// Where the target is and how to connect (nvme-cli's flags where it has them).
#[derive(Debug, ClapArgs)]
struct Conn {
    /// The target's address (nvme-cli's --traddr).
    #[arg(short = 'a', long = "traddr")]
    traddr: String,
    /// The target's port (--trsvcid).
    #[arg(short = 's', long = "trsvcid", default_value_t = NVMF_PORT)]
    trsvcid: u16,
    /// The subsystem NQN.
    #[arg(short = 'n', long = "nqn", default_value = DEFAULT_NQN)]
    nqn: String,
    /// The local address to connect from (--host-traddr; default: the routed one).
    #[arg(short = 'w', long = "host-traddr")]
    host_traddr: Option<IpAddr>,
    /// The host NQN (default: one made from a random host id).
    #[arg(short = 'q', long = "hostnqn")]
    hostnqn: Option<String>,
    /// Keep alive timeout, seconds (0: none).
    #[arg(short = 'k', long = "keep-alive-tmo", default_value_t = 5)]
    kato: u32,
    /// Entries per I/O queue.
    #[arg(short = 'Q', long = "queue-size", default_value_t = 128)]
    queue_size: u16,
    /// I/O queues (bench: one thread each).
    #[arg(short = 'i', long = "nr-io-queues", default_value_t = 1)]
    io_queues: u16,
    /// Expose data through memory windows the target invalidates with its response.
    #[arg(long)]
    remote_invalidate: bool,
    /// Never put write data in the command capsule.
    #[arg(long)]
    no_in_capsule: bool,
    /// The namespace.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// Write every RoCEv2 datagram of the host's device to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Read the discovery log of the target's discovery controller.
    Discover(Conn),
    /// Identify the controller and the namespaces of a subsystem.
    Identify(Conn),
    /// Read blocks to a file (or stdout).
    Read {
        #[command(flatten)]
        conn: Conn,
        /// First block.
        #[arg(long, default_value_t = 0)]
        lba: u64,
        /// Bytes to read (whole blocks).
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// Where to (default: stdout).
        #[arg(short = 'd', long = "data")]
        output: Option<PathBuf>,
    },
    /// Write a file (or stdin) to blocks.
    Write {
        #[command(flatten)]
        conn: Conn,
        /// First block.
        #[arg(long, default_value_t = 0)]
        lba: u64,
        /// What to write (default: stdin); padded with zeros to whole blocks.
        #[arg(short = 'd', long = "data")]
        input: Option<PathBuf>,
    },
    /// Write a pseudo-random pattern, read it back and compare.
    Verify {
        #[command(flatten)]
        conn: Conn,
        /// First block.
        #[arg(long, default_value_t = 0)]
        lba: u64,
        /// Bytes to write and read back.
        #[arg(long, value_parser = parse_size, default_value = "64M")]
        size: u64,
    },
    /// Measure IOPS and bandwidth, summarised like fio.
    Bench {
        #[command(flatten)]
        conn: Conn,
        /// randread, randwrite, read or write.
        #[arg(long = "rw", default_value = "randread", value_parser = pattern)]
        rw: Pattern,
        /// Bytes per I/O.
        #[arg(long = "bs", default_value = "4k", value_parser = parse_size)]
        bs: u64,
        /// I/Os in flight per queue.
        #[arg(long = "iodepth", default_value_t = 32)]
        iodepth: usize,
        /// Seconds to run.
        #[arg(long = "runtime", default_value_t = 10.0)]
        runtime: f64,
    },
}

fn pattern(s: &str) -> Result<Pattern, String> {
    [
        Pattern::RandRead,
        Pattern::RandWrite,
        Pattern::SeqRead,
        Pattern::SeqWrite,
    ]
    .into_iter()
    .find(|p| p.name() == s)
    .ok_or_else(|| "randread, randwrite, read or write".into())
}

pub(crate) fn run(args: &Args) -> ExitCode {
    match dispatch(&args.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma nvmf: {e}");
            ExitCode::FAILURE
        }
    }
}

fn config(c: &Conn) -> Result<HostConfig, String> {
    let target = crate::route::resolve(&c.traddr, c.trsvcid).map_err(|e| e.to_string())?;
    let mut cfg = HostConfig::new(target);
    cfg.source =
        Some(crate::route::device_ip(c.host_traddr, target.ip()).map_err(|e| e.to_string())?);
    if let Some(q) = &c.hostnqn {
        cfg.hostnqn = q.clone();
    }
    cfg.kato_ms = c.kato.saturating_mul(1000);
    cfg.queue_size = c.queue_size.max(2);
    cfg.in_capsule = !c.no_in_capsule;
    cfg.remote_invalidate = c.remote_invalidate;
    if let (Some(pcap), Some(ip)) = (&c.pcap, cfg.source) {
        cfg.device = Some(
            Device::open(DeviceConfig::new(ip).pcap(pcap))
                .map_err(|e| format!("device on {ip}: {e}"))?,
        );
    }
    Ok(cfg)
}

fn connect(c: &Conn) -> Result<(RemoteController, NamespaceInfo), String> {
    let cfg = config(c)?;
    let ctrl = RemoteController::connect(&cfg, &c.nqn, c.io_queues).map_err(|e| e.to_string())?;
    let ns = ctrl.namespace(c.nsid).map_err(|e| e.to_string())?;
    if ns.blocks == 0 {
        return Err(format!("namespace {} is not active", c.nsid));
    }
    Ok((ctrl, ns))
}

fn err(e: HostError) -> String {
    e.to_string()
}

fn dispatch(cmd: &Cmd) -> Result<(), String> {
    match cmd {
        Cmd::Discover(c) => discover(c),
        Cmd::Identify(c) => identify(c),
        Cmd::Read {
            conn,
            lba,
            size,
            output,
        } => {
            let (ctrl, ns) = connect(conn)?;
            let mut q = ctrl.io_queue(1).map_err(err)?;
            let blocks = size.div_ceil(ns.block_size);
            let data = q.read(&ns, *lba, blocks).map_err(err)?;
            match output {
                Some(p) => std::fs::write(p, &data).map_err(|e| format!("{}: {e}", p.display()))?,
                None => std::io::stdout()
                    .write_all(&data)
                    .map_err(|e| e.to_string())?,
            }
            eprintln!("read {} bytes from block {lba}", data.len());
            q.disconnect();
            ctrl.shutdown().map_err(err)
        }
        Cmd::Write { conn, lba, input } => {
            let mut data = Vec::new();
            match input {
                Some(p) => data = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?,
                None => {
                    std::io::stdin()
                        .read_to_end(&mut data)
                        .map_err(|e| e.to_string())?;
                }
            }
            let (ctrl, ns) = connect(conn)?;
            let whole = (data.len() as u64).div_ceil(ns.block_size) * ns.block_size;
            data.resize(whole as usize, 0);
            let mut q = ctrl.io_queue(1).map_err(err)?;
            q.write(&ns, *lba, &data).map_err(err)?;
            q.flush(ns.nsid).map_err(err)?;
            eprintln!("wrote {} bytes at block {lba}", data.len());
            q.disconnect();
            ctrl.shutdown().map_err(err)
        }
        Cmd::Verify { conn, lba, size } => verify(conn, *lba, *size),
        Cmd::Bench {
            conn,
            rw,
            bs,
            iodepth,
            runtime,
        } => {
            let (ctrl, ns) = connect(conn)?;
            let queues = (1..=conn.io_queues.min(ctrl.io_queues))
                .map(|qid| ctrl.io_queue(qid))
                .collect::<Result<Vec<_>, _>>()
                .map_err(err)?;
            let spec = BenchSpec {
                pattern: *rw,
                block_size: *bs as usize,
                depth: (*iodepth).max(1),
                duration: Duration::from_secs_f64(runtime.max(0.1)),
                seed: 0x5eed,
            };
            let report = run_bench(queues, &ns, spec).map_err(err)?;
            println!("{}", report.fio_summary());
            ctrl.shutdown().map_err(err)
        }
    }
}

fn discover(c: &Conn) -> Result<(), String> {
    let cfg = config(c)?;
    let ctrl = RemoteController::connect(&cfg, DISCOVERY_NQN, 0).map_err(err)?;
    let log = ctrl.discovery_log().map_err(err)?;
    println!(
        "\nDiscovery Log Number of Records {}, Generation counter {}",
        log.entries.len(),
        log.genctr
    );
    for (i, e) in log.entries.iter().enumerate() {
        let sub = match e.subtype {
            subtype::NVM => "nvme subsystem",
            subtype::CURRENT_DISCOVERY => "current discovery subsystem",
            subtype::REFERRAL => "discovery subsystem referral",
            _ => "unrecognized",
        };
        println!("=====Discovery Log Entry {i}======");
        println!(
            "trtype:  {}",
            if e.trtype == 1 {
                "rdma"
            } else {
                "unrecognized"
            }
        );
        println!("adrfam:  {}", if e.adrfam == 1 { "ipv4" } else { "ipv6" });
        println!("subtype: {sub}");
        println!(
            "treq:    {}",
            if e.treq & 4 != 0 {
                "not specified, sq flow control disable supported"
            } else {
                "not specified"
            }
        );
        println!("portid:  {}", e.portid);
        println!("trsvcid: {}", e.trsvcid);
        println!("subnqn:  {}", e.subnqn);
        println!("traddr:  {}", e.traddr);
        println!("rdma_prtype: {}", e.tsas.prtype);
        println!(
            "rdma_qptype: {}",
            if e.tsas.qptype == 1 {
                "connected"
            } else {
                "unrecognized"
            }
        );
        println!(
            "rdma_cms:    {}",
            if e.tsas.cms == 1 {
                "rdma-cm"
            } else {
                "unrecognized"
            }
        );
        println!("rdma_pkey: {:#06x}", e.tsas.pkey);
    }
    ctrl.shutdown().map_err(err)
}

fn identify(c: &Conn) -> Result<(), String> {
    let cfg = config(c)?;
    let ctrl = RemoteController::connect(&cfg, &c.nqn, 1).map_err(err)?;
    let id = &ctrl.identify;
    let v = ctrl.version;
    println!("NVMe controller {} of {}", ctrl.cntlid, id.subnqn);
    println!("sn       : {}", id.sn);
    println!("mn       : {}", id.mn);
    println!("fr       : {}", id.fr);
    println!("ver      : {}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff);
    println!(
        "mdts     : {} ({})",
        id.mdts,
        id.max_transfer()
            .map_or("no limit".into(), |b| format!("{b} bytes"))
    );
    println!("cntrltype: {}", id.cntrltype);
    println!("kas      : {}", id.kas);
    println!("maxcmd   : {}", id.maxcmd);
    println!("nn       : {}", id.nn);
    println!("oncs     : {:#x}", id.oncs);
    println!("vwc      : {:#x}", id.vwc);
    println!("sgls     : {:#x}", id.sgls);
    println!(
        "ioccsz   : {} (in-capsule data {} bytes)",
        id.ioccsz,
        id.in_capsule_len()
    );
    println!("iorcsz   : {}", id.iorcsz);
    println!("io queues: {} granted", ctrl.io_queues);
    for nsid in ctrl.namespaces().map_err(err)? {
        let ns = ctrl.namespace(nsid).map_err(err)?;
        let nguid: String = ns
            .identify
            .nguid
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        println!(
            "namespace {nsid}: {} blocks of {} bytes ({} bytes), nguid {nguid}",
            ns.blocks,
            ns.block_size,
            ns.blocks * ns.block_size
        );
    }
    ctrl.shutdown().map_err(err)
}

fn verify(c: &Conn, lba: u64, size: u64) -> Result<(), String> {
    let (ctrl, ns) = connect(c)?;
    let size = size.div_ceil(ns.block_size) * ns.block_size;
    if lba * ns.block_size + size > ns.blocks * ns.block_size {
        return Err(format!(
            "{size} bytes from block {lba} do not fit the namespace"
        ));
    }
    let mut q = ctrl.io_queue(1).map_err(err)?;
    let seed = size ^ u64::from(std::process::id()) << 32 ^ lba;
    let data = random_bytes(seed, size as usize);
    let t = std::time::Instant::now();
    q.write(&ns, lba, &data).map_err(err)?;
    q.flush(ns.nsid).map_err(err)?;
    let w = t.elapsed();
    let t = std::time::Instant::now();
    let back = q.read(&ns, lba, size / ns.block_size).map_err(err)?;
    let r = t.elapsed();
    q.disconnect();
    ctrl.shutdown().map_err(err)?;
    let mib = size as f64 / (1 << 20) as f64;
    if back != data {
        let at = back
            .iter()
            .zip(&data)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!("data differ from byte {at} on"));
    }
    println!(
        "verify: {mib:.0} MiB written ({:.1} MiB/s) and read back ({:.1} MiB/s) identical",
        mib / w.as_secs_f64().max(1e-9),
        mib / r.as_secs_f64().max(1e-9)
    );
    Ok(())
}
