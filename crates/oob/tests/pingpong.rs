//! ibv_rc_pingpong's out-of-band exchange against the captured one (rdma-core 44 on rxe) and
//! between our own client and server over IPv4 and IPv6.
//!
//! rc_send.pcap holds three TCP segments, one per message (52 B client, 52 B server, 5 B
//! `done`); our sessions write each message with one `write`, so segments and our messages
//! compare one to one.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use common::{repo_file, tcp_conns, Conn, Dir};
use softrdma_oob::pingpong::{
    exchange_as_client, exchange_as_client_with_timeout, Listener, PingpongDest, DONE, MSG_LEN,
};
use softrdma_oob::{Error, Gid, DEFAULT_PORT};

fn capture() -> Conn {
    let conns = tcp_conns(
        &repo_file("testdata/conformance/rc_send.pcap"),
        DEFAULT_PORT,
    );
    assert_eq!(conns.len(), 1);
    conns.into_iter().next().unwrap()
}

#[test]
fn captured_sequence_is_client_address_server_address_done() {
    let c = capture();
    assert_eq!(
        c.sizes(),
        [(Dir::C, MSG_LEN), (Dir::S, MSG_LEN), (Dir::C, DONE.len())]
    );
    assert_eq!(c.segments[2].1, DONE);
    let client = PingpongDest::parse(&c.segments[0].1).unwrap();
    let server = PingpongDest::parse(&c.segments[1].1).unwrap();
    assert_eq!(client.gid.to_string(), "::ffff:10.88.0.12");
    assert_eq!(
        server.gid.to_ip(),
        Some(IpAddr::V4(Ipv4Addr::new(10, 88, 0, 11)))
    );
    assert_eq!((client.lid, client.qpn, server.qpn), (0, 0x11, 0x11));
    assert_eq!(client.format().unwrap()[..], c.segments[0].1[..]);
    assert_eq!(server.format().unwrap()[..], c.segments[1].1[..]);
}

/// Plays one side of the capture: writes its messages, checks the other side's byte for byte.
fn play(mut s: TcpStream, conn: &Conn, me: Dir) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for (dir, m) in &conn.segments {
        if *dir == me {
            s.write_all(m).unwrap();
        } else {
            let mut buf = vec![0u8; m.len()];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(buf, *m);
        }
    }
}

#[test]
fn our_client_against_the_captured_server() {
    let c = capture();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let conn = c.clone();
    let peer = thread::spawn(move || play(l.accept().unwrap().0, &conn, Dir::S));
    let local = PingpongDest::parse(&c.segments[0].1).unwrap();
    let remote = exchange_as_client(addr, &local).unwrap();
    peer.join().unwrap();
    assert_eq!(remote, PingpongDest::parse(&c.segments[1].1).unwrap());
}

#[test]
fn our_server_against_the_captured_client() {
    let c = capture();
    let l = Listener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let conn = c.clone();
    let peer = thread::spawn(move || play(TcpStream::connect(addr).unwrap(), &conn, Dir::C));
    let pending = l.accept().unwrap();
    assert_eq!(
        *pending.remote(),
        PingpongDest::parse(&c.segments[0].1).unwrap()
    );
    assert_eq!(pending.peer_addr().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    // ... the QP would go to RTR/RTS here, before we answer ...
    let local = PingpongDest::parse(&c.segments[1].1).unwrap();
    pending.reply(&local).unwrap().wait_done().unwrap();
    peer.join().unwrap();
}

fn loopback(listener: Listener, connect_to: IpAddr) {
    let port = listener.local_addr().unwrap().port();
    let server_dest = PingpongDest {
        lid: 0,
        qpn: 0x12,
        psn: 0xabcdef,
        gid: Gid::from_ip(connect_to),
    };
    let client_dest = PingpongDest {
        lid: 0,
        qpn: 0x11,
        psn: 0x123456,
        gid: Gid::from_ipv4_mapped(Ipv4Addr::new(10, 88, 0, 1)),
    };
    let server = thread::spawn(move || {
        let pending = listener.accept().unwrap();
        let remote = *pending.remote();
        let peer = pending.peer_addr();
        pending.reply(&server_dest).unwrap().wait_done().unwrap();
        (remote, peer)
    });
    let got = exchange_as_client((connect_to, port), &client_dest).unwrap();
    let (remote, peer) = server.join().unwrap();
    assert_eq!(got, server_dest);
    assert_eq!(remote, client_dest);
    assert_eq!(
        peer.ip(),
        connect_to,
        "peer address shown in its own family"
    );
}

#[test]
fn loopback_ipv4() {
    loopback(
        Listener::bind("127.0.0.1:0").unwrap(),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    );
}

#[test]
fn loopback_ipv6_when_available() {
    match Listener::bind("[::1]:0") {
        Ok(l) => loopback(l, "::1".parse().unwrap()),
        Err(e) => eprintln!("no IPv6 loopback here, skipped: {e}"),
    }
}

#[test]
fn dual_stack_listener_accepts_ipv4_clients() {
    // port 0: an ephemeral port, so tests never collide with a real 18515 server
    let l = Listener::bind_port(0).unwrap();
    loopback(l, IpAddr::V4(Ipv4Addr::LOCALHOST));
}

#[test]
fn client_times_out_on_a_silent_server() {
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
    let e = exchange_as_client_with_timeout(
        addr,
        &PingpongDest::default(),
        Some(Duration::from_millis(50)),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    release.send(()).unwrap();
    hold.join().unwrap();
}

#[test]
fn garbage_from_the_server_is_malformed() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; MSG_LEN];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&[0xffu8; MSG_LEN]).unwrap();
    });
    let e = exchange_as_client(addr, &PingpongDest::default()).unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e:?}");
    peer.join().unwrap();
}

#[test]
fn wrong_done_and_early_close_are_typed_errors() {
    let l = Listener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let msg = PingpongDest::default().format().unwrap();
    let peer = thread::spawn(move || {
        // first client: proper address, then "nope\0" instead of "done\0"
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&msg).unwrap();
        let mut buf = [0u8; MSG_LEN];
        s.read_exact(&mut buf).unwrap();
        s.write_all(b"nope\0").unwrap();
        // second client: half an address, then gone
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&msg[..20]).unwrap();
    });
    let e = l
        .accept()
        .unwrap()
        .reply(&PingpongDest::default())
        .unwrap()
        .wait_done()
        .unwrap_err();
    assert!(
        matches!(e, Error::BadDone { got } if &got == b"nope\0"),
        "{e:?}"
    );
    let e = l.accept().unwrap_err();
    assert!(
        matches!(
            e,
            Error::PeerClosed {
                got: 20,
                expected: MSG_LEN,
                ..
            }
        ),
        "{e:?}"
    );
    peer.join().unwrap();
}

#[test]
fn connect_refused_is_an_io_error() {
    // bind then drop to get a port nobody listens on
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = exchange_as_client(("127.0.0.1", port), &PingpongDest::default()).unwrap_err();
    assert!(matches!(e, Error::Io { op: "connect", .. }), "{e:?}");
}
