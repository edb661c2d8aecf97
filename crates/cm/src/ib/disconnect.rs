//! Teardown: DREQ and DREP both ways, and time-wait (`ib_send_cm_dreq`, `cm_dreq_handler`,
//! `cm_issue_drep`, `ib_send_cm_drep`, `cm_drep_handler`, `cm_enter_timewait`).
//!
//! Time-wait keeps a disconnected connection around for the QP's ACK timeout (Linux:
//! `cm_convert_to_ms(av.timeout)`), long enough for packets of the old connection to die, and
//! answers retransmitted DREQs during it; `TimewaitExit` then says the QP number may be reused.

use softrdma_proto::Instant;
use softrdma_wire::mad::cm::{attr, private_data_len, CmMad, CmMessage, Drep, Dreq};
use softrdma_wire::mad::PrivateData;

use super::timers::iba_time;
use super::{check_private_data, CmDrop, CmError, CmState, IbCm, IbCmEvent, IbCmId, Received};

impl IbCm {
    /// Starts a disconnect (`ib_send_cm_dreq`): the DREQ is resent until the DREP comes;
    /// either way the connection ends in time-wait. Only an established connection can.
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: IbCmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_private_data(private_data, private_data_len::DREQ)?;
        let state = self.conn(id)?.state;
        if state != CmState::Established {
            return Err(CmError::InvalidState(state));
        }
        self.send_dreq(now, id, private_data);
        Ok(())
    }

    fn send_dreq(&mut self, now: Instant, id: IbCmId, private_data: &[u8]) {
        let dreq = self.format_dreq(id, private_data);
        let timeout = self.conns[&id].timeout;
        self.conns.get_mut(&id).expect("exists").state = CmState::DreqSent;
        self.send_and_wait(now, id, dreq, timeout);
    }

    /// Our DREQ for connection `id`, under our TID for it.
    pub(super) fn format_dreq(&self, id: IbCmId, private_data: &[u8]) -> CmMad {
        let c = &self.conns[&id];
        let dreq = Dreq {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            remote_qpn: c.remote_qpn,
            private_data: PrivateData::from_slice(private_data).unwrap_or_default(),
        };
        CmMad::new(self.form_tid(c.local_comm_id), CmMessage::Dreq(dreq))
    }

    /// A new connection request showed that `old` is stale: Linux sends it a DREQ if it is
    /// established (and nothing otherwise).
    pub(super) fn dreq_stale(&mut self, now: Instant, old: IbCmId) {
        if self
            .conns
            .get(&old)
            .is_some_and(|c| c.state == CmState::Established)
        {
            self.send_dreq(now, old, &[]);
        }
    }

    /// Answers the peer's DREQ (`ib_send_cm_drep`) and enters time-wait.
    pub fn send_drep(
        &mut self,
        now: Instant,
        id: IbCmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_private_data(private_data, private_data_len::DREP)?;
        let state = self.conn(id)?.state;
        if state != CmState::DreqRcvd {
            return Err(CmError::InvalidState(state));
        }
        self.conn_mut(id)?.private_data = private_data.to_vec();
        self.enter_timewait(now, id);
        let drep = self.format_drep(id, private_data);
        self.send_to_peer(id, drep);
        Ok(())
    }

    /// Our DREP for connection `id` with `private_data`, under the DREQ's TID.
    pub(super) fn format_drep(&self, id: IbCmId, private_data: &[u8]) -> CmMad {
        let c = &self.conns[&id];
        let drep = Drep {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            private_data: PrivateData::from_slice(private_data).unwrap_or_default(),
        };
        CmMad::new(c.tid, CmMessage::Drep(drep))
    }

    /// A DREQ arrived.
    pub(super) fn on_dreq(&mut self, _now: Instant, rx: Received, dreq: &Dreq) {
        let Some(id) = self.acquire(dreq.remote_comm_id, dreq.local_comm_id) else {
            // Forgotten already (or never known): answer so the peer stops (cm_issue_drep).
            self.stats.rx_duplicates.bump(attr::DREQ);
            let drep = Drep {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: PrivateData::ZERO,
            };
            self.send(
                rx.src,
                rx.src_qpn,
                CmMad::new(rx.tid, CmMessage::Drep(drep)),
            );
            return;
        };
        let c = &self.conns[&id];
        if c.local_qpn != dreq.remote_qpn {
            return self.stats.drop(CmDrop::WrongQpn);
        }
        match c.state {
            CmState::RepSent | CmState::DreqSent => self.cancel(id),
            CmState::Established | CmState::MraRepRcvd => {}
            CmState::Timewait => {
                // Our DREP was lost: send it again, with the private data it had.
                self.stats.rx_duplicates.bump(attr::DREQ);
                let drep = self.format_drep(id, &c.private_data);
                self.send(rx.src, rx.src_qpn, drep);
                return;
            }
            CmState::DreqRcvd => {
                self.stats.rx_duplicates.bump(attr::DREQ);
                return;
            }
            _ => return self.stats.drop(CmDrop::WrongState),
        }
        let c = self.conns.get_mut(&id).expect("acquired");
        c.state = CmState::DreqRcvd;
        c.tid = rx.tid;
        self.event(IbCmEvent::DreqReceived {
            id,
            private_data: dreq.private_data,
        });
    }

    /// A DREP arrived: the disconnect is complete.
    pub(super) fn on_drep(&mut self, now: Instant, drep: &Drep) {
        let Some(id) = self.acquire(drep.remote_comm_id, drep.local_comm_id) else {
            return self.stats.drop(CmDrop::NoSuchConnection);
        };
        if !matches!(self.conns[&id].state, CmState::DreqSent | CmState::DreqRcvd) {
            return self.stats.drop(CmDrop::WrongState);
        }
        self.enter_timewait(now, id);
        self.cancel(id);
        self.event(IbCmEvent::DrepReceived {
            id,
            private_data: drep.private_data,
        });
    }

    /// Enters time-wait (`cm_enter_timewait`): out of the duplicate and stale indexes, idle
    /// again after the ACK timeout.
    pub(super) fn enter_timewait(&mut self, now: Instant, id: IbCmId) {
        self.remove_remote(id);
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = CmState::Timewait;
            c.timewait_until = Some(now + iba_time(c.ack_timeout));
        }
        self.rearm(id);
    }
}
