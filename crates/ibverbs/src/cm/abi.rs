//! The structs of `<rdma/rdma_cma.h>` (librdmacm 44) that programs read and write directly:
//! `id->verbs`, `id->qp`, `id->route.addr`, `event->param.conn.private_data` and the inline
//! helpers of `<rdma/rdma_verbs.h>` compile these offsets in. `tests/c/layout.c` checks each
//! against the system header through the library's layout table.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

use crate::abi::{ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp};
use crate::abi::{ibv_sa_path_rec, ibv_srq};

/// `enum rdma_cm_event_type`.
pub(crate) const RDMA_CM_EVENT_ADDR_RESOLVED: c_int = 0;
pub(crate) const RDMA_CM_EVENT_ADDR_ERROR: c_int = 1;
pub(crate) const RDMA_CM_EVENT_ROUTE_RESOLVED: c_int = 2;
pub(crate) const RDMA_CM_EVENT_ROUTE_ERROR: c_int = 3;
pub(crate) const RDMA_CM_EVENT_CONNECT_REQUEST: c_int = 4;
pub(crate) const RDMA_CM_EVENT_CONNECT_RESPONSE: c_int = 5;
pub(crate) const RDMA_CM_EVENT_CONNECT_ERROR: c_int = 6;
pub(crate) const RDMA_CM_EVENT_UNREACHABLE: c_int = 7;
pub(crate) const RDMA_CM_EVENT_REJECTED: c_int = 8;
pub(crate) const RDMA_CM_EVENT_ESTABLISHED: c_int = 9;
pub(crate) const RDMA_CM_EVENT_DISCONNECTED: c_int = 10;
pub(crate) const RDMA_CM_EVENT_DEVICE_REMOVAL: c_int = 11;
pub(crate) const RDMA_CM_EVENT_MULTICAST_JOIN: c_int = 12;
pub(crate) const RDMA_CM_EVENT_MULTICAST_ERROR: c_int = 13;
pub(crate) const RDMA_CM_EVENT_ADDR_CHANGE: c_int = 14;
pub(crate) const RDMA_CM_EVENT_TIMEWAIT_EXIT: c_int = 15;

/// `enum rdma_port_space`.
pub(crate) const RDMA_PS_IPOIB: c_int = 0x0002;
pub(crate) const RDMA_PS_TCP: c_int = 0x0106;
pub(crate) const RDMA_PS_UDP: c_int = 0x0111;
pub(crate) const RDMA_PS_IB: c_int = 0x013F;

/// `rdma_addrinfo.ai_flags`.
pub(crate) const RAI_PASSIVE: c_int = 0x1;
pub(crate) const RAI_NUMERICHOST: c_int = 0x2;

/// `rdma_set_option` levels and names.
pub(crate) const RDMA_OPTION_ID: c_int = 0;
pub(crate) const RDMA_OPTION_IB: c_int = 1;
pub(crate) const RDMA_OPTION_ID_TOS: c_int = 0;
pub(crate) const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub(crate) const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub(crate) const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub(crate) const RDMA_OPTION_IB_PATH: c_int = 1;

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

/// `struct rdma_addr`: the source and destination as `sockaddr_storage` (the largest member
/// of each C union), then the IB addresses.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct rdma_addr {
    pub src_storage: libc::sockaddr_storage,
    pub dst_storage: libc::sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`.
#[repr(C)]
pub(crate) struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub(crate) struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub(crate) struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub(crate) struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: libc::socklen_t,
    pub ai_dst_len: libc::socklen_t,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `enum rdma_cm_join_mc_attr_mask` and `enum rdma_cm_mc_join_flags`.
pub(crate) const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
pub(crate) const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
pub(crate) const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
pub(crate) const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub(crate) struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

/// rdma_cm's Q_Key for the UDP port space (`RDMA_UDP_QKEY`).
pub(crate) const RDMA_UDP_QKEY: u32 = 0x0123_4567;
