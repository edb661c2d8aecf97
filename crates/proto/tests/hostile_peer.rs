//! A connected peer that misbehaves (or a buggy RoCE implementation): packets with a valid
//! ICRC from the right address, into node 0's RC QP, that ask for more than the protocol lets
//! them have. Each case is answered as rxe answers it (`rxe_resp.c`, `rxe_comp.c`), or more
//! strictly where rxe would serve what it should not; none panics, none grows memory without
//! bound. Found by a review that probed the engine with these packets.

mod common;

use std::sync::Arc;

use common::*;
use softrdma_proto::*;
use softrdma_wire::{
    emit_headers, packet_len, Aeth, AtomicAckEth, AtomicEth, Bth, ExtHeaders, IcrcContext, NakCode,
    Opcode, PacketRepr, Psn, Reth, Syndrome,
};

const PORT: u16 = 0xc000;
/// Node 0's RC QP expects requests from this PSN on (see `Net::rc_connect`).
const PEER_PSN: u32 = 0xe00;
/// Node 0's own first PSN.
const OWN_PSN: u32 = 0x700;

/// A packet from node 1's address, with a valid ICRC.
fn forge(bth: Bth, ext: &ExtHeaders, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; packet_len(bth.opcode, payload.len())];
    let h = emit_headers(&bth, ext, payload.len(), &mut out);
    out[h..h + payload.len()].copy_from_slice(payload);
    IcrcContext::new(ip(1), ip(0), PORT, 4791)
        .fill(&mut out)
        .unwrap();
    out
}

fn inject(net: &mut Net, pkt: &[u8]) {
    let meta = DatagramMeta::new(std::net::SocketAddr::new(ip(1), PORT), ip(0));
    net.nodes[0].engine.handle_datagram(net.now, &meta, pkt);
}

/// What node 0 sends now: (opcode, PSN, AETH syndrome).
fn sent(net: &mut Net) -> Vec<(Opcode, u32, Option<Syndrome>)> {
    let mut v = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = net.nodes[0].engine.poll_transmit(net.now, &mut buf) {
        let p = PacketRepr::parse(&buf[..t.len]).unwrap();
        v.push((
            p.bth.opcode,
            p.bth.psn.value(),
            p.ext.aeth.map(|a| a.syndrome),
        ));
    }
    v
}

fn req(op: Opcode, qpn: u32, psn: u32) -> Bth {
    let mut b = Bth::new(op, qpn, Psn::new(psn));
    b.ack_req = true;
    b
}

fn reth(va: u64, rkey: u32, dma_len: u32) -> ExtHeaders {
    ExtHeaders {
        reth: Some(Reth { va, rkey, dma_len }),
        ..Default::default()
    }
}

const INVALID_REQUEST: Option<Syndrome> = Some(Syndrome::Nak(NakCode::InvalidRequest));

/// A region's bytes that only pretend to be there (a 2^33-byte region): long requests are
/// answered or NAKed long before any byte would matter.
struct Vast(usize);

impl RegionMemory for Vast {
    fn len(&self) -> usize {
        self.0
    }
    fn read(&self, _: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        dst.fill(0xab);
        Ok(())
    }
    fn write(&self, _: usize, _: &[u8]) -> Result<(), MemoryFault> {
        Ok(())
    }
    fn compare_swap(&self, _: usize, _: u64, _: u64) -> Result<u64, MemoryFault> {
        unreachable!("no atomic here")
    }
    fn fetch_add(&self, _: usize, _: u64) -> Result<u64, MemoryFault> {
        unreachable!("no atomic here")
    }
}

fn vast_region(net: &mut Net) -> (u64, u32) {
    let n = &mut net.nodes[0];
    let len = 1u64 << 33;
    let iova = 0x1_0000_0000;
    let rkey = n
        .engine
        .reg_mr(
            n.pd,
            iova,
            len,
            AccessFlags::all(),
            Arc::new(Vast(len as usize)),
        )
        .unwrap();
    (iova, rkey)
}

/// rxe's `duplicate_request` serves a duplicate READ only inside the original: the same R_Key
/// and bytes within it. Before, any READ with an old PSN was served whole: 16 KiB from
/// elsewhere in the region for a request that had asked for 8 bytes, its response PSNs running
/// over the SEND after it and past anything the responder had executed.
#[test]
fn a_duplicate_read_gets_at_most_what_the_original_asked_for() {
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_on([None, None]);
    let key = net.nodes[0].key;
    net.write_mem(0, 0, &pattern(7, MEM));
    let read = forge(
        req(Opcode::RC_RDMA_READ_REQUEST, a, PEER_PSN),
        &reth(BASE, key, 8),
        &[],
    );
    inject(&mut net, &read);
    assert_eq!(sent(&mut net).len(), 1);
    net.recv(0, a, 1, 0x8000, 64);
    let send = forge(
        req(Opcode::RC_SEND_ONLY, a, PEER_PSN + 1),
        &ExtHeaders::default(),
        &[1; 4],
    );
    inject(&mut net, &send);
    assert_eq!(sent(&mut net).len(), 1);
    let more = [
        reth(BASE + 0x4000, key, 16 * 1024), // elsewhere, longer
        reth(BASE, key, 16),                 // longer
        reth(BASE, key ^ 0x100, 8),          // another key
    ];
    for ext in more {
        inject(
            &mut net,
            &forge(req(Opcode::RC_RDMA_READ_REQUEST, a, PEER_PSN), &ext, &[]),
        );
        assert_eq!(sent(&mut net), vec![], "{ext:?}");
    }
    // The same READ again is answered again, as a requester whose response was lost needs.
    inject(&mut net, &read);
    assert_eq!(
        sent(&mut net),
        vec![(
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            PEER_PSN,
            Some(Syndrome::ACK)
        )]
    );
}

/// A READ or WRITE longer than IBTA's largest message (2^31 bytes) is an invalid request
/// (rxe's `check_length`). Before, a READ of 2^32 - 1 bytes was answered: at MTU 256 its
/// response spans all 2^24 PSNs, and the responder's next expected PSN wrapped onto its own.
#[test]
fn requests_longer_than_two_gib_are_invalid() {
    for op in [Opcode::RC_RDMA_READ_REQUEST, Opcode::RC_RDMA_WRITE_FIRST] {
        let mut net = Net::new(2);
        let [a, _] = net.rc_pair_on([None, None]);
        let (iova, rkey) = vast_region(&mut net);
        let payload = if op == Opcode::RC_RDMA_WRITE_FIRST {
            vec![0; 1024]
        } else {
            vec![]
        };
        inject(
            &mut net,
            &forge(req(op, a, PEER_PSN), &reth(iova, rkey, u32::MAX), &payload),
        );
        let got = sent(&mut net);
        assert_eq!(
            got.first().map(|g| g.2),
            Some(INVALID_REQUEST),
            "{op:?}: {got:?}"
        );
        assert_eq!(got.len(), 1, "{op:?}: {got:?}");
    }
}

/// A QP that does not take an operation answers it Invalid Request, as rxe's
/// `check_op_valid` does (the requester sees `REM_INV_REQ_ERR`), before anything else about
/// the packet: even when the region grants the access, when it names no bytes, or when a
/// WRITE with immediate finds no receive (an RNR NAK would have the requester retry a WRITE
/// that can never be taken). Before, zero-byte WRITEs and READs passed — a WRITE with
/// immediate took a receive WQE and delivered its immediate into a QP granting no writes.
#[test]
fn a_qp_without_the_right_refuses_the_operation_first() {
    let imm = |payload: &[u8]| ExtHeaders {
        imm_dt: Some(softrdma_wire::ImmDt { imm: 0x1234 }),
        ..reth(BASE, 0, payload.len() as u32)
    };
    let cases: [(Opcode, ExtHeaders, Vec<u8>); 5] = [
        (Opcode::RC_RDMA_WRITE_ONLY, reth(BASE, 0, 8), vec![9; 8]),
        (Opcode::RC_RDMA_WRITE_ONLY, reth(BASE, 0, 0), vec![]),
        (Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, imm(&[]), vec![]),
        (
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            imm(&[7; 8]),
            vec![7; 8],
        ),
        (Opcode::RC_RDMA_READ_REQUEST, reth(BASE, 0, 0), vec![]),
    ];
    for (op, mut ext, payload) in cases {
        let mut net = Net::new(2);
        let access = AccessFlags::LOCAL_WRITE;
        let [a, _] = net.rc_pair_with([None, None], [4, 4], [4, 4], access);
        if let Some(r) = ext.reth.as_mut() {
            r.rkey = net.nodes[0].key;
        }
        inject(&mut net, &forge(req(op, a, PEER_PSN), &ext, &payload));
        assert_eq!(
            sent(&mut net),
            vec![(Opcode::RC_ACKNOWLEDGE, PEER_PSN, INVALID_REQUEST)]
        );
        assert_eq!(net.read_mem(0, 0, 8), vec![0; 8]);
        let took_a_receive = net
            .completions(0)
            .iter()
            .any(|w| w.status == WcStatus::Success);
        assert!(!took_a_receive, "{op:?}");
    }
    // A READ where the QP keeps no responder resources is refused as such, whatever its key
    // (rxe's check_resource comes before check_rkey).
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_with([None, None], [4, 4], [0, 0], AccessFlags::all());
    let bad_key = net.nodes[0].key ^ 0x100;
    let read = forge(
        req(Opcode::RC_RDMA_READ_REQUEST, a, PEER_PSN),
        &reth(BASE, bad_key, 8),
        &[],
    );
    inject(&mut net, &read);
    assert_eq!(
        sent(&mut net),
        vec![(Opcode::RC_ACKNOWLEDGE, PEER_PSN, INVALID_REQUEST)]
    );
    // Over UC, such a WRITE is dropped with its message (rxe: drop_msg), the QP lives on.
    let mut net = Net::new(2);
    let [u, _] = net.uc_pair_with(Mtu::Mtu1024, AccessFlags::LOCAL_WRITE);
    let key = net.nodes[0].key;
    let uc_write = forge(
        Bth::new(Opcode::UC_RDMA_WRITE_ONLY, u, Psn::new(0xa00)),
        &reth(BASE, key, 8),
        &[9; 8],
    );
    inject(&mut net, &uc_write);
    assert_eq!(sent(&mut net), vec![]);
    assert_eq!(net.read_mem(0, 0, 8), vec![0; 8]);
    assert_eq!(net.nodes[0].engine.qp(u).unwrap().state(), QpState::Rts);
}

/// The same refused request, repeated with nothing polling the engine's output in between,
/// is answered once: a queued NAK is not queued again. Before, 100 000 copies of a SEND that
/// found no receive queued 100 000 RNR NAKs.
#[test]
fn a_repeated_refused_request_queues_one_answer() {
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_on([None, None]);
    let send = forge(
        req(Opcode::RC_SEND_ONLY, a, PEER_PSN),
        &ExtHeaders::default(),
        &[1; 4],
    );
    let duplicate = forge(
        req(Opcode::RC_SEND_ONLY, a, PEER_PSN - 1),
        &ExtHeaders::default(),
        &[1; 4],
    );
    for _ in 0..100_000 {
        inject(&mut net, &send);
    }
    let got = sent(&mut net);
    assert_eq!(got.len(), 1, "{:?}", &got[..got.len().min(4)]);
    assert!(matches!(got[0].2, Some(Syndrome::RnrNak { .. })), "{got:?}");
    // Interleaved with duplicates (each answered by a plain ACK, coalesced away by the NAK).
    for _ in 0..50_000 {
        inject(&mut net, &send);
        inject(&mut net, &duplicate);
    }
    assert!(sent(&mut net).len() <= 2);
}

/// Region memory whose first byte sits 4 bytes past an 8-byte boundary, as a region
/// registered zero-based or at an iova of its own may: no aligned virtual address of it is an
/// aligned host word, and its atomics must never run.
struct OffByFour(std::sync::Mutex<Vec<u8>>);

impl RegionMemory for OffByFour {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn read(&self, o: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        dst.copy_from_slice(&self.0.lock().unwrap()[o..o + dst.len()]);
        Ok(())
    }
    fn write(&self, o: usize, src: &[u8]) -> Result<(), MemoryFault> {
        self.0.lock().unwrap()[o..o + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn compare_swap(&self, _: usize, _: u64, _: u64) -> Result<u64, MemoryFault> {
        panic!("atomic on a misaligned host word");
    }
    fn fetch_add(&self, _: usize, _: u64) -> Result<u64, MemoryFault> {
        panic!("atomic on a misaligned host word");
    }
    fn is_atomic_word(&self, _: usize) -> bool {
        false
    }
}

/// rxe checks the host address of an atomic's target (`atomic_reply`): misaligned is an
/// invalid request. The engine checked only the virtual address, and the verbs layer's memory
/// asserted on the host one: a peer could panic the device's progress thread.
#[test]
fn an_atomic_on_a_misaligned_host_word_is_refused_before_it_runs() {
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_on([None, None]);
    let n = &mut net.nodes[0];
    let memory = Arc::new(OffByFour(std::sync::Mutex::new(vec![0; 64])));
    let key = n
        .engine
        .reg_mr(n.pd, 0, 64, AccessFlags::all(), memory.clone())
        .unwrap();
    let fetch_add = forge(
        req(Opcode::RC_FETCH_ADD, a, PEER_PSN),
        &ExtHeaders {
            atomic_eth: Some(AtomicEth {
                va: 8,
                rkey: key,
                swap_add: 1,
                compare: 0,
            }),
            ..Default::default()
        },
        &[],
    );
    inject(&mut net, &fetch_add);
    assert_eq!(sent(&mut net)[0].2, INVALID_REQUEST);
    assert_eq!(*memory.0.lock().unwrap(), vec![0; 64]);
}

/// An ATOMIC ACKNOWLEDGE whose AETH is a NAK is a malformed response: the atomic fails with a
/// bad response error (rxe's `check_ack` errors too). Before, it completed successfully with
/// the value the responder had disowned.
#[test]
fn an_atomic_ack_carrying_a_nak_fails_the_atomic() {
    let mut net = Net::new(2);
    let [a, _] = net.rc_pair_on([None, None]);
    let sge = net.sge(0, 0x100, 8);
    let op = SendOp::AtomicFetchAdd {
        remote_addr: 0x1000,
        rkey: 0x1234,
        add: 1,
    };
    let now = net.now;
    net.nodes[0]
        .engine
        .post_send(now, a, wr(1, op, sge))
        .unwrap();
    assert_eq!(sent(&mut net).len(), 1);
    let ack = forge(
        Bth::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, a, Psn::new(OWN_PSN)),
        &ExtHeaders {
            aeth: Some(Aeth {
                syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
                msn: 1,
            }),
            atomic_ack_eth: Some(AtomicAckEth { orig: 42 }),
            ..Default::default()
        },
        &[],
    );
    inject(&mut net, &ack);
    let wcs = net.completions(0);
    assert_eq!(wcs[0].status, WcStatus::BadRespErr);
    assert_eq!(net.read_mem(0, 0x100, 8), vec![0; 8]);
}
