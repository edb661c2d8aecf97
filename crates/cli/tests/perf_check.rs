//! The data check between softrdma peers (issue 15, item 6), against faults only a peer can
//! commit: the test plays one side itself, with the softrdma library and perftest's
//! out-of-band exchange, marked as a softrdma device the way `softrdma perf` marks itself
//! (PSN and buffer address, see `perf/check.rs`), and misbehaves on purpose — it loses a
//! WRITE, misplaces one, serves READs wrong bytes in the middle of a run, or sends a
//! ping-pong message with another message's stamp. The real
//! `softrdma perf` on the other side must notice and say what it saw, exit status 1.
//!
//! Before the fix the passive WRITE server compared every slot with one pattern, the same on
//! every cycle, and the READ client compared its landing buffer only at the end: a WRITE lost
//! after the first cycle, and READs returning wrong bytes in the middle of a run, went
//! unnoticed.

use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use softrdma::{
    wr, AccessFlags, ConnectOptions, Device, DeviceConfig, MemoryRegion, Mtu, Psn, QpAttr,
    QpEndpoint, QpInitAttr, QueuePair, WcStatus,
};
use softrdma_oob::perftest::{BwReport, PerftestDest, PerftestSession, Role, SysData, Test};

/// Where softrdma's perftest buffer starts within its page (its mark).
const VADDR_TAG: u64 = 0x5c0;

/// softrdma's PSN mark: the low byte hashes the upper 16 bits.
fn marked_psn(psn: u32) -> u32 {
    let hi = psn & 0xff_ff00;
    hi | ((hi >> 8).wrapping_mul(0x9d) ^ 0x5c) & 0xff
}

/// The byte softrdma's data pattern has at `offset`.
fn pattern(offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len)
        .map(|o| ((o % 251) as u8) ^ ((o / 251) as u8))
        .collect()
}

/// Message `seq` of QP 0, stamped, at cycle offset `off`.
fn stamped(seq: u64, size: usize, off: usize) -> Vec<u8> {
    let mut v = pattern(off, size);
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&seq.to_le_bytes());
    s[12..].copy_from_slice(b"sRdM");
    let n = size.min(16);
    v[..n].copy_from_slice(&s[..n]);
    v
}

/// Kills the child unless it was waited for.
struct Proc(Option<Child>);

impl Proc {
    fn perf(args: &[&str]) -> Proc {
        let child = Command::new(env!("CARGO_BIN_EXE_softrdma"))
            .arg("perf")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn softrdma");
        Proc(Some(child))
    }

    /// (exit code, stdout, stderr), within `limit`.
    fn finish(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let mut child = self.0.take().expect("child");
        let deadline = Instant::now() + limit;
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The test's side: a device, one QP, and a region laid out like softrdma's (target slot at
/// `VADDR_TAG + buf`).
struct Side {
    _dev: Device,
    qp: QueuePair,
    cq: softrdma::CompletionQueue,
    mr: MemoryRegion,
    my: PerftestDest,
}

const BUF: u64 = 4096;

fn side(ip: &str, sess: &mut PerftestSession<TcpStream>, out_reads: u16) -> (Side, PerftestDest) {
    let dev = Device::open(DeviceConfig::new(ip.parse().unwrap())).expect("device");
    sess.exchange_versions().unwrap();
    sess.exchange_sys_data(SysData::default()).unwrap();
    let mtu = sess.exchange_mtu(5).unwrap();
    let pd = dev.alloc_pd();
    let mr = pd
        .reg_mr(
            (VADDR_TAG + 2 * BUF) as usize,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = pd.create_qp(&QpInitAttr::rc(&cq)).unwrap();
    let my = PerftestDest {
        lid: 0,
        out_reads,
        qpn: qp.qp_num(),
        psn: marked_psn(qp.local_psn()),
        rkey: mr.rkey(),
        vaddr: mr.addr() + VADDR_TAG + BUF,
        gid: dev.gid(),
        srqn: 0,
    };
    let rem = sess.exchange_keys(&my).unwrap();
    let opts = ConnectOptions {
        path_mtu: Mtu::from_ibv_enum(mtu),
        max_rd_atomic: 16,
        // What `out_reads` promised the peer: it may have that many READs outstanding.
        max_dest_rd_atomic: u8::try_from(out_reads.max(1)).unwrap_or(u8::MAX),
        ..ConnectOptions::default()
    };
    let ep = QpEndpoint {
        gid: rem.gid,
        qpn: rem.qpn,
        psn: rem.psn,
    };
    qp.to_init(opts.access).unwrap();
    qp.to_rtr(&ep, &opts).unwrap();
    qp.modify(&QpAttr::rc_rts(
        Psn::new(my.psn),
        opts.timeout,
        opts.retry_cnt,
        opts.rnr_retry,
        opts.max_rd_atomic,
    ))
    .unwrap();
    for _ in 1..Test::WriteBw.schedule(1, false).setup_keys {
        sess.exchange_keys(&my).unwrap();
    }
    (
        Side {
            _dev: dev,
            qp,
            cq,
            mr,
            my,
        },
        rem,
    )
}

fn connect(ip: &str, port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect((ip, port)) {
            Ok(s) => return s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("connect: {e}"),
        }
    }
}

/// What the test client does wrong in a write-bw run.
#[derive(Clone, Copy)]
enum WriteFault {
    None,
    /// WRITE `seq` is never posted (but counted).
    Lose(u64),
    /// WRITE `seq` goes one position further.
    Misplace(u64),
}

/// A softrdma `perf write-bw` server, and the test as its client: `ITERS` stamped 64-byte
/// WRITEs over perftest's 64 cycle positions, one of them wronged as `fault` says.
fn write_bw_with(port: u16, fault: WriteFault) -> (Option<i32>, String, String) {
    const ITERS: u64 = 300;
    const SIZE: usize = 64;
    let server = Proc::perf(&[
        "write-bw",
        "--bind",
        "127.0.66.11",
        "-p",
        &port.to_string(),
        "-s",
        "64",
        "-n",
        "300",
        "--check",
        "--timeout",
        "20",
    ]);
    let stream = connect("127.0.66.11", port);
    let trailer = stream.try_clone().unwrap();
    let mut sess = PerftestSession::from_stream(stream, Role::Client);
    sess.set_timeout(Some(Duration::from_secs(20))).unwrap();
    let (c, rem) = side("127.0.66.12", &mut sess, 1);
    for seq in 0..ITERS {
        let mut pos = seq % (BUF / SIZE as u64);
        match fault {
            WriteFault::Lose(s) if s == seq => continue,
            WriteFault::Misplace(s) if s == seq => pos += 1,
            _ => {}
        }
        let off = (pos * SIZE as u64) as usize;
        c.mr.write(0, &stamped(seq, SIZE, off)).unwrap();
        c.qp.post_send([wr::write(
            seq,
            vec![c.mr.sge(0, SIZE as u32)],
            rem.vaddr + off as u64,
            rem.rkey,
        )])
        .unwrap();
        let mut wcs = Vec::new();
        c.cq.poll_blocking(1, &mut wcs, Some(Duration::from_secs(20)));
        assert_eq!(wcs.first().map(|w| w.status), Some(WcStatus::Success));
    }
    sess.exchange_keys(&c.my).unwrap();
    let report = BwReport {
        size: SIZE as u64,
        iters: ITERS,
        bw_peak: 1.0,
        bw_avg: 1.0,
        msg_rate_avg: 1.0,
    };
    sess.exchange_bw_report(&report).unwrap();
    sess.finish(&c.my).unwrap();
    let mut counts = b"sRdMchk1".to_vec();
    counts.extend(1u32.to_be_bytes());
    counts.extend(ITERS.to_be_bytes());
    (&trailer).write_all(&counts).unwrap();
    server.finish(Duration::from_secs(30))
}

#[test]
fn write_bw_server_verifies_the_last_write_at_every_position() {
    let (code, out, err) = write_bw_with(19811, WriteFault::None);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains(" Data check      : OK (the last WRITE at each of 64 target positions landed intact, 300 64-byte WRITEs stamped"),
        "{out}"
    );
    // WRITE 260 is the last of the five aimed at position 4 (260 = 4 + 4 * 64).
    let (code, out, err) = write_bw_with(19812, WriteFault::Lose(260));
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("data check failed: QP index 0: WRITE 260 (the last of 300 aimed at offset 256) is missing: it holds what looks like WRITE 196"),
        "{err}"
    );
    // WRITE 270, the last at position 14, lands at position 15 instead.
    let (code, out, err) = write_bw_with(19813, WriteFault::Misplace(270));
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("WRITE 270 (the last of 300 aimed at offset 896) is missing: it holds what looks like WRITE 206"),
        "{err}"
    );
}

/// A `perf read-bw` client against the test as a passive softrdma server whose READ source
/// holds wrong bytes for most of the run and the right ones at its end: only a check of each
/// READ as it lands notices.
#[test]
fn read_client_verifies_reads_as_they_land() {
    let port = 19814u16;
    let listener = std::net::TcpListener::bind(("127.0.66.13", port)).unwrap();
    let mut client = Proc::perf(&[
        "read-bw",
        "127.0.66.13",
        "-p",
        &port.to_string(),
        "--bind",
        "127.0.66.14",
        "-s",
        "64",
        "-n",
        "2000",
        "--check",
        "--timeout",
        "20",
    ]);
    let (stream, _) = listener.accept().unwrap();
    let mut sess = PerftestSession::from_stream(stream, Role::Server);
    sess.set_timeout(Some(Duration::from_secs(20))).unwrap();
    let (s, _) = side("127.0.66.13", &mut sess, 128);
    let source = (VADDR_TAG + BUF) as usize;
    s.mr.write(source, &vec![0u8; BUF as usize]).unwrap();
    // Serve wrong bytes until the client is nearly done, then the right ones.
    let dev = s.qp.device().clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    let running = |c: &mut Proc| {
        c.0.as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    };
    while dev.stats().engine.reads_served < 1800
        && Instant::now() < deadline
        && running(&mut client)
    {
        std::thread::yield_now();
    }
    s.mr.write(source, &pattern(0, BUF as usize)).unwrap();
    let sched = Test::ReadBw.schedule(1, false);
    if sched.bw_report {
        let _ = sess.exchange_keys(&s.my);
        let _ = sess.exchange_bw_report(&BwReport::default());
    }
    let _ = sess.finish(&s.my);
    let (code, out, err) = client.finish(Duration::from_secs(30));
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("data check failed: READ 0 of QP index 0 (64 bytes from offset 0) completed, but byte 1 differs from the server's"),
        "{err}"
    );
}

/// A `perf send-lat` server, and the test as its client: 8-byte stamped SENDs, message 20
/// carrying message 21's stamp. The server checks each message after it has answered it
/// (the check is not on the ping-pong's path), and must still name the bad one.
#[test]
fn send_lat_server_checks_every_message_after_answering_it() {
    const SIZE: usize = 8;
    let port = 19815u16;
    let server = Proc::perf(&[
        "send-lat",
        "--bind",
        "127.0.66.15",
        "-p",
        &port.to_string(),
        "-s",
        "8",
        "-n",
        "100",
        "--check",
        "--timeout",
        "20",
    ]);
    let stream = connect("127.0.66.15", port);
    let mut sess = PerftestSession::from_stream(stream, Role::Client);
    sess.set_timeout(Some(Duration::from_secs(20))).unwrap();
    let (c, _rem) = side("127.0.66.16", &mut sess, 1);
    // send-lat's one exchange before the size's run.
    sess.exchange_keys(&c.my).unwrap();
    let answer_at = 2 * BUF as usize;
    for seq in 0..30u64 {
        c.qp.post_recv([wr::recv(1000 + seq, vec![c.mr.sge(answer_at, SIZE as u32)])])
            .unwrap();
        let stamp = if seq == 20 { seq + 1 } else { seq };
        c.mr.write(0, &stamped(stamp, SIZE, 0)).unwrap();
        c.qp.post_send([wr::send(seq, vec![c.mr.sge(0, SIZE as u32)])])
            .unwrap();
        // The send's completion and the answer (the server stops answering once it has
        // found the bad message).
        let mut wcs = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while wcs.len() < 2 && Instant::now() < deadline {
            c.cq.poll_blocking(2 - wcs.len(), &mut wcs, Some(Duration::from_millis(100)));
        }
        if wcs.len() < 2 {
            break;
        }
    }
    let (code, out, err) = server.finish(Duration::from_secs(30));
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("data check failed: message 20 on QP index 0: it carries message 21's stamp"),
        "{err}"
    );
}
