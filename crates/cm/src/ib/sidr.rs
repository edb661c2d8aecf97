//! Service ID resolution for UD services (IBTA 12.11; `ib_send_cm_sidr_req`,
//! `cm_sidr_req_handler`, `ib_send_cm_sidr_rep`, `cm_sidr_rep_handler`): one question, one
//! answer, no connection. A SIDR_REQ for a service nobody listens on is answered
//! "unsupported" at once.

use softrdma_proto::{Duration, Instant};
use softrdma_wire::mad::cm::sidr::SIDR_INFO_LEN;
use softrdma_wire::mad::cm::{
    attr, private_data_len, CmMad, CmMessage, SidrRep, SidrReq, SidrStatus,
};
use softrdma_wire::mad::PrivateData;

use super::event::{SidrRepReceived, SidrReqReceived};
use super::{
    check_private_data, CmDrop, CmError, CmState, IbCm, IbCmEvent, IbCmId, Received, SidrRepParams,
    SidrReqParams,
};

impl IbCm {
    /// Asks which UD QP serves a service ID (`ib_send_cm_sidr_req`); the SIDR_REQ is resent
    /// every `timeout_ms` until answered.
    pub fn sidr_request(&mut self, now: Instant, p: &SidrReqParams) -> Result<IbCmId, CmError> {
        check_private_data(&p.private_data, private_data_len::SIDR_REQ)?;
        if p.max_cm_retries > 15 {
            return Err(CmError::InvalidParameter("CM retries over 15"));
        }
        let id = self.create(p.path.dgid, p.path)?;
        let local_comm_id = self.conns[&id].local_comm_id;
        let tid = self.form_tid(local_comm_id);
        let c = self.conn_mut(id)?;
        c.service_id = p.service_id;
        c.tid = tid;
        c.timeout = Duration::from_millis(u64::from(p.timeout_ms));
        c.max_cm_retries = p.max_cm_retries;
        c.state = CmState::SidrReqSent;
        let req = SidrReq {
            request_id: local_comm_id,
            pkey: p.path.pkey,
            service_id: p.service_id,
            private_data: PrivateData::from_slice(&p.private_data).expect("length checked"),
        };
        let timeout = c.timeout;
        self.send_and_wait(now, id, CmMad::new(tid, CmMessage::SidrReq(req)), timeout);
        Ok(id)
    }

    /// A SIDR_REQ arrived.
    pub(super) fn on_sidr_req(&mut self, rx: Received, req: &SidrReq) {
        if self.remote_sidr.contains_key(&(req.request_id, rx.src)) {
            self.stats.rx_duplicates.bump(attr::SIDR_REQ);
            return;
        }
        let Some(listen_id) = self.find_listener(req.service_id) else {
            let rep = SidrRep {
                request_id: req.request_id,
                status: SidrStatus::Unsupported,
                service_id: req.service_id,
                ..SidrRep::default()
            };
            self.send(
                rx.src,
                rx.src_qpn,
                CmMad::new(rx.tid, CmMessage::SidrRep(rep)),
            );
            return;
        };
        let path = super::params::PathRecord::roce(Default::default(), rx.src, 0, 0);
        let Ok(id) = self.create(rx.src, path) else {
            return self.stats.drop(CmDrop::NoResources);
        };
        let c = self.conns.get_mut(&id).expect("just created");
        c.state = CmState::SidrReqRcvd;
        c.peer_qpn = rx.src_qpn;
        c.remote_comm_id = req.request_id;
        c.service_id = req.service_id;
        c.tid = rx.tid;
        c.listen_id = Some(listen_id);
        c.in_remote_sidr = true;
        self.remote_sidr.insert((req.request_id, rx.src), id);
        self.event(IbCmEvent::SidrReqReceived {
            id,
            req: Box::new(SidrReqReceived {
                listen_id,
                peer: rx.src,
                service_id: req.service_id,
                pkey: req.pkey,
                private_data: req.private_data,
            }),
        });
    }

    /// Answers a SIDR_REQ (`ib_send_cm_sidr_rep`); the lookup goes back to idle.
    pub fn sidr_reply(
        &mut self,
        _now: Instant,
        id: IbCmId,
        p: &SidrRepParams,
    ) -> Result<(), CmError> {
        check_private_data(&p.private_data, private_data_len::SIDR_REP)?;
        if p.info.len() > SIDR_INFO_LEN {
            return Err(CmError::InvalidParameter(
                "additional information over 72 bytes",
            ));
        }
        let c = self.conn_mut(id)?;
        if c.state != CmState::SidrReqRcvd {
            return Err(CmError::InvalidState(c.state));
        }
        let mut info = [0u8; SIDR_INFO_LEN];
        info[..p.info.len()].copy_from_slice(&p.info);
        let rep = SidrRep {
            request_id: c.remote_comm_id,
            status: p.status,
            info_len: p.info.len() as u8,
            qpn: p.qpn & softrdma_wire::QPN_MASK,
            service_id: c.service_id,
            qkey: p.qkey,
            info,
            private_data: PrivateData::from_slice(&p.private_data).expect("length checked"),
            ..SidrRep::default()
        };
        c.state = CmState::Idle;
        let tid = c.tid;
        if c.in_remote_sidr {
            c.in_remote_sidr = false;
            let key = (c.remote_comm_id, c.peer);
            self.remote_sidr.remove(&key);
        }
        self.send_to_peer(id, CmMad::new(tid, CmMessage::SidrRep(rep)));
        Ok(())
    }

    /// A SIDR_REP arrived.
    pub(super) fn on_sidr_rep(&mut self, rep: &SidrRep) {
        let Some(id) = self.acquire(rep.request_id, 0) else {
            return self.stats.drop(CmDrop::NoSuchConnection);
        };
        if self.conns[&id].state != CmState::SidrReqSent {
            return self.stats.drop(CmDrop::WrongState);
        }
        self.conn_mut(id).expect("acquired").state = CmState::Idle;
        self.cancel(id);
        self.event(IbCmEvent::SidrRepReceived {
            id,
            rep: Box::new(SidrRepReceived {
                status: rep.status,
                qpn: rep.qpn,
                qkey: rep.qkey,
                info: rep.info[..usize::from(rep.info_len).min(SIDR_INFO_LEN)].to_vec(),
                private_data: rep.private_data,
            }),
        });
    }
}
