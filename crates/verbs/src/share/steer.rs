//! The steering program of a shared address: which member's socket gets an arriving RoCEv2
//! packet, decided by the kernel from the packet alone (classic BPF over the bytes after the
//! UDP header, that is from the BTH on).
//!
//! - **Data packets** go by their destination QP: a member's QPNs carry its slot in their top
//!   byte (`slot << 16 | n`), so BTH byte 5 names the member (slot 0's QPNs start at 0x11,
//!   as rxe's do, above QP 0 and QP 1).
//! - **CM MADs** (to QP 1) go to the member that owns the connection: a member's
//!   communication IDs also carry its slot in their top byte, and every CM message but the two
//!   requests names the receiver's ID (the Remote Communication ID; a SIDR_REP's Request ID).
//!   A REQ or SIDR_REQ goes to the member listening on its Service ID.
//! - **Probes** (to QP 0, with [`PROBE_MAGIC`]) go to the index they name: that is how a member
//!   learns its place in the kernel's array (see `super`).
//! - Anything else — an unknown slot or service, another management class, a packet too short
//!   for its loads (the kernel's BPF then returns 0) — goes to index 0, which drops it or, for a
//!   REQ nobody listens for, rejects it as any CM would.

use softrdma_udp::SteeringInsn;
use softrdma_wire::mad::cm::attr;
use softrdma_wire::{Bth, Deth};

/// Probes start with this word after their QPN-0 BTH ("SRDS").
pub(crate) const PROBE_MAGIC: u32 = 0x5352_4453;
/// A probe's length: BTH (12), magic (4), index (4), nonce (4).
pub(crate) const PROBE_LEN: usize = 24;

/// Where the MAD of a packet to QP 1 starts (BTH + DETH).
const MAD: u32 = (Bth::LEN + Deth::LEN) as u32;
/// The management class byte of the MAD header.
const MGMT_CLASS: u32 = MAD + 1;
/// The attribute ID of the MAD header.
const ATTR_ID: u32 = MAD + 16;
/// The CM message's first word: the Local Communication ID (a SIDR message's Request ID).
const FIRST_ID: u32 = MAD + 24;
/// The Remote Communication ID.
const REMOTE_ID: u32 = MAD + 28;
/// A REQ's or SIDR_REQ's Service ID (two words).
const SERVICE_ID: u32 = MAD + 32;
/// The CM's management class.
const CM_CLASS: u32 = 0x07;

/// A member as the program sees it: its slot and its index in the kernel's array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) slot: u8,
    pub(crate) index: u32,
}

/// The program for `members` and `listeners` (Service ID and the index of the member that
/// listens on it).
pub(crate) fn program(members: &[Route], listeners: &[(u64, u32)]) -> Vec<SteeringInsn> {
    let mut a = Asm::default();
    let (slots, probe, mad, by_request_id, by_service, default) = (
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
    );

    // cBPF jumps only forward: the slot chain, which three paths share, comes last.
    a.ld(B, 5); // the QPN's top byte
    a.goto_if_ne(0, slots);

    // QPNs 0..=0xffff: QP 1, probes (QP 0), and slot 0's QPs.
    a.ld(H, 6);
    a.goto_if_eq(1, mad);
    a.goto_if_eq(0, probe);
    a.ld_imm(0);
    a.goto(slots);

    a.mark(probe);
    a.ld(W, Bth::LEN as u32);
    a.goto_if_ne(PROBE_MAGIC, default);
    a.ld(W, Bth::LEN as u32 + 4);
    a.ret_a();

    a.mark(mad);
    a.ld(B, MGMT_CLASS);
    a.goto_if_ne(CM_CLASS, default);
    a.ld(H, ATTR_ID);
    a.goto_if_eq(u32::from(attr::REQ), by_service);
    a.goto_if_eq(u32::from(attr::SIDR_REQ), by_service);
    a.goto_if_eq(u32::from(attr::SIDR_REP), by_request_id);
    // MRA, REJ, REP, RTU, DREQ, DREP (0x11..=0x16), LAP, APR (0x19, 0x1a): the receiver's ID.
    a.goto_if_lt(u32::from(attr::MRA), default);
    a.goto_if_gt(u32::from(attr::APR), default);
    a.ld(B, REMOTE_ID);
    a.goto(slots);

    a.mark(by_request_id);
    a.ld(B, FIRST_ID);
    a.goto(slots);

    a.mark(by_service);
    for &(sid, index) in listeners {
        let next = a.label();
        a.ld(W, SERVICE_ID);
        a.goto_if_ne((sid >> 32) as u32, next);
        a.ld(W, SERVICE_ID + 4);
        a.goto_if_ne(sid as u32, next);
        a.ret(index);
        a.mark(next);
    }
    a.mark(default);
    a.ret(0);

    a.mark(slots); // A is a slot here
    for m in members {
        a.ret_if_eq(u32::from(m.slot), m.index);
    }
    a.ret(0);
    a.finish()
}

/// A probe asking the kernel for the member at `index`, tagged `nonce`.
pub(crate) fn probe(index: u32, nonce: u32) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[0] = 0xff; // no RoCE opcode: a packet that reaches an engine by mistake is dropped
    p[Bth::LEN..Bth::LEN + 4].copy_from_slice(&PROBE_MAGIC.to_be_bytes());
    p[Bth::LEN + 4..Bth::LEN + 8].copy_from_slice(&index.to_be_bytes());
    p[Bth::LEN + 8..].copy_from_slice(&nonce.to_be_bytes());
    p
}

/// The index and nonce of a probe, if `datagram` is one.
pub(crate) fn parse_probe(datagram: &[u8]) -> Option<(u32, u32)> {
    if datagram.len() != PROBE_LEN || datagram[5..8] != [0, 0, 0] {
        return None;
    }
    let word = |at: usize| u32::from_be_bytes(datagram[at..at + 4].try_into().expect("4 bytes"));
    (word(Bth::LEN) == PROBE_MAGIC).then(|| (word(Bth::LEN + 4), word(Bth::LEN + 8)))
}

const B: u16 = 0x10; // BPF_B
const H: u16 = 0x08; // BPF_H
const W: u16 = 0x00; // BPF_W
const LD_ABS: u16 = 0x20; // BPF_LD (0) | BPF_ABS
const LD_IMM: u16 = 0x00; // BPF_LD | BPF_IMM
const JA: u16 = 0x05; // BPF_JMP | BPF_JA
const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGT: u16 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const RET_A: u16 = 0x16; // BPF_RET | BPF_A

/// A tiny assembler: every conditional jump is "skip the next instruction or not", and the
/// next instruction an unconditional jump (32-bit offset) to a label, so no program is too
/// long for cBPF's 8-bit conditional offsets.
#[derive(Default)]
struct Asm {
    insns: Vec<SteeringInsn>,
    /// (instruction, label) of every `ja` to fix up.
    jumps: Vec<(usize, usize)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn mark(&mut self, label: usize) {
        self.labels[label] = Some(self.insns.len());
    }

    fn op(&mut self, code: u16, jt: u8, jf: u8, k: u32) {
        self.insns.push(SteeringInsn { code, jt, jf, k });
    }

    fn ld(&mut self, size: u16, offset: u32) {
        self.op(LD_ABS | size, 0, 0, offset);
    }

    fn ld_imm(&mut self, k: u32) {
        self.op(LD_IMM, 0, 0, k);
    }

    fn goto(&mut self, label: usize) {
        self.jumps.push((self.insns.len(), label));
        self.op(JA, 0, 0, 0);
    }

    /// If the test holds, run the next instruction (the `goto`), else skip it.
    fn test_then_goto(&mut self, code: u16, k: u32, holds_on_true: bool, label: usize) {
        let (jt, jf) = if holds_on_true { (0, 1) } else { (1, 0) };
        self.op(code, jt, jf, k);
        self.goto(label);
    }

    fn goto_if_eq(&mut self, k: u32, label: usize) {
        self.test_then_goto(JEQ, k, true, label);
    }

    fn goto_if_ne(&mut self, k: u32, label: usize) {
        self.test_then_goto(JEQ, k, false, label);
    }

    fn goto_if_lt(&mut self, k: u32, label: usize) {
        self.test_then_goto(JGE, k, false, label);
    }

    fn goto_if_gt(&mut self, k: u32, label: usize) {
        self.test_then_goto(JGT, k, true, label);
    }

    fn ret_if_eq(&mut self, k: u32, value: u32) {
        self.op(JEQ, 0, 1, k);
        self.ret(value);
    }

    fn ret(&mut self, value: u32) {
        self.op(RET_K, 0, 0, value);
    }

    fn ret_a(&mut self) {
        self.op(RET_A, 0, 0, 0);
    }

    fn finish(mut self) -> Vec<SteeringInsn> {
        for &(at, label) in &self.jumps {
            let target = self.labels[label].expect("every label is marked");
            debug_assert!(target > at, "jumps go forward");
            self.insns[at].k = (target - at - 1) as u32;
        }
        self.insns
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use softrdma_wire::mad::cm::{CmMad, CmMessage, Dreq, Rtu, SidrRep, SidrReq};
    use softrdma_wire::mad::MAD_LEN;

    /// Runs `program` on `packet` as the kernel's classic BPF does: a load past the end
    /// makes the program return 0.
    pub(crate) fn run(program: &[SteeringInsn], packet: &[u8]) -> u32 {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = program[pc];
            pc += 1;
            match i.code {
                LD_IMM => a = i.k,
                c if c & 0x07 == 0x00 => {
                    let at = i.k as usize;
                    let n = match c & 0x18 {
                        B => 1,
                        H => 2,
                        _ => 4,
                    };
                    let Some(bytes) = packet.get(at..at + n) else {
                        return 0;
                    };
                    a = bytes.iter().fold(0, |v, b| v << 8 | u32::from(*b));
                }
                JA => pc += i.k as usize,
                JEQ | JGT | JGE => {
                    let hit = match i.code {
                        JEQ => a == i.k,
                        JGT => a > i.k,
                        _ => a >= i.k,
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
                RET_K => return i.k,
                RET_A => return a,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    fn data_packet(dest_qpn: u32) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[5..8].copy_from_slice(&dest_qpn.to_be_bytes()[1..]);
        p
    }

    /// A GSI packet (BTH, DETH) carrying `message` in a CM MAD.
    fn mad_packet(message: CmMessage) -> Vec<u8> {
        let mut p = data_packet(1);
        p.truncate(Bth::LEN + Deth::LEN);
        p.extend_from_slice(&CmMad::new(0x1234, message).to_bytes());
        p.extend_from_slice(&[0; 4]); // ICRC
        p
    }

    const MEMBERS: [Route; 4] = [
        Route { slot: 0, index: 3 },
        Route { slot: 1, index: 2 },
        Route { slot: 7, index: 0 },
        Route { slot: 9, index: 1 },
    ];

    #[test]
    fn data_packets_go_by_the_slot_in_their_qpn() {
        let prog = program(&MEMBERS, &[]);
        assert_eq!(run(&prog, &data_packet(0x01_0011)), 2);
        assert_eq!(run(&prog, &data_packet(0x07_ffff)), 0);
        assert_eq!(run(&prog, &data_packet(0x09_0100)), 1);
        assert_eq!(run(&prog, &data_packet(0x00_0011)), 3, "slot 0: rxe's QPNs");
        // Slots nobody holds, and short packets, go to index 0.
        assert_eq!(run(&prog, &data_packet(0x05_0011)), 0);
        assert_eq!(run(&prog, &[0, 0, 0]), 0);
    }

    #[test]
    fn probes_reach_the_index_they_name() {
        let prog = program(&MEMBERS, &[]);
        assert_eq!(run(&prog, &probe(5, 77)), 5);
        assert_eq!(parse_probe(&probe(5, 77)), Some((5, 77)));
        let mut bad = probe(5, 77);
        bad[Bth::LEN] ^= 1;
        assert_eq!(run(&prog, &bad), 0);
        assert_eq!(parse_probe(&bad), None);
        assert_eq!(parse_probe(&data_packet(0)), None);
    }

    fn sidr_req(service_id: u64) -> CmMessage {
        CmMessage::SidrReq(SidrReq {
            request_id: 0x0900_0001,
            pkey: 0xffff,
            service_id,
            private_data: Default::default(),
        })
    }

    #[test]
    fn cm_messages_go_to_the_owner_of_the_receiving_id() {
        let prog = program(&MEMBERS, &[]);
        let rtu = CmMessage::Rtu(Rtu {
            local_comm_id: 0x0100_0005,
            remote_comm_id: 0x0900_0abc,
            private_data: Default::default(),
        });
        assert_eq!(run(&prog, &mad_packet(rtu)), 1, "slot 9 is at index 1");
        let dreq = CmMessage::Dreq(Dreq {
            local_comm_id: 0x0900_0abc,
            remote_comm_id: 0x0100_0005,
            remote_qpn: 0x01_0011,
            private_data: Default::default(),
        });
        assert_eq!(run(&prog, &mad_packet(dreq)), 2, "slot 1 is at index 2");
        let rep = CmMessage::SidrRep(SidrRep {
            request_id: 0x0700_0042,
            ..SidrRep::default()
        });
        assert_eq!(run(&prog, &mad_packet(rep)), 0, "slot 7 is at index 0");
    }

    #[test]
    fn requests_go_to_the_listener_of_their_service() {
        let rping = 0x0000_0000_0106_4e20; // RDMA_PS_TCP, port 20000
        let udaddy = 0x0000_0000_0111_1b5f;
        let prog = program(&MEMBERS, &[(udaddy, 1), (rping, 2)]);
        assert_eq!(run(&prog, &mad_packet(sidr_req(udaddy))), 1);
        assert_eq!(run(&prog, &mad_packet(sidr_req(rping))), 2);
        assert_eq!(
            run(&prog, &mad_packet(sidr_req(rping + 1))),
            0,
            "nobody listens"
        );

        // A REQ carries its Service ID where a SIDR_REQ does: the same bytes under the REQ's
        // attribute ID parse as a REQ for that service.
        let mut req = mad_packet(sidr_req(rping));
        let attr_at = ATTR_ID as usize;
        req[attr_at..attr_at + 2].copy_from_slice(&attr::REQ.to_be_bytes());
        let mad = &req[MAD as usize..MAD as usize + MAD_LEN];
        match CmMad::parse(mad).expect("parses").msg {
            CmMessage::Req(r) => assert_eq!(r.service_id, rping),
            other => panic!("not a REQ: {other:?}"),
        }
        assert_eq!(run(&prog, &req), 2);
    }

    #[test]
    fn other_mads_go_to_index_zero() {
        let prog = program(&MEMBERS, &[(0x0106_4e20, 2)]);
        let mut mad = mad_packet(sidr_req(0x0106_4e20));
        mad[MGMT_CLASS as usize] = 0x04; // performance management
        assert_eq!(run(&prog, &mad), 0);
        let mut cpi = mad_packet(sidr_req(0x0106_4e20));
        cpi[ATTR_ID as usize..ATTR_ID as usize + 2]
            .copy_from_slice(&attr::CLASS_PORT_INFO.to_be_bytes());
        assert_eq!(run(&prog, &cpi), 0);
    }
}
