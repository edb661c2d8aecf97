//! The passive side of the handshake: a REQ for a listened service becomes a new connection
//! (or is recognised as a duplicate, a stale connection, or a request nobody listens for),
//! the consumer accepts with a REP, the RTU (or the QP's first packet) establishes it
//! (`cm_req_handler`, `cm_match_req`, `cm_dup_req_handler`, `ib_send_cm_rep`,
//! `cm_rtu_handler`, `cm_establish`).

use softrdma_proto::Instant;
use softrdma_wire::mad::cm::reply::Mra;
use softrdma_wire::mad::cm::{
    attr, private_data_len, CmMad, CmMessage, MsgResponse, RejectReason, Rep, Req, Rtu,
};
use softrdma_wire::mad::PrivateData;

use super::event::ReqReceived;
use super::params::PathRecord;
use super::timers::iba_time;
use super::{
    check_private_data, CmDrop, CmError, CmState, IbCm, IbCmEvent, IbCmId, Received, RepParams,
};

impl IbCm {
    /// A REQ arrived.
    pub(super) fn on_req(&mut self, now: Instant, rx: Received, req: &Req) {
        // cm_match_req: a duplicate of a REQ we already took?
        if let Some(&old) = self.remote_ids.get(&(req.local_comm_id, req.local_ca_guid)) {
            return self.on_dup_req(rx, old);
        }
        // A connection from the same remote QP exists: the peer lost it, this one is stale.
        if let Some(&old) = self.remote_qpns.get(&(req.local_qpn, req.local_ca_guid)) {
            self.reject_req(rx, req, RejectReason::StaleConnection);
            self.dreq_stale(now, old);
            return;
        }
        let Some(listen_id) = self.find_listener(req.service_id) else {
            return self.reject_req(rx, req, RejectReason::InvalidServiceId);
        };
        // Linux takes the hop limit of the path from the received GRH (the IP TTL); the driver
        // does not pass it in, so the REQ's own hop limit stands for it.
        let path = PathRecord::from_req(&req.primary_path, req.pkey, req.path_mtu);
        let Ok(id) = self.create(rx.src, path) else {
            // Linux cannot allocate: no REJ, so that a retransmission may succeed later.
            return self.stats.drop(CmDrop::NoResources);
        };
        let c = self.conns.get_mut(&id).expect("just created");
        c.state = CmState::ReqRcvd;
        c.peer_qpn = rx.src_qpn;
        c.remote_comm_id = req.local_comm_id;
        c.remote_ca_guid = req.local_ca_guid;
        c.remote_qpn = req.local_qpn;
        c.service_id = req.service_id;
        c.tid = rx.tid;
        c.timeout = iba_time(req.local_cm_response_timeout);
        c.max_cm_retries = req.max_cm_retries;
        c.initiator_depth = req.responder_resources;
        c.responder_resources = req.initiator_depth;
        c.sq_psn = req.starting_psn;
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        c.transport = req.transport;
        c.flow_control = req.end_to_end_flow_control;
        c.srq = req.srq;
        c.ack_timeout = path.packet_life_time.saturating_add(1);
        c.listen_id = Some(listen_id);
        self.insert_remote_id(id);
        self.insert_remote_qpn(id);
        self.event(IbCmEvent::ReqReceived {
            id,
            req: Box::new(ReqReceived {
                listen_id,
                peer: rx.src,
                primary_path: path,
                service_id: req.service_id,
                remote_ca_guid: req.local_ca_guid,
                remote_qkey: req.local_qkey,
                remote_qpn: req.local_qpn,
                transport: req.transport,
                starting_psn: req.starting_psn,
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                local_cm_response_timeout: req.remote_cm_response_timeout,
                remote_cm_response_timeout: req.local_cm_response_timeout,
                flow_control: req.end_to_end_flow_control,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                srq: req.srq,
                private_data: req.private_data,
            }),
        });
    }

    /// Refuses a REQ that gets no connection here (`cm_issue_rej`). Linux reads the REQ as if
    /// it were a REJ, so our "local comm ID" is whatever sits at offset 4 of the REQ: the
    /// reserved byte and the ECE vendor ID.
    fn reject_req(&mut self, rx: Received, req: &Req, reason: RejectReason) {
        self.issue_rej(
            rx,
            req.vendor_id,
            req.local_comm_id,
            reason,
            MsgResponse::Req,
        );
    }

    /// A retransmitted REQ (`cm_dup_req_handler`): ignored while the consumer decides, answered
    /// with the MRA if it asked for time. Once a REP is out, the REP's own retransmission
    /// answers.
    fn on_dup_req(&mut self, rx: Received, id: IbCmId) {
        self.stats.rx_duplicates.bump(attr::REQ);
        let c = &self.conns[&id];
        if c.state != CmState::MraReqSent {
            return;
        }
        let mra = Mra {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            msg_mraed: MsgResponse::Req,
            service_timeout: c.service_timeout,
            private_data: PrivateData::from_slice(&c.private_data).unwrap_or_default(),
        };
        let tid = c.tid;
        self.send(rx.src, rx.src_qpn, CmMad::new(tid, CmMessage::Mra(mra)));
    }

    /// Accepts a request (`ib_send_cm_rep`): sends the REP, resent until the RTU (or the
    /// QP's first packet, [`IbCm::established`]) arrives.
    pub fn accept(&mut self, now: Instant, id: IbCmId, p: &RepParams) -> Result<(), CmError> {
        check_private_data(&p.private_data, private_data_len::REP)?;
        if p.qpn > softrdma_wire::QPN_MASK {
            return Err(CmError::InvalidParameter("QPN over 24 bits"));
        }
        if p.rnr_retry_count > 7 {
            return Err(CmError::InvalidParameter("RNR retry count over 7"));
        }
        let state = self.conn(id)?.state;
        if !matches!(state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::InvalidState(state));
        }
        let psn = match p.starting_psn {
            Some(psn) => psn,
            None => self.random_psn(),
        };
        let (ca_ack_delay, ca_guid) = (self.config.ca_ack_delay, self.config.ca_guid);
        let c = self.conn_mut(id)?;
        let rep = Rep {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            local_qpn: p.qpn,
            starting_psn: psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: ca_ack_delay,
            failover_accepted: p.failover_accepted,
            end_to_end_flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: ca_guid,
            private_data: PrivateData::from_slice(&p.private_data).expect("length checked"),
            ..Rep::default()
        };
        c.state = CmState::RepSent;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.rq_psn = psn;
        c.local_qpn = p.qpn;
        let (tid, timeout) = (c.tid, c.timeout);
        self.send_and_wait(now, id, CmMad::new(tid, CmMessage::Rep(rep)), timeout);
        Ok(())
    }

    /// An RTU: the active side is ready; so is the connection.
    pub(super) fn on_rtu(&mut self, rtu: &Rtu) {
        let Some(id) = self.acquire(rtu.remote_comm_id, rtu.local_comm_id) else {
            return self.stats.drop(CmDrop::NoSuchConnection);
        };
        let c = self.conns.get_mut(&id).expect("acquired");
        if !matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            self.stats.rx_duplicates.bump(attr::RTU);
            return;
        }
        c.state = CmState::Established;
        self.cancel(id);
        self.event(IbCmEvent::Established { id });
    }

    /// The QP received its first packet before the RTU (Linux: `ib_cm_notify` with
    /// `IB_EVENT_COMM_EST`): the connection is established; the REP stops. An `Established`
    /// event follows, as for an RTU.
    pub fn established(&mut self, _now: Instant, id: IbCmId) -> Result<(), CmError> {
        let c = self.conn_mut(id)?;
        if !matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            return Err(CmError::InvalidState(c.state));
        }
        c.state = CmState::Established;
        self.cancel(id);
        self.event(IbCmEvent::Established { id });
        Ok(())
    }
}
