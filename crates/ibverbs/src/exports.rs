//! Every symbol the library exports, with its rdma-core symbol version (the default `@@`
//! version of rdma-core 44) and the function that implements it.
//!
//! The wrappers and the `.symver` directives must live in one module: `.symver` binds a
//! symbol defined in the same object file, and rustc keeps one module's items in one
//! codegen unit. `libibverbs.map` defines the version nodes (rustc's own export list is an
//! anonymous version script, which cannot name versions).

use std::ffi::{c_char, c_int, c_void};

use crate::abi::*;
use crate::cm::abi::*;
use crate::layout::LayoutEntry;

macro_rules! exports {
    ($($ver:literal fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? = $imp:path;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "` (", $ver, ").")]
            #[no_mangle]
            unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller keeps the contract of the rdma-core function of this
                // name, which is the implementation's.
                unsafe { $imp($($arg),*) }
            }
        )*
        std::arch::global_asm!($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@", $ver)),*);
    };
}

exports! {
    "IBVERBS_1.0" fn ibv_copy_path_rec_from_kern(dst: *mut ibv_sa_path_rec, src: *const ib_user_path_rec) = crate::misc::ibv_copy_path_rec_from_kern;
    "IBVERBS_1.0" fn ibv_copy_path_rec_to_kern(dst: *mut ib_user_path_rec, src: *const ibv_sa_path_rec) = crate::misc::ibv_copy_path_rec_to_kern;
    "IBVERBS_1.0" fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *const ib_uverbs_qp_attr) = crate::misc::ibv_copy_qp_attr_from_kern;
    "IBVERBS_1.0" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel = crate::cq::ibv_create_comp_channel;
    "IBVERBS_1.0" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int = crate::cq::ibv_destroy_comp_channel;
    "IBVERBS_1.0" fn ibv_get_sysfs_path() -> *const c_char = crate::misc::ibv_get_sysfs_path;
    "IBVERBS_1.0" fn ibv_rate_to_mult(rate: c_int) -> c_int = crate::misc::ibv_rate_to_mult;
    "IBVERBS_1.0" fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int = crate::misc::ibv_read_sysfs_file;
    "IBVERBS_1.0" fn mult_to_ibv_rate(mult: c_int) -> c_int = crate::misc::mult_to_ibv_rate;
    "IBVERBS_1.1" fn ibv_ack_async_event(event: *mut ibv_async_event) = crate::device::ibv_ack_async_event;
    "IBVERBS_1.1" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) = crate::cq::ibv_ack_cq_events;
    "IBVERBS_1.1" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd = crate::pd::ibv_alloc_pd;
    "IBVERBS_1.1" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int = crate::ah::ibv_attach_mcast;
    "IBVERBS_1.1" fn ibv_close_device(context: *mut ibv_context) -> c_int = crate::device::ibv_close_device;
    "IBVERBS_1.1" fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *const ib_uverbs_ah_attr) = crate::misc::ibv_copy_ah_attr_from_kern;
    "IBVERBS_1.1" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah = crate::ah::ibv_create_ah;
    "IBVERBS_1.1" fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut ibv_grh, port_num: u8) -> *mut ibv_ah = crate::ah::ibv_create_ah_from_wc;
    "IBVERBS_1.1" fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq = crate::cq::ibv_create_cq;
    "IBVERBS_1.1" fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp = crate::qp::ibv_create_qp;
    "IBVERBS_1.1" fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq = crate::srq::ibv_create_srq;
    "IBVERBS_1.1" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int = crate::pd::ibv_dealloc_pd;
    "IBVERBS_1.1" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int = crate::pd::ibv_dereg_mr;
    "IBVERBS_1.1" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int = crate::ah::ibv_destroy_ah;
    "IBVERBS_1.1" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int = crate::cq::ibv_destroy_cq;
    "IBVERBS_1.1" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int = crate::qp::ibv_destroy_qp;
    "IBVERBS_1.1" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int = crate::srq::ibv_destroy_srq;
    "IBVERBS_1.1" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int = crate::ah::ibv_detach_mcast;
    "IBVERBS_1.1" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int = crate::misc::ibv_dofork_range;
    "IBVERBS_1.1" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int = crate::misc::ibv_dontfork_range;
    "IBVERBS_1.1" fn ibv_event_type_str(event: c_int) -> *const c_char = crate::misc::ibv_event_type_str;
    "IBVERBS_1.1" fn ibv_fork_init() -> c_int = crate::misc::ibv_fork_init;
    "IBVERBS_1.1" fn ibv_free_device_list(list: *mut *mut ibv_device) = crate::device::ibv_free_device_list;
    "IBVERBS_1.1" fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int = crate::device::ibv_get_async_event;
    "IBVERBS_1.1" fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int = crate::cq::ibv_get_cq_event;
    "IBVERBS_1.1" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 = crate::device::ibv_get_device_guid;
    "IBVERBS_1.1" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device = crate::device::ibv_get_device_list;
    "IBVERBS_1.1" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char = crate::device::ibv_get_device_name;
    "IBVERBS_1.1" fn ibv_init_ah_from_wc(context: *mut ibv_context, port_num: u8, wc: *mut ibv_wc, grh: *mut ibv_grh, attr: *mut ibv_ah_attr) -> c_int = crate::ah::ibv_init_ah_from_wc;
    "IBVERBS_1.1" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int = crate::qp::ibv_modify_qp;
    "IBVERBS_1.1" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int = crate::srq::ibv_modify_srq;
    "IBVERBS_1.1" fn ibv_node_type_str(node_type: c_int) -> *const c_char = crate::misc::ibv_node_type_str;
    "IBVERBS_1.1" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context = crate::device::ibv_open_device;
    "IBVERBS_1.1" fn ibv_port_state_str(state: c_int) -> *const c_char = crate::misc::ibv_port_state_str;
    "IBVERBS_1.1" fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int = crate::query::ibv_query_device;
    "IBVERBS_1.1" fn ibv_query_gid(context: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int = crate::query::ibv_query_gid;
    "IBVERBS_1.1" fn ibv_query_pkey(context: *mut ibv_context, port: u8, index: c_int, pkey: *mut u16) -> c_int = crate::query::ibv_query_pkey;
    "IBVERBS_1.1" fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int = crate::query::ibv_query_port;
    "IBVERBS_1.1" fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int = crate::qp::ibv_query_qp;
    "IBVERBS_1.1" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int = crate::srq::ibv_query_srq;
    "IBVERBS_1.1" fn ibv_rate_to_mbps(rate: c_int) -> c_int = crate::misc::ibv_rate_to_mbps;
    "IBVERBS_1.1" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr = crate::pd::ibv_reg_mr;
    "IBVERBS_1.1" fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int = crate::pd::ibv_rereg_mr;
    "IBVERBS_1.1" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int = crate::cq::ibv_resize_cq;
    "IBVERBS_1.1" fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8, vid: *mut u16) -> c_int = crate::misc::ibv_resolve_eth_l2_from_gid;
    "IBVERBS_1.1" fn ibv_wc_status_str(status: c_int) -> *const c_char = crate::misc::ibv_wc_status_str;
    "IBVERBS_1.1" fn mbps_to_ibv_rate(mbps: c_int) -> c_int = crate::misc::mbps_to_ibv_rate;
    "IBVERBS_1.10" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context = crate::import::ibv_import_device;
    "IBVERBS_1.10" fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr = crate::import::ibv_import_mr;
    "IBVERBS_1.10" fn ibv_import_pd(context: *mut ibv_context, handle: u32) -> *mut ibv_pd = crate::import::ibv_import_pd;
    "IBVERBS_1.10" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int = crate::misc::ibv_query_ece;
    "IBVERBS_1.10" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int = crate::misc::ibv_set_ece;
    "IBVERBS_1.10" fn ibv_unimport_mr(mr: *mut ibv_mr) = crate::import::ibv_unimport_mr;
    "IBVERBS_1.10" fn ibv_unimport_pd(pd: *mut ibv_pd) = crate::import::ibv_unimport_pd;
    "IBVERBS_1.11" fn _ibv_query_gid_ex(context: *mut ibv_context, port: u32, index: u32, entry: *mut ibv_gid_entry, flags: u32, entry_size: usize) -> c_int = crate::query::_ibv_query_gid_ex;
    "IBVERBS_1.11" fn _ibv_query_gid_table(context: *mut ibv_context, entries: *mut ibv_gid_entry, max_entries: usize, flags: u32, entry_size: usize) -> isize = crate::query::_ibv_query_gid_table;
    "IBVERBS_1.12" fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr = crate::misc::ibv_reg_dmabuf_mr;
    "IBVERBS_1.13" fn ibv_import_dm(context: *mut ibv_context, handle: u32) -> *mut c_void = crate::import::ibv_import_dm;
    "IBVERBS_1.13" fn ibv_is_fork_initialized() -> c_int = crate::misc::ibv_is_fork_initialized;
    "IBVERBS_1.13" fn ibv_unimport_dm(dm: *mut c_void) = crate::import::ibv_unimport_dm;
    "IBVERBS_1.14" fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: c_int, flags: u32) -> c_int = crate::misc::ibv_query_qp_data_in_order;
    "IBVERBS_1.5" fn ibv_get_pkey_index(context: *mut ibv_context, port: u8, pkey: u16) -> c_int = crate::query::ibv_get_pkey_index;
    "IBVERBS_1.6" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex = crate::qp::ibv_qp_to_qp_ex;
    "IBVERBS_1.7" fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut ibv_mr = crate::pd::ibv_reg_mr_iova;
    "IBVERBS_1.8" fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: u32) -> *mut ibv_mr = crate::pd::ibv_reg_mr_iova2;
    "IBVERBS_1.9" fn ibv_get_device_index(device: *mut ibv_device) -> c_int = crate::device::ibv_get_device_index;
    "IBVERBS_PRIVATE_34" fn ibv_query_gid_type(context: *mut ibv_context, port: u8, index: u32, gid_type: *mut c_int) -> c_int = crate::query::ibv_query_gid_type;
    "SOFTRDMA_1.0" fn softrdma_abi_layout() -> *const LayoutEntry = crate::layout::softrdma_abi_layout;
    "SOFTRDMA_1.0" fn softrdma_rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int = crate::cm::connect::rdma_accept;
    "SOFTRDMA_1.0" fn softrdma_rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int = crate::cm::events::rdma_ack_cm_event;
    "SOFTRDMA_1.0" fn softrdma_rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int = crate::cm::connect::rdma_bind_addr;
    "SOFTRDMA_1.0" fn softrdma_rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int = crate::cm::connect::rdma_connect;
    "SOFTRDMA_1.0" fn softrdma_rdma_create_ep(id: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int = crate::cm::ep::rdma_create_ep;
    "SOFTRDMA_1.0" fn softrdma_rdma_create_event_channel() -> *mut rdma_event_channel = crate::cm::events::rdma_create_event_channel;
    "SOFTRDMA_1.0" fn softrdma_rdma_create_id(channel: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void, ps: c_int) -> c_int = crate::cm::connect::rdma_create_id;
    "SOFTRDMA_1.0" fn softrdma_rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> c_int = crate::cm::qp::rdma_create_qp;
    "SOFTRDMA_1.0" fn softrdma_rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int = crate::cm::qp::rdma_create_qp_ex;
    "SOFTRDMA_1.0" fn softrdma_rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int = crate::cm::qp::rdma_create_srq;
    "SOFTRDMA_1.0" fn softrdma_rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut c_void) -> c_int = crate::cm::qp::rdma_create_srq_ex;
    "SOFTRDMA_1.0" fn softrdma_rdma_destroy_ep(id: *mut rdma_cm_id) = crate::cm::ep::rdma_destroy_ep;
    "SOFTRDMA_1.0" fn softrdma_rdma_destroy_event_channel(channel: *mut rdma_event_channel) = crate::cm::events::rdma_destroy_event_channel;
    "SOFTRDMA_1.0" fn softrdma_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int = crate::cm::connect::rdma_destroy_id;
    "SOFTRDMA_1.0" fn softrdma_rdma_destroy_qp(id: *mut rdma_cm_id) = crate::cm::qp::rdma_destroy_qp;
    "SOFTRDMA_1.0" fn softrdma_rdma_destroy_srq(id: *mut rdma_cm_id) = crate::cm::qp::rdma_destroy_srq;
    "SOFTRDMA_1.0" fn softrdma_rdma_disconnect(id: *mut rdma_cm_id) -> c_int = crate::cm::connect::rdma_disconnect;
    "SOFTRDMA_1.0" fn softrdma_rdma_event_str(event: c_int) -> *const c_char = crate::cm::ep::rdma_event_str;
    "SOFTRDMA_1.0" fn softrdma_rdma_free_devices(list: *mut *mut ibv_context) = crate::cm::ep::rdma_free_devices;
    "SOFTRDMA_1.0" fn softrdma_rdma_freeaddrinfo(res: *mut rdma_addrinfo) = crate::cm::ep::rdma_freeaddrinfo;
    "SOFTRDMA_1.0" fn softrdma_rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int = crate::cm::events::rdma_get_cm_event;
    "SOFTRDMA_1.0" fn softrdma_rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context = crate::cm::ep::rdma_get_devices;
    "SOFTRDMA_1.0" fn softrdma_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 = crate::cm::connect::rdma_get_dst_port;
    "SOFTRDMA_1.0" fn softrdma_rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int = crate::cm::ep::rdma_get_request;
    "SOFTRDMA_1.0" fn softrdma_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 = crate::cm::connect::rdma_get_src_port;
    "SOFTRDMA_1.0" fn softrdma_rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> c_int = crate::cm::ep::rdma_getaddrinfo;
    "SOFTRDMA_1.0" fn softrdma_rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int = crate::cm::connect::rdma_listen;
    "SOFTRDMA_1.0" fn softrdma_rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int = crate::cm::connect::rdma_migrate_id;
    "SOFTRDMA_1.0" fn softrdma_rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int = crate::cm::connect::rdma_notify;
    "SOFTRDMA_1.0" fn softrdma_rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int = crate::cm::connect::rdma_reject;
    "SOFTRDMA_1.0" fn softrdma_rdma_resolve_addr(id: *mut rdma_cm_id, src: *mut libc::sockaddr, dst: *mut libc::sockaddr, timeout_ms: c_int) -> c_int = crate::cm::connect::rdma_resolve_addr;
    "SOFTRDMA_1.0" fn softrdma_rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int = crate::cm::connect::rdma_resolve_route;
    "SOFTRDMA_1.0" fn softrdma_rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> c_int = crate::cm::connect::rdma_set_option;
    "SOFTRDMA_1.0" fn softrdma_rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr, context: *mut c_void) -> c_int = crate::cm::multicast::rdma_join_multicast;
    "SOFTRDMA_1.0" fn softrdma_rdma_join_multicast_ex(id: *mut rdma_cm_id, attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void) -> c_int = crate::cm::multicast::rdma_join_multicast_ex;
    "SOFTRDMA_1.0" fn softrdma_rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int = crate::cm::multicast::rdma_leave_multicast;
    "SOFTRDMA_1.0" fn softrdma_rdma_establish(id: *mut rdma_cm_id) -> c_int = crate::cm::connect::rdma_establish;
    "SOFTRDMA_1.0" fn softrdma_rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int = crate::cm::qp::rdma_init_qp_attr;
}

/// librdmacm's calls that softrdma does not do (`cm/unsupported.rs`). The caller's arguments
/// are not named: nothing reads them, and under the C calling conventions of the platforms
/// softrdma runs on (System V x86-64, AAPCS64) a callee may ignore any number of them.
macro_rules! unsupported_exports {
    ($($what:literal fn $name:ident -> $ret:ty = $imp:ident;)*) => {
        $(
            #[doc = concat!("`", $what, "`: not supported.")]
            #[no_mangle]
            extern "C" fn $name() -> $ret {
                crate::cm::unsupported::$imp($what) as $ret
            }
        )*
        std::arch::global_asm!($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@SOFTRDMA_1.0")),*);
    };
}

unsupported_exports! {
    "raccept" fn softrdma_raccept -> c_int = rsocket_call;
    "rbind" fn softrdma_rbind -> c_int = rsocket_call;
    "rclose" fn softrdma_rclose -> c_int = rsocket_call;
    "rconnect" fn softrdma_rconnect -> c_int = rsocket_call;
    "rfcntl" fn softrdma_rfcntl -> c_int = rsocket_call;
    "rgetpeername" fn softrdma_rgetpeername -> c_int = rsocket_call;
    "rgetsockname" fn softrdma_rgetsockname -> c_int = rsocket_call;
    "rgetsockopt" fn softrdma_rgetsockopt -> c_int = rsocket_call;
    "riomap" fn softrdma_riomap -> i64 = rsocket_call;
    "riounmap" fn softrdma_riounmap -> c_int = rsocket_call;
    "riowrite" fn softrdma_riowrite -> isize = rsocket_call;
    "rlisten" fn softrdma_rlisten -> c_int = rsocket_call;
    "rpoll" fn softrdma_rpoll -> c_int = rsocket_call;
    "rread" fn softrdma_rread -> isize = rsocket_call;
    "rreadv" fn softrdma_rreadv -> isize = rsocket_call;
    "rrecv" fn softrdma_rrecv -> isize = rsocket_call;
    "rrecvfrom" fn softrdma_rrecvfrom -> isize = rsocket_call;
    "rrecvmsg" fn softrdma_rrecvmsg -> isize = rsocket_call;
    "rselect" fn softrdma_rselect -> c_int = rsocket_call;
    "rsend" fn softrdma_rsend -> isize = rsocket_call;
    "rsendmsg" fn softrdma_rsendmsg -> isize = rsocket_call;
    "rsendto" fn softrdma_rsendto -> isize = rsocket_call;
    "rsetsockopt" fn softrdma_rsetsockopt -> c_int = rsocket_call;
    "rshutdown" fn softrdma_rshutdown -> c_int = rsocket_call;
    "rsocket" fn softrdma_rsocket -> c_int = rsocket_call;
    "rwrite" fn softrdma_rwrite -> isize = rsocket_call;
    "rwritev" fn softrdma_rwritev -> isize = rsocket_call;
    "rdma_get_remote_ece" fn softrdma_rdma_get_remote_ece -> c_int = unsupported;
    "rdma_reject_ece" fn softrdma_rdma_reject_ece -> c_int = unsupported;
    "rdma_set_local_ece" fn softrdma_rdma_set_local_ece -> c_int = unsupported;
}
