//! One QP's parameters as perftest exchanges them, in the two encodings perftest uses: text
//! over its TCP socket, and `struct pingpong_dest` in network byte order when the exchange
//! runs over an rdma_cm-connected QP (`-R`, `-z`).

use crate::error::{FormatError, ParseError};
use crate::text::{c_str, parse_hex, put_hex};
use softrdma_wire::Gid;

/// Size of a key message with GID (`KEY_MSG_SIZE_GID`). perftest always sends the GID form
/// on RoCE; the 59-byte GID-less form (InfiniBand without `-x`) is not supported.
pub const KEY_MSG_LEN: usize = 108;

/// One QP's parameters as perftest exchanges them (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PerftestDest {
    /// Port LID; 0 on RoCE.
    pub lid: u16,
    /// Outstanding RDMA READ/atomic requests the sender accepts: 1 for write/send tests,
    /// `max_qp_rd_atom` (128 on rxe) for read/atomic tests.
    pub out_reads: u16,
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// Initial PSN (24 bits).
    pub psn: u32,
    /// rkey of the sender's buffer (0 in send tests).
    pub rkey: u32,
    /// Address of the sender's buffer, the target of RDMA WRITE/READ/atomics.
    pub vaddr: u64,
    /// GID of the sender.
    pub gid: Gid,
    /// SRQ number (XRC/DC only; 0 otherwise).
    pub srqn: u32,
}

/// Size of a key message over an rdma_cm QP: `sizeof(struct pingpong_dest)` on 64-bit
/// Linux (also the length of the one receive perftest posts on that QP, so no message on it
/// may be longer).
pub const RDMA_CM_KEY_LEN: usize = 56;

/// Number of `:`-terminated fields of the key message: 6 + 16 GID bytes + srqn.
const KEY_FIELDS: usize = 23;

impl PerftestDest {
    /// Encodes the 108-byte key message
    /// `"%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 × "%02x:" + "%08x:"` + NUL.
    ///
    /// Fails if the QPN or PSN exceed 24 bits (the message would no longer be 108 bytes).
    pub fn format(&self) -> Result<[u8; KEY_MSG_LEN], FormatError> {
        let mut v = Vec::with_capacity(KEY_MSG_LEN);
        let field = |v: &mut Vec<u8>, value: u64, width, name| {
            put_hex(v, value, width, name).map(|()| v.push(b':'))
        };
        field(&mut v, u64::from(self.lid), 4, "lid")?;
        field(&mut v, u64::from(self.out_reads), 4, "out_reads")?;
        field(&mut v, u64::from(self.qpn), 6, "qpn")?;
        field(&mut v, u64::from(self.psn), 6, "psn")?;
        field(&mut v, u64::from(self.rkey), 8, "rkey")?;
        field(&mut v, self.vaddr, 16, "vaddr")?;
        for b in self.gid.0 {
            field(&mut v, u64::from(b), 2, "gid")?;
        }
        field(&mut v, u64::from(self.srqn), 8, "srqn")?;
        v.push(0);
        let mut out = [0u8; KEY_MSG_LEN];
        out.copy_from_slice(&v);
        Ok(out)
    }

    /// Decodes a 108-byte key message. Hex fields may have any width (perftest parses each
    /// with `strtol`), but every field must be present, hex, and in range; the text must end
    /// with `:` and a NUL.
    pub fn parse(msg: &[u8]) -> Result<PerftestDest, ParseError> {
        if msg.len() != KEY_MSG_LEN {
            return Err(ParseError::Length {
                expected: KEY_MSG_LEN,
                got: msg.len(),
            });
        }
        let text = c_str(msg)?;
        let mut fields: Vec<&[u8]> = text.split(|&b| b == b':').collect();
        // "a:b:...:z:" splits into the fields plus one empty tail.
        if fields.len() != KEY_FIELDS + 1 || fields.pop() != Some(&[][..]) {
            return Err(ParseError::FieldCount {
                expected: KEY_FIELDS,
                found: fields.len().saturating_sub(1),
            });
        }
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = parse_hex(fields[6 + i], 0xff, "gid")? as u8;
        }
        Ok(PerftestDest {
            lid: parse_hex(fields[0], 0xffff, "lid")? as u16,
            out_reads: parse_hex(fields[1], 0xffff, "out_reads")? as u16,
            qpn: parse_hex(fields[2], 0xff_ffff, "qpn")? as u32,
            psn: parse_hex(fields[3], 0xff_ffff, "psn")? as u32,
            rkey: parse_hex(fields[4], 0xffff_ffff, "rkey")? as u32,
            vaddr: parse_hex(fields[5], u64::MAX, "vaddr")?,
            gid: Gid(gid),
            srqn: parse_hex(fields[22], 0xffff_ffff, "srqn")? as u32,
        })
    }

    /// Encodes the key message perftest SENDs over its rdma_cm control QP
    /// (`rdma_write_keys`): `struct pingpong_dest` with every integer big-endian — lid,
    /// out_reads, qpn, psn, rkey as 32-bit words at 0..20, four bytes of padding (perftest
    /// leaves stack garbage there; zeros here), vaddr at 24, the raw GID at 32, srqn at 48 and
    /// `gid_index` (the sender's) at 52.
    pub fn to_rdma_cm_bytes(&self, gid_index: u32) -> [u8; RDMA_CM_KEY_LEN] {
        let mut b = [0u8; RDMA_CM_KEY_LEN];
        let words = [
            u32::from(self.lid),
            u32::from(self.out_reads),
            self.qpn,
            self.psn,
            self.rkey,
        ];
        for (i, w) in words.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid.0);
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&gid_index.to_be_bytes());
        b
    }

    /// Decodes [`to_rdma_cm_bytes`](Self::to_rdma_cm_bytes)'s message. perftest's reader
    /// (`rdma_read_keys`) takes lid, out_reads, qpn, psn, rkey, vaddr and the GID and
    /// ignores the rest, so do we (the padding and `gid_index` are not checked; srqn is
    /// kept); values too wide for their field are refused.
    pub fn from_rdma_cm_bytes(msg: &[u8]) -> Result<PerftestDest, ParseError> {
        if msg.len() != RDMA_CM_KEY_LEN {
            return Err(ParseError::Length {
                expected: RDMA_CM_KEY_LEN,
                got: msg.len(),
            });
        }
        let word = |i: usize| u32::from_be_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
        let narrow = |v: u32, max: u32, field| {
            if v <= max {
                Ok(v)
            } else {
                Err(ParseError::OutOfRange { field })
            }
        };
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&msg[24..32]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&msg[32..48]);
        Ok(PerftestDest {
            lid: narrow(word(0), 0xffff, "lid")? as u16,
            out_reads: narrow(word(4), 0xffff, "out_reads")? as u16,
            qpn: narrow(word(8), 0xff_ffff, "qpn")?,
            psn: narrow(word(12), 0xff_ffff, "psn")?,
            rkey: word(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid: Gid(gid),
            srqn: word(48),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn rdma_cm_keys_are_pingpong_dest_in_network_order() {
        let d = PerftestDest {
            lid: 0,
            out_reads: 0x80,
            qpn: 0x11,
            psn: 0x92_8761,
            rkey: 0x202,
            vaddr: 0x55fa_6b64_b000,
            gid: Gid::from_ipv4_mapped(Ipv4Addr::new(10, 88, 0, 12)),
            srqn: 0,
        };
        let b = d.to_rdma_cm_bytes(1);
        let mut want = vec![
            0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0x11, 0, 0x92, 0x87, 0x61,
        ];
        want.extend([0, 0, 2, 2, 0, 0, 0, 0]); // rkey, padding
        want.extend([0, 0, 0x55, 0xfa, 0x6b, 0x64, 0xb0, 0]); // vaddr
        want.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 88, 0, 12]); // GID
        want.extend([0, 0, 0, 0, 0, 0, 0, 1]); // srqn, gid_index
        assert_eq!(b.to_vec(), want);
        assert_eq!(PerftestDest::from_rdma_cm_bytes(&b), Ok(d));
        // perftest leaves its padding uninitialised and nobody reads gid_index.
        let mut noisy = b;
        noisy[20..24].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        noisy[52..56].copy_from_slice(&[0xff; 4]);
        assert_eq!(PerftestDest::from_rdma_cm_bytes(&noisy), Ok(d));
    }

    #[test]
    fn rdma_cm_keys_out_of_range_or_short_are_typed_errors() {
        let mut b = PerftestDest::default().to_rdma_cm_bytes(0);
        b[8] = 1; // QPN 0x01000000: 25 bits
        assert_eq!(
            PerftestDest::from_rdma_cm_bytes(&b),
            Err(ParseError::OutOfRange { field: "qpn" })
        );
        assert_eq!(
            PerftestDest::from_rdma_cm_bytes(&b[..55]),
            Err(ParseError::Length {
                expected: RDMA_CM_KEY_LEN,
                got: 55
            })
        );
    }
}
