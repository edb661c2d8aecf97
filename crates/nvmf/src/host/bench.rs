//! `softrdma nvmf bench`: random or sequential reads or writes at a queue depth on one or
//! more I/O queues (a thread each) for a while, summarised the way fio summarises a job
//! (IOPS, bandwidth in MiB/s and MB/s, completion latency and percentiles).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::controller::{IoQueue, NamespaceInfo};
use super::error::HostError;
use super::queue::Data;
use crate::wire::sqe::io;

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Sequential reads.
    SeqRead,
    /// Sequential writes.
    SeqWrite,
}

impl Pattern {
    /// fio's name (`rw=`).
    pub fn name(self) -> &'static str {
        match self {
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::SeqRead => "read",
            Pattern::SeqWrite => "write",
        }
    }

    fn writes(self) -> bool {
        matches!(self, Pattern::RandWrite | Pattern::SeqWrite)
    }
}

/// A job.
#[derive(Debug, Clone, Copy)]
pub struct BenchSpec {
    /// Reads or writes, random or sequential.
    pub pattern: Pattern,
    /// Bytes per I/O (whole blocks).
    pub block_size: usize,
    /// I/Os in flight per queue.
    pub depth: usize,
    /// How long to run.
    pub duration: Duration,
    /// Seed of the random offsets.
    pub seed: u64,
}

/// Completion latency statistics, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// What a job did.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// The job.
    pub spec: BenchSpec,
    /// Queues it ran on.
    pub queues: usize,
    /// I/Os completed.
    pub ios: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Completion latency.
    pub latency: Latency,
}

impl BenchReport {
    /// I/Os per second.
    pub fn iops(&self) -> f64 {
        self.ios as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// fio's summary of the job.
    pub fn fio_summary(&self) -> String {
        let s = &self.spec;
        let dir = if s.pattern.writes() { "write" } else { "read" };
        let iops = self.iops();
        let iops_text = if iops >= 1000.0 {
            format!("{:.1}k", iops / 1000.0)
        } else {
            format!("{iops:.0}")
        };
        let bw = self.bandwidth();
        // fio's units: KiB/s (kB/s) below 1 MiB/s, MiB/s (MB/s) above.
        let bw_text = if bw < f64::from(1 << 20) {
            format!("{:.0}KiB/s ({:.0}kB/s)", bw / 1024.0, bw / 1e3)
        } else {
            format!("{:.0}MiB/s ({:.0}MB/s)", bw / f64::from(1 << 20), bw / 1e6)
        };
        let total = if self.bytes < 1 << 20 {
            format!("{}KiB", self.bytes >> 10)
        } else {
            format!("{}MiB", self.bytes >> 20)
        };
        let l = &self.latency;
        format!(
            "{name}: (g=0): rw={name}, bs=(R) {bs}B-{bs}B, ioengine=softrdma-nvmf, iodepth={depth}, queues={queues}\n\
             \x20 {dir}: IOPS={iops_text}, BW={bw_text}({total}/{ms}msec)\n\
             \x20   clat (usec): min={min:.0}, max={max:.0}, avg={avg:.2}, stdev={sd:.2}\n\
             \x20    clat percentiles (usec): 50.00th=[{p50:.0}], 99.00th=[{p99:.0}], 99.90th=[{p999:.0}]",
            name = s.pattern.name(),
            bs = s.block_size,
            depth = s.depth,
            queues = self.queues,
            ms = self.elapsed.as_millis(),
            min = l.min,
            max = l.max,
            avg = l.mean,
            sd = l.stdev,
            p50 = l.p50,
            p99 = l.p99,
            p999 = l.p999,
        )
    }
}

/// PCG32 (O'Neill's PCG-XSH-RR): random offsets and data, the same for the same seed.
struct Pcg32(u64);

impl Pcg32 {
    fn new(seed: u64) -> Pcg32 {
        let mut p = Pcg32(seed.wrapping_add(0x1405_7b7e_f767_814f));
        p.next_u32();
        p
    }

    fn next_u32(&mut self) -> u32 {
        let old = self.0;
        self.0 = old
            .wrapping_mul(0x5851_f42d_4c95_7f2d)
            .wrapping_add(0x1405_7b7e_f767_814f);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        xorshifted.rotate_right((old >> 59) as u32)
    }

    fn next(&mut self) -> u64 {
        u64::from(self.next_u32()) << 32 | u64::from(self.next_u32())
    }
}

/// `len` pseudo-random bytes from `seed`: data no earlier run left on a namespace, which
/// a verify then expects back.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Pcg32::new(seed);
    let mut out = Vec::with_capacity(len + 4);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u32().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Runs `spec` on each queue (a thread per queue) against namespace `ns`.
pub fn run_bench(
    queues: Vec<IoQueue>,
    ns: &NamespaceInfo,
    spec: BenchSpec,
) -> Result<BenchReport, HostError> {
    let bs = spec.block_size as u64;
    if bs == 0 || bs % ns.block_size != 0 || bs > ns.blocks * ns.block_size {
        return Err(HostError::Invalid(format!(
            "block size {bs} for {}-byte blocks",
            ns.block_size
        )));
    }
    if queues.iter().any(|q| spec.block_size > q.max_transfer()) {
        return Err(HostError::Invalid(format!("block size {bs} above MDTS")));
    }
    let n = queues.len();
    let start = Instant::now();
    let results: Vec<Result<(u64, Vec<u64>), HostError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = queues
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let ns = ns.clone();
                scope.spawn(move || one_queue(q, &ns, spec, i as u64, n as u64))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(HostError::Transport("a bench thread panicked".into())))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    let mut ios = 0;
    let mut lat = Vec::new();
    for r in results {
        let (n_ios, l) = r?;
        ios += n_ios;
        lat.extend(l);
    }
    Ok(BenchReport {
        spec,
        queues: n,
        ios,
        bytes: ios * bs,
        elapsed,
        latency: latency(&mut lat),
    })
}

fn latency(ns: &mut [u64]) -> Latency {
    if ns.is_empty() {
        return Latency::default();
    }
    ns.sort_unstable();
    let us = |v: u64| v as f64 / 1000.0;
    let n = ns.len() as f64;
    let mean = ns.iter().map(|&v| us(v)).sum::<f64>() / n;
    let var = ns.iter().map(|&v| (us(v) - mean).powi(2)).sum::<f64>() / n;
    let pct = |p: f64| us(ns[((n * p) as usize).min(ns.len() - 1)]);
    Latency {
        min: us(ns[0]),
        max: us(ns[ns.len() - 1]),
        mean,
        stdev: var.sqrt(),
        p50: pct(0.50),
        p99: pct(0.99),
        p999: pct(0.999),
    }
}

/// One queue's share: `part` of `parts` of the namespace for sequential jobs.
fn one_queue(
    mut q: IoQueue,
    ns: &NamespaceInfo,
    spec: BenchSpec,
    part: u64,
    parts: u64,
) -> Result<(u64, Vec<u64>), HostError> {
    let nlb = spec.block_size as u64 / ns.block_size;
    let slots = ns.blocks / nlb;
    let (first, span) = (slots * part / parts, (slots / parts).max(1));
    let mut rng = Pcg32::new(spec.seed ^ (part + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut seq = 0u64;
    let data: Vec<u8> = (0..spec.block_size).map(|i| (i as u8) ^ 0x5a).collect();
    let opcode = if spec.pattern.writes() {
        io::WRITE
    } else {
        io::READ
    };
    let depth = spec.depth.clamp(1, usize::from(q.queue().entries()));
    let mut sent: HashMap<u16, Instant> = HashMap::with_capacity(depth);
    let mut lat = Vec::new();
    let deadline = Instant::now() + spec.duration;
    loop {
        let now = Instant::now();
        while now < deadline && sent.len() < depth {
            let slot = match spec.pattern {
                Pattern::RandRead | Pattern::RandWrite => rng.next() % slots,
                Pattern::SeqRead | Pattern::SeqWrite => {
                    seq += 1;
                    first + (seq - 1) % span
                }
            };
            let sqe = IoQueue::rw_sqe(opcode, ns.nsid, slot * nlb, nlb as u32);
            let d = if spec.pattern.writes() {
                Data::Out(&data)
            } else {
                Data::In(spec.block_size)
            };
            let cid = q.queue().submit(sqe, d)?;
            sent.insert(cid, Instant::now());
        }
        if sent.is_empty() {
            break;
        }
        for (cid, c) in q.queue().poll(Some(Duration::from_millis(10)))? {
            let Some(t) = sent.remove(&cid) else {
                continue;
            };
            if !c.cqe.status.is_success() {
                return Err(HostError::Status {
                    command: if spec.pattern.writes() {
                        "Write"
                    } else {
                        "Read"
                    },
                    status: c.cqe.status,
                    dw0: c.cqe.dw0,
                });
            }
            lat.push(t.elapsed().as_nanos() as u64);
        }
    }
    q.disconnect();
    Ok((lat.len() as u64, lat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_random_bytes_repeat_for_a_seed() {
        let a = random_bytes(7, 1001);
        assert_eq!(a.len(), 1001);
        assert_eq!(a, random_bytes(7, 1001));
        assert_ne!(a, random_bytes(8, 1001));
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn test_latency_statistics() {
        let mut ns: Vec<u64> = (1..=1000).rev().map(|us| us * 1000).collect();
        let l = latency(&mut ns);
        assert_eq!((l.min, l.max), (1.0, 1000.0));
        assert_eq!(l.mean, 500.5);
        assert_eq!((l.p50, l.p99, l.p999), (501.0, 991.0, 1000.0));
        assert_eq!(latency(&mut []), Latency::default());
    }

    #[test]
    fn test_fio_summary() {
        let r = BenchReport {
            spec: BenchSpec {
                pattern: Pattern::RandRead,
                block_size: 4096,
                depth: 32,
                duration: Duration::from_secs(1),
                seed: 1,
            },
            queues: 1,
            ios: 25_600,
            bytes: 25_600 * 4096,
            elapsed: Duration::from_secs(1),
            latency: Latency::default(),
        };
        let s = r.fio_summary();
        assert!(
            s.starts_with("randread: (g=0): rw=randread, bs=(R) 4096B-4096B"),
            "{s}"
        );
        assert!(
            s.contains("read: IOPS=25.6k, BW=100MiB/s (105MB/s)(100MiB/1000msec)"),
            "{s}"
        );
    }
}
