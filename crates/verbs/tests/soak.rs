//! Soak of the data path (issue 32, item 5): 64 RC QP pairs between two devices on loopback,
//! each running rounds of RDMA WRITE, RDMA READ, SEND/RECV, FETCH_ADD and CMP_SWAP, while one
//! device loses 1 % of the datagrams it sends and, independently, 1 % of those it receives.
//! Every result is checked: each QP owns its slices of both regions and its own counter word,
//! so after each round the written, read and received bytes and both atomics' original values
//! are known exactly. Checked besides: no error completion, RSS flat (within 10 % of its value
//! after a warm-up), and at the end the counters add up — what each device's engine built is
//! what its socket took plus the injected drops, what one socket sent the other received, and
//! what an engine sent is what the peer's engine received plus the injected drops between them.
//!
//! `SOFTRDMA_SOAK_SECS` sets the length (default 5 s, for CI; `scripts/soak.sh` runs 600 s in
//! release mode). Run with `--nocapture` for the figures. Addresses 127.0.62.x.

mod common;

use std::time::{Duration, Instant};

use common::{all_access, open, pattern, Rng};
use softrdma::{
    wr, CompletionQueue, Device, DeviceConfig, DeviceStats, FaultConfig, MemoryRegion, QpInitAttr,
    QpState, QueuePair, WcOpcode, WcStatus, WorkCompletion,
};

const QPS: usize = 64;
/// Each QP's share of each region.
const SLOT: usize = 64 << 10;
/// Offsets within a slot. On the requester (A): the WRITE source, the READ destination, the
/// SEND source and the two atomics' result words; on the responder (B): the WRITE destination,
/// the READ source, the receive buffer and the QP's counter word.
const WRITE_AT: usize = 0;
const READ_AT: usize = 16 << 10;
const SEND_AT: usize = 32 << 10;
const ATOMIC_AT: usize = 36 << 10;
const MAX_RDMA: usize = 16 << 10;
const MAX_SEND: usize = 4 << 10;
const LOSS: f64 = 0.01;
/// Longest any round may wait for its completions before the test calls it a stall.
const STALL: Duration = Duration::from_secs(30);

/// The work requests of a round, in posting order (the low bits of each wr_id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Write = 0,
    Read = 1,
    Send = 2,
    FetchAdd = 3,
    CmpSwap = 4,
    Recv = 5,
}
const KINDS: [Kind; 6] = [
    Kind::Write,
    Kind::Read,
    Kind::Send,
    Kind::FetchAdd,
    Kind::CmpSwap,
    Kind::Recv,
];

impl Kind {
    fn opcode(self) -> WcOpcode {
        match self {
            Kind::Write => WcOpcode::RdmaWrite,
            Kind::Read => WcOpcode::RdmaRead,
            Kind::Send => WcOpcode::Send,
            Kind::FetchAdd => WcOpcode::FetchAdd,
            Kind::CmpSwap => WcOpcode::CompSwap,
            Kind::Recv => WcOpcode::Recv,
        }
    }
}

fn wr_id(round: u64, qp: usize, kind: Kind) -> u64 {
    (round << 16) | ((qp as u64) << 4) | kind as u64
}

fn split_wr_id(id: u64) -> (u64, usize, Kind) {
    (
        id >> 16,
        ((id >> 4) & 0xfff) as usize,
        KINDS[(id & 0xf) as usize],
    )
}

/// One QP pair's round in flight, and what its results must be.
struct Round {
    round: u64,
    started: Instant,
    /// Completions still to come (5 at the requester, 1 at the receiver).
    left: usize,
    seen: [bool; 6],
    write: Vec<u8>,
    read: Vec<u8>,
    send: Vec<u8>,
    /// The counter's value before the FETCH_ADD, the addend, the CMP_SWAP's compare and swap
    /// values and whether the compare matches.
    counter: u64,
    add: u64,
    compare: u64,
    swap: u64,
}

struct Pair {
    a: QueuePair,
    b: QueuePair,
    rng: Rng,
    next_round: u64,
    /// The counter word's value between rounds.
    counter: u64,
    round: Option<Round>,
}

#[derive(Default, Debug)]
struct Ops {
    rounds: u64,
    writes: u64,
    reads: u64,
    sends: u64,
    fetch_adds: u64,
    cmp_swaps_swapped: u64,
    cmp_swaps_failed: u64,
    bytes: u64,
}

struct Soak {
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
    pairs: Vec<Pair>,
    ops: Ops,
}

impl Soak {
    fn start(&mut self, i: usize) {
        let (mr_a, mr_b) = (&self.mr_a, &self.mr_b);
        let p = &mut self.pairs[i];
        let round = p.next_round;
        p.next_round += 1;
        let base = i * SLOT;
        let seed = (i as u64) << 40 | round;
        let write = pattern(1 + p.rng.below(MAX_RDMA as u64) as usize, seed * 3 + 1);
        let read = pattern(1 + p.rng.below(MAX_RDMA as u64) as usize, seed * 3 + 2);
        let send = pattern(1 + p.rng.below(MAX_SEND as u64) as usize, seed * 3 + 3);
        // Sources in place; destinations overwritten, so nothing left from the last round
        // passes for this one's result.
        mr_a.write(base + WRITE_AT, &write).unwrap();
        mr_b.fill(base + WRITE_AT, MAX_RDMA, 0xee).unwrap();
        mr_b.write(base + READ_AT, &read).unwrap();
        mr_a.fill(base + READ_AT, MAX_RDMA, 0xee).unwrap();
        mr_a.write(base + SEND_AT, &send).unwrap();
        mr_b.fill(base + SEND_AT, MAX_SEND, 0xee).unwrap();
        mr_a.write_u64(base + ATOMIC_AT, 0xdead).unwrap();
        mr_a.write_u64(base + ATOMIC_AT + 8, 0xdead).unwrap();
        let add = 1 + p.rng.next() % 1000;
        // One CMP_SWAP in four compares with a value the counter does not hold.
        let compare = if round % 4 == 3 {
            p.counter.wrapping_add(add) ^ 1
        } else {
            p.counter.wrapping_add(add)
        };
        let swap = p.rng.next();
        p.b.post_recv([wr::recv(
            wr_id(round, i, Kind::Recv),
            vec![mr_b.sge(base + SEND_AT, MAX_SEND as u32)],
        )])
        .unwrap();
        let remote = mr_b.remote();
        let at = |off: usize| remote.at((base + off) as u64);
        p.a.post_send([
            wr::write(
                wr_id(round, i, Kind::Write),
                vec![mr_a.sge(base + WRITE_AT, write.len() as u32)],
                at(WRITE_AT),
                remote.rkey,
            ),
            wr::read(
                wr_id(round, i, Kind::Read),
                vec![mr_a.sge(base + READ_AT, read.len() as u32)],
                at(READ_AT),
                remote.rkey,
            ),
            wr::send(
                wr_id(round, i, Kind::Send),
                vec![mr_a.sge(base + SEND_AT, send.len() as u32)],
            ),
            wr::fetch_add(
                wr_id(round, i, Kind::FetchAdd),
                mr_a.sge(base + ATOMIC_AT, 8),
                at(ATOMIC_AT),
                remote.rkey,
                add,
            ),
            wr::compare_swap(
                wr_id(round, i, Kind::CmpSwap),
                mr_a.sge(base + ATOMIC_AT + 8, 8),
                at(ATOMIC_AT),
                remote.rkey,
                compare,
                swap,
            ),
        ])
        .unwrap();
        p.round = Some(Round {
            round,
            started: Instant::now(),
            left: 6,
            seen: [false; 6],
            write,
            read,
            send,
            counter: p.counter,
            add,
            compare,
            swap,
        });
    }

    /// Takes one completion; returns the QP whose round it finished, if it did.
    fn complete(&mut self, wc: &WorkCompletion) -> Option<usize> {
        let (round, i, kind) = split_wr_id(wc.wr_id);
        assert_eq!(wc.status, WcStatus::Success, "{kind:?} of QP {i}: {wc:?}");
        assert_eq!(wc.opcode, kind.opcode(), "{wc:?}");
        let r = self.pairs[i].round.as_mut().expect("a round in flight");
        assert_eq!(r.round, round, "QP {i}: a completion of another round");
        assert!(!r.seen[kind as usize], "QP {i}: {kind:?} completed twice");
        r.seen[kind as usize] = true;
        match kind {
            Kind::Read => assert_eq!(wc.byte_len as usize, r.read.len()),
            Kind::Recv => assert_eq!(wc.byte_len as usize, r.send.len()),
            Kind::FetchAdd | Kind::CmpSwap => assert_eq!(wc.byte_len, 8),
            _ => {}
        }
        r.left -= 1;
        (r.left == 0).then(|| {
            self.check(i);
            i
        })
    }

    /// Checks a finished round's results.
    fn check(&mut self, i: usize) {
        let p = &mut self.pairs[i];
        let r = p.round.take().unwrap();
        let base = i * SLOT;
        let (mr_a, mr_b) = (&self.mr_a, &self.mr_b);
        let ctx = format!("QP {i} round {}", r.round);
        assert!(
            mr_b.read_vec(base + WRITE_AT, r.write.len()).unwrap() == r.write,
            "{ctx}: WRITE"
        );
        assert!(
            mr_a.read_vec(base + READ_AT, r.read.len()).unwrap() == r.read,
            "{ctx}: READ"
        );
        assert!(
            mr_b.read_vec(base + SEND_AT, r.send.len()).unwrap() == r.send,
            "{ctx}: SEND"
        );
        let added = r.counter.wrapping_add(r.add);
        assert_eq!(
            mr_a.read_u64(base + ATOMIC_AT).unwrap(),
            r.counter,
            "{ctx}: FETCH_ADD's original value"
        );
        assert_eq!(
            mr_a.read_u64(base + ATOMIC_AT + 8).unwrap(),
            added,
            "{ctx}: CMP_SWAP's original value"
        );
        let swapped = r.compare == added;
        p.counter = if swapped { r.swap } else { added };
        assert_eq!(
            mr_b.read_u64(base + ATOMIC_AT).unwrap(),
            p.counter,
            "{ctx}: the counter word"
        );
        let o = &mut self.ops;
        o.rounds += 1;
        o.writes += 1;
        o.reads += 1;
        o.sends += 1;
        o.fetch_adds += 1;
        if swapped {
            o.cmp_swaps_swapped += 1;
        } else {
            o.cmp_swaps_failed += 1;
        }
        o.bytes += (r.write.len() + r.read.len() + r.send.len() + 16) as u64;
    }

    fn in_flight(&self) -> usize {
        self.pairs.iter().filter(|p| p.round.is_some()).count()
    }

    fn stalled(&self) -> Option<String> {
        self.pairs.iter().enumerate().find_map(|(i, p)| {
            let r = p.round.as_ref()?;
            (r.started.elapsed() > STALL).then(|| {
                format!(
                    "QP {i} round {} waits since {:?} for {:?} (QP states {:?}/{:?})",
                    r.round,
                    r.started.elapsed(),
                    KINDS
                        .iter()
                        .filter(|k| !r.seen[**k as usize])
                        .collect::<Vec<_>>(),
                    p.a.state(),
                    p.b.state()
                )
            })
        })
    }
}

/// Resident set size in bytes (`/proc/self/statm`'s second field, in pages).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The kernel's UDP receive-buffer drops (`/proc/net/snmp`), for the failure message of a
/// datagram count that does not add up: those are losses no injector counted.
fn udp_rcvbuf_errors() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut lines = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (lines.next()?, lines.next()?);
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Both devices' counters once nothing moves any more (two reads 100 ms apart agree).
fn settled(a: &Device, b: &Device) -> (DeviceStats, DeviceStats) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = (a.stats(), b.stats());
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = (a.stats(), b.stats());
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

#[test]
fn sixty_four_qps_of_mixed_work_under_one_percent_loss() {
    let secs: f64 = std::env::var("SOFTRDMA_SOAK_SECS")
        .ok()
        .map(|s| s.parse().expect("SOFTRDMA_SOAK_SECS: seconds"))
        .unwrap_or(5.0);
    let length = Duration::from_secs_f64(secs);
    // RSS is measured from the end of the warm-up: a tenth of the run, 1 s to 30 s.
    let warm_up = Duration::from_secs_f64((secs / 10.0).clamp(1.0, 30.0));
    let sample_every = Duration::from_millis(if secs > 60.0 { 1000 } else { 250 });

    let faults = FaultConfig {
        loss: LOSS,
        seed: 62,
        ..FaultConfig::NONE
    };
    let dev_a = Device::open(DeviceConfig::new(common::ip("127.0.62.1")).faults(faults)).unwrap();
    let dev_b = open("127.0.62.2");
    let (pd_a, pd_b) = (dev_a.alloc_pd(), dev_b.alloc_pd());
    let cq_a = dev_a.create_cq(4096).unwrap();
    let cq_b = dev_b.create_cq(4096).unwrap();
    let pairs = (0..QPS)
        .map(|i| {
            let qa = pd_a.create_qp(&QpInitAttr::rc(&cq_a)).unwrap();
            let qb = pd_b.create_qp(&QpInitAttr::rc(&cq_b)).unwrap();
            common::connect(&qa, &qb);
            Pair {
                a: qa,
                b: qb,
                rng: Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1)),
                next_round: 0,
                counter: 0,
                round: None,
            }
        })
        .collect();
    let mut soak = Soak {
        cq_a,
        cq_b,
        mr_a: pd_a.reg_mr(QPS * SLOT, all_access()).unwrap(),
        mr_b: pd_b.reg_mr(QPS * SLOT, all_access()).unwrap(),
        pairs,
        ops: Ops::default(),
    };
    let kernel_drops_before = udp_rcvbuf_errors();

    let began = Instant::now();
    for i in 0..QPS {
        soak.start(i);
    }
    let mut baseline: Option<u64> = None;
    let mut samples: Vec<(f64, u64)> = vec![(0.0, rss())];
    let mut next_sample = began + sample_every;
    let mut wcs = Vec::with_capacity(256);
    let mut stopping = false;
    loop {
        let now = Instant::now();
        if now >= next_sample {
            let t = now - began;
            let r = rss();
            samples.push((t.as_secs_f64(), r));
            if baseline.is_none() && t >= warm_up {
                baseline = Some(r);
            }
            next_sample += sample_every;
        }
        stopping |= now - began >= length;
        if stopping && soak.in_flight() == 0 {
            break;
        }
        wcs.clear();
        soak.cq_b.poll(256, &mut wcs);
        if soak.cq_a.poll(256, &mut wcs) == 0 && wcs.is_empty() {
            soak.cq_a
                .poll_blocking(256, &mut wcs, Some(Duration::from_millis(10)));
        }
        for wc in &wcs {
            if let Some(i) = soak.complete(wc) {
                if !stopping {
                    soak.start(i);
                }
            }
        }
        if let Some(stall) = soak.stalled() {
            panic!("{stall}\nA: {:?}\nB: {:?}", dev_a.stats(), dev_b.stats());
        }
    }
    let ran = began.elapsed();
    samples.push((ran.as_secs_f64(), rss()));
    for p in &soak.pairs {
        assert_eq!((p.a.state(), p.b.state()), (QpState::Rts, QpState::Rts));
    }
    assert!(!soak.cq_a.overrun() && !soak.cq_b.overrun());
    assert!(soak.cq_a.is_empty() && soak.cq_b.is_empty());

    // The figures.
    let o = &soak.ops;
    println!(
        "soak: {QPS} QP pairs, {:.1} s, loss {LOSS} both ways on 127.0.62.1",
        ran.as_secs_f64()
    );
    println!(
        "ops: {} rounds: {} WRITE, {} READ, {} SEND/RECV, {} FETCH_ADD, {} CMP_SWAP ({} swapped, \
         {} compare failed); {} ops, {:.0} ops/s, {:.1} MiB of payload",
        o.rounds,
        o.writes,
        o.reads,
        o.sends,
        o.fetch_adds,
        o.cmp_swaps_swapped + o.cmp_swaps_failed,
        o.cmp_swaps_swapped,
        o.cmp_swaps_failed,
        o.rounds * 5,
        (o.rounds * 5) as f64 / ran.as_secs_f64(),
        mib(o.bytes)
    );
    let base = baseline.unwrap_or(samples.last().unwrap().1);
    let after: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= warm_up.as_secs_f64())
        .map(|s| s.1)
        .collect();
    let (min, max) = (
        after.iter().copied().min().unwrap_or(base),
        after.iter().copied().max().unwrap_or(base),
    );
    println!(
        "rss: start {:.1} MiB, after the {:.0} s warm-up {:.1} MiB; {} samples after it: min \
         {:.1} MiB, max {:.1} MiB ({:+.1} % of the post-warm-up value), end {:.1} MiB",
        mib(samples[0].1),
        warm_up.as_secs_f64(),
        mib(base),
        after.len(),
        mib(min),
        mib(max),
        (max as f64 / base as f64 - 1.0) * 100.0,
        mib(samples.last().unwrap().1)
    );

    // Let the last ACKs land, then the counters.
    let (sa, sb) = settled(&dev_a, &dev_b);
    let kernel_drops = udp_rcvbuf_errors()
        .zip(kernel_drops_before)
        .map(|(n, m)| n - m);
    let (ea, ia, eb, ib) = (&sa.engine, &sa.io, &sb.engine, &sb.io);
    println!(
        "A (lossy): engine tx_packets {} rx_packets {}; io tx_datagrams {} rx_datagrams {} \
         tx_errors {}; injected tx_drops {} ({:.3} %) rx_drops {} ({:.3} %); \
         retransmitted_packets {} retransmit_timeouts {} tail_probes {}",
        ea.tx_packets,
        ea.rx_packets,
        ia.tx_datagrams,
        ia.rx_datagrams,
        ia.tx_errors,
        ia.injected_tx_drops,
        100.0 * ia.injected_tx_drops as f64 / ea.tx_packets as f64,
        ia.injected_rx_drops,
        100.0 * ia.injected_rx_drops as f64 / ia.rx_datagrams as f64,
        ea.retransmitted_packets,
        ea.retransmit_timeouts,
        ea.tail_probes
    );
    println!(
        "B: engine tx_packets {} rx_packets {}; io tx_datagrams {} rx_datagrams {} tx_errors {}; \
         retransmitted_packets {} duplicate_requests {} atomics_executed {} atomics_replayed {} \
         reads_served {}",
        eb.tx_packets,
        eb.rx_packets,
        ib.tx_datagrams,
        ib.rx_datagrams,
        ib.tx_errors,
        eb.retransmitted_packets,
        eb.duplicate_requests,
        eb.atomics_executed,
        eb.atomics_replayed,
        eb.reads_served
    );
    println!("kernel UDP RcvbufErrors during the run: {kernel_drops:?}");
    let nonzero = |s: &DeviceStats| {
        s.counters()
            .into_iter()
            .filter(|(_, n)| *n != 0)
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("A counters: {}", nonzero(&sa));
    println!("B counters: {}", nonzero(&sb));

    // Every completion was checked above; now the memory: RSS flat after the warm-up.
    assert!(
        max as f64 <= base as f64 * 1.10,
        "RSS grew from {:.1} MiB to {:.1} MiB: {samples:?}",
        mib(base),
        mib(max)
    );
    // Loss on both of A's paths, at about the rate asked for, and RC repaired it.
    assert!(
        ia.injected_tx_drops > 0 && ia.injected_rx_drops > 0,
        "{ia:?}"
    );
    assert!(ea.retransmitted_packets > 0);
    for (drops, of) in [
        (ia.injected_tx_drops, ea.tx_packets),
        (ia.injected_rx_drops, ia.rx_datagrams),
    ] {
        let rate = drops as f64 / of as f64;
        assert!(
            of < 20_000 || (0.5 * LOSS..1.5 * LOSS).contains(&rate),
            "{drops} of {of} dropped"
        );
    }
    // Only losses were injected: nothing duplicated, corrupted or held back.
    assert_eq!(
        (
            ia.injected_tx_duplicates + ia.injected_rx_duplicates,
            ia.injected_tx_corruptions + ia.injected_rx_corruptions,
            ia.injected_tx_delays + ia.injected_rx_delays
        ),
        (0, 0, 0)
    );
    // What each engine built is what its socket took plus what injection dropped (and what a
    // failed send lost, counted and retransmitted).
    assert_eq!(
        ea.tx_packets,
        ia.tx_datagrams + ia.injected_tx_drops + ia.tx_errors,
        "A: {ia:?}"
    );
    assert_eq!(eb.tx_packets, ib.tx_datagrams + ib.tx_errors, "B: {ib:?}");
    // Loopback loses nothing else: each socket received what the other sent.
    assert_eq!(
        ib.rx_datagrams, ia.tx_datagrams,
        "A→B datagrams (kernel receive-buffer drops: {kernel_drops:?})"
    );
    assert_eq!(
        ia.rx_datagrams, ib.tx_datagrams,
        "B→A datagrams (kernel receive-buffer drops: {kernel_drops:?})"
    );
    // End to end: sent = received + injected drops, both ways.
    assert_eq!(
        ea.tx_packets,
        eb.rx_packets + ia.injected_tx_drops + ia.tx_errors
    );
    assert_eq!(
        eb.tx_packets,
        ea.rx_packets + ia.injected_rx_drops + ib.tx_errors
    );
    // No error on the socket, nothing the engines dropped as malformed.
    assert_eq!(ia.tx_errors + ib.tx_errors + ia.rx_errors + ib.rx_errors, 0);
    assert_eq!(ia.rx_truncated + ib.rx_truncated, 0);
    assert_eq!(ea.cq_overruns + eb.cq_overruns, 0);
}
