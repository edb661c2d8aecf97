//! rdma_cm's loopback tests once more, every address they name a device on an in-process
//! `LocalFabric` that duplicates and reorders datagrams (see `common/mod.rs`): the connection
//! manager's exchanges (REQ, REP, RTU, REJ, DREQ, DREP) and the data after them must come
//! through duplicates and overtaking.
// `loopback.rs` declares `mod common;` for its own binary; here it is a module of this one.
#![allow(clippy::duplicate_mod)]

#[path = "loopback.rs"]
mod loopback;

mod common;

use std::time::Duration;

use common::{addr, fabric};
use softrdma::QpInitAttr;
use softrdma_rdmacm::{CmEventKind, CmId, EventChannel, PortSpace, RdmaQpType};

/// The connection requests of the tests above cross the fabric, not a socket.
#[test]
fn a_connect_request_crosses_the_fabric() {
    let (sch, cch) = (EventChannel::new(), EventChannel::new());
    let listener = CmId::new(&sch, PortSpace::Tcp, RdmaQpType::Rc);
    listener.bind_addr(addr("127.0.61.2:7471")).unwrap();
    listener.listen().unwrap();
    let client = CmId::new(&cch, PortSpace::Tcp, RdmaQpType::Rc);
    let before = fabric().stats().delivered;
    client
        .resolve_addr(Some(addr("127.0.61.1:0")), addr("127.0.61.2:7471"))
        .unwrap();
    let wait = Some(Duration::from_secs(10));
    assert_eq!(cch.get_event(wait).unwrap().kind, CmEventKind::AddrResolved);
    client.resolve_route().unwrap();
    assert_eq!(
        cch.get_event(wait).unwrap().kind,
        CmEventKind::RouteResolved
    );
    let pd = client.pd().unwrap();
    let cq = client.device().unwrap().create_cq(4).unwrap();
    let _qp = client.create_qp(&pd, &QpInitAttr::rc(&cq)).unwrap();
    client.connect(&Default::default()).unwrap();
    let request = sch.get_event(wait).unwrap();
    assert!(matches!(request.kind, CmEventKind::ConnectRequest { .. }));
    assert!(
        fabric().stats().delivered > before,
        "the REQ went another way"
    );
}
