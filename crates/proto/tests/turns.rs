//! How the QPs of one engine share its sending: round robin by turns of about one UDP GSO
//! send each, a WRITE's short tail finished within the turn, and the ACK asked for on the
//! packet that ends a turn.

mod common;

use common::*;
use softrdma_proto::*;
use softrdma_wire::{Opcode, PacketRepr};

/// 16 packets at MTU 4096, one more than a turn holds (65507 bytes).
const LEN: u32 = 64 * 1024;

/// Two RC QPs of node 0, A and B, each with one `op` of [`LEN`] bytes posted; returns what
/// node 0 sends as (A or B, opcode, AckReq).
fn two_qps_send(op: impl Fn(&Net) -> SendOp) -> Vec<(char, Opcode, bool)> {
    let mut net = Net::with_config(2, |c| EngineConfig {
        port_mtu: Mtu::Mtu4096,
        ..c
    });
    let [[a, a_peer], [b, _]] = [0; 2].map(|_| {
        let all = AccessFlags::all();
        net.rc_connect_mtu(Mtu::Mtu4096, [0, 1], [None, None], [4, 4], [4, 4], all)
    });
    let mut buf = Vec::new();
    // Setting the QPs up put them in the ready line: they find nothing to send and leave it.
    assert!(net.nodes[0]
        .engine
        .poll_transmit(net.now, &mut buf)
        .is_none());
    for (qpn, wr_id) in [(a, 1), (b, 2)] {
        let w = wr(wr_id, op(&net), net.sge(0, 0, LEN));
        let now = net.now;
        net.nodes[0].engine.post_send(now, qpn, w).unwrap();
    }
    let mut sent = Vec::new();
    while let Some(t) = net.nodes[0].engine.poll_transmit(net.now, &mut buf) {
        let p = PacketRepr::parse(&buf[..t.len]).unwrap();
        let who = if p.bth.dest_qpn == a_peer { 'A' } else { 'B' };
        sent.push((who, p.bth.opcode, p.bth.ack_req));
    }
    sent
}

#[test]
fn a_turn_runs_on_to_finish_a_write_whose_tail_is_short() {
    // Cut after 15 packets, each WRITE's last packet waited for its QP's next turn and left
    // in a GSO send of its own: the next WRITE's first packet, longer by its RETH, cannot
    // join it. Three sends per 64 KiB WRITE instead of two, with a thousand QPs.
    let sent = two_qps_send(|net| SendOp::RdmaWrite {
        remote_addr: BASE,
        rkey: net.nodes[1].key,
    });
    let who: String = sent.iter().map(|p| p.0).collect();
    assert_eq!(who, format!("{}{}", "A".repeat(16), "B".repeat(16)));
    for qp in [&sent[..16], &sent[16..]] {
        assert_eq!(qp[0].1, Opcode::RC_RDMA_WRITE_FIRST);
        assert_eq!(qp[15].1, Opcode::RC_RDMA_WRITE_LAST);
        // Where the turn used to end no ACK is asked for; the WRITE's end asks.
        assert!(!qp[14].2 && qp[15].2, "{sent:?}");
    }
}

#[test]
fn a_turn_of_sends_ends_where_the_next_packet_does_not_fit() {
    // A SEND's packets are all alike: its last one joins the next SEND's first in its QP's
    // next turn, so the turn is not drawn out for it.
    let sent = two_qps_send(|_| SendOp::Send);
    let who: String = sent.iter().map(|p| p.0).collect();
    assert_eq!(who, format!("{}{}AB", "A".repeat(15), "B".repeat(15)));
    // The packet that ends a turn asks for the ACK that brings its QP's packets home while
    // the other QP sends.
    assert_eq!(sent[14], ('A', Opcode::RC_SEND_MIDDLE, true));
    assert_eq!(sent[29], ('B', Opcode::RC_SEND_MIDDLE, true));
    assert_eq!(sent[30], ('A', Opcode::RC_SEND_LAST, true));
}
