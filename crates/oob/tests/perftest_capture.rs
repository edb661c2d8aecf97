//! perftest's out-of-band protocol against real captures (perftest 4.5-0.17 on Linux rxe).
//!
//! Level of comparison: the captures show exactly one protocol message per TCP segment (the
//! exchange is lock-step, so the kernel never had two messages of one side queued at once,
//! except `key` + `done` at the close, which also went out as two segments). Our sessions
//! write each message with one `write` call. So "captured segments of one side" and "our
//! write calls of that side" are the same unit, and we compare them one to one, byte for
//! byte; between the two sides only the lock-step order matters, and the `done` messages
//! are compared as a set because their order on the wire is a race (both capture orders
//! occur; nobody reads `done` before writing its own).

mod common;

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{crate_file, repo_file, tcp_conns, Conn, Dir};
use softrdma_oob::perftest::{
    parse_mtu, BwReport, KeySchedule, PerftestDest, PerftestSession, PerftestVersion, Role,
    SysData, Test, DONE, KEY_MSG_LEN, VERSION_LEN,
};
use softrdma_oob::{Error, Gid};

const PORT: u16 = 18515;
/// `-a` runs every power of two from 2 to 2^23.
const ALL_SIZES: usize = 23;

/// A captured connection and what produced it.
struct Case {
    name: String,
    test: Test,
    qps: usize,
    run_all: bool,
    conn: Conn,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (file, test) in [
        ("rc_write.pcap", Test::WriteBw),
        ("rc_read.pcap", Test::ReadBw),
        ("atomic_fa.pcap", Test::AtomicBw),
    ] {
        let conns = tcp_conns(&repo_file(&format!("testdata/conformance/{file}")), PORT);
        assert_eq!(conns.len(), 1, "{file}");
        out.push(Case {
            name: file.to_string(),
            test,
            qps: 1,
            run_all: false,
            conn: conns.into_iter().next().unwrap(),
        });
    }
    // tests/data/README.md lists these in order
    let lab = [
        (Test::SendLat, 1, false),
        (Test::WriteLat, 1, false),
        (Test::ReadLat, 1, false),
        (Test::AtomicLat, 1, false),
        (Test::SendBw, 1, false),
        (Test::WriteBw, 2, false),
        (Test::SendLat, 1, true),
        (Test::WriteBw, 1, true),
        (Test::SendBw, 1, true),
        (Test::WriteLat, 1, true),
        (Test::SendBw, 2, false),
        (Test::ReadLat, 1, true),
        (Test::AtomicBw, 2, false),
    ];
    let conns = tcp_conns(&crate_file("tests/data/perftest_oob.pcap"), PORT);
    assert_eq!(conns.len(), lab.len());
    for (i, ((test, qps, run_all), conn)) in lab.into_iter().zip(conns).enumerate() {
        out.push(Case {
            name: format!(
                "perftest_oob.pcap #{} {test:?} -q {qps}{}",
                i + 1,
                if run_all { " -a" } else { "" }
            ),
            test,
            qps,
            run_all,
            conn,
        });
    }
    out
}

/// The (sender, size) sequence the schedule predicts, `done` excluded.
fn predicted_sizes(s: &KeySchedule, sizes: usize) -> Vec<(Dir, usize)> {
    let mut v = Vec::new();
    let both = |v: &mut Vec<(Dir, usize)>, n: usize| {
        v.push((Dir::C, n));
        v.push((Dir::S, n));
    };
    both(&mut v, VERSION_LEN);
    both(&mut v, 4);
    both(&mut v, 4);
    both(&mut v, 2);
    for _ in 0..s.setup_keys {
        both(&mut v, KEY_MSG_LEN);
    }
    for _ in 0..sizes {
        for _ in 0..s.keys_before_size + s.keys_after_size {
            both(&mut v, KEY_MSG_LEN);
        }
    }
    if s.bw_report {
        both(&mut v, KEY_MSG_LEN);
        for _ in 0..5 {
            both(&mut v, 8);
        }
    }
    if s.close {
        both(&mut v, KEY_MSG_LEN);
    }
    v
}

#[test]
fn schedules_predict_every_captured_sequence() {
    for c in cases() {
        let sched = c.test.schedule(c.qps, c.run_all);
        let sizes = if c.run_all { ALL_SIZES } else { 1 };
        let mut got = c.conn.sizes();
        if sched.close {
            let tail = got.split_off(got.len() - 2);
            assert!(
                tail == [(Dir::S, 5), (Dir::C, 5)] || tail == [(Dir::C, 5), (Dir::S, 5)],
                "{}: done tail {tail:?}",
                c.name
            );
        }
        assert_eq!(got, predicted_sizes(&sched, sizes), "{}", c.name);
    }
}

#[test]
fn every_captured_message_parses_and_reformats_exactly() {
    let mut keys = 0;
    for c in cases() {
        for (dir, m) in &c.conn.segments {
            match m.len() {
                VERSION_LEN => assert_eq!(m[..], PerftestVersion::CURRENT.as_bytes()[..]),
                KEY_MSG_LEN => {
                    let d = PerftestDest::parse(m).unwrap();
                    assert_eq!(d.format().unwrap()[..], m[..], "{}", c.name);
                    // the lab's GIDs: client 10.88.0.12, server 10.88.0.11, index 1
                    let ip = if *dir == Dir::C { 12 } else { 11 };
                    assert_eq!(d.gid, Gid::from_ipv4_mapped([10, 88, 0, ip].into()));
                    assert_eq!(d.gid.to_string(), format!("::ffff:10.88.0.{ip}"));
                    keys += 1;
                }
                2 => assert_eq!(parse_mtu(m), Ok(3)),
                5 => assert_eq!(&m[..], DONE),
                4 | 8 => {}
                n => panic!("{}: unexpected message size {n}", c.name),
            }
        }
    }
    assert!(keys > 100);
    // the bandwidth report of rc_write.pcap's client: 4096 B x 20 iterations
    let w = &cases()[0].conn;
    let eights: Vec<_> = w
        .sent_by(Dir::C)
        .into_iter()
        .filter(|m| m.len() == 8)
        .collect();
    let r = report_from(&eights);
    assert_eq!((r.size, r.iters), (4096, 20));
    assert!((5.0..5.3).contains(&r.bw_peak), "{}", r.bw_peak);
}

fn report_from(f: &[Vec<u8>]) -> BwReport {
    let u = |m: &Vec<u8>| u64::from_be_bytes(m[..].try_into().unwrap());
    BwReport {
        size: u(&f[0]),
        iters: u(&f[1]),
        bw_peak: f64::from_bits(u(&f[2])),
        bw_avg: f64::from_bits(u(&f[3])),
        msg_rate_avg: f64::from_bits(u(&f[4])),
    }
}

/// What a benchmark driver does, step by step, following the schedule. Local values are
/// taken from `locals` (this side's captured messages, in order), so a byte-exact session
/// must reproduce them. Returns the peer's messages as the session decoded them,
/// re-encoded, for comparison with the peer's captured messages.
fn drive<S: Read + Write>(
    mut s: PerftestSession<S>,
    sched: &KeySchedule,
    sizes: usize,
    locals: Vec<Vec<u8>>,
) -> Vec<Vec<u8>> {
    let mut locals: VecDeque<Vec<u8>> = locals.into();
    let mut remote = Vec::new();
    let v = s.exchange_versions().unwrap();
    assert_eq!(
        next(&mut locals)[..],
        PerftestVersion::CURRENT.as_bytes()[..]
    );
    remote.push(v.as_bytes().to_vec());
    let be32 = |m: Vec<u8>| u32::from_be_bytes(m[..].try_into().unwrap());
    let local_sys = SysData {
        cycle_buffer: be32(next(&mut locals)),
        cache_line_size: be32(next(&mut locals)),
    };
    let negotiated = s.exchange_sys_data(local_sys).unwrap();
    let r = s.remote_sys_data().unwrap();
    assert_eq!(negotiated, local_sys.max(r));
    remote.push(r.cycle_buffer.to_be_bytes().to_vec());
    remote.push(r.cache_line_size.to_be_bytes().to_vec());
    let mtu = s
        .exchange_mtu(parse_mtu(&next(&mut locals)).unwrap())
        .unwrap();
    remote.push(vec![b'0' + mtu, 0]); // both sides 3 in the captures: min == remote
    let keys = |s: &mut PerftestSession<S>,
                n: usize,
                remote: &mut Vec<Vec<u8>>,
                locals: &mut VecDeque<Vec<u8>>| {
        for _ in 0..n {
            let local = PerftestDest::parse(&next(locals)).unwrap();
            let r = s.exchange_keys(&local).unwrap();
            remote.push(r.format().unwrap().to_vec());
        }
    };
    keys(&mut s, sched.setup_keys, &mut remote, &mut locals);
    for _ in 0..sizes {
        keys(&mut s, sched.keys_before_size, &mut remote, &mut locals);
        // ... RDMA traffic would run here ...
        keys(&mut s, sched.keys_after_size, &mut remote, &mut locals);
    }
    if sched.bw_report {
        keys(&mut s, 1, &mut remote, &mut locals);
        let f: Vec<Vec<u8>> = (0..5).map(|_| next(&mut locals)).collect();
        let r = s.exchange_bw_report(&report_from(&f)).unwrap();
        remote.push(r.size.to_be_bytes().to_vec());
        remote.push(r.iters.to_be_bytes().to_vec());
        for x in [r.bw_peak, r.bw_avg, r.msg_rate_avg] {
            remote.push(x.to_bits().to_be_bytes().to_vec());
        }
    }
    assert_eq!(
        s.keys_exchanged(),
        sched.setup_keys
            + sizes * (sched.keys_before_size + sched.keys_after_size)
            + usize::from(sched.bw_report)
    );
    if sched.close {
        let local = PerftestDest::parse(&next(&mut locals)).unwrap();
        assert_eq!(&next(&mut locals)[..], DONE);
        s.finish(&local).unwrap();
    } else {
        drop(s.into_inner());
    }
    assert!(locals.is_empty(), "unused captured local messages");
    remote
}

fn next(locals: &mut VecDeque<Vec<u8>>) -> Vec<u8> {
    locals
        .pop_front()
        .expect("ran out of captured local messages")
}

/// The peer's captured messages a driver sees decoded: all but `done` and the final key
/// exchange, whose result [`PerftestSession::finish`] does not return.
fn seen_by_driver(msgs: Vec<Vec<u8>>, sched: &KeySchedule) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = msgs.into_iter().filter(|m| m[..] != DONE[..]).collect();
    if sched.close {
        assert_eq!(v.pop().map(|m| m.len()), Some(KEY_MSG_LEN));
    }
    v
}

/// Plays one side of a captured conversation: writes that side's messages and checks that
/// the other side's arrive byte for byte, in capture order.
fn play(mut stream: TcpStream, conn: &Conn, me: Dir, name: &str) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for (i, (dir, m)) in conn.segments.iter().enumerate() {
        if *dir == me {
            stream.write_all(m).unwrap();
        } else {
            let mut buf = vec![0u8; m.len()];
            stream
                .read_exact(&mut buf)
                .unwrap_or_else(|e| panic!("{name}: segment {i}: {e}"));
            assert_eq!(buf, *m, "{name}: segment {i} differs");
        }
    }
}

#[test]
fn our_client_replays_every_capture_against_the_captured_server() {
    for c in cases() {
        let sched = c.test.schedule(c.qps, c.run_all);
        let sizes = if c.run_all { ALL_SIZES } else { 1 };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let conn = c.conn.clone();
        let name = c.name.clone();
        let peer = thread::spawn(move || play(l.accept().unwrap().0, &conn, Dir::S, &name));
        let s = PerftestSession::connect(addr).unwrap();
        assert_eq!(s.role(), Role::Client);
        let remote = drive(s, &sched, sizes, c.conn.sent_by(Dir::C));
        peer.join().unwrap();
        assert_eq!(
            remote,
            seen_by_driver(c.conn.sent_by(Dir::S), &sched),
            "{}",
            c.name
        );
    }
}

#[test]
fn our_server_replays_every_capture_against_the_captured_client() {
    for c in cases() {
        let sched = c.test.schedule(c.qps, c.run_all);
        let sizes = if c.run_all { ALL_SIZES } else { 1 };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let conn = c.conn.clone();
        let name = c.name.clone();
        let peer =
            thread::spawn(move || play(TcpStream::connect(addr).unwrap(), &conn, Dir::C, &name));
        let s = PerftestSession::accept(&l).unwrap();
        assert_eq!(s.role(), Role::Server);
        let remote = drive(s, &sched, sizes, c.conn.sent_by(Dir::S));
        peer.join().unwrap();
        assert_eq!(
            remote,
            seen_by_driver(c.conn.sent_by(Dir::C), &sched),
            "{}",
            c.name
        );
    }
}

/// Records every `write` call, so we see message boundaries as the peer's `read` would.
struct Recorder {
    inner: TcpStream,
    writes: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
}

impl Write for Recorder {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // accept the whole buffer in one call, so one entry == one write_all by the session
        self.inner.write_all(buf)?;
        self.writes.lock().unwrap().push(buf.to_vec());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[test]
fn loopback_client_and_server_write_exactly_the_captured_messages() {
    for c in cases() {
        let sched = c.test.schedule(c.qps, c.run_all);
        let sizes = if c.run_all { ALL_SIZES } else { 1 };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let srv_writes = Arc::new(Mutex::new(Vec::new()));
        let cli_writes = Arc::new(Mutex::new(Vec::new()));
        let (sw, sched2, srv_locals) = (srv_writes.clone(), sched, c.conn.sent_by(Dir::S));
        let server = thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let rec = Recorder {
                inner: s,
                writes: sw,
            };
            drive(
                PerftestSession::from_stream(rec, Role::Server),
                &sched2,
                sizes,
                srv_locals,
            )
        });
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let rec = Recorder {
            inner: s,
            writes: cli_writes.clone(),
        };
        let cli_remote = drive(
            PerftestSession::from_stream(rec, Role::Client),
            &sched,
            sizes,
            c.conn.sent_by(Dir::C),
        );
        let srv_remote = server.join().unwrap();
        let cli_w = cli_writes.lock().unwrap().clone();
        let srv_w = srv_writes.lock().unwrap().clone();
        assert_eq!(cli_w, c.conn.sent_by(Dir::C), "{}: client writes", c.name);
        assert_eq!(srv_w, c.conn.sent_by(Dir::S), "{}: server writes", c.name);
        assert_eq!(cli_remote, seen_by_driver(srv_w, &sched), "{}", c.name);
        assert_eq!(srv_remote, seen_by_driver(cli_w, &sched), "{}", c.name);
    }
}

#[test]
fn timeout_when_the_server_says_nothing() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    // The server holds the connection, silent, until the client's timeout has been seen:
    // no race between the two waits.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let hold = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let _ = held.recv();
        drop(s);
    });
    let mut s = PerftestSession::connect(addr).unwrap();
    s.set_timeout(Some(Duration::from_millis(50))).unwrap();
    let e = s.exchange_versions().unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    release.send(()).unwrap();
    hold.join().unwrap();
}

#[test]
fn garbage_keys_and_early_close_are_typed_errors() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; KEY_MSG_LEN];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&[b'z'; KEY_MSG_LEN]).unwrap();
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf[..50]).unwrap(); // half a message, then close
    });
    let mut s = PerftestSession::connect(addr).unwrap();
    let local = PerftestDest::default();
    let e = s.exchange_keys(&local).unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e:?}");
    let e = s.exchange_keys(&local).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PeerClosed {
                got: 50,
                expected: KEY_MSG_LEN,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.is_peer_gone());
    peer.join().unwrap();
}

#[test]
fn finish_tolerates_a_peer_that_closes_without_done() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let mut s = PerftestSession::accept(&l).unwrap();
        s.exchange_keys(&PerftestDest::default()).unwrap();
        // close without writing done
    });
    let s = PerftestSession::connect(addr).unwrap();
    s.finish(&PerftestDest::default()).unwrap();
    peer.join().unwrap();
}

#[test]
fn mtu_negotiates_the_minimum_and_refuses_invalid_local_values() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let mut s = PerftestSession::accept(&l).unwrap();
        s.exchange_mtu(5).unwrap()
    });
    let mut s = PerftestSession::connect(addr).unwrap();
    assert!(matches!(s.exchange_mtu(0), Err(Error::Format(_))));
    assert_eq!(s.exchange_mtu(3).unwrap(), 3);
    assert_eq!(peer.join().unwrap(), 3);
}
