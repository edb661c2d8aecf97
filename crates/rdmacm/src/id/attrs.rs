//! What an id is and what it was set to: its device and PD, QP, addresses, route, port
//! space and QP type, the peer's parameters, and the options (`rdma_set_option`'s TOS and
//! ACK timeout) that shape the route and the QP later.

use std::net::SocketAddr;

use softrdma::{ProtectionDomain, QueuePair};
use softrdma_cm::rdma::{ConnParam, RdmaQpType, Route};
use softrdma_wire::mad::cma::PortSpace;

use super::channel::{lock, CmId};

impl CmId {
    /// The device the id is bound to (`id->verbs`).
    pub fn device(&self) -> Option<softrdma::Device> {
        lock(&self.inner.state)
            .service
            .as_ref()
            .map(|s| s.device.clone())
    }

    /// The device's protection domain that rdma_cm uses when none is given (`id->pd` after
    /// `rdma_create_qp(id, NULL, …)`).
    pub fn pd(&self) -> Option<ProtectionDomain> {
        lock(&self.inner.state)
            .service
            .as_ref()
            .map(|s| s.pd.clone())
    }

    /// The id's QP, once created.
    pub fn qp(&self) -> Option<QueuePair> {
        lock(&self.inner.state).qp.clone()
    }

    /// The local and remote addresses.
    pub fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let s = lock(&self.inner.state);
        (s.src, s.dst)
    }

    /// Sets the type of service (`RDMA_OPTION_ID_TOS`): the traffic class of the route
    /// resolved after it, hence of the connection's packets.
    pub fn set_tos(&self, tos: u8) {
        lock(&self.inner.state).tos = Some(tos);
    }

    /// Sets the local ACK timeout of the id's QP (`RDMA_OPTION_ID_ACK_TIMEOUT`: 4.096 µs ×
    /// 2^`timeout`), used instead of the one the CM derives from the path when the QP moves
    /// to RTS (and in [`CmId::qp_attr`]).
    pub fn set_ack_timeout(&self, timeout: u8) {
        lock(&self.inner.state).ack_timeout = Some(timeout.min(31));
    }

    /// The port space the id was created in.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }

    /// The QP type the id carries.
    pub fn qp_type(&self) -> RdmaQpType {
        self.inner.qp_type
    }

    /// The route, once resolved (or, for an id of a connect request, once accepted).
    pub fn route(&self) -> Option<Route> {
        lock(&self.inner.state).route
    }

    /// The peer's parameters from its REP (active side), once connected.
    pub fn peer_param(&self) -> Option<ConnParam> {
        lock(&self.inner.state).peer_param.clone()
    }
}
