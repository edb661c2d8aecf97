//! Soak of rdma_cm (issue 32, item 5): connect/disconnect cycles between two softrdma devices
//! on loopback, each a whole connection's life — resolve, connect with private data, accept,
//! one SEND over the new QPs, disconnect from the client, the server's answer, both ids and
//! QPs destroyed — while the process's open file descriptors, threads and RSS are watched:
//! after a warm-up they must stay flat (descriptors and threads exactly, RSS within 10 %).
//!
//! Two phases of `SOFTRDMA_CM_SOAK_CYCLES` cycles each (default 200, for CI; `scripts/soak.sh`
//! runs 10 000): in the first the client keeps its device (an id bound on its address holds
//! the device and its CM service, as a long-lived program does), in the second every cycle
//! opens the client's device and closes it again (its socket, CM service, threads: a program
//! run again and again). The server's listener lives throughout. Run with `--nocapture` for
//! the figures. Addresses 127.0.63.x.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use softrdma::{wr, AccessFlags, CompletionQueue, QpInitAttr, QueuePair, WcOpcode, WcStatus};
use softrdma_rdmacm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RdmaQpType};

const WAIT: Duration = Duration::from_secs(10);
const CLIENT: &str = "127.0.63.1";
const SERVER: &str = "127.0.63.2:7471";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Open file descriptors of this process.
fn fds() -> usize {
    // The directory's own descriptor is among them, every time.
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// What the open file descriptors are, by kind ("socket", "anon_inode", a path), counted.
fn fd_kinds() -> String {
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let target = std::fs::read_link(e.path())
            .map_or_else(|_| "?".to_owned(), |t| t.display().to_string());
        let kind = target.split(':').next().unwrap_or("?").to_owned();
        *kinds.entry(kind).or_default() += 1;
    }
    format!("{kinds:?}")
}

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Resident set size in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Time-wait exits seen (ids in time-wait when they were destroyed get none: the count is
/// only reported).
#[derive(Default)]
struct Tally {
    timewait_exits: u64,
}

/// The next event on `ch` other than a time-wait exit.
fn next(ch: &EventChannel, tally: &mut Tally, what: &str) -> CmEvent {
    loop {
        let e = ch
            .get_event(Some(WAIT))
            .unwrap_or_else(|| panic!("no event within {WAIT:?} waiting for {what}"));
        if e.kind == CmEventKind::TimewaitExit {
            tally.timewait_exits += 1;
            continue;
        }
        return e;
    }
}

fn qp_for(id: &CmId) -> (QueuePair, CompletionQueue) {
    let pd = id.pd().unwrap();
    let cq = id.device().unwrap().create_cq(16).unwrap();
    let qp = id.create_qp(&pd, &QpInitAttr::rc(&cq)).unwrap();
    (qp, cq)
}

fn wait_wc(cq: &CompletionQueue, what: &str) -> softrdma::WorkCompletion {
    let mut out = Vec::new();
    cq.poll_blocking(1, &mut out, Some(WAIT));
    let wc = *out
        .first()
        .unwrap_or_else(|| panic!("no completion for {what}"));
    assert_eq!(wc.status, WcStatus::Success, "{what}: {wc:?}");
    wc
}

/// One connection's whole life.
fn cycle(n: u64, sch: &EventChannel, cch: &EventChannel, tally: &mut Tally) {
    let c = CmId::new(cch, PortSpace::Tcp, RdmaQpType::Rc);
    c.resolve_addr(Some(addr(&format!("{CLIENT}:0"))), addr(SERVER))
        .unwrap();
    let e = next(cch, tally, "AddrResolved");
    assert_eq!((&e.id, &e.kind), (&c, &CmEventKind::AddrResolved), "{e:?}");
    c.resolve_route().unwrap();
    let e = next(cch, tally, "RouteResolved");
    assert_eq!((&e.id, &e.kind), (&c, &CmEventKind::RouteResolved), "{e:?}");
    let (cqp, ccq) = qp_for(&c);
    c.connect(&ConnParam {
        private_data: n.to_le_bytes().to_vec(),
        ..ConnParam::rc(0)
    })
    .unwrap();

    let req = next(sch, tally, "ConnectRequest");
    let CmEventKind::ConnectRequest { param, .. } = &req.kind else {
        panic!("cycle {n}: {req:?}");
    };
    assert_eq!(param.private_data[..8], n.to_le_bytes(), "cycle {n}");
    let s = req.id.clone();
    drop(req);
    let (sqp, scq) = qp_for(&s);
    let rmr = s.pd().unwrap().reg_mr(8, AccessFlags::LOCAL_WRITE).unwrap();
    sqp.post_recv([wr::recv(n, vec![rmr.sge(0, 8)])]).unwrap();
    s.accept(&ConnParam::rc(0)).unwrap();
    let e = next(cch, tally, "the client's Established");
    assert!(
        e.id == c && matches!(e.kind, CmEventKind::Established { .. }),
        "cycle {n}: {e:?}"
    );
    let e = next(sch, tally, "the server's Established");
    assert!(
        e.id == s && matches!(e.kind, CmEventKind::Established { .. }),
        "cycle {n}: {e:?}"
    );

    // The connection carries data.
    let smr = c.pd().unwrap().reg_mr(8, AccessFlags::LOCAL_WRITE).unwrap();
    smr.write(0, &n.to_le_bytes()).unwrap();
    cqp.post_send([wr::send(n, vec![smr.sge(0, 8)])]).unwrap();
    assert_eq!(wait_wc(&ccq, "the SEND").opcode, WcOpcode::Send);
    let wc = wait_wc(&scq, "the receive");
    assert_eq!((wc.opcode, wc.wr_id, wc.byte_len), (WcOpcode::Recv, n, 8));
    assert_eq!(rmr.read_vec(0, 8).unwrap(), n.to_le_bytes());

    // The client disconnects; the server answers (as rping's does).
    c.disconnect().unwrap();
    let e = next(sch, tally, "the server's Disconnected");
    assert!(
        e.id == s && e.kind == CmEventKind::Disconnected,
        "cycle {n}: {e:?}"
    );
    s.disconnect().unwrap();
    let e = next(cch, tally, "the client's Disconnected");
    assert!(
        e.id == c && e.kind == CmEventKind::Disconnected,
        "cycle {n}: {e:?}"
    );
    // Everything of the connection goes here: QPs, CQs, MRs, ids.
}

/// Runs `cycles` cycles, samples descriptors and RSS, checks them flat; returns the figures.
fn phase(
    name: &str,
    cycles: u64,
    sch: &EventChannel,
    cch: &EventChannel,
    tally: &mut Tally,
) -> String {
    let warm = (cycles / 20).clamp(10, 200);
    let sample_every = (cycles / 50).max(1);
    let began = Instant::now();
    for n in 0..warm {
        cycle(n, sch, cch, tally);
    }
    let ((fd0, threads0), rss0) = (settled(None), rss());
    let (mut fd_max, mut rss_min, mut rss_max) = (fd0, rss0, rss0);
    let timed = Instant::now();
    for n in warm..warm + cycles {
        cycle(n, sch, cch, tally);
        if n % sample_every == 0 {
            let (f, r) = (fds(), rss());
            fd_max = fd_max.max(f);
            rss_min = rss_min.min(r);
            rss_max = rss_max.max(r);
        }
    }
    let per_cycle = timed.elapsed() / cycles as u32;
    // The last connection's teardown (in the second phase, the client device's) may still be
    // under way on a service thread: let it finish.
    let (fd1, threads1) = settled(Some((fd0, threads0)));
    let rss1 = rss();
    rss_min = rss_min.min(rss1);
    rss_max = rss_max.max(rss1);
    let figures = format!(
        "{name}: {cycles} cycles after {warm} of warm-up, {:.1} s, {:.2} ms a cycle; open fds \
         {fd0} after the warm-up, {fd1} at the end (max {fd_max} sampled); RSS {:.1} MiB after \
         the warm-up, {:.1} MiB at the end (sampled min {:.1}, max {:.1} MiB: {:+.1} %); threads \
         {threads0} after the warm-up, {threads1} at the end",
        began.elapsed().as_secs_f64(),
        per_cycle.as_secs_f64() * 1e3,
        mib(rss0),
        mib(rss1),
        mib(rss_min),
        mib(rss_max),
        (rss_max as f64 / rss0 as f64 - 1.0) * 100.0
    );
    println!("{figures}");
    assert_eq!(fd1, fd0, "{figures}; open now: {}", fd_kinds());
    assert_eq!(threads1, threads0, "{figures}");
    assert!(rss_max as f64 <= rss0 as f64 * 1.10, "{figures}");
    figures
}

/// Open descriptors and threads once they are at most `target` (`None`: once they have not
/// changed for 200 ms), waiting up to 5 s: a client device's teardown may still be under way
/// on its CM service's thread.
fn settled(target: Option<(usize, usize)>) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut last, mut since) = ((fds(), threads()), Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = (fds(), threads());
        let stable = now == last && since.elapsed() >= Duration::from_millis(200);
        match target {
            Some(t) if now.0 <= t.0 && now.1 <= t.1 => return now,
            None if stable => return now,
            _ if Instant::now() > deadline => return now,
            _ => {}
        }
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
}

#[test]
fn connect_disconnect_cycles_keep_fds_and_rss_flat() {
    let cycles: u64 = std::env::var("SOFTRDMA_CM_SOAK_CYCLES")
        .ok()
        .map(|s| s.parse().expect("SOFTRDMA_CM_SOAK_CYCLES: a count"))
        .unwrap_or(200);
    let (sch, cch) = (EventChannel::new(), EventChannel::new());
    let listener = CmId::new(&sch, PortSpace::Tcp, RdmaQpType::Rc);
    listener.bind_addr(addr(SERVER)).unwrap();
    listener.listen().unwrap();
    let mut tally = Tally::default();

    // Phase 1: an id bound on the client's address keeps its device and CM service open.
    let keeper = CmId::new(&cch, PortSpace::Tcp, RdmaQpType::Rc);
    keeper.bind_addr(addr(&format!("{CLIENT}:0"))).unwrap();
    phase("client device kept", cycles, &sch, &cch, &mut tally);
    drop(keeper);

    // Phase 2: nothing holds the client's device between cycles.
    phase(
        "client device reopened each cycle",
        cycles,
        &sch,
        &cch,
        &mut tally,
    );
    println!("time-wait exits seen: {}", tally.timewait_exits);
    assert!(sch.try_get_event().is_none() && cch.try_get_event().is_none());
}
