//! From IB CM events to rdma_cm events (`cma_ib_handler`, `cma_ib_req_handler`,
//! `cma_sidr_rep_handler`): which listener a request belongs to, what each event means for
//! the id, and the MRA rdma_cm arms while its consumer decides.

use std::net::SocketAddr;

use softrdma_proto::Instant;
use softrdma_wire::mad::cm::{SidrStatus, TransportType};
use softrdma_wire::mad::cma::{PortSpace, CMA_HEADER_LEN};

use crate::ib::{IbCmEvent, IbCmId, CMA_MRA_SERVICE_TIMEOUT};

use super::addr::{listener_matches, read_header};
use super::{
    ConnParam, Id, RdmaCm, RdmaEvent, RdmaEventKind, RdmaId, RdmaQpType, RdmaState, UdParam,
};

impl RdmaCm {
    pub(super) fn event(&mut self, id: RdmaId, kind: RdmaEventKind) {
        self.events.push_back(RdmaEvent { id, kind });
    }

    /// Turns the IB CM's events into rdma_cm's (`cma_ib_handler`, `cma_ib_req_handler`,
    /// `cma_sidr_rep_handler`).
    pub(super) fn pump(&mut self, now: Instant) {
        while let Some(e) = self.ib.poll_event() {
            match e {
                IbCmEvent::ReqReceived { id: cm, req } => {
                    self.on_request(now, cm, Request::Rc(req))
                }
                IbCmEvent::SidrReqReceived { id: cm, req } => {
                    self.on_request(now, cm, Request::Ud(req))
                }
                other => self.on_cm_event(now, other),
            }
        }
    }

    fn on_cm_event(&mut self, now: Instant, e: IbCmEvent) {
        let cm = e.id();
        let Some(&id) = self.by_cm.get(&cm) else {
            return;
        };
        let state = self.ids[&id].state;
        // cma_ib_handler: everything but TIMEWAIT_EXIT only while connecting/connected,
        // TIMEWAIT_EXIT only after the disconnect.
        let wanted = match e {
            IbCmEvent::TimewaitExit { .. } => RdmaState::Disconnect,
            _ => RdmaState::Connect,
        };
        if state != wanted {
            return;
        }
        let kind = match e {
            IbCmEvent::RepReceived { rep, .. } => {
                // The consumer readies its QP before the RTU: retransmitted REPs get an MRA.
                let _ = self
                    .ib
                    .send_mra(now, cm, CMA_MRA_SERVICE_TIMEOUT, true, &[]);
                RdmaEventKind::ConnectResponse {
                    param: ConnParam {
                        private_data: rep.private_data.to_vec(),
                        responder_resources: rep.responder_resources,
                        initiator_depth: rep.initiator_depth,
                        flow_control: rep.flow_control,
                        retry_count: 0,
                        rnr_retry_count: rep.rnr_retry_count,
                        srq: rep.srq,
                        qp_num: rep.remote_qpn,
                        qkey: 0,
                    },
                }
            }
            IbCmEvent::Established { .. } => RdmaEventKind::Established { ud: None },
            IbCmEvent::RejReceived {
                reason,
                private_data,
                ..
            } => RdmaEventKind::Rejected {
                reason,
                private_data: private_data.to_vec(),
            },
            IbCmEvent::ReqError { .. }
            | IbCmEvent::RepError { .. }
            | IbCmEvent::SidrReqError { .. } => RdmaEventKind::Unreachable { sidr_status: None },
            IbCmEvent::DreqReceived { .. }
            | IbCmEvent::DrepReceived { .. }
            | IbCmEvent::DreqError { .. } => {
                self.ids.get_mut(&id).expect("exists").state = RdmaState::Disconnect;
                RdmaEventKind::Disconnected
            }
            IbCmEvent::TimewaitExit { .. } => RdmaEventKind::TimewaitExit,
            IbCmEvent::SidrRepReceived { rep, .. } if rep.status == SidrStatus::Success => {
                let peer = self.ids[&id].dst.map(|d| d.ip());
                RdmaEventKind::Established {
                    ud: Some(UdParam {
                        qp_num: rep.qpn,
                        qkey: rep.qkey,
                        peer,
                        private_data: rep.private_data.to_vec(),
                    }),
                }
            }
            IbCmEvent::SidrRepReceived { rep, .. } => RdmaEventKind::Unreachable {
                sidr_status: Some(rep.status),
            },
            IbCmEvent::MraReceived { .. } => return,
            IbCmEvent::ReqReceived { .. } | IbCmEvent::SidrReqReceived { .. } => return,
        };
        self.event(id, kind);
    }

    /// A REQ or SIDR_REQ reached a service ID we listen on: find the rdma listener its IP
    /// header and QP type fit (`cma_ib_id_from_event`, `cma_ib_check_req_qp_type`), or refuse
    /// it as Linux does when a handler fails — REJ 28, SIDR_REP "reject".
    fn on_request(&mut self, now: Instant, cm: IbCmId, req: Request) {
        let (service_id, private_data) = match &req {
            Request::Rc(r) => (r.service_id, &r.private_data[..]),
            Request::Ud(r) => (r.service_id, &r.private_data[..]),
        };
        let found = PortSpace::from_service_id(service_id).and_then(|(ps, port)| {
            let (_, peer, dst) = read_header(private_data).ok()?;
            let listener = self
                .ports
                .on_port(ps, port)
                .iter()
                .find_map(|&(lid, bound)| {
                    let l = &self.ids[&lid];
                    let type_fits = match &req {
                        Request::Rc(r) => matches!(
                            (l.qp_type, r.transport),
                            (RdmaQpType::Rc, TransportType::Rc)
                                | (RdmaQpType::Uc, TransportType::Uc)
                        ),
                        Request::Ud(_) => l.qp_type == RdmaQpType::Ud,
                    };
                    (l.state == RdmaState::Listen && type_fits && listener_matches(bound, dst))
                        .then_some(lid)
                })?;
            Some((ps, port, listener, peer, dst))
        });
        let Some((ps, port, listener, peer, dst)) = found else {
            // cm_destroy_id in REQ_RCVD / SIDR_REQ_RCVD: REJ 28 / SIDR_REP reject.
            let _ = self.ib.destroy(now, cm);
            return;
        };
        let id = RdmaId(self.next_id);
        self.next_id += 1;
        let qp_type = self.ids[&listener].qp_type;
        let local = SocketAddr::new(dst, port);
        self.ids.insert(
            id,
            Id {
                ps,
                qp_type,
                state: RdmaState::Connect,
                src: Some(local),
                dst: Some(peer),
                cm: Some(cm),
                listen_id: Some(listener),
                seq_num: self.rng.psn(),
            },
        );
        self.by_cm.insert(cm, id);
        let user = private_data[CMA_HEADER_LEN..].to_vec();
        let param = match &req {
            Request::Rc(r) => ConnParam {
                private_data: user,
                responder_resources: r.responder_resources,
                initiator_depth: r.initiator_depth,
                flow_control: r.flow_control,
                retry_count: r.retry_count,
                rnr_retry_count: r.rnr_retry_count,
                srq: r.srq,
                qp_num: r.remote_qpn,
                qkey: 0,
            },
            Request::Ud(_) => ConnParam {
                private_data: user,
                ..ConnParam::default()
            },
        };
        self.event(
            id,
            RdmaEventKind::ConnectRequest {
                listen_id: listener,
                param,
                peer,
                local,
            },
        );
        if matches!(req, Request::Rc(_)) {
            // cma_ib_req_handler arms an MRA for retransmitted REQs while the consumer decides.
            let _ = self
                .ib
                .send_mra(now, cm, CMA_MRA_SERVICE_TIMEOUT, true, &[]);
        }
    }
}

/// A request as the IB CM reported it.
enum Request {
    Rc(Box<crate::ib::ReqReceived>),
    Ud(Box<crate::ib::SidrReqReceived>),
}
