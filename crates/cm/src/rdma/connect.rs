//! The calls that drive a connection: `connect`, `accept`, `reject`, `complete_connect`,
//! `established`, `disconnect`, `destroy` (Linux's `rdma_connect`, `rdma_accept`,
//! `rdma_reject`, librdmacm's `ucma_process_conn_resp`, `rdma_notify`, `rdma_disconnect`,
//! `rdma_destroy_id`), each turned into the IB CM's call with rdma_cm's parameters.

use std::net::SocketAddr;

use softrdma_proto::Instant;
use softrdma_wire::mad::cm::{private_data_len, RejectReason, SidrStatus, TransportType};
use softrdma_wire::mad::cma::{roce_flow_label, CMA_HEADER_LEN, RDMA_UDP_QKEY};
use softrdma_wire::Gid;

use crate::ib::{CmError, PathRecord, RepParams, ReqParams, SidrRepParams, SidrReqParams};

use super::addr::request_private_data;
use super::{ConnParam, RdmaCm, RdmaError, RdmaEventKind, RdmaId, RdmaQpType, RdmaState, Route};

impl RdmaCm {
    /// Connects a bound id to `dst` (`rdma_connect` after address and route resolution):
    /// a REQ (RC/UC) or SIDR_REQ (UD) with rdma_cm's IP header and `param.private_data`
    /// after it.
    pub fn connect(
        &mut self,
        now: Instant,
        id: RdmaId,
        dst: SocketAddr,
        route: Route,
        param: &ConnParam,
    ) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        if i.state != RdmaState::Bound {
            return Err(RdmaError::InvalidState(i.state));
        }
        let src = i.src.expect("bound");
        if src.ip().is_unspecified() || src.is_ipv4() != dst.is_ipv4() {
            return Err(RdmaError::Address);
        }
        let ud = i.qp_type == RdmaQpType::Ud;
        let field = if ud {
            private_data_len::SIDR_REQ
        } else {
            private_data_len::REQ
        };
        let max = field - CMA_HEADER_LEN;
        Self::check_user_data(&param.private_data, max)?;
        let private_data =
            request_private_data(src, dst.ip(), &param.private_data).ok_or(RdmaError::Address)?;
        let path = PathRecord {
            traffic_class: route.traffic_class,
            hop_limit: route.hop_limit,
            ..PathRecord::roce(
                Gid::from_ip(src.ip()),
                Gid::from_ip(dst.ip()),
                route.mtu,
                roce_flow_label(src.port(), dst.port()),
            )
        };
        let service_id = i.ps.service_id(dst.port());
        let cm = if ud {
            self.ib.sidr_request(
                now,
                &SidrReqParams {
                    path,
                    service_id,
                    timeout_ms: 1 << (crate::ib::CMA_CM_RESPONSE_TIMEOUT - 8),
                    max_cm_retries: crate::ib::CMA_MAX_CM_RETRIES,
                    private_data,
                },
            )?
        } else {
            let req = ReqParams {
                transport: if i.qp_type == RdmaQpType::Uc {
                    TransportType::Uc
                } else {
                    TransportType::Rc
                },
                responder_resources: param.responder_resources,
                initiator_depth: param.initiator_depth,
                flow_control: param.flow_control,
                retry_count: param.retry_count.min(7),
                rnr_retry_count: param.rnr_retry_count.min(7),
                srq: param.srq,
                private_data,
                starting_psn: Some(i.seq_num),
                ..ReqParams::rdma_cm(path, service_id, param.qp_num)
            };
            self.ib.connect(now, &req)?
        };
        let i = self.get_mut(id)?;
        i.cm = Some(cm);
        i.dst = Some(dst);
        i.state = RdmaState::Connect;
        self.by_cm.insert(cm, id);
        self.pump(now);
        Ok(())
    }

    /// Accepts a connection request on the id its `ConnectRequest` came with
    /// (`rdma_accept`): a REP with `param`'s QP number, resources and private data, or for UD
    /// a SIDR_REP with the QP number and Q_Key.
    pub fn accept(&mut self, now: Instant, id: RdmaId, param: &ConnParam) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        let cm = match (i.state, i.cm, i.listen_id) {
            (RdmaState::Connect, Some(cm), Some(_)) => cm,
            _ => return Err(RdmaError::InvalidState(i.state)),
        };
        if i.qp_type == RdmaQpType::Ud {
            Self::check_user_data(&param.private_data, private_data_len::SIDR_REP)?;
            let qkey = if param.qkey != 0 {
                param.qkey
            } else {
                RDMA_UDP_QKEY
            };
            self.ib.sidr_reply(
                now,
                cm,
                &SidrRepParams {
                    status: SidrStatus::Success,
                    qpn: param.qp_num,
                    qkey,
                    info: Vec::new(),
                    private_data: param.private_data.clone(),
                },
            )?;
        } else {
            self.ib.accept(
                now,
                cm,
                &RepParams {
                    qpn: param.qp_num,
                    starting_psn: Some(i.seq_num),
                    responder_resources: param.responder_resources,
                    initiator_depth: param.initiator_depth,
                    failover_accepted: 0,
                    flow_control: param.flow_control,
                    rnr_retry_count: param.rnr_retry_count.min(7),
                    srq: param.srq,
                    private_data: param.private_data.clone(),
                },
            )?;
        }
        self.pump(now);
        Ok(())
    }

    /// Refuses a connection request (`rdma_reject`): REJ reason 28 (consumer defined) with
    /// `private_data` (≤ 148 bytes), or a SIDR_REP "reject" for UD.
    pub fn reject(
        &mut self,
        now: Instant,
        id: RdmaId,
        private_data: &[u8],
    ) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        let cm = i.cm.ok_or(RdmaError::InvalidState(i.state))?;
        if i.qp_type == RdmaQpType::Ud {
            self.ib.sidr_reply(
                now,
                cm,
                &SidrRepParams {
                    private_data: private_data.to_vec(),
                    ..SidrRepParams::refuse(SidrStatus::Reject)
                },
            )?;
        } else {
            self.ib
                .reject(now, cm, RejectReason::ConsumerDefined, &[], private_data)?;
        }
        self.pump(now);
        Ok(())
    }

    /// Completes an active connection after `ConnectResponse` (librdmacm's
    /// `ucma_process_conn_resp`): the QP is in RTS; the RTU goes out and `Established`
    /// follows.
    pub fn complete_connect(&mut self, now: Instant, id: RdmaId) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        let cm = match (i.state, i.cm, i.listen_id) {
            (RdmaState::Connect, Some(cm), None) => cm,
            _ => return Err(RdmaError::InvalidState(i.state)),
        };
        self.ib.send_rtu(now, cm, &[])?;
        self.event(id, RdmaEventKind::Established { ud: None });
        self.pump(now);
        Ok(())
    }

    /// The QP of a passive connection received traffic before the RTU (`rdma_notify` with
    /// `IBV_EVENT_COMM_EST`).
    pub fn established(&mut self, now: Instant, id: RdmaId) -> Result<(), RdmaError> {
        let cm = self.get(id)?.cm.ok_or(RdmaError::NoSuchId)?;
        self.ib.established(now, cm)?;
        self.pump(now);
        Ok(())
    }

    /// Disconnects (`rdma_disconnect`): the DREQ if connected, the DREP if the peer's DREQ
    /// came first.
    pub fn disconnect(&mut self, now: Instant, id: RdmaId) -> Result<(), RdmaError> {
        let i = self.get(id)?;
        let cm = i.cm.ok_or(RdmaError::InvalidState(i.state))?;
        match self.ib.disconnect(now, cm, &[]) {
            Ok(()) => {}
            Err(CmError::InvalidState(_)) => self.ib.send_drep(now, cm, &[])?,
            Err(e) => return Err(e.into()),
        }
        self.pump(now);
        Ok(())
    }

    /// Forgets an id (`rdma_destroy_id`): stops listening, releases the port, and destroys the
    /// IB connection (which tells the peer what its state calls for).
    pub fn destroy(&mut self, now: Instant, id: RdmaId) -> Result<(), RdmaError> {
        let i = self.ids.remove(&id).ok_or(RdmaError::NoSuchId)?;
        if i.state == RdmaState::Listen {
            let sid = i.ps.service_id(i.src.expect("bound").port());
            if let Some((l, users)) = self.ib_listens.get_mut(&sid) {
                *users -= 1;
                if *users == 0 {
                    let l = *l;
                    self.ib_listens.remove(&sid);
                    self.ib.stop_listening(l)?;
                }
            }
        }
        if i.listen_id.is_none() {
            if let Some(src) = i.src {
                self.ports.unbind(id, i.ps, src.port());
            }
        }
        if let Some(cm) = i.cm {
            self.by_cm.remove(&cm);
            self.ib.destroy(now, cm)?;
        }
        self.pump(now);
        Ok(())
    }
}
