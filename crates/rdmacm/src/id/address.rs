//! Binding an id to an address and resolving the peer's address and route
//! (`rdma_bind_addr`, `rdma_resolve_addr`, `rdma_resolve_route`): what comes before a
//! connection or a listen, and what ties the id to a device's service.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use softrdma_cm::rdma::Route;

use crate::error::CmError;
use crate::event::CmEventKind;
use crate::service::{route_source, Endpoint, Service};

use super::channel::{lock, CmId, IdInner};

impl CmId {
    /// Binds the id to a local address (`rdma_bind_addr`): the softrdma device on that IP
    /// (opened now if this process has none there) and a port (0: an ephemeral one).
    /// Returns the address bound.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        if lock(&self.inner.state).service.is_some() {
            return Err(CmError::InvalidState("the id is bound already"));
        }
        let service = Service::for_ip(addr.ip())?;
        self.bind_on(service, addr)
    }

    /// Binds the id to `addr` on a device the caller opened (`addr.ip()` must be its
    /// address): how a program that also uses the device directly shares it with rdma_cm.
    pub fn bind_device(&self, device: &softrdma::Device, port: u16) -> Result<SocketAddr, CmError> {
        let service = Service::for_device(device)?;
        self.bind_on(service, SocketAddr::new(device.ip(), port))
    }

    fn bind_on(&self, service: Arc<Service>, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        let (ps, qp_type) = (self.inner.ps, self.inner.qp_type);
        let weak: Weak<dyn Endpoint> = Arc::downgrade(&self.inner) as Weak<dyn Endpoint>;
        let (rid, bound) = service.with_cm(|st, _| {
            let rid = st.cm.create_id(ps, qp_type);
            match st.cm.bind(rid, addr) {
                Ok(bound) => {
                    st.ids.insert(rid, weak);
                    Ok((rid, bound))
                }
                Err(e) => {
                    let _ = st.cm.destroy(softrdma_proto::Instant::ZERO, rid);
                    Err(e)
                }
            }
        })?;
        let mut s = lock(&self.inner.state);
        s.service = Some(service);
        s.rid = Some(rid);
        s.src = Some(bound);
        Ok(bound)
    }

    /// Resolves `dst` (`rdma_resolve_addr`): binds to `src`, or to the address the routing
    /// table would send from, if the id is not bound yet; then `AddrResolved` arrives.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), CmError> {
        if lock(&self.inner.state).service.is_none() {
            let src = match src {
                Some(s) => s,
                None => SocketAddr::new(route_source(dst)?, 0),
            };
            self.bind_addr(src)?;
        }
        // What the data path holds back goes out first (see `service`).
        self.service()?;
        lock(&self.inner.state).dst = Some(dst);
        IdInner::post_event(&self.inner, CmEventKind::AddrResolved);
        Ok(())
    }

    /// Resolves the route (`rdma_resolve_route`): RoCE needs no path query; the path MTU is
    /// the port's active MTU. Then `RouteResolved` arrives.
    pub fn resolve_route(&self) -> Result<(), CmError> {
        let (service, _) = self.service()?;
        let mtu = service
            .device
            .query_port(1)
            .map(|p| p.active_mtu)
            .map_err(|e| CmError::Qp(e.to_string()))?;
        let mut s = lock(&self.inner.state);
        if s.dst.is_none() {
            return Err(CmError::InvalidState("resolve the address first"));
        }
        s.route = Some(Route {
            mtu: mtu.ibv_enum(),
            traffic_class: s.tos.unwrap_or(0),
            ..Route::default()
        });
        drop(s);
        IdInner::post_event(&self.inner, CmEventKind::RouteResolved);
        Ok(())
    }
}
