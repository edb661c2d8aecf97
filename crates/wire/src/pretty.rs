//! One-line, tcpdump-style rendering of a packet, used by `softrdma decode` and in traces.
//!
//! A UD packet to QP 1 carries a management datagram; its line ends with the MAD's own
//! rendering ([`crate::mad::describe`]): class, method, attribute and the CM fields.

use core::fmt;

use crate::PacketRepr;

impl fmt::Display for PacketRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.bth;
        write!(f, "{} qp={:#08x} psn={}", b.opcode, b.dest_qpn, b.psn)?;
        if b.ack_req {
            f.write_str(" ackreq")?;
        }
        if b.solicited {
            f.write_str(" se")?;
        }
        if b.fecn {
            f.write_str(" fecn")?;
        }
        if b.becn {
            f.write_str(" becn")?;
        }
        if b.pkey != crate::DEFAULT_PKEY {
            write!(f, " pkey={:#06x}", b.pkey)?;
        }
        let e = &self.ext;
        if let Some(d) = e.deth {
            write!(f, " DETH[qkey={:#010x} srcqp={:#08x}]", d.qkey, d.src_qpn)?;
        }
        if let Some(x) = e.xrceth {
            write!(f, " XRCETH[srq={:#08x}]", x.srqn)?;
        }
        if let Some(h) = e.feth {
            write!(f, " FETH[sel={} plt={}]", h.selectivity, h.placement)?;
        }
        if let Some(r) = e.reth {
            write!(
                f,
                " RETH[va={:#x} rkey={:#x} len={}]",
                r.va, r.rkey, r.dma_len
            )?;
        }
        if let Some(a) = e.atomic_eth {
            write!(
                f,
                " AtomicETH[va={:#x} rkey={:#x} swap_add={:#x} cmp={:#x}]",
                a.va, a.rkey, a.swap_add, a.compare
            )?;
        }
        if let Some(a) = e.aeth {
            write!(f, " AETH[{} msn={}]", a.syndrome, a.msn)?;
        }
        if let Some(a) = e.atomic_ack_eth {
            write!(f, " AtomicAckETH[orig={:#x}]", a.orig)?;
        }
        if let Some(i) = e.imm_dt {
            write!(f, " ImmDt[{:#010x}]", i.imm)?;
        }
        if let Some(i) = e.ieth {
            write!(f, " IETH[rkey={:#x}]", i.rkey)?;
        }
        write!(f, " payload={}", self.payload.len())?;
        if e.deth.is_some() && b.dest_qpn == crate::mad::GSI_QPN {
            write!(f, " {}", crate::mad::describe(self.payload))?;
        }
        Ok(())
    }
}
