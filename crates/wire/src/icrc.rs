//! The invariant CRC of RoCEv2 (IBTA Annex A17.3.3).
//!
//! The ICRC is CRC-32 (the Ethernet / zlib polynomial) over a pseudo-packet:
//!
//! ```text
//! ff ff ff ff ff ff ff ff                      stands in for the (absent) LRH
//! IPv4 header, TOS, TTL and checksum := ones   or IPv6 header, traffic class, flow label and
//!                                              hop limit := ones
//! UDP header, checksum := ones
//! BTH, byte 4 (FECN, BECN, reserved) := ones
//! the rest of the transport packet up to (not including) the ICRC
//! ```
//!
//! and is stored after the payload **little-endian** (what Linux rxe and RoCE NICs put on the
//! wire; verified against every capture in the test data).
//!
//! The IPv4 total length and identification are *covered*. A sender using an ordinary UDP
//! socket therefore needs to know the identification the kernel writes (Linux writes 0 in
//! don't-fragment datagrams of unconnected sockets), and a receiver does not learn the
//! identification at all: `recvmsg` does not report it. [`IcrcContext::verify_unknown_id`]
//! solves for it instead: the CRC is linear, so the difference between the stored ICRC and the
//! one computed with identification 0 determines the identification uniquely (the 16 unknown
//! bits map injectively into the 32-bit CRC). The price is that 16 of the 32 check bits go into
//! finding the identification, so a random corruption slips through with probability about
//! 2^-15 rather than 2^-32. The engine narrows this again by learning each peer's habit:
//! softrdma peers only ever use identification 0 (or GSO segment numbers below 64), so a
//! corruption that solves to a large identification is rejected (see `softrdma-proto`'s
//! per-QP `PeerIpv4Ids`).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::ip::{Ipv4Header, Ipv6Header, UdpHeader, IPPROTO_UDP};
use crate::packet::ICRC_LEN;
use crate::{Bth, ParseError, Result};

const LRH_ONES: [u8; 8] = [0xff; 8];

/// Computes the ICRC from raw network and UDP header bytes, as found in a capture, and the
/// transport bytes (BTH up to, not including, the ICRC). IPv4 options, if any, are ignored.
pub fn compute_raw(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> Result<u32> {
    if udp_header.len() < UdpHeader::LEN || transport.len() < Bth::LEN {
        return Err(ParseError::Truncated);
    }
    // The pseudo-packet is assembled in one buffer, and short packets (ACKs, small SENDs)
    // whole: each CRC update has a fixed cost that dwarfs a few dozen bytes (five updates
    // made the ICRC of a 64-byte packet cost as much as that of 4 KiB).
    let mut buf = [0u8; PSEUDO_SHORT];
    buf[..LRH_ONES.len()].copy_from_slice(&LRH_ONES);
    let mut n = LRH_ONES.len();
    match ip_header.first().map(|b| b >> 4) {
        Some(4) if ip_header.len() >= Ipv4Header::LEN => {
            let ip = &mut buf[n..n + Ipv4Header::LEN];
            ip.copy_from_slice(&ip_header[..Ipv4Header::LEN]);
            mask_ipv4(ip);
            n += Ipv4Header::LEN;
        }
        Some(6) if ip_header.len() >= Ipv6Header::LEN => {
            let ip = &mut buf[n..n + Ipv6Header::LEN];
            ip.copy_from_slice(&ip_header[..Ipv6Header::LEN]);
            mask_ipv6(ip);
            n += Ipv6Header::LEN;
        }
        _ => return Err(ParseError::BadIpHeader),
    }
    let udp = &mut buf[n..n + UdpHeader::LEN];
    udp.copy_from_slice(&udp_header[..UdpHeader::LEN]);
    mask_udp(udp);
    n += UdpHeader::LEN;
    Ok(crc_after_header(&mut buf, n, transport))
}

/// Continues the CRC-32 (the Ethernet / zlib polynomial, zlib's convention: `crc` is the CRC
/// of the bytes before, 0 for none) over `bytes`. What [`IcrcContext::begin`] starts, this
/// and the copies of registered memory that compute it on the way go on with.
pub fn crc32_update(crc: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(bytes);
    h.finalize()
}

/// Sets the IPv4 header fields the ICRC does not cover to ones: TOS, TTL, header checksum.
fn mask_ipv4(ip: &mut [u8]) {
    ip[1] = 0xff;
    ip[8] = 0xff;
    ip[10] = 0xff;
    ip[11] = 0xff;
}

/// Sets the IPv6 header fields the ICRC does not cover to ones: traffic class, flow label,
/// hop limit.
fn mask_ipv6(ip: &mut [u8]) {
    ip[0] |= 0x0f;
    ip[1] = 0xff;
    ip[2] = 0xff;
    ip[3] = 0xff;
    ip[7] = 0xff;
}

/// Sets the UDP checksum, which the ICRC does not cover, to ones.
fn mask_udp(udp: &mut [u8]) {
    udp[6] = 0xff;
    udp[7] = 0xff;
}

/// The ICRC of the pseudo-packet whose masked header (ones for the LRH, the IP and UDP
/// headers with their variant fields set to ones) is `buf[..n]`, followed by `transport`
/// (at least a BTH). A short transport packet is hashed with the header in one update; of
/// a long one, the BTH.
fn crc_after_header(buf: &mut [u8; PSEUDO_SHORT], mut n: usize, transport: &[u8]) -> u32 {
    let bth = n;
    let rest = if transport.len() <= PSEUDO_SHORT - n {
        buf[n..n + transport.len()].copy_from_slice(transport);
        n += transport.len();
        &[][..]
    } else {
        buf[n..n + Bth::LEN].copy_from_slice(&transport[..Bth::LEN]);
        n += Bth::LEN;
        &transport[Bth::LEN..]
    };
    buf[bth + Bth::FECN_BECN_OFFSET] = 0xff;
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[..n]);
    if !rest.is_empty() {
        h.update(rest);
    }
    h.finalize()
}

/// Bytes of the buffer the pseudo-packet is assembled in: the longest pseudo-header (8 ones,
/// IPv6, UDP: 56 bytes) and a short transport packet (an ACK, a small SEND or WRITE).
const PSEUDO_SHORT: usize = 256;

/// What the ICRC covers besides the transport packet: the addresses and ports of the UDP/IP
/// datagram, and (IPv4) the identification and don't-fragment flag the sender's kernel writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcrcContext {
    /// Source IP address.
    pub src: IpAddr,
    /// Destination IP address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port (4791 for RoCEv2).
    pub dst_port: u16,
    /// IPv4 identification (ignored for IPv6).
    pub ipv4_id: u16,
    /// IPv4 don't-fragment flag (ignored for IPv6).
    pub ipv4_dont_fragment: bool,
}

impl IcrcContext {
    /// A context for a datagram sent as softrdma sends: IPv4 with DF set and identification 0.
    pub fn new(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16) -> IcrcContext {
        IcrcContext {
            src,
            dst,
            src_port,
            dst_port,
            ipv4_id: 0,
            ipv4_dont_fragment: true,
        }
    }

    /// Computes the ICRC of `packet` (a whole RoCEv2 UDP payload including its 4-byte ICRC
    /// slot, whose contents are ignored).
    pub fn compute(&self, packet: &[u8]) -> Result<u32> {
        if packet.len() < Bth::LEN + ICRC_LEN {
            return Err(ParseError::Truncated);
        }
        let transport = &packet[..packet.len() - ICRC_LEN];
        let (mut buf, n) = self.pseudo_header(packet.len())?;
        Ok(crc_after_header(&mut buf, n, transport))
    }

    /// The CRC so far of a packet of `packet_len` bytes (ICRC included) whose first bytes
    /// are `head` (at least the BTH): the pseudo-header, then `head`. A caller that holds the
    /// rest of the packet elsewhere continues it with [`crc32_update`] (or a copy that
    /// computes it on the way, as an engine gathering a payload out of registered memory
    /// does) up to the ICRC slot: the value it ends with is what [`IcrcContext::compute`]
    /// gives for the whole packet. One pass over the payload, not two.
    pub fn begin(&self, packet_len: usize, head: &[u8]) -> Result<u32> {
        if head.len() < Bth::LEN || packet_len < head.len() + ICRC_LEN {
            return Err(ParseError::Truncated);
        }
        let (mut buf, n) = self.pseudo_header(packet_len)?;
        Ok(crc_after_header(&mut buf, n, head))
    }

    /// Checks `computed`, a packet's ICRC computed with this context (by [`begin`] and its
    /// continuation), against `stored`, the one it carries, for a datagram received over UDP
    /// whose IPv4 identification is unknown (as [`verify_ipv4_near`] with `self.ipv4_id` as
    /// the guess): the identification the sender used, or `BadIcrc`. Only senders that set
    /// don't-fragment (softrdma, rxe) are recognised here; [`verify_ipv4_near`] also tries a
    /// datagram without it, over the packet's bytes again.
    ///
    /// [`begin`]: IcrcContext::begin
    /// [`verify_ipv4_near`]: IcrcContext::verify_ipv4_near
    pub fn check_computed(
        &self,
        computed: u32,
        stored: u32,
        packet_len: usize,
    ) -> Result<RecoveredIpv4> {
        let v4 = matches!((self.src, self.dst), (IpAddr::V4(_), IpAddr::V4(_)));
        let guess = if v4 { self.ipv4_id } else { 0 };
        if computed == stored {
            return Ok(RecoveredIpv4 {
                id: guess,
                dont_fragment: true,
            });
        }
        if !v4 || !self.ipv4_dont_fragment || packet_len < ICRC_LEN {
            return Err(ParseError::BadIcrc);
        }
        let after_id = (Ipv4Header::LEN - 6) + UdpHeader::LEN + packet_len - ICRC_LEN;
        solve_id(stored ^ computed, after_id)
            .map(|delta| RecoveredIpv4 {
                id: delta ^ guess,
                dont_fragment: true,
            })
            .ok_or(ParseError::BadIcrc)
    }

    /// The masked pseudo-header of a packet of `packet_len` bytes (ones for the LRH, the IP
    /// and UDP headers with their variant fields set to ones), written straight into the
    /// buffer the CRC reads (built apart and copied in, its bytes were read back before
    /// their stores had settled, which cost more than the CRC of a short packet's header);
    /// returns the buffer and how many bytes of it are the header.
    fn pseudo_header(&self, packet_len: usize) -> Result<([u8; PSEUDO_SHORT], usize)> {
        let udp_len = UdpHeader::LEN + packet_len;
        let udp_len16 = u16::try_from(udp_len).map_err(|_| ParseError::BadIpHeader)?;
        let mut buf = [0u8; PSEUDO_SHORT];
        buf[..LRH_ONES.len()].copy_from_slice(&LRH_ONES);
        let mut n = LRH_ONES.len();
        match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let total = u16::try_from(Ipv4Header::LEN + udp_len)
                    .map_err(|_| ParseError::BadIpHeader)?;
                let ip = &mut buf[n..n + Ipv4Header::LEN];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                ip[4..6].copy_from_slice(&self.ipv4_id.to_be_bytes());
                ip[6] = if self.ipv4_dont_fragment { 0x40 } else { 0 };
                ip[9] = IPPROTO_UDP;
                ip[12..16].copy_from_slice(&src.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                mask_ipv4(ip);
                n += Ipv4Header::LEN;
            }
            (src, dst) => {
                let ip = &mut buf[n..n + Ipv6Header::LEN];
                ip[0] = 0x60;
                ip[4..6].copy_from_slice(&udp_len16.to_be_bytes());
                ip[6] = IPPROTO_UDP;
                ip[8..24].copy_from_slice(&to_v6(src).octets());
                ip[24..40].copy_from_slice(&to_v6(dst).octets());
                mask_ipv6(ip);
                n += Ipv6Header::LEN;
            }
        }
        let udp = &mut buf[n..n + UdpHeader::LEN];
        udp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len16.to_be_bytes());
        mask_udp(udp);
        n += UdpHeader::LEN;
        Ok((buf, n))
    }

    /// Computes the ICRC and stores it in the last 4 bytes of `packet`.
    pub fn fill(&self, packet: &mut [u8]) -> Result<()> {
        let crc = self.compute(packet)?;
        let n = packet.len();
        packet[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Checks the stored ICRC against this context exactly.
    pub fn verify(&self, packet: &[u8]) -> Result<()> {
        let stored = crate::packet::stored_icrc(packet).ok_or(ParseError::Truncated)?;
        if self.compute(packet)? == stored {
            Ok(())
        } else {
            Err(ParseError::BadIcrc)
        }
    }

    /// Checks the stored ICRC of a datagram received over UDP, where the IPv4 identification
    /// and DF flag are not known. Returns the identification the sender used (0 for IPv6).
    /// `self.ipv4_id` and `self.ipv4_dont_fragment` are ignored.
    pub fn verify_unknown_id(&self, packet: &[u8]) -> Result<u16> {
        self.verify_unknown_ipv4(packet).map(|r| r.id)
    }

    /// Like [`verify_unknown_id`](Self::verify_unknown_id), also telling whether the sender
    /// set don't-fragment (IPv6: identification 0, don't-fragment reported set). A receiver
    /// that must reproduce the sender's IP header (the GRH area of a UD receive) needs both.
    pub fn verify_unknown_ipv4(&self, packet: &[u8]) -> Result<RecoveredIpv4> {
        self.verify_ipv4_near(packet, 0)
    }

    /// Like [`verify_unknown_ipv4`](Self::verify_unknown_ipv4), trying identification `guess`
    /// first: segment k of a GRO batch was most likely segment k of its sender's GSO send,
    /// which the kernel sent with identification k. A right guess spares solving for the
    /// identification (a multiplication modulo the CRC polynomial); a wrong one costs
    /// nothing more, since the CRC is linear: the difference between the stored ICRC and the
    /// one computed with `guess` solves to `guess` XOR the identification the sender used.
    pub fn verify_ipv4_near(&self, packet: &[u8], guess: u16) -> Result<RecoveredIpv4> {
        let stored = crate::packet::stored_icrc(packet).ok_or(ParseError::Truncated)?;
        let v4 = matches!((self.src, self.dst), (IpAddr::V4(_), IpAddr::V4(_)));
        let mut ctx = IcrcContext {
            ipv4_id: if v4 { guess } else { 0 },
            ipv4_dont_fragment: true,
            ..*self
        };
        let with_df = ctx.compute(packet)?;
        let found = |delta, dont_fragment| RecoveredIpv4 {
            id: delta ^ ctx.ipv4_id,
            dont_fragment,
        };
        if with_df == stored {
            return Ok(found(0, true));
        }
        if !v4 {
            return Err(ParseError::BadIcrc);
        }
        // Bytes of the pseudo-packet after the identification field: the rest of the IPv4
        // header (6 bytes after offset 6), UDP header, and the transport bytes before the ICRC.
        let after_id = (Ipv4Header::LEN - 6) + UdpHeader::LEN + packet.len() - ICRC_LEN;
        if let Some(delta) = solve_id(stored ^ with_df, after_id) {
            return Ok(found(delta, true));
        }
        ctx.ipv4_dont_fragment = false;
        let without_df = ctx.compute(packet)?;
        solve_id(stored ^ without_df, after_id)
            .map(|delta| found(delta, false))
            .ok_or(ParseError::BadIcrc)
    }
}

/// What [`IcrcContext::verify_unknown_ipv4`] learned of the sender's IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredIpv4 {
    /// The identification.
    pub id: u16,
    /// The don't-fragment flag.
    pub dont_fragment: bool,
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

// --- GF(2) arithmetic on the reflected CRC-32 register -----------------------------------
//
// A CRC register value r stands for a polynomial modulo P (bit 31 is the x^0 coefficient).
// Feeding n zero bytes multiplies it by x^(8n). Two messages of equal length differing only in
// the identification field differ in CRC by L(id) * x^(8n) mod P, where L(id) is the register
// after feeding the two ID bytes from zero and n counts the bytes after them.

const POLY: u32 = 0xedb8_8320;
/// x^-1 mod P in the reflected representation: (P - 1) / x.
const X_INVERSE: u32 = (POLY << 1) | 1;
const ONE: u32 = 1 << 31;

/// a * b mod P. Branch-free: the bits of `a` are the packet's ICRC difference, random to the
/// branch predictor (a branch per bit mispredicted half the time and made this multiply most
/// of `solve_id`, itself 5 % of a receiver's time at MTU 1024).
fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    for i in (0..32).rev() {
        product ^= b & 0u32.wrapping_sub((a >> i) & 1);
        b = (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1));
    }
    product
}

/// x^(-8 * 2^i) mod P for i in 0..64: multiplying by these undoes feeding 2^i zero bytes.
fn inverse_byte_powers() -> &'static [u32; 64] {
    static TABLE: OnceLock<[u32; 64]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; 64];
        // x^-8
        let mut p = ONE;
        for _ in 0..8 {
            p = mul_mod_p(p, X_INVERSE);
        }
        for slot in t.iter_mut() {
            *slot = p;
            p = mul_mod_p(p, p);
        }
        t
    })
}

/// x^(-8n) mod P: the inverse of feeding `n` zero bytes. A receiver asks for the same few
/// packet lengths over and over (full-MTU packets, ACKs), and the product costs a dozen
/// polynomial multiplications, so recent answers are remembered: a few slots, each one atomic
/// word holding `n` and its factor together, so a racing reader sees a whole pair or a miss.
fn unfeed_zero_bytes(n: u64) -> u32 {
    const SLOTS: usize = 8;
    static RECENT: [AtomicU64; SLOTS] = [const { AtomicU64::new(u64::MAX) }; SLOTS];
    let Ok(key) = u32::try_from(n) else {
        return unfeed_zero_bytes_uncached(n);
    };
    let slot = &RECENT[key as usize % SLOTS];
    let seen = slot.load(Ordering::Relaxed);
    if seen >> 32 == u64::from(key) && seen != u64::MAX {
        return seen as u32;
    }
    let factor = unfeed_zero_bytes_uncached(n);
    slot.store(u64::from(key) << 32 | u64::from(factor), Ordering::Relaxed);
    factor
}

fn unfeed_zero_bytes_uncached(n: u64) -> u32 {
    let table = inverse_byte_powers();
    let mut acc = ONE;
    for (i, &p) in table.iter().enumerate() {
        if n >> i & 1 != 0 {
            acc = mul_mod_p(acc, p);
        }
    }
    acc
}

/// The CRC register after feeding `bytes` from a zero register, without final inversion.
fn raw_register(bytes: &[u8]) -> u32 {
    let mut r = 0u32;
    for &byte in bytes {
        r ^= u32::from(byte);
        for _ in 0..8 {
            r = if r & 1 != 0 { (r >> 1) ^ POLY } else { r >> 1 };
        }
    }
    r
}

/// The 16 rows (L(e_i), e_i) for the ID bits, in echelon form over GF(2): each row's pivot
/// (its highest set bit) appears in no later row.
fn id_echelon() -> &'static [(u32, u16); 16] {
    static ROWS: OnceLock<[(u32, u16); 16]> = OnceLock::new();
    ROWS.get_or_init(|| {
        let mut rows: [(u32, u16); 16] = core::array::from_fn(|i| {
            let bit = 1u16 << i;
            (raw_register(&bit.to_be_bytes()), bit)
        });
        for i in 0..rows.len() {
            let (vec, bits) = rows[i];
            // L is injective (CRC-32 catches every burst of up to 32 bits), so no row is zero.
            assert_ne!(vec, 0, "CRC map of the identification is injective");
            let pivot = 1u32 << (31 - vec.leading_zeros());
            for row in rows.iter_mut().skip(i + 1) {
                if row.0 & pivot != 0 {
                    row.0 ^= vec;
                    row.1 ^= bits;
                }
            }
        }
        rows
    })
}

/// The reduction of a register value by [`id_echelon`], as four tables, one per byte of the
/// value: entry `v` of table `k` is what reducing `v << 8k` leaves (the residual) and which
/// identification bits it took away. Reducing by an echelon basis is linear over GF(2)
/// (the result is the unique combination of rows that clears every pivot bit), so the
/// reduction of a whole value is the XOR of its bytes' entries: four lookups per packet
/// instead of sixteen data-dependent branches.
fn id_reduction() -> &'static [[(u32, u16); 256]; 4] {
    static TABLES: OnceLock<[[(u32, u16); 256]; 4]> = OnceLock::new();
    TABLES.get_or_init(|| {
        core::array::from_fn(|k| core::array::from_fn(|v| reduce_by_rows((v as u32) << (8 * k))))
    })
}

/// Reduces `rest` by the rows of [`id_echelon`] one by one: what is left, and the
/// identification bits of the rows taken away.
fn reduce_by_rows(mut rest: u32) -> (u32, u16) {
    let mut id = 0u16;
    for &(vec, bits) in id_echelon() {
        let pivot = 1u32 << (31 - vec.leading_zeros());
        if rest & pivot != 0 {
            rest ^= vec;
            id ^= bits;
        }
    }
    (rest, id)
}

/// [`reduce_by_rows`] through the tables of [`id_reduction`].
fn reduce_by_tables(g: u32) -> (u32, u16) {
    id_reduction()
        .iter()
        .enumerate()
        .fold((0, 0), |(rest, id), (k, table)| {
            let (r, i) = table[(g >> (8 * k)) as usize & 0xff];
            (rest ^ r, id ^ i)
        })
}

/// Finds the 16-bit identification whose contribution to the CRC is `delta`, given the number
/// of bytes that follow the identification in the pseudo-packet.
fn solve_id(delta: u32, bytes_after: usize) -> Option<u16> {
    let (rest, id) = reduce_by_tables(mul_mod_p(delta, unfeed_zero_bytes(bytes_after as u64)));
    (rest == 0).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::IpPacket;

    // rxe's ACK in rc_send.pcap, from the IPv4 header on: IP ID 0x1f88, DF.
    static ACK_IP: [u8; 48] = [
        0x45, 0x00, 0x00, 0x30, 0x1f, 0x88, 0x40, 0x00, 0x40, 0x11, 0x06, 0x6f, 0x0a, 0x58, 0x00,
        0x0b, 0x0a, 0x58, 0x00, 0x0c, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00,
        0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0xd9, 0xd1, 0x84, 0x1f, 0x00, 0x00, 0x01, 0xf5,
        0xe5, 0x0b, 0x27,
    ];

    fn ctx_of(p: &IpPacket<'_>) -> (IcrcContext, Vec<u8>) {
        let (udp, _, payload) = p.udp().unwrap();
        let mut ctx = IcrcContext::new(p.ip.src(), p.ip.dst(), udp.src_port, udp.dst_port);
        if let crate::ip::IpHeader::V4(h) = p.ip {
            ctx.ipv4_id = h.id;
            ctx.ipv4_dont_fragment = h.dont_fragment;
        }
        (ctx, payload.to_vec())
    }

    #[test]
    fn test_raw_matches_capture() {
        let p = IpPacket::parse(&ACK_IP).unwrap();
        let (_, udp_hdr, payload) = p.udp().unwrap();
        let crc = compute_raw(p.ip_header, udp_hdr, &payload[..payload.len() - 4]).unwrap();
        assert_eq!(crc, crate::packet::stored_icrc(payload).unwrap());
    }

    #[test]
    fn test_context_matches_capture() {
        let p = IpPacket::parse(&ACK_IP).unwrap();
        let (ctx, payload) = ctx_of(&p);
        ctx.verify(&payload).unwrap();
        let mut copy = payload.clone();
        copy[16] ^= 1;
        assert_eq!(ctx.verify(&copy), Err(ParseError::BadIcrc));
    }

    #[test]
    fn test_recover_id() {
        let p = IpPacket::parse(&ACK_IP).unwrap();
        let (ctx, payload) = ctx_of(&p);
        assert_eq!(ctx.verify_unknown_id(&payload), Ok(0x1f88));
        let mut corrupted = payload.clone();
        corrupted[13] ^= 0x10;
        assert_eq!(ctx.verify_unknown_id(&corrupted), Err(ParseError::BadIcrc));
    }

    /// A context between two IPv4 addresses, identification 0 and DF as softrdma sends.
    fn v4_ctx() -> IcrcContext {
        IcrcContext::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            0xc000,
            4791,
        )
    }

    #[test]
    fn test_recover_any_id_and_df() {
        let mut packet = ACK_IP[20 + 8..].to_vec();
        let base = v4_ctx();
        for (id, df) in [
            (0u16, true),
            (1, true),
            (0xffff, true),
            (0x8001, false),
            (0, false),
        ] {
            let ctx = IcrcContext {
                ipv4_id: id,
                ipv4_dont_fragment: df,
                ..base
            };
            ctx.fill(&mut packet).unwrap();
            assert_eq!(
                base.verify_unknown_id(&packet),
                Ok(id),
                "id {id:#x} df {df}"
            );
        }
    }

    #[test]
    fn a_guessed_identification_right_or_wrong_verifies_as_the_unknown_one() {
        let mut packet = ACK_IP[20 + 8..].to_vec();
        let base = v4_ctx();
        for (id, df) in [(3u16, true), (0, true), (0x1f88, true), (7, false)] {
            let sent = IcrcContext {
                ipv4_id: id,
                ipv4_dont_fragment: df,
                ..base
            };
            sent.fill(&mut packet).unwrap();
            let want = Ok(RecoveredIpv4 {
                id,
                dont_fragment: df,
            });
            for guess in [id, 0, 3, 0xffff] {
                assert_eq!(
                    base.verify_ipv4_near(&packet, guess),
                    want,
                    "id {id:#x} df {df} guess {guess:#x}"
                );
            }
        }
        // A corrupted packet fails whatever the guess.
        let n = packet.len();
        packet[n - 6] ^= 0x10;
        for guess in [0, 7, 0x1234] {
            assert_eq!(
                base.verify_ipv4_near(&packet, guess),
                Err(ParseError::BadIcrc)
            );
        }
    }

    #[test]
    fn test_ipv6() {
        let mut packet = ACK_IP[20 + 8..].to_vec();
        let ctx = IcrcContext::new(
            "fe80::1".parse().unwrap(),
            "fe80::2".parse().unwrap(),
            1,
            4791,
        );
        ctx.fill(&mut packet).unwrap();
        ctx.verify(&packet).unwrap();
        assert_eq!(ctx.verify_unknown_id(&packet), Ok(0));
        packet[12] ^= 0x80;
        assert!(ctx.verify_unknown_id(&packet).is_err());
    }

    /// The pseudo-packet, built the plain way, hashes to what `compute_raw` returns, for
    /// transports short enough to go into its buffer whole and longer ones, IPv4 and IPv6.
    #[test]
    fn compute_raw_hashes_the_annex_a17_pseudo_packet() {
        let v4: Vec<u8> = ACK_IP[..20].to_vec();
        let mut v6 = vec![0x6a, 0xbc, 0xde, 0xf1, 0, 0, 17, 64];
        v6.extend((0..32u8).map(|i| i.wrapping_mul(7)));
        let udp = [0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x12, 0x34];
        for ip in [&v4, &v6] {
            for len in [12usize, 20, 64, 180, 188, 196, 200, 208, 220, 1000] {
                let transport: Vec<u8> = (0..len).map(|i| (i * 31 + 5) as u8).collect();
                let mut pseudo = vec![0xff; 8];
                let mut masked_ip = ip.clone();
                if ip[0] >> 4 == 4 {
                    for i in [1, 8, 10, 11] {
                        masked_ip[i] = 0xff;
                    }
                } else {
                    masked_ip[0] |= 0x0f;
                    for i in [1, 2, 3, 7] {
                        masked_ip[i] = 0xff;
                    }
                }
                pseudo.extend(&masked_ip);
                pseudo.extend(&udp[..6]);
                pseudo.extend([0xff, 0xff]);
                pseudo.extend(&transport);
                pseudo[8 + ip.len() + 8 + 4] = 0xff;
                assert_eq!(
                    compute_raw(ip, &udp, &transport).unwrap(),
                    crc32fast::hash(&pseudo),
                    "IPv{} transport {len}",
                    ip[0] >> 4
                );
            }
        }
    }

    #[test]
    fn id_reduction_by_tables_matches_the_row_by_row_one() {
        let mut x = 0x1234_5678u32;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            assert_eq!(reduce_by_tables(x), reduce_by_rows(x), "{x:#x}");
        }
    }

    #[test]
    fn test_gf2() {
        let x = ONE >> 1;
        assert_eq!(mul_mod_p(x, X_INVERSE), ONE);
        // Feeding 1000 zero bytes multiplies by x^8000; unfeeding undoes it.
        let mut fed = ONE;
        for _ in 0..8000 {
            fed = mul_mod_p(fed, x);
        }
        assert_eq!(mul_mod_p(fed, unfeed_zero_bytes(1000)), ONE);
        assert_eq!(raw_register(&[0; 1000]), 0);
    }

    /// An ICRC begun over the headers and continued over the rest in pieces is the one
    /// computed over the whole packet, for every split point; and a check of the value so
    /// computed recovers the sender's identification as `verify_ipv4_near` does.
    #[test]
    fn test_begin_and_continue_equals_compute() {
        let mut packet: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        packet[0] = 0x0a; // RDMA WRITE MIDDLE: a BTH and payload
        for (id, v6) in [(0u16, false), (5, false), (0, true)] {
            let mut ctx = v4_ctx();
            if v6 {
                ctx.src = "fe80::1".parse().unwrap();
                ctx.dst = "fe80::2".parse().unwrap();
            }
            let sent = IcrcContext { ipv4_id: id, ..ctx };
            sent.fill(&mut packet).unwrap();
            let stored = crate::packet::stored_icrc(&packet).unwrap();
            let body = packet.len() - ICRC_LEN;
            for split in [Bth::LEN, 13, 40, 200, body] {
                let head = ctx.begin(packet.len(), &packet[..split]).unwrap();
                let mut crc = head;
                for piece in packet[split..body].chunks(37) {
                    crc = crc32_update(crc, piece);
                }
                assert_eq!(
                    ctx.check_computed(crc, stored, packet.len()).map(|r| r.id),
                    Ok(if v6 { 0 } else { id }),
                    "split {split}"
                );
                if id == 0 {
                    assert_eq!(crc, ctx.compute(&packet).unwrap());
                }
            }
            let mut bad = packet.clone();
            bad[100] ^= 4;
            let crc = crc32_update(ctx.begin(bad.len(), &bad[..12]).unwrap(), &bad[12..body]);
            assert_eq!(
                ctx.check_computed(crc, stored, bad.len()),
                Err(ParseError::BadIcrc)
            );
        }
        assert_eq!(v4_ctx().begin(20, &packet[..8]), Err(ParseError::Truncated));
    }
}
