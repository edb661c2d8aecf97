//! perftest's rdma_cm mode (`-R`) as rxe runs it (`ib_write_bw -R`, `ib_send_bw -R` between
//! two rxe guests, `testdata/conformance/{write,send}_bw_cm.pcap`): the out-of-band messages
//! are SENDs on the first rdma_cm connection's QPs, in the sizes and order of the TCP
//! exchange plus two barriers around the test QPs' connections; the keys are `struct
//! pingpong_dest` in network order; there is no `done`. A [`PerftestSession::over_rdma_cm`]
//! client fed rxe's server messages writes what rxe's client wrote, byte for byte (but the
//! padding perftest leaves uninitialised), and decodes rxe's keys.

mod common;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::rc::Rc;

use common::{gsi_mads, roce_packets};
use softrdma_oob::perftest::{
    BwReport, PerftestDest, PerftestSession, Role, SysData, Test, RDMA_CM_KEY_LEN,
};
use softrdma_wire::mad::cm::{attr, Rep};
use softrdma_wire::mad::Mad;
use softrdma_wire::Opcode;

/// The control QP's messages of a capture: (client's, server's), each in order.
fn control_messages(capture: &str) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let client: IpAddr = gsi_mads(capture)[0].src;
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for p in roce_packets(capture) {
        // The test QPs of these runs carry 4096-byte messages (never SEND_ONLY at MTU 1024).
        if p.opcode == Opcode::RC_SEND_ONLY {
            if p.src == client {
                c.push(p.payload);
            } else {
                s.push(p.payload);
            }
        }
    }
    (c, s)
}

/// A stream that reads the peer's recorded messages and records what is written, one entry
/// per write (a SEND each, over rdma_cm).
struct Script {
    incoming: VecDeque<u8>,
    written: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl Read for Script {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.incoming.len());
        for (b, x) in buf.iter_mut().zip(self.incoming.drain(..n)) {
            *b = x;
        }
        Ok(n)
    }
}

impl Write for Script {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written.borrow_mut().push(buf.to_vec());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn be_u32(m: &[u8]) -> u32 {
    u32::from_be_bytes(m.try_into().unwrap())
}

fn be_u64(m: &[u8]) -> u64 {
    u64::from_be_bytes(m.try_into().unwrap())
}

/// Equal but for the four padding bytes of a key message (perftest's stack garbage) and
/// its `gid_index` word (we send ours; nobody reads it).
fn same_message(ours: &[u8], theirs: &[u8]) -> bool {
    if ours.len() != RDMA_CM_KEY_LEN {
        return ours == theirs;
    }
    ours.len() == theirs.len() && ours[..20] == theirs[..20] && ours[24..52] == theirs[24..52]
}

/// Replays a capture's client with our session and checks every message.
fn replay_client(capture: &str, test: Test) {
    let (client, server) = control_messages(capture);
    let sched = test.schedule(1, false);
    // versions, sys data ×2, MTU, two barriers, the setup keys, the per-size keys, then the
    // report (a key and five words) and the close (one key).
    let keys_before = 2 + sched.setup_keys + sched.keys_before_size + sched.keys_after_size;
    let expected = 4 + keys_before + if sched.bw_report { 6 } else { 0 } + 1;
    assert_eq!(client.len(), expected, "{capture}: client messages");
    assert_eq!(server.len(), expected, "{capture}: server messages");
    let sizes: Vec<usize> = client.iter().map(Vec::len).collect();
    assert_eq!(&sizes[..4], &[16, 4, 4, 2], "{capture}");
    assert!(
        sizes[4..4 + keys_before].iter().all(|&n| n == 56),
        "{capture}"
    );
    assert_eq!(
        *sizes.last().unwrap(),
        56,
        "{capture}: the close is a key, no done"
    );

    let written = Rc::new(RefCell::new(Vec::new()));
    let script = Script {
        incoming: server.iter().flatten().copied().collect(),
        written: written.clone(),
    };
    let mut s = PerftestSession::over_rdma_cm(script, Role::Client, 1);
    s.exchange_versions().unwrap();
    s.exchange_sys_data(SysData {
        cycle_buffer: be_u32(&client[1]),
        cache_line_size: be_u32(&client[2]),
    })
    .unwrap();
    s.exchange_mtu(client[3][0] - b'0').unwrap();
    let mut at = 4;
    let mut rxe_keys = Vec::new();
    for _ in 0..keys_before {
        let mine = PerftestDest::from_rdma_cm_bytes(&client[at]).unwrap();
        rxe_keys.push(s.exchange_keys(&mine).unwrap());
        at += 1;
    }
    if sched.bw_report {
        let mine = PerftestDest::from_rdma_cm_bytes(&client[at]).unwrap();
        s.exchange_keys(&mine).unwrap();
        let w: Vec<u64> = client[at + 1..at + 6].iter().map(|m| be_u64(m)).collect();
        let report = BwReport {
            size: w[0],
            iters: w[1],
            bw_peak: f64::from_bits(w[2]),
            bw_avg: f64::from_bits(w[3]),
            msg_rate_avg: f64::from_bits(w[4]),
        };
        s.exchange_bw_report(&report).unwrap();
        // The client's report says what ran: -s 4096 -n 10.
        assert_eq!((report.size, report.iters), (4096, 10), "{capture}");
        at += 6;
    }
    let last = PerftestDest::from_rdma_cm_bytes(&client[at]).unwrap();
    s.finish(&last).unwrap();
    let written = written.borrow();
    assert_eq!(written.len(), client.len(), "{capture}");
    for (i, (ours, theirs)) in written.iter().zip(&client).enumerate() {
        assert!(
            same_message(ours, theirs),
            "{capture}: message {i} differs:\n ours {ours:02x?}\n rxe  {theirs:02x?}"
        );
    }

    // rxe's keys: the barriers are all zeros; the real ones carry the server's test QP (the
    // second connection's QPN, from its REP) and its IPv4-mapped GID.
    assert_eq!(rxe_keys[0], PerftestDest::default(), "{capture}");
    assert_eq!(rxe_keys[1], PerftestDest::default(), "{capture}");
    let key = rxe_keys[2];
    let server_ip = match gsi_mads(capture)[0].dst {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(_) => panic!("IPv4 lab"),
    };
    assert_eq!(key.gid.to_ip(), Some(IpAddr::V4(server_ip)), "{capture}");
    let data_rep_qpn = gsi_mads(capture)
        .iter()
        .filter(|m| m.src == IpAddr::V4(server_ip))
        .filter_map(|m| {
            let mad = Mad::parse(&m.mad).ok()?;
            (mad.header.attr_id == attr::REP).then(|| Rep::parse(mad.data).ok())?
        })
        .map(|rep| rep.local_qpn)
        .nth(1)
        .expect("a REP for the test QP");
    assert_eq!(key.qpn, data_rep_qpn, "{capture}");
    if test == Test::WriteBw {
        assert_ne!(key.rkey, 0, "{capture}: WRITE targets need an rkey");
        assert_ne!(key.vaddr, 0, "{capture}");
    }
}

#[test]
fn ib_write_bw_r_client_replayed() {
    replay_client("write_bw_cm.pcap", Test::WriteBw);
}

#[test]
fn ib_send_bw_r_client_replayed() {
    replay_client("send_bw_cm.pcap", Test::SendBw);
}
