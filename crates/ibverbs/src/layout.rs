//! `softrdma_abi_layout()`: the size and field offsets of every C struct this library shares
//! with programs, as the Rust side lays them out. Each entry is named by the C expression
//! that computes it against rdma-core's headers (`"offsetof(struct ibv_context, ops)"`), so
//! `tests/c/layout.c`, compiled against the system `<infiniband/verbs.h>`, evaluates the same
//! expression and compares. Struct members that are unions in C are named with their C path
//! (`wr.rdma.rkey`).

use std::ffi::c_char;
use std::mem::{offset_of, size_of};

use crate::abi::*;
use crate::cm::abi::*;

/// One entry of the table: a NUL-terminated C expression and its value on the Rust side.
#[repr(C)]
pub(crate) struct LayoutEntry {
    name: *const c_char,
    value: usize,
}

// SAFETY: the names are 'static string literals, never written.
unsafe impl Sync for LayoutEntry {}
// SAFETY: as above.
unsafe impl Send for LayoutEntry {}

macro_rules! size {
    ($t:ident) => {
        LayoutEntry {
            name: concat!("sizeof(struct ", stringify!($t), ")\0")
                .as_ptr()
                .cast(),
            value: size_of::<$t>(),
        }
    };
}

macro_rules! off {
    ($t:ident, $f:ident) => {
        LayoutEntry {
            name: concat!(
                "offsetof(struct ",
                stringify!($t),
                ", ",
                stringify!($f),
                ")\0"
            )
            .as_ptr()
            .cast(),
            value: offset_of!($t, $f),
        }
    };
    ($t:ident, $cpath:literal, $v:expr) => {
        LayoutEntry {
            name: concat!("offsetof(struct ", stringify!($t), ", ", $cpath, ")\0")
                .as_ptr()
                .cast(),
            value: $v,
        }
    };
}

macro_rules! struct_layout {
    ($t:ident; $($f:ident),* $(,)?) => {
        [size!($t), $(off!($t, $f)),*]
    };
}

macro_rules! table {
    ($($part:expr),* $(,)?) => {{
        let mut v = Vec::new();
        $(v.extend($part);)*
        v
    }};
}

fn entries() -> Vec<LayoutEntry> {
    let send_wr_wr = offset_of!(ibv_send_wr, wr);
    let send_wr_ext = offset_of!(ibv_send_wr, ext);
    table![
        struct_layout!(ibv_device; node_type, transport_type, name, dev_name, dev_path, ibdev_path),
        struct_layout!(ibv_context_ops; _compat_query_device, _compat_query_port, alloc_mw, bind_mw,
            dealloc_mw, poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv,
            _compat_async_event),
        struct_layout!(ibv_context; device, ops, cmd_fd, async_fd, num_comp_vectors, mutex,
            abi_compat),
        struct_layout!(verbs_context; query_port, advise_mr, alloc_null_mr, read_counters,
            attach_counters_point_flow, create_counters, destroy_counters, reg_dm_mr, alloc_dm,
            free_dm, modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
            modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
            post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
            create_wq, query_rt_values, create_cq_ex, query_device_ex, ibv_destroy_flow,
            ibv_create_flow, open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd,
            close_xrcd, sz, context),
        [
            off!(verbs_context, "priv", offset_of!(verbs_context, priv_)),
            off!(
                verbs_context,
                "ABI_placeholder1",
                offset_of!(verbs_context, abi_placeholder1)
            ),
            off!(
                verbs_context,
                "ABI_placeholder2",
                offset_of!(verbs_context, abi_placeholder2)
            ),
            off!(
                verbs_context,
                "_ABI_placeholder3",
                offset_of!(verbs_context, _abi_placeholder3)
            )
        ],
        struct_layout!(ibv_device_attr; fw_ver, node_guid, sys_image_guid, max_mr_size,
            page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags,
            max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom,
            max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee,
            max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp,
            max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr,
            max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt),
        struct_layout!(ibv_device_attr_ex; orig_attr, comp_mask, odp_caps,
            completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps,
            max_wq_type_rq, packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps,
            max_dm_size, pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex),
        struct_layout!(ibv_port_attr; state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags,
            max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc,
            max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed,
            phys_state, link_layer, flags, port_cap_flags2),
        struct_layout!(ibv_gid_entry; gid, gid_index, port_num, gid_type, ndev_ifindex),
        struct_layout!(ibv_values_ex; comp_mask, raw_clock),
        struct_layout!(ibv_pd; context, handle),
        struct_layout!(ibv_mr; context, pd, addr, length, handle, lkey, rkey),
        struct_layout!(ibv_comp_channel; context, fd, refcnt),
        struct_layout!(ibv_cq; context, channel, cq_context, handle, cqe, mutex, cond,
            comp_events_completed, async_events_completed),
        [
            size!(ibv_cq_ex),
            off!(
                ibv_cq_ex,
                "comp_events_completed",
                offset_of!(ibv_cq, comp_events_completed)
            ),
            off!(ibv_cq_ex, comp_mask),
            off!(ibv_cq_ex, status),
            off!(ibv_cq_ex, wr_id),
            off!(ibv_cq_ex, start_poll),
            off!(ibv_cq_ex, next_poll),
            off!(ibv_cq_ex, end_poll),
            off!(ibv_cq_ex, read_opcode),
            off!(ibv_cq_ex, read_vendor_err),
            off!(ibv_cq_ex, read_byte_len),
            off!(ibv_cq_ex, read_imm_data),
            off!(ibv_cq_ex, read_qp_num),
            off!(ibv_cq_ex, read_src_qp),
            off!(ibv_cq_ex, read_wc_flags),
            off!(ibv_cq_ex, read_slid),
            off!(ibv_cq_ex, read_sl),
            off!(ibv_cq_ex, read_dlid_path_bits),
            off!(ibv_cq_ex, read_completion_ts),
            off!(ibv_cq_ex, read_cvlan),
            off!(ibv_cq_ex, read_flow_tag),
            off!(ibv_cq_ex, read_tm_info),
            off!(ibv_cq_ex, read_completion_wallclock_ns)
        ],
        struct_layout!(ibv_cq_init_attr_ex; cqe, cq_context, channel, comp_vector, wc_flags,
            comp_mask, flags, parent_domain),
        struct_layout!(ibv_alloc_dm_attr; length, log_align_req, comp_mask),
        struct_layout!(ibv_dm; context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle),
        struct_layout!(ibv_td_init_attr; comp_mask),
        struct_layout!(ibv_td; context),
        struct_layout!(ibv_parent_domain_init_attr; pd, td, comp_mask, alloc, free, pd_context),
        struct_layout!(ibv_wc; wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num,
            src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits),
        struct_layout!(ibv_sge; addr, length, lkey),
        [
            size!(ibv_send_wr),
            off!(ibv_send_wr, wr_id),
            off!(ibv_send_wr, next),
            off!(ibv_send_wr, sg_list),
            off!(ibv_send_wr, num_sge),
            off!(ibv_send_wr, opcode),
            off!(ibv_send_wr, send_flags),
            off!(ibv_send_wr, imm_data),
            off!(
                ibv_send_wr,
                "invalidate_rkey",
                offset_of!(ibv_send_wr, imm_data)
            ),
            off!(
                ibv_send_wr,
                "wr.rdma.remote_addr",
                send_wr_wr + offset_of!(wr_rdma, remote_addr)
            ),
            off!(
                ibv_send_wr,
                "wr.rdma.rkey",
                send_wr_wr + offset_of!(wr_rdma, rkey)
            ),
            off!(
                ibv_send_wr,
                "wr.atomic.remote_addr",
                send_wr_wr + offset_of!(wr_atomic, remote_addr)
            ),
            off!(
                ibv_send_wr,
                "wr.atomic.compare_add",
                send_wr_wr + offset_of!(wr_atomic, compare_add)
            ),
            off!(
                ibv_send_wr,
                "wr.atomic.swap",
                send_wr_wr + offset_of!(wr_atomic, swap)
            ),
            off!(
                ibv_send_wr,
                "wr.atomic.rkey",
                send_wr_wr + offset_of!(wr_atomic, rkey)
            ),
            off!(ibv_send_wr, "wr.ud.ah", send_wr_wr + offset_of!(wr_ud, ah)),
            off!(
                ibv_send_wr,
                "wr.ud.remote_qpn",
                send_wr_wr + offset_of!(wr_ud, remote_qpn)
            ),
            off!(
                ibv_send_wr,
                "wr.ud.remote_qkey",
                send_wr_wr + offset_of!(wr_ud, remote_qkey)
            ),
            off!(
                ibv_send_wr,
                "qp_type.xrc.remote_srqn",
                offset_of!(ibv_send_wr, remote_srqn)
            ),
            off!(
                ibv_send_wr,
                "bind_mw.mw",
                send_wr_ext + offset_of!(wr_bind_mw, mw)
            ),
            off!(
                ibv_send_wr,
                "bind_mw.rkey",
                send_wr_ext + offset_of!(wr_bind_mw, rkey)
            ),
            off!(
                ibv_send_wr,
                "bind_mw.bind_info",
                send_wr_ext + offset_of!(wr_bind_mw, bind_info)
            ),
            off!(
                ibv_send_wr,
                "tso.hdr",
                send_wr_ext + offset_of!(wr_tso, hdr)
            ),
            off!(
                ibv_send_wr,
                "tso.hdr_sz",
                send_wr_ext + offset_of!(wr_tso, hdr_sz)
            ),
            off!(
                ibv_send_wr,
                "tso.mss",
                send_wr_ext + offset_of!(wr_tso, mss)
            )
        ],
        struct_layout!(ibv_recv_wr; wr_id, next, sg_list, num_sge),
        struct_layout!(ibv_mw_bind_info; mr, addr, length, mw_access_flags),
        struct_layout!(ibv_mw_bind; wr_id, send_flags, bind_info),
        [
            size!(ibv_mw),
            off!(ibv_mw, context),
            off!(ibv_mw, pd),
            off!(ibv_mw, rkey),
            off!(ibv_mw, handle),
            off!(ibv_mw, "type", offset_of!(ibv_mw, type_))
        ],
        struct_layout!(ibv_global_route; dgid, flow_label, sgid_index, hop_limit, traffic_class),
        struct_layout!(ibv_ah_attr; grh, dlid, sl, src_path_bits, static_rate, is_global,
            port_num),
        struct_layout!(ibv_qp_cap; max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
            max_inline_data),
        struct_layout!(ibv_qp_init_attr; qp_context, send_cq, recv_cq, srq, cap, qp_type,
            sq_sig_all),
        struct_layout!(ibv_qp_init_attr_ex; qp_context, send_cq, recv_cq, srq, cap, qp_type,
            sq_sig_all, comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl,
            rx_hash_conf, source_qpn, send_ops_flags),
        struct_layout!(ibv_qp_attr; qp_state, cur_qp_state, path_mtu, path_mig_state, qkey,
            rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
            max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, rate_limit),
        struct_layout!(ibv_qp; context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num,
            state, qp_type, mutex, cond, events_completed),
        struct_layout!(ibv_qp_ex; qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp,
            wr_atomic_fetch_add, wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write,
            wr_rdma_write_imm, wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr,
            wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge,
            wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write),
        struct_layout!(ibv_data_buf; addr, length),
        struct_layout!(ibv_srq; context, srq_context, pd, handle, mutex, cond, events_completed),
        struct_layout!(ibv_srq_attr; max_wr, max_sge, srq_limit),
        struct_layout!(ibv_srq_init_attr; srq_context, attr),
        struct_layout!(ibv_tm_cap; max_num_tags, max_ops),
        struct_layout!(ibv_srq_init_attr_ex; srq_context, attr, comp_mask, srq_type, pd, xrcd,
            cq, tm_cap),
        struct_layout!(ibv_xrcd; context),
        struct_layout!(ibv_xrcd_init_attr; comp_mask, fd, oflags),
        struct_layout!(ibv_qp_open_attr; comp_mask, qp_num, xrcd, qp_context, qp_type),
        struct_layout!(ibv_ah; context, pd, handle),
        [
            size!(ibv_async_event),
            off!(
                ibv_async_event,
                "element",
                offset_of!(ibv_async_event, element)
            ),
            off!(ibv_async_event, event_type)
        ],
        struct_layout!(ibv_ece; vendor_id, options, comp_mask),
        struct_layout!(ibv_grh; version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid),
        struct_layout!(ibv_sa_path_rec; dgid, sgid, dlid, slid, raw_traffic, flow_label,
            hop_limit, traffic_class, reversible, numb_path, pkey, sl, mtu_selector, mtu,
            rate_selector, rate, packet_life_time_selector, packet_life_time, preference),
        struct_layout!(ib_user_path_rec; dgid, sgid, dlid, slid, raw_traffic, flow_label,
            reversible, mtu, pkey, hop_limit, traffic_class, numb_path, sl, mtu_selector,
            rate_selector, rate, packet_life_time_selector, packet_life_time, preference),
        [
            size!(ib_uverbs_qp_attr),
            off!(ib_uverbs_qp_attr, qp_attr_mask),
            off!(ib_uverbs_qp_attr, ah_attr),
            off!(ib_uverbs_qp_attr, alt_ah_attr),
            off!(ib_uverbs_qp_attr, max_send_wr),
            off!(ib_uverbs_qp_attr, pkey_index),
            off!(ib_uverbs_qp_attr, alt_timeout),
            size!(ib_uverbs_ah_attr),
            off!(
                ib_uverbs_ah_attr,
                "grh.flow_label",
                offset_of!(ib_uverbs_ah_attr, flow_label)
            ),
            off!(
                ib_uverbs_ah_attr,
                "grh.sgid_index",
                offset_of!(ib_uverbs_ah_attr, sgid_index)
            ),
            off!(ib_uverbs_ah_attr, dlid),
            off!(ib_uverbs_ah_attr, port_num)
        ],
        // <rdma/rdma_cma.h>: the unions are named by a member the Rust side stands for.
        struct_layout!(rdma_ib_addr; sgid, dgid, pkey),
        [
            size!(rdma_addr),
            off!(rdma_addr, "src_addr", offset_of!(rdma_addr, src_storage)),
            off!(rdma_addr, "dst_addr", offset_of!(rdma_addr, dst_storage)),
            off!(rdma_addr, "addr.ibaddr", offset_of!(rdma_addr, ibaddr)),
        ],
        struct_layout!(rdma_route; addr, path_rec, num_paths),
        struct_layout!(rdma_event_channel; fd),
        struct_layout!(rdma_cm_id; verbs, channel, context, qp, route, ps, port_num, event,
            send_cq_channel, send_cq, recv_cq_channel, recv_cq, srq, pd, qp_type),
        struct_layout!(rdma_conn_param; private_data, private_data_len, responder_resources,
            initiator_depth, flow_control, retry_count, rnr_retry_count, srq, qp_num),
        struct_layout!(rdma_ud_param; private_data, private_data_len, ah_attr, qp_num, qkey),
        struct_layout!(rdma_cm_event; id, listen_id, event, status, param),
        [
            off!(
                rdma_cm_event,
                "param.conn.qp_num",
                offset_of!(rdma_cm_event, param) + offset_of!(rdma_conn_param, qp_num)
            ),
            off!(
                rdma_cm_event,
                "param.ud.qkey",
                offset_of!(rdma_cm_event, param) + offset_of!(rdma_ud_param, qkey)
            ),
        ],
        struct_layout!(rdma_addrinfo; ai_flags, ai_family, ai_qp_type, ai_port_space,
            ai_src_len, ai_dst_len, ai_src_addr, ai_dst_addr, ai_src_canonname,
            ai_dst_canonname, ai_route_len, ai_route, ai_connect_len, ai_connect, ai_next),
        struct_layout!(rdma_cm_join_mc_attr_ex; comp_mask, join_flags, addr),
    ]
}

/// The table, terminated by an entry with a null name.
fn table() -> &'static [LayoutEntry] {
    static TABLE: std::sync::OnceLock<Vec<LayoutEntry>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut v = entries();
        v.push(LayoutEntry {
            name: std::ptr::null(),
            value: 0,
        });
        v
    })
}

/// `softrdma_abi_layout` (softrdma's own symbol, version `SOFTRDMA_1.0`): the layout table,
/// ended by an entry whose name is NULL.
pub(crate) unsafe extern "C" fn softrdma_abi_layout() -> *const LayoutEntry {
    table().as_ptr()
}
