//! Multicast groups on CM ids (`rdma_join_multicast`, `_ex`, `rdma_leave_multicast`). RoCE
//! needs no subnet administrator: the group's GID is its IP address (IPv4-mapped for IPv4),
//! the id's QP is attached to it (unless the join is send-only), and
//! `RDMA_CM_EVENT_MULTICAST_JOIN` gives the address handle attributes, QPN 0xFFFFFF and
//! rdma_cm's Q_Key, with the join's context in `param.ud.private_data` as librdmacm does.

use std::ffi::{c_int, c_void};
use std::net::{IpAddr, SocketAddr};

use softrdma::Gid;

use super::abi::*;
use super::channel::Event;
use super::connect::{complete, result};
use super::device::cm_device;
use super::id::{lock, read_sockaddr, Id};
use crate::abi::*;
use crate::util::fail_minus_one;

/// The multicast QPN.
const MULTICAST_QPN: u32 = 0xff_ffff;

fn join(
    i: &Id,
    addr: *const libc::sockaddr,
    flags: u32,
    context: *mut c_void,
) -> Result<(), c_int> {
    // SAFETY: the caller passes a socket address or NULL.
    let group = unsafe { read_sockaddr(addr) }
        .map(|a| a.ip())
        .filter(IpAddr::is_multicast)
        .ok_or(libc::EINVAL)?;
    let dev = cm_device()?;
    if i.cm.addrs().0.is_none() {
        i.cm.bind_device(&dev.device, 0)
            .map_err(|e| super::connect::cm_errno(&e))?;
        i.set_addrs(i.cm.addrs().0, None);
    }
    let mgid = ibv_gid {
        raw: Gid::from_ip(group).0,
    };
    let qp = i.raw().qp;
    let attach = !qp.is_null() && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
    if attach {
        // SAFETY: our own verb on the id's QP.
        let r = unsafe { crate::ah::ibv_attach_mcast(qp, &mgid, 0) };
        if r != 0 {
            return Err(r);
        }
    }
    lock(&i.extra).groups.push((group, attach));
    let ah = super::id::global_ah(mgid, 64, 0);
    let ev = Box::new(Event {
        raw: rdma_cm_event {
            id: i.handle(),
            listen_id: std::ptr::null_mut(),
            event: RDMA_CM_EVENT_MULTICAST_JOIN,
            status: 0,
            param: rdma_cm_event_param {
                ud: rdma_ud_param {
                    private_data: context.cast_const(),
                    private_data_len: 0,
                    ah_attr: ah,
                    qp_num: MULTICAST_QPN,
                    qkey: RDMA_UDP_QKEY,
                },
            },
        },
        private_data: Vec::new(),
        rust: None,
    });
    super::id::post(ev);
    complete(i)
}

/// `rdma_join_multicast`: a full member.
pub(crate) unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    let i = match Id::from_handle(id) {
        Ok(i) => i,
        Err(e) => return fail_minus_one(e),
    };
    result(join(i, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context))
}

/// `rdma_join_multicast_ex`: full or send-only member.
pub(crate) unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    let i = match Id::from_handle(id) {
        Ok(i) => i,
        Err(e) => return fail_minus_one(e),
    };
    // SAFETY: the caller passes join attributes or NULL.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return fail_minus_one(libc::EINVAL);
    };
    let needed = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
    if a.comp_mask & needed != needed
        || a.comp_mask & !needed != 0
        || a.join_flags > RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
    {
        return fail_minus_one(libc::EINVAL);
    }
    result(join(i, a.addr, a.join_flags, context))
}

/// `rdma_leave_multicast`: detaches the QP; `EADDRNOTAVAIL` for a group the id did not join.
pub(crate) unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    let i = match Id::from_handle(id) {
        Ok(i) => i,
        Err(e) => return fail_minus_one(e),
    };
    // SAFETY: the caller passes a socket address or NULL.
    let Some(group) = (unsafe { read_sockaddr(addr) }).map(|a: SocketAddr| a.ip()) else {
        return fail_minus_one(libc::EINVAL);
    };
    let mut x = lock(&i.extra);
    let Some(at) = x.groups.iter().position(|(g, _)| *g == group) else {
        return fail_minus_one(libc::EADDRNOTAVAIL);
    };
    let (_, attached) = x.groups.remove(at);
    drop(x);
    let qp = i.raw().qp;
    if attached && !qp.is_null() {
        let mgid = ibv_gid {
            raw: Gid::from_ip(group).0,
        };
        // SAFETY: our own verb on the id's QP.
        let r = unsafe { crate::ah::ibv_detach_mcast(qp, &mgid, 0) };
        if r != 0 {
            return fail_minus_one(r);
        }
    }
    0
}
