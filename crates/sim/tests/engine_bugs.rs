//! Engine bugs the swarm found, pinned as exact scenarios (regression tests): the seeds that
//! first failed, and a scripted reproduction of each mechanism.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;

use softrdma_proto::{
    AccessFlags, Duration, RecvWr, SendFlags, SendOp, SendWr, Sge, VecMemory, WcStatus,
    WorkCompletion,
};
use softrdma_sim::setup::{connect_rc, node_resources, RcParams};
use softrdma_sim::swarm::run_seed;
use softrdma_sim::{Fabric, FabricConfig, NodeId, PacketInfo, PacketMatch, Targeted, Verdict};

use softrdma_wire::{Aeth, Opcode, PacketRepr, Psn, Syndrome, ROCEV2_UDP_PORT};

/// Swarm seeds (of the first 20,000) that fail, by cause. All pass seeds 1..=200.
const SEEDS_IMPLICIT_NAK_OVERRIDDEN: [u64; 13] = [
    1477, 1869, 2071, 5446, 6065, 6117, 6913, 7422, 8311, 10414, 13591, 16851, 18052,
];
const SEEDS_STALE_NAK_HANG: [u64; 5] = [3774, 5924, 11714, 12014, 16423];
/// A READ's first response packet lost again and again while the responder kept executing the
/// requests behind it: its sequence NAKs drained the retry budget (RETRY_EXC_ERR in 65 µs of
/// a live connection) because progress was only counted when the READ completed.
const SEEDS_NAKS_DRAIN_RETRIES: [u64; 1] = [2040589];
/// 16542: a corruption aliased as another IPv4 ID mid-connection; 25561 and 105993: the same
/// on a connection's first packet.
/// 193471: the same bit corrupted three times, aliasing three times to one ID.
const SEEDS_ICRC_ALIAS: [u64; 4] = [16542, 25561, 105993, 193471];

#[test]
fn swarm_seeds_that_found_engine_bugs() {
    let mut failed = Vec::new();
    for seed in SEEDS_IMPLICIT_NAK_OVERRIDDEN
        .iter()
        .chain(&SEEDS_STALE_NAK_HANG)
        .chain(&SEEDS_NAKS_DRAIN_RETRIES)
        .chain(&SEEDS_ICRC_ALIAS)
    {
        if let Err(f) = run_seed(*seed) {
            eprintln!("{f}\n");
            failed.push(*seed);
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}

struct Pair {
    fabric: Fabric,
    qp: [u32; 2],
    key: [u32; 2],
    /// Node 0's send CQ and node 1's receive CQ.
    send_cq: softrdma_proto::CqHandle,
    recv_cq: softrdma_proto::CqHandle,
}

/// Two nodes, one RC connection, 64 KiB registered on each side; node 0 sends from PSN
/// `psn0`.
fn pair(timeout: u8, psn0: u32) -> Pair {
    let mut fabric = Fabric::new(FabricConfig::new(1));
    let a = fabric.add_node().unwrap();
    let b = fabric.add_node().unwrap();
    let ra = node_resources(&mut fabric, a, 256).unwrap();
    let rb = node_resources(&mut fabric, b, 256).unwrap();
    let params = RcParams {
        timeout,
        ..RcParams::default()
    };
    let conn = connect_rc(&mut fabric, &ra, &rb, &params, Psn::new(psn0), Psn::new(77)).unwrap();
    let mut key = [0; 2];
    for (i, r) in [ra, rb].iter().enumerate() {
        key[i] = fabric
            .engine_mut(r.node)
            .unwrap()
            .reg_mr(
                r.pd,
                0x10000,
                65536,
                AccessFlags::all(),
                Arc::new(VecMemory::new(65536)),
            )
            .unwrap();
    }
    Pair {
        fabric,
        qp: [conn.a.qpn, conn.b.qpn],
        key,
        send_cq: ra.send_cq,
        recv_cq: rb.recv_cq,
    }
}

impl Pair {
    fn post(&mut self, wr_id: u64, op: SendOp, len: u32) {
        let wr = SendWr {
            wr_id,
            op,
            sg_list: vec![Sge {
                addr: 0x10000 + wr_id * 256,
                length: len,
                lkey: self.key[0],
            }],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
            xrc_srqn: None,
        };
        let now = self.fabric.now();
        self.fabric
            .engine_mut(NodeId(0))
            .unwrap()
            .post_send(now, self.qp[0], wr)
            .unwrap();
    }
    fn post_recv(&mut self, wr_id: u64) {
        let wr = RecvWr {
            wr_id,
            sg_list: vec![Sge {
                addr: 0x10000 + 0x8000 + wr_id * 256,
                length: 256,
                lkey: self.key[1],
            }],
        };
        self.fabric
            .engine_mut(NodeId(1))
            .unwrap()
            .post_recv(self.qp[1], wr)
            .unwrap();
    }
    /// Runs until `n` send completions arrived at node 0 (or `limit` of virtual time).
    fn completions(&mut self, n: usize, limit: Duration) -> Vec<WorkCompletion> {
        let mut got = Vec::new();
        let cq = self.send_cq;
        let deadline = self.fabric.now() + limit;
        let _ = self.fabric.run_until(deadline, |f| {
            let _ = f.engine_mut(NodeId(0)).unwrap().poll_cq(cq, 64, &mut got);
            got.len() >= n
        });
        got
    }
}

/// Bug: a PSN-sequence NAK for a PSN after an atomic (or READ) whose response was lost.
/// `ack_through(psn - 1)` notices the missing response and rewinds the cursor to the atomic
/// (implicit NAK), but `handle_ack` then calls `go_back(psn)` unconditionally, overriding
/// it; `gap_retry_at` stops any later ACK from asking again. The atomic is not resent, every
/// further NAK costs a retry without progress, and the QP dies with RETRY_EXC_ERR long before
/// its ACK timeout could rescue it (swarm seed 6913: 0 timeouts, 7 NAKs, RETRY_EXC_ERR). Here:
/// one NAK, and the WRs wait for the ACK timeout instead of completing at once.
#[test]
fn atomic_response_lost_then_sequence_naks_still_complete() {
    // Long ACK timeout (4.096 µs × 2^18 ≈ 1 s): recovery must come from NAKs, not the timer.
    let mut p = pair(18, 1000);
    let rkey = p.key[1];
    // 1 FETCH_ADD then 8 two-packet WRITEs (MTU 1024, 1500 bytes).
    p.post(
        1,
        SendOp::AtomicFetchAdd {
            remote_addr: 0x10000,
            rkey,
            add: 5,
        },
        8,
    );
    for i in 0..8u64 {
        p.post(
            2 + i,
            SendOp::RdmaWrite {
                remote_addr: 0x11000 + i * 2048,
                rkey,
            },
            1500,
        );
    }
    // Lose the atomic's ACK and the first WRITE's first packet: the responder NAKs PSN 1001
    // (it executed the atomic at 1000, whose answer is gone).
    p.fabric.add_interceptor(Targeted::drop_nth(
        PacketMatch::opcode(Opcode::RC_ATOMIC_ACKNOWLEDGE),
        0,
    ));
    p.fabric.add_interceptor(Targeted::drop_nth(
        PacketMatch::opcode(Opcode::RC_RDMA_WRITE_FIRST),
        0,
    ));
    // The NAK implies the atomic's response was lost: it must be resent at once. With the
    // bug nothing completes until the ~1 s ACK timeout (or, under more NAKs, RETRY_EXC_ERR).
    let wcs = p.completions(9, Duration::from_millis(100));
    let statuses: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(statuses.len(), 9, "{statuses:?}");
    assert!(
        statuses.iter().all(|s| s.1 == WcStatus::Success),
        "{statuses:?}"
    );
    let stats = p.fabric.engine(NodeId(1)).unwrap().stats();
    assert_eq!(stats.atomics_executed, 1);
}

/// Bug: a stale NAK — one whose PSN is before `unacked_psn` (a duplicate or a late copy of an
/// RNR NAK that was already dealt with) — is acted on. `go_back(psn)` finds no WQE owning
/// that PSN and parks the cursor at the end of the send queue; after the RNR wait, nothing
/// is sent, and since the RNR path stopped the retransmit timer, no timer is armed: the QP
/// hangs forever with work outstanding (swarm seeds 5924, 11714, 12014, 16423).
#[test]
fn stale_rnr_nak_does_not_hang_the_qp() {
    let mut p = pair(12, 5000);
    // Capture the first RNR NAK so it can be replayed late.
    let saved: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
    let keep = saved.clone();
    p.fabric.add_interceptor(move |pkt: &PacketInfo<'_>| {
        let rnr = pkt
            .packet
            .and_then(|r: &PacketRepr<'_>| r.ext.aeth)
            .is_some_and(|a: Aeth| matches!(a.syndrome, Syndrome::RnrNak { .. }));
        if rnr && keep.borrow().is_none() {
            *keep.borrow_mut() = Some(pkt.payload.to_vec());
        }
        Verdict::Pass
    });
    // SEND 1 with no RECV posted: RNR NAK; then the RECV appears and SEND 1 completes.
    p.post(1, SendOp::Send, 100);
    let _ = p.fabric.run_for(Duration::from_micros(5));
    p.post_recv(1);
    let first = p.completions(1, Duration::from_millis(10));
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].status, WcStatus::Success);
    // SEND 2, again without a RECV: RNR NAK for PSN 5001, the requester waits...
    p.post(2, SendOp::Send, 100);
    let _ = p.fabric.run_for(Duration::from_micros(5));
    // ...and a late copy of the old RNR NAK (PSN 5000) arrives.
    let stale = saved.borrow().clone().expect("an RNR NAK was sent");
    let dst = SocketAddr::new(IpAddr::V4(p.fabric.ip(NodeId(0)).unwrap()), ROCEV2_UDP_PORT);
    let sport = softrdma_proto::rxe_source_port(p.qp[1], p.qp[0]);
    p.fabric.inject(NodeId(1), dst, sport, 0, stale).unwrap();
    p.post_recv(2);
    // With a 17 ms ACK timeout, one second of virtual time is plenty.
    let second = p.completions(1, Duration::from_secs(1));
    assert_eq!(second.len(), 1, "SEND 2 never completed: the QP hung");
    assert_eq!(second[0].status, WcStatus::Success);
    let mut rwc = Vec::new();
    let rcq = p.recv_cq;
    p.fabric
        .engine_mut(NodeId(1))
        .unwrap()
        .poll_cq(rcq, 8, &mut rwc)
        .unwrap();
    assert_eq!(rwc.len(), 2);
}
