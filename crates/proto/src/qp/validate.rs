//! What `post_send` refuses before anything is queued (ibverbs returns `EINVAL` for these):
//! the structure of a work request and whether the QP's transport offers the operation.
//! Protection (keys, bounds, rights) is checked later, when the WQE executes, and reported in
//! its completion, as on hardware.

use super::attr::QpType;
use super::QpContext;
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::wr::{SendFlags, SendOp, SendWr, FLUSH_GLOBAL, FLUSH_PERSISTENT};

/// Largest message the engine accepts (rxe's max_msg_sz is 8 MiB; IBTA allows 2^31).
pub const MAX_MESSAGE_BYTES: u64 = 1 << 31;

impl QpContext {
    /// Checks `wr` against this QP's transport and capacities.
    pub(crate) fn validate_send(
        &self,
        config: &EngineConfig,
        wr: &SendWr,
    ) -> Result<(), EngineError> {
        let invalid = |why| Err(EngineError::InvalidArgument(why));
        if wr.sg_list.len() > self.caps.max_send_sge as usize {
            return invalid("too many scatter/gather elements");
        }
        if wr.flags.contains(SendFlags::INLINE) {
            let Some(data) = &wr.inline_data else {
                return invalid("INLINE flag without inline data");
            };
            // ATOMIC_WRITE's 8 bytes travel in the work request itself (ibverbs'
            // `ibv_wr_atomic_write` passes them by pointer, as rxe keeps them in its WQE), not
            // as inline data the QP was sized for.
            let atomic_value = matches!(wr.op, SendOp::AtomicWrite { .. }) && data.len() == 8;
            if data.len() > self.caps.max_inline_data as usize && !atomic_value {
                return invalid("inline data longer than max_inline_data");
            }
            if wr.op.writes_locally() || matches!(wr.op, SendOp::Flush { .. }) {
                return invalid("READ, atomics and FLUSH cannot be inline");
            }
        } else if wr.inline_data.is_some() {
            return invalid("inline data without the INLINE flag");
        }
        if wr.op.is_atomic() {
            let len: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
            if len != 8 {
                return invalid("atomic operations need an 8-byte SGL");
            }
            let addr = match wr.op {
                SendOp::AtomicCmpSwap { remote_addr, .. }
                | SendOp::AtomicFetchAdd { remote_addr, .. } => remote_addr,
                _ => 0,
            };
            if addr % 8 != 0 {
                return invalid("atomic remote address not 8-byte aligned");
            }
        }
        match wr.op {
            SendOp::AtomicWrite { remote_addr, .. } => {
                if wr.length() != 8 {
                    return invalid("ATOMIC_WRITE carries exactly 8 bytes");
                }
                if remote_addr % 8 != 0 {
                    return invalid("atomic remote address not 8-byte aligned");
                }
            }
            SendOp::Flush { placement, .. } => {
                if !wr.sg_list.is_empty() {
                    return invalid("FLUSH moves no data: no scatter/gather list");
                }
                if placement & !(FLUSH_GLOBAL | FLUSH_PERSISTENT) != 0 || placement == 0 {
                    return invalid("FLUSH placement type is GLOBAL and/or PERSISTENT");
                }
            }
            // As rdma-core's rxe provider: a local operation carries no data.
            SendOp::BindMw(_) | SendOp::LocalInv { .. }
                if !wr.sg_list.is_empty() || wr.inline_data.is_some() =>
            {
                return invalid("BIND_MW and LOCAL_INV carry no scatter/gather list");
            }
            _ => {}
        }
        if wr.op.is_read_or_atomic() && self.cfg.max_rd_atomic == 0 && self.qp_type.is_reliable() {
            // rxe would hold the request forever (no initiator credit ever frees up).
            return invalid("max_rd_atomic is 0: the QP may not issue READ, atomics or FLUSH");
        }
        if wr.length() > MAX_MESSAGE_BYTES {
            return invalid("message longer than 2^31 bytes");
        }
        if wr.xrc_srqn.is_some() != (self.qp_type == QpType::XrcIni) {
            return invalid(if self.qp_type == QpType::XrcIni {
                "an XRC initiator's work request names the SRQ at the target (remote_srqn)"
            } else {
                "a remote SRQ number on a QP that is not an XRC initiator"
            });
        }
        match self.qp_type {
            QpType::Rc | QpType::XrcIni => {
                if wr.ud.is_some() {
                    return invalid("a UD destination on a connected QP");
                }
                if wr.xrc_srqn.is_some_and(|n| n > softrdma_wire::QPN_MASK) {
                    return invalid("an SRQ number has 24 bits");
                }
            }
            QpType::XrcTgt => return invalid("an XRC target QP has no send queue"),
            QpType::Uc => {
                if wr.ud.is_some() {
                    return invalid("a UD destination on a connected QP");
                }
                // IBTA 9.3.1: UC carries SEND and RDMA WRITE (with immediate), nothing else;
                // the local operations (window binds, invalidation) are the QP's own.
                if !matches!(
                    wr.op,
                    SendOp::Send
                        | SendOp::SendWithImm { .. }
                        | SendOp::RdmaWrite { .. }
                        | SendOp::RdmaWriteWithImm { .. }
                        | SendOp::BindMw(_)
                        | SendOp::LocalInv { .. }
                ) {
                    return invalid(
                        "UC QPs offer only SEND, RDMA WRITE (with immediate), BIND_MW and LOCAL_INV",
                    );
                }
            }
            QpType::Ud => {
                if !matches!(wr.op, SendOp::Send | SendOp::SendWithImm { .. }) {
                    return invalid("UD QPs offer only SEND and SEND with immediate");
                }
                let Some(dest) = wr.ud else {
                    return invalid("a UD SEND needs a destination (address handle)");
                };
                if dest.av.dest_ip.is_ipv4() != config.local_ip.is_ipv4() {
                    return invalid("the address handle is of another IP family");
                }
                // A UD message is one packet. IBTA C10-93.1.1 has an oversized one vanish
                // silently (rxe fakes a successful send); softrdma refuses it at post time, so
                // the mistake is seen and still nothing is sent.
                if wr.length() > u64::from(config.port_mtu.bytes()) {
                    return invalid("UD message longer than the port MTU");
                }
            }
        }
        Ok(())
    }
}
