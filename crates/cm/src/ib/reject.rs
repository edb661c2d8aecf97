//! Saying no and asking for time, both ways — REJ and MRA (`ib_send_cm_rej`, `cm_rej_handler`,
//! `cm_issue_rej`, `ib_send_cm_mra`, `cm_mra_handler`) — and `destroy`, which is mostly
//! about what to say to the peer on the way out (`cm_destroy_id`), and `farewell`: that same
//! last word, given to the driver beforehand so that it can be said for a process that dies
//! without destroying its connections, as the kernel says it for a killed process's ids.

use softrdma_proto::Instant;
use softrdma_wire::mad::cm::reply::{Mra, ARI_LEN};
use softrdma_wire::mad::cm::{
    attr, private_data_len, CmMad, CmMessage, MsgResponse, Rej, RejectReason, SidrStatus,
};
use softrdma_wire::mad::PrivateData;

use super::timers::iba_time;
use super::{
    check_private_data, CmDrop, CmError, CmState, IbCm, IbCmEvent, IbCmId, OutMad, Received,
    SidrRepParams,
};

impl IbCm {
    /// Rejects a connection in the handshake (`ib_send_cm_rej`): during the REQ/REP exchange
    /// the connection goes back to idle; after our REP (the peer may already use its QP) it
    /// goes to time-wait. `ari` is the additional rejection information (≤ 72 bytes).
    pub fn reject(
        &mut self,
        now: Instant,
        id: IbCmId,
        reason: RejectReason,
        ari: &[u8],
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_private_data(private_data, private_data_len::REJ)?;
        if ari.len() > ARI_LEN {
            return Err(CmError::InvalidParameter("ARI over 72 bytes"));
        }
        let state = self.conn(id)?.state;
        let to_timewait = match state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepRcvd
            | CmState::MraRepSent => false,
            CmState::RepSent | CmState::MraRepRcvd => true,
            other => return Err(CmError::InvalidState(other)),
        };
        let rej = self.format_rej(id, reason, ari, private_data);
        self.send_to_peer(id, rej);
        self.cancel(id);
        if to_timewait {
            self.enter_timewait(now, id);
        } else {
            self.reset_to_idle(id);
        }
        Ok(())
    }

    /// The REJ for connection `id` in its current state (`cm_format_rej`): which message it
    /// rejects, and our comm ID unless we are still deciding on a REQ.
    fn format_rej(
        &self,
        id: IbCmId,
        reason: RejectReason,
        ari: &[u8],
        private_data: &[u8],
    ) -> CmMad {
        let c = &self.conns[&id];
        let (local_comm_id, msg_rejected) = match c.state {
            CmState::ReqRcvd => (0, MsgResponse::Req),
            CmState::MraReqSent => (c.local_comm_id, MsgResponse::Req),
            CmState::RepRcvd | CmState::MraRepSent => (c.local_comm_id, MsgResponse::Rep),
            _ => (c.local_comm_id, MsgResponse::Other),
        };
        let mut ari_field = [0u8; ARI_LEN];
        ari_field[..ari.len()].copy_from_slice(ari);
        let rej = Rej {
            local_comm_id,
            remote_comm_id: c.remote_comm_id,
            msg_rejected,
            ari_len: ari.len() as u8,
            reason,
            ari: ari_field,
            private_data: PrivateData::from_slice(private_data).expect("length checked"),
        };
        CmMad::new(c.tid, CmMessage::Rej(rej))
    }

    /// A REJ in answer to a received MAD that has no connection here (`cm_issue_rej`):
    /// `local` and `remote` are the comm IDs as the rejected message named them.
    pub(super) fn issue_rej(
        &mut self,
        rx: Received,
        local: u32,
        remote: u32,
        reason: RejectReason,
        rejected: MsgResponse,
    ) {
        let rej = Rej {
            local_comm_id: local,
            remote_comm_id: remote,
            msg_rejected: rejected,
            reason,
            ..Rej::default()
        };
        self.send(rx.src, rx.src_qpn, CmMad::new(rx.tid, CmMessage::Rej(rej)));
    }

    /// A REJ arrived (`cm_acquire_rejected_id`, `cm_rej_handler`).
    pub(super) fn on_rej(&mut self, now: Instant, rej: &Rej) {
        let id = if rej.reason == RejectReason::Timeout {
            // The active side gave up; it names itself by its CA GUID in the ARI.
            let guid = u64::from_be_bytes(rej.ari[..8].try_into().expect("8 bytes"));
            self.remote_ids
                .get(&(rej.local_comm_id, guid))
                .copied()
                .filter(|&id| self.conns[&id].remote_comm_id == rej.local_comm_id)
        } else if rej.msg_rejected == MsgResponse::Req {
            self.acquire(rej.remote_comm_id, 0)
        } else {
            self.acquire(rej.remote_comm_id, rej.local_comm_id)
        };
        let Some(id) = id else {
            return self.stats.drop(CmDrop::NoSuchConnection);
        };
        let stale = rej.reason == RejectReason::StaleConnection;
        match self.conns[&id].state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => {
                self.cancel(id);
                if stale {
                    self.enter_timewait(now, id);
                } else {
                    self.reset_to_idle(id);
                }
            }
            CmState::DreqSent | CmState::RepRcvd | CmState::MraRepSent | CmState::Established => {
                self.cancel(id);
                self.enter_timewait(now, id);
            }
            _ => return self.stats.drop(CmDrop::WrongState),
        }
        self.event(IbCmEvent::RejReceived {
            id,
            reason: rej.reason,
            ari: rej.ari().to_vec(),
            private_data: rej.private_data,
        });
    }

    /// Asks the peer for time (`ib_send_cm_mra`) while the consumer decides on a REQ
    /// (REQ_RCVD → MRA_REQ_SENT) or readies its QP after a REP (REP_RCVD → MRA_REP_SENT).
    /// With `delay` nothing is sent now — the MRA only answers retransmissions, which is how
    /// rdma_cm uses it (`IB_CM_MRA_FLAG_DELAY`); without, it is sent at once.
    pub fn send_mra(
        &mut self,
        _now: Instant,
        id: IbCmId,
        service_timeout: u8,
        delay: bool,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_private_data(private_data, private_data_len::MRA)?;
        if service_timeout > 31 {
            return Err(CmError::InvalidParameter("service timeout over 31"));
        }
        let c = self.conn_mut(id)?;
        let (next, msg_mraed) = match c.state {
            CmState::ReqRcvd => (CmState::MraReqSent, MsgResponse::Req),
            CmState::RepRcvd => (CmState::MraRepSent, MsgResponse::Rep),
            other => return Err(CmError::InvalidState(other)),
        };
        c.state = next;
        c.service_timeout = service_timeout;
        c.private_data = private_data.to_vec();
        if !delay {
            let mra = Mra {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                msg_mraed,
                service_timeout,
                private_data: PrivateData::from_slice(private_data).expect("length checked"),
            };
            let tid = c.tid;
            self.send_to_peer(id, CmMad::new(tid, CmMessage::Mra(mra)));
        }
        Ok(())
    }

    /// An MRA arrived: the peer needs time; the outstanding REQ or REP waits the service
    /// timeout plus the ACK timeout before its next attempt, for the rest of its attempts.
    pub(super) fn on_mra(&mut self, now: Instant, mra: &Mra) {
        let id = match mra.msg_mraed {
            MsgResponse::Req => self.acquire(mra.remote_comm_id, 0),
            MsgResponse::Rep | MsgResponse::Other => {
                self.acquire(mra.remote_comm_id, mra.local_comm_id)
            }
            MsgResponse::Reserved => None,
        };
        let Some(id) = id else {
            return self.stats.drop(CmDrop::NoSuchConnection);
        };
        let c = self.conns.get_mut(&id).expect("acquired");
        let next = match (c.state, mra.msg_mraed) {
            (CmState::ReqSent, MsgResponse::Req) => CmState::MraReqRcvd,
            (CmState::RepSent, MsgResponse::Rep) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.stats.rx_duplicates.bump(attr::MRA);
                return;
            }
            _ => return self.stats.drop(CmDrop::WrongState),
        };
        let timeout = iba_time(mra.service_timeout) + iba_time(c.ack_timeout);
        let Some(p) = c.pending.as_mut() else {
            return self.stats.drop(CmDrop::WrongState);
        };
        p.timeout = timeout;
        p.deadline = now + timeout;
        p.sent_in = next;
        c.state = next;
        self.rearm(id);
        self.event(IbCmEvent::MraReceived {
            id,
            service_timeout: mra.service_timeout,
        });
    }

    /// Forgets a connection (`ib_destroy_cm_id`), telling the peer what its state calls for:
    /// a REJ (timeout, from the active side; consumer-defined from the passive side), one
    /// DREQ if established, the DREP if a DREQ is unanswered, the SIDR_REP "reject" for an
    /// unanswered SIDR_REQ. The connection is gone afterwards, time-wait included.
    pub fn destroy(&mut self, now: Instant, id: IbCmId) -> Result<(), CmError> {
        loop {
            match self.conn(id)?.state {
                CmState::Idle => break,
                CmState::SidrReqSent => {
                    self.cancel(id);
                    break;
                }
                CmState::SidrReqRcvd => {
                    self.sidr_reply(now, id, &SidrRepParams::refuse(SidrStatus::Reject))?;
                    break;
                }
                CmState::Established => {
                    self.disconnect(now, id, &[])?;
                }
                CmState::DreqSent => {
                    self.cancel(id);
                    self.enter_timewait(now, id);
                }
                CmState::DreqRcvd => {
                    self.send_drep(now, id, &[])?;
                }
                CmState::Timewait => {
                    self.conn_mut(id)?.state = CmState::Idle;
                }
                // The handshake: rejected, which ends in idle (before our REP) or time-wait.
                handshake => {
                    let (reason, ari) = self.rej_on_destroy(handshake);
                    self.reject(now, id, reason, &ari, &[])?;
                }
            }
        }
        self.forget(id);
        Ok(())
    }

    /// The REJ `destroy` sends in a handshake state: the active side giving up says timeout,
    /// with its CA GUID as the ARI; any other says no as the consumer.
    fn rej_on_destroy(&self, state: CmState) -> (RejectReason, Vec<u8>) {
        match state {
            CmState::ReqSent | CmState::MraReqRcvd => (
                RejectReason::Timeout,
                self.config.ca_guid.to_be_bytes().to_vec(),
            ),
            _ => (RejectReason::ConsumerDefined, Vec::new()),
        }
    }

    /// The MAD [`IbCm::destroy`] would send first for `id` now, changing nothing: a REJ in
    /// the handshake, the DREQ of an established connection, the DREP of an unanswered DREQ.
    /// `None` where destroy sends nothing (idle, time-wait, a DREQ of ours outstanding,
    /// SIDR). A driver keeps these where another process finds them, so that a process that
    /// is killed still has its connections ended as Linux ends a dead process's (its CM
    /// destroys them: one DREQ, not resent, for an established one).
    pub fn farewell(&self, id: IbCmId) -> Option<OutMad> {
        let c = self.conns.get(&id)?;
        let mad = match c.state {
            CmState::Established => self.format_dreq(id, &[]),
            CmState::DreqRcvd => self.format_drep(id, &[]),
            CmState::Idle
            | CmState::SidrReqSent
            | CmState::SidrReqRcvd
            | CmState::DreqSent
            | CmState::Timewait => return None,
            handshake => {
                let (reason, ari) = self.rej_on_destroy(handshake);
                self.format_rej(id, reason, &ari, &[])
            }
        };
        Some(OutMad {
            dst: c.peer,
            dst_qpn: c.peer_qpn,
            mad: mad.to_bytes(),
        })
    }

    /// The connections whose [`IbCm::farewell`] changed since the last call, each with its
    /// new one (`None`: nothing to say any more, or the connection is gone). Cheap when
    /// nothing changed: one comparison per connection.
    pub fn farewell_changes(&mut self) -> Vec<(IbCmId, Option<OutMad>)> {
        let mut changes = Vec::new();
        // A farewell follows from the state, the peer's comm ID (and QPN, learnt with it)
        // and the exchange's TID; everything else in it is fixed when the connection is made.
        for (&id, c) in &self.conns {
            let key = (c.state, c.remote_comm_id, c.tid);
            if self.farewell_keys.get(&id) != Some(&key) {
                changes.push(id);
            }
        }
        let mut out: Vec<(IbCmId, Option<OutMad>)> = Vec::with_capacity(changes.len());
        for id in changes {
            let c = &self.conns[&id];
            self.farewell_keys
                .insert(id, (c.state, c.remote_comm_id, c.tid));
            out.push((id, self.farewell(id)));
        }
        let gone: Vec<IbCmId> = self
            .farewell_keys
            .keys()
            .filter(|id| !self.conns.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            self.farewell_keys.remove(&id);
            out.push((id, None));
        }
        out
    }
}
