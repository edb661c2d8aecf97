//! The QP attributes a connection's handshake decided (`ib_cm_init_qp_attr`): what the
//! consumer passes to `modify_qp` for RESET→INIT, INIT→RTR and RTR→RTS.
//!
//! Who uses which PSN is worth stating, because rxe's captures show it: the REQ's starting PSN
//! is the one the *active* side receives first (its RQ PSN) and the passive side sends first;
//! the REP's is the passive side's RQ PSN and the active side's first send PSN.

use softrdma_proto::{AccessFlags, AddressVector, Mtu, QpAttr, QpState};
use softrdma_wire::mad::cm::TransportType;

use super::{CmError, CmState, IbCm, IbCmId};

impl IbCm {
    /// The attributes that move connection `id`'s QP to `target` (`Init`, `Rtr` or `Rts`), as
    /// Linux's `ib_cm_init_qp_attr` computes them:
    ///
    /// - `Init`: remote write, plus remote read and atomics if this side accepts READs
    ///   (responder resources > 0); P_Key index 0, port 1. From REQ_SENT on.
    /// - `Rtr`: the peer's address (from its GID), path MTU, its QPN, the PSN to expect, the
    ///   READ/atomic requests to accept, RNR timer code 0. Once the other side's message
    ///   (REQ or REP) is in.
    /// - `Rts`: the PSN to send with, retry and RNR retry counts, READ/atomic requests to
    ///   issue, the local ACK timeout. From REQ_RCVD on (the passive side may go to RTS before
    ///   sending the REP).
    pub fn qp_attr(&self, id: IbCmId, target: QpState) -> Result<QpAttr, CmError> {
        let c = self.conn(id)?;
        use CmState::*;
        let handshake = matches!(
            c.state,
            ReqRcvd | MraReqSent | RepRcvd | MraRepSent | RepSent | MraRepRcvd | Established
        );
        let connected_rc = c.transport == TransportType::Rc;
        match target {
            QpState::Init if handshake || matches!(c.state, ReqSent | MraReqRcvd) => {
                let mut access = AccessFlags::REMOTE_WRITE;
                if c.responder_resources != 0 {
                    access = access | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
                }
                Ok(QpAttr::rc_init(access))
            }
            QpState::Rtr if handshake => {
                let path_mtu = Mtu::from_ibv_enum(c.path.mtu)
                    .ok_or(CmError::InvalidParameter("path MTU code not 1..=5"))?;
                let dest_ip = c
                    .path
                    .dgid
                    .to_ip()
                    .ok_or(CmError::InvalidParameter("peer GID names no IP address"))?;
                let dest = AddressVector {
                    dest_ip,
                    traffic_class: c.path.traffic_class,
                    hop_limit: c.path.hop_limit,
                };
                let mut attr = QpAttr::rc_rtr(
                    path_mtu,
                    dest,
                    c.remote_qpn,
                    c.rq_psn,
                    c.responder_resources,
                    0,
                );
                if !connected_rc {
                    attr.max_dest_rd_atomic = None;
                    attr.min_rnr_timer = None;
                }
                Ok(attr)
            }
            QpState::Rts if handshake => {
                let mut attr = QpAttr::rc_rts(
                    c.sq_psn,
                    c.ack_timeout,
                    c.retry_count,
                    c.rnr_retry_count,
                    c.initiator_depth,
                );
                if !connected_rc {
                    attr.timeout = None;
                    attr.retry_cnt = None;
                    attr.rnr_retry = None;
                    attr.max_rd_atomic = None;
                }
                Ok(attr)
            }
            QpState::Init | QpState::Rtr | QpState::Rts => Err(CmError::InvalidState(c.state)),
            _ => Err(CmError::InvalidParameter("target must be INIT, RTR or RTS")),
        }
    }
}
