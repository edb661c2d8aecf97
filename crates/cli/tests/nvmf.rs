//! `softrdma nvmf-target` and `softrdma nvmf` as users run them, on loopback (127.0.38.2x):
//! discover, identify, verify, read/write, bench through the binary, the target's capture
//! decoding cleanly (softrdma decode, and tshark's nvme-rdma dissector when installed); and
//! a host process killed in the middle of its I/O, cleaned up by the keep alive timeout.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softrdma_nvmf::backend::MemoryBackend;
use softrdma_nvmf::controller::{Namespace, Subsystem, TeardownReason};
use softrdma_nvmf::transport::{Target, TargetConfig};

fn softrdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
}

fn run(args: &[&str]) -> Output {
    let out = softrdma().args(args).output().expect("run softrdma");
    assert!(
        out.status.success(),
        "softrdma {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `softrdma nvmf SUB... -a 127.0.38.20 -w 127.0.38.21 -n ...:cli`.
fn nvmf(sub: &[&str]) -> Output {
    let mut a = vec!["nvmf"];
    a.extend_from_slice(sub);
    a.extend_from_slice(&[
        "-a",
        "127.0.38.20",
        "-w",
        "127.0.38.21",
        "-n",
        "nqn.2026-12.io.softrdma:cli",
    ]);
    run(&a)
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softrdma-nvmf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Starts `softrdma nvmf-target` and waits for its "listening" line.
fn start_target(args: &[&str]) -> Kill {
    let mut child = softrdma()
        .arg("nvmf-target")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the target");
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let first = lines.next().expect("a line").unwrap();
    assert!(first.contains("listening on"), "{first}");
    // Keep reading (and discarding) so the target never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Kill(child)
}

#[test]
fn target_and_host_commands_and_a_clean_capture() {
    let pcap = scratch("target.pcap");
    let img = scratch("disk.img");
    let pcap_s = pcap.to_str().unwrap();
    let img_s = img.to_str().unwrap();
    let target = start_target(&[
        "--ip",
        "127.0.38.20",
        "--file",
        img_s,
        "--size",
        "16M",
        "--nqn",
        "nqn.2026-12.io.softrdma:cli",
        "--pcap",
        pcap_s,
        "--duration",
        "60",
    ]);
    let d = text(&nvmf(&["discover"]));
    assert!(d.contains("Discovery Log Number of Records 2"), "{d}");
    assert!(d.contains("subnqn:  nqn.2026-12.io.softrdma:cli"), "{d}");
    assert!(d.contains("traddr:  127.0.38.20"), "{d}");
    let id = text(&nvmf(&["identify"]));
    assert!(
        id.contains("namespace 1: 32768 blocks of 512 bytes"),
        "{id}"
    );
    assert!(id.contains("in-capsule data 8192 bytes"), "{id}");
    let v = text(&nvmf(&["verify", "--size", "4M", "--remote-invalidate"]));
    assert!(v.contains("verify: 4 MiB written"), "{v}");
    assert!(v.contains("read back"), "{v}");
    // write a file, read it back.
    let input = scratch("in.bin");
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let output = scratch("out.bin");
    nvmf(&["write", "--lba", "64", "-d", input.to_str().unwrap()]);
    nvmf(&[
        "read",
        "--lba",
        "64",
        "--size",
        "10000",
        "-d",
        output.to_str().unwrap(),
    ]);
    let back = std::fs::read(&output).unwrap();
    assert_eq!(back.len(), 10240, "whole blocks");
    assert!(back[..10_000] == data[..] && back[10_000..].iter().all(|&b| b == 0));
    // The namespace is the file: the blocks are there.
    let file = std::fs::read(&img).unwrap();
    assert!(file[64 * 512..64 * 512 + 10_000] == data[..]);
    let b = text(&nvmf(&["bench", "--runtime", "0.5", "--iodepth", "8"]));
    assert!(
        b.contains("rw=randread") && b.contains("read: IOPS="),
        "{b}"
    );
    drop(target);

    // Every datagram of the target's capture decodes with a good ICRC.
    let dec = softrdma().args(["decode", "-q", pcap_s]).output().unwrap();
    let line = String::from_utf8_lossy(&dec.stdout).into_owned();
    assert!(dec.status.success(), "{line}");
    assert!(line.contains("icrc_bad: 0, malformed: 0"), "{line}");
    // tshark's nvme-rdma dissector, when there is one, finds nothing malformed.
    if let Ok(t) = Command::new("tshark").args(["-r", pcap_s]).output() {
        if t.status.success() {
            let all = String::from_utf8_lossy(&t.stdout);
            assert!(
                all.contains("NVMeOF Connect"),
                "tshark dissects the capsules"
            );
            assert!(!all.contains("Malformed"), "tshark: malformed packets");
        }
    }
    let _ = std::fs::remove_dir_all(pcap.parent().unwrap());
}

#[test]
fn a_host_killed_mid_io_is_cleaned_up_by_keep_alive() {
    let nqn = "nqn.2026-12.io.softrdma:killed";
    let ns = Namespace::new(1, Arc::new(MemoryBackend::new(64 << 20)), 512, nqn).unwrap();
    let subsys = Subsystem::new(nqn, vec![Arc::new(ns)], Vec::new()).unwrap();
    let target = Target::start(TargetConfig::new(
        "127.0.38.22:4420".parse().unwrap(),
        vec![subsys],
    ))
    .unwrap();
    let mut host = Kill(
        softrdma()
            .args([
                "nvmf",
                "bench",
                "-a",
                "127.0.38.22",
                "-w",
                "127.0.38.23",
                "-n",
                nqn,
                "-k",
                "2",
                "--rw",
                "randwrite",
                "--runtime",
                "60",
                "--iodepth",
                "16",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Mid-I/O: the controller and its I/O queue are up, commands flowing.
    let deadline = Instant::now() + Duration::from_secs(20);
    while target.stats().capsules < 2000 {
        assert!(Instant::now() < deadline, "the bench did not get going");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ctrl = target.registry().controllers();
    assert_eq!(ctrl.len(), 1);
    assert_eq!(ctrl[0].queues(), vec![0, 1]);
    host.0.kill().unwrap();
    host.0.wait().unwrap();
    let killed = Instant::now();
    // Nothing answers any more: within the 2 s keep alive timeout (and the reaper's tick)
    // the controller is torn down and its queues disconnected.
    while !target.registry().controllers().is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(6),
            "still there after {:?}",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = killed.elapsed();
    assert!(
        took > Duration::from_millis(1500),
        "gone after {took:?}: not the keep alive timer"
    );
    assert_eq!(ctrl[0].torn_down(), Some(TeardownReason::KeepAliveExpired));
    let s = target.stats();
    assert_eq!(s.keep_alive_expired, 1);
    while target.stats().queues_live != 0 {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "queues still served"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        ctrl[0]
            .subsys
            .counters
            .unsafe_shutdowns
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}
