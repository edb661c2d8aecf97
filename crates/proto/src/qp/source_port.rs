//! The UDP source ports rxe gives its packets (RoCEv2 leaves the source port to the sender,
//! for ECMP entropy): the same values make softrdma's packets, ICRC included, identical to
//! rxe's.

/// rxe's UDP source port for a connected QP: `0xC000 | fold(flow_label(lqpn, rqpn))`, where
/// the flow label mixes the product of the QPNs (rdma-core `rdma_calc_flow_label`) and the fold
/// xors the top 6 of its 20 bits into the low 14 (`rdma_flow_label_to_udp_sport`).
pub fn rxe_source_port(local_qpn: u32, remote_qpn: u32) -> u16 {
    let mut v = u64::from(local_qpn) * u64::from(remote_qpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xf_ffff) as u32;
    let folded = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    0xc000 | folded as u16
}

/// The UDP source port rxe gives a UD QP's packets: `0xC000 + hash_32(qpn, 14)` (the kernel's
/// multiplicative hash with the 32-bit golden ratio), so QP1 sends from 55410.
pub fn ud_source_port(qpn: u32) -> u16 {
    let hash = qpn.wrapping_mul(0x61c8_8647) >> (32 - 14);
    0xc000 + hash as u16
}
