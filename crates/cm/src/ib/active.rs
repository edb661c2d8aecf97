//! The active side of the handshake: `connect` sends the REQ, the REP comes back (or a
//! duplicate of it), the consumer readies its QP and sends the RTU (`ib_send_cm_req`,
//! `cm_rep_handler`, `cm_dup_rep_handler`, `ib_send_cm_rtu`).

use softrdma_proto::Instant;
use softrdma_wire::mad::cm::reply::Mra;
use softrdma_wire::mad::cm::{
    private_data_len, CmMad, CmMessage, MsgResponse, RejectReason, Rep, Req, Rtu, TransportType,
};
use softrdma_wire::mad::PrivateData;

use super::event::RepReceived;
use super::timers::{ack_timeout, iba_time};
use super::{
    check_private_data, CmDrop, CmError, CmState, IbCm, IbCmEvent, IbCmId, Received, ReqParams,
};

fn check_param(ok: bool, what: &'static str) -> Result<(), CmError> {
    if ok {
        Ok(())
    } else {
        Err(CmError::InvalidParameter(what))
    }
}

impl IbCm {
    /// Requests a connection (`ib_send_cm_req`): a new connection in REQ_SENT whose REQ is
    /// resent until a REP, REJ or MRA answers it. The REQ goes to `primary_path.dgid`.
    pub fn connect(&mut self, now: Instant, p: &ReqParams) -> Result<IbCmId, CmError> {
        check_private_data(&p.private_data, private_data_len::REQ)?;
        check_param(
            matches!(p.transport, TransportType::Rc | TransportType::Uc),
            "transport must be RC or UC",
        )?;
        check_param(p.qpn <= softrdma_wire::QPN_MASK, "QPN over 24 bits")?;
        check_param(p.retry_count <= 7, "retry count over 7")?;
        check_param(p.rnr_retry_count <= 7, "RNR retry count over 7")?;
        check_param(p.max_cm_retries <= 15, "CM retries over 15")?;
        check_param(
            p.remote_cm_response_timeout <= 31 && p.local_cm_response_timeout <= 31,
            "CM response timeout over 31",
        )?;
        check_param(
            (1..=5).contains(&p.primary_path.mtu),
            "path MTU code not 1..=5",
        )?;
        let path = p.primary_path;
        let id = self.create(path.dgid, path)?;
        let psn = match p.starting_psn {
            Some(psn) => psn,
            None => self.random_psn(),
        };
        let ca_ack_delay = self.config.ca_ack_delay;
        let ca_guid = self.config.ca_guid;
        let local_comm_id = self.conn(id)?.local_comm_id;
        let tid = self.form_tid(local_comm_id);
        let c = self.conn_mut(id)?;
        c.service_id = p.service_id;
        c.tid = tid;
        c.timeout = iba_time(path.packet_life_time) * 2 + iba_time(p.remote_cm_response_timeout);
        c.max_cm_retries = p.max_cm_retries;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.retry_count = p.retry_count;
        c.transport = p.transport;
        c.local_qpn = p.qpn;
        c.rq_psn = psn;
        c.flow_control = p.flow_control;
        c.srq = p.srq;
        c.ack_timeout = path.packet_life_time.saturating_add(1);
        c.state = CmState::ReqSent;
        let req = Req {
            local_comm_id,
            service_id: p.service_id,
            local_ca_guid: ca_guid,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport: p.transport,
            end_to_end_flow_control: p.flow_control,
            starting_psn: psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: path.pkey,
            path_mtu: path.mtu,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            primary_path: path.to_cm_path(ca_ack_delay),
            private_data: PrivateData::from_slice(&p.private_data).expect("length checked"),
            ..Req::default()
        };
        let timeout = c.timeout;
        self.send_and_wait(now, id, CmMad::new(tid, CmMessage::Req(req)), timeout);
        Ok(id)
    }

    /// A REP: the answer to our REQ, or a duplicate of one we already took.
    pub(super) fn on_rep(&mut self, now: Instant, rx: Received, rep: &Rep) {
        let Some(id) = self.acquire(rep.remote_comm_id, 0) else {
            return self.on_dup_rep(rx, rep);
        };
        let state = self.conns[&id].state;
        if !matches!(state, CmState::ReqSent | CmState::MraReqRcvd) {
            return self.stats.drop(CmDrop::WrongState);
        }
        let c = self.conns.get_mut(&id).expect("acquired");
        c.remote_comm_id = rep.local_comm_id;
        c.remote_ca_guid = rep.local_ca_guid;
        c.remote_qpn = rep.local_qpn;
        if self.insert_remote_id(id).is_some() {
            // Another connection already has this (comm ID, CA GUID): a REP crossed.
            self.conns.get_mut(&id).expect("acquired").remote_comm_id = 0;
            self.stats
                .rx_duplicates
                .bump(softrdma_wire::mad::cm::attr::REP);
            return;
        }
        if let Some(old) = self.insert_remote_qpn(id) {
            // The passive QP is still connected to us under another connection: stale.
            self.remove_remote(id);
            self.conns.get_mut(&id).expect("acquired").remote_comm_id = 0;
            self.issue_rej(
                rx,
                rep.remote_comm_id,
                rep.local_comm_id,
                RejectReason::StaleConnection,
                MsgResponse::Rep,
            );
            self.dreq_stale(now, old);
            return;
        }
        let c = self.conns.get_mut(&id).expect("acquired");
        c.state = CmState::RepRcvd;
        c.initiator_depth = rep.responder_resources;
        c.responder_resources = rep.initiator_depth;
        c.sq_psn = rep.starting_psn;
        c.rnr_retry_count = rep.rnr_retry_count;
        c.target_ack_delay = rep.target_ack_delay;
        c.ack_timeout = ack_timeout(rep.target_ack_delay, c.ack_timeout.saturating_sub(1));
        self.cancel(id);
        self.event(IbCmEvent::RepReceived {
            id,
            rep: Box::new(RepReceived {
                remote_ca_guid: rep.local_ca_guid,
                remote_qkey: rep.local_qkey,
                remote_qpn: rep.local_qpn,
                starting_psn: rep.starting_psn,
                responder_resources: rep.initiator_depth,
                initiator_depth: rep.responder_resources,
                target_ack_delay: rep.target_ack_delay,
                failover_accepted: rep.failover_accepted,
                flow_control: rep.end_to_end_flow_control,
                rnr_retry_count: rep.rnr_retry_count,
                srq: rep.srq,
                private_data: rep.private_data,
            }),
        });
    }

    /// A REP for a connection that has moved on (`cm_dup_rep_handler`): the RTU again if we
    /// are established (it was lost), the MRA again if we asked for time, else nothing.
    fn on_dup_rep(&mut self, rx: Received, rep: &Rep) {
        let Some(id) = self.acquire(rep.remote_comm_id, rep.local_comm_id) else {
            return self.stats.drop(CmDrop::NoSuchConnection);
        };
        self.stats
            .rx_duplicates
            .bump(softrdma_wire::mad::cm::attr::REP);
        let c = &self.conns[&id];
        let msg = match c.state {
            CmState::Established => CmMessage::Rtu(Rtu {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                private_data: PrivateData::from_slice(&c.private_data).unwrap_or_default(),
            }),
            CmState::MraRepSent => CmMessage::Mra(Mra {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                msg_mraed: MsgResponse::Rep,
                service_timeout: c.service_timeout,
                private_data: PrivateData::from_slice(&c.private_data).unwrap_or_default(),
            }),
            _ => return,
        };
        let tid = c.tid;
        self.send(rx.src, rx.src_qpn, CmMad::new(tid, msg));
    }

    /// Sends the RTU (`ib_send_cm_rtu`): the consumer has moved its QP to RTS; the connection
    /// is established on this side.
    pub fn send_rtu(
        &mut self,
        _now: Instant,
        id: IbCmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_private_data(private_data, private_data_len::RTU)?;
        let c = self.conn_mut(id)?;
        if !matches!(c.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(CmError::InvalidState(c.state));
        }
        c.state = CmState::Established;
        c.private_data = private_data.to_vec();
        let rtu = Rtu {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            private_data: PrivateData::from_slice(private_data).expect("length checked"),
        };
        let tid = c.tid;
        self.send_to_peer(id, CmMad::new(tid, CmMessage::Rtu(rtu)));
        Ok(())
    }
}
