//! The id's QP: created or adopted, moved by rdma_cm with the CM's attributes (and the id's
//! own ACK timeout), released, or put in the error state on a disconnect.

use softrdma::{ProtectionDomain, QpAttr, QpInitAttr, QpState, QueuePair};
use softrdma_cm::rdma::{RdmaCm, RdmaId, RdmaQpType};

use crate::error::CmError;

use super::channel::{lock, CmId, IdInner};

impl IdInner {
    pub(super) fn qp_to_error(&self) {
        if let Some(qp) = lock(&self.state).qp.clone() {
            let _ = qp.modify(&QpAttr {
                qp_state: Some(QpState::Err),
                ..QpAttr::default()
            });
        }
    }
}

/// The CM's attributes for `target`, with the id's own ACK timeout at RTS if it set one.
fn qp_attr_for(
    cm: &RdmaCm,
    rid: RdmaId,
    target: QpState,
    ack_timeout: Option<u8>,
) -> Result<QpAttr, CmError> {
    let mut attr = cm.qp_attr(rid, target)?;
    if let (QpState::Rts, Some(t)) = (target, ack_timeout) {
        attr.timeout = Some(t);
    }
    Ok(attr)
}

pub(super) fn move_qp(
    qp: &QueuePair,
    cm: &RdmaCm,
    rid: RdmaId,
    steps: &[QpState],
    ack_timeout: Option<u8>,
) -> Result<(), CmError> {
    for &target in steps {
        let attr = qp_attr_for(cm, rid, target, ack_timeout)?;
        qp.modify(&attr)
            .map_err(|e| CmError::Qp(format!("to {}: {e}", target.name())))?;
    }
    Ok(())
}

impl CmId {
    /// Creates the id's QP (`rdma_create_qp`) in `pd` (of the id's device) and moves it to
    /// INIT as rdma_cm does — a UD QP on to RTS, with rdma_cm's Q_Key (librdmacm's
    /// `ucma_init_ud_qp`): datagrams need no handshake.
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        init: &QpInitAttr,
    ) -> Result<QueuePair, CmError> {
        self.service()?;
        let qp = pd.create_qp(init).map_err(|e| CmError::Qp(e.to_string()))?;
        self.adopt_qp(&qp)?;
        Ok(qp)
    }

    /// Makes `qp` (new, in RESET, of the id's device) the id's QP, moved as
    /// [`CmId::create_qp`] moves the QPs it creates: how a library that creates QPs its own
    /// way (the C `rdma_create_qp`) hands them to rdma_cm.
    pub fn adopt_qp(&self, qp: &QueuePair) -> Result<(), CmError> {
        let (service, rid) = self.service()?;
        if lock(&self.inner.state).qp.is_some() {
            return Err(CmError::InvalidState("the id has a QP already"));
        }
        service.with_cm(|st, _| move_qp(qp, &st.cm, rid, &[QpState::Init], None))?;
        if self.inner.qp_type == RdmaQpType::Ud {
            qp.modify(&QpAttr::ud_rtr())
                .and_then(|()| qp.modify(&QpAttr::unreliable_rts(softrdma::Psn::new(0))))
                .map_err(|e| CmError::Qp(e.to_string()))?;
        }
        lock(&self.inner.state).qp = Some(qp.clone());
        Ok(())
    }

    /// Forgets the id's QP (`rdma_destroy_qp`): rdma_cm moves it no more.
    pub fn release_qp(&self) -> Option<QueuePair> {
        lock(&self.inner.state).qp.take()
    }

    /// The attributes that move a QP of this connection to `target` (`rdma_init_qp_attr`):
    /// for a consumer that created its QP itself and moves it with them.
    pub fn qp_attr(&self, target: QpState) -> Result<QpAttr, CmError> {
        let (service, rid) = self.service()?;
        let ack_timeout = lock(&self.inner.state).ack_timeout;
        service.with_cm(|st, _| qp_attr_for(&st.cm, rid, target, ack_timeout))
    }
}
