//! The connection's verbs on an id: listen, connect, accept, reject, disconnect, and the
//! consumer's own completion of a connection (`rdma_establish`, `rdma_notify`).

use softrdma::QpState;
use softrdma_cm::rdma::{ConnParam, RdmaQpType};

use crate::error::CmError;

use super::channel::{lock, CmId};
use super::qp::move_qp;

impl CmId {
    /// Completes an active connection whose QP the consumer readied after
    /// [`CmEventKind::ConnectResponse`] (`rdma_establish`): the RTU leaves, and the connection
    /// is established when this returns, with no `Established` event (as with librdmacm,
    /// whose programs wait for the next event, `Disconnected`).
    ///
    /// [`CmEventKind::ConnectResponse`]: crate::CmEventKind::ConnectResponse
    pub fn establish(&self) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        lock(&self.inner.state).establish_quietly = true;
        let done = service.with_cm(|st, now| st.cm.complete_connect(now, rid));
        if done.is_err() {
            lock(&self.inner.state).establish_quietly = false;
        }
        Ok(done?)
    }

    /// A passive connection's QP received traffic before the RTU (`rdma_notify` with
    /// `IBV_EVENT_COMM_EST`): the connection is established without waiting for it.
    pub fn notify_established(&self) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        Ok(service.with_cm(|st, now| st.cm.established(now, rid))?)
    }

    /// Listens for connect requests (`rdma_listen`) on the bound address.
    pub fn listen(&self) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        let port = lock(&self.inner.state).src.map_or(0, |a| a.port());
        // Other processes on the address may listen too: the port is taken host-wide first,
        // as the kernel's rdma_cm takes it.
        let claim = service
            .device
            .claim_service_id(self.inner.ps.service_id(port))
            .map_err(|e| match e {
                softrdma::ShareError::ServiceInUse(_) => {
                    CmError::Cm(softrdma_cm::rdma::RdmaError::AddressInUse)
                }
                other => CmError::Setup(other.to_string()),
            })?;
        service.with_cm(|st, _| st.cm.listen(rid))?;
        lock(&self.inner.state).listen_claim = Some(claim);
        Ok(())
    }

    /// Connects (`rdma_connect`) with `param` (its `qp_num` is the id's QP); `Established`
    /// follows, or `Rejected` / `Unreachable`.
    pub fn connect(&self, param: &ConnParam) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        let s = lock(&self.inner.state);
        let (Some(dst), Some(route)) = (s.dst, s.route) else {
            return Err(CmError::InvalidState("connect needs a resolved route"));
        };
        // The id's QP, or the consumer's own, named by `param.qp_num`.
        let qp_num = match &s.qp {
            Some(qp) => qp.qp_num(),
            None if param.qp_num != 0 => param.qp_num,
            None => return Err(CmError::InvalidState("connect needs a QP")),
        };
        drop(s);
        let param = ConnParam {
            qp_num,
            ..param.clone()
        };
        service.with_cm(|st, now| st.cm.connect(now, rid, dst, route, &param))?;
        Ok(())
    }

    /// Accepts a connect request (`rdma_accept`): the QP goes to RTR and RTS, then the REP
    /// leaves; `Established` follows the peer's RTU. For UD, the SIDR_REP carries the QP's
    /// number and Q_Key (`param.qkey`, 0 for rdma_cm's), and the id is ready at once.
    pub fn accept(&self, param: &ConnParam) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        let qp = self.qp();
        let ack_timeout = lock(&self.inner.state).ack_timeout;
        let qp_num = match &qp {
            Some(qp) => qp.qp_num(),
            None if param.qp_num != 0 => param.qp_num,
            None => return Err(CmError::InvalidState("accept needs a QP")),
        };
        let param = ConnParam {
            qp_num,
            ..param.clone()
        };
        let ud = self.inner.qp_type == RdmaQpType::Ud;
        service.with_cm(|st, now| {
            // rdma_cm readies its own QP; the consumer readied its own with `qp_attr`.
            if let (false, Some(qp)) = (ud, &qp) {
                let steps = [QpState::Init, QpState::Rtr, QpState::Rts];
                move_qp(qp, &st.cm, rid, &steps, ack_timeout)?;
            }
            st.cm.accept(now, rid, &param).map_err(CmError::from)
        })
    }

    /// Rejects a connect request (`rdma_reject`) with private data (at most 148 bytes).
    pub fn reject(&self, private_data: &[u8]) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        service.with_cm(|st, now| st.cm.reject(now, rid, private_data))?;
        Ok(())
    }

    /// Disconnects (`rdma_disconnect`): the QP goes to ERR (outstanding work flushes), the
    /// DREQ (or the DREP to the peer's) leaves; `Disconnected` follows.
    pub fn disconnect(&self) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        self.inner.qp_to_error();
        service.with_cm(|st, now| st.cm.disconnect(now, rid))?;
        Ok(())
    }
}
