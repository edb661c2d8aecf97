//! The function tables of a context: `ibv_context_ops` (reached by the inline `ibv_poll_cq`,
//! `ibv_req_notify_cq`, `ibv_post_send`, `ibv_post_recv`) and `verbs_context` (reached by the
//! inline `_ex` verbs and the `ibv_query_port` macro).
//!
//! A slot softrdma cannot serve stays null, so the header's inline wrapper answers
//! `EOPNOTSUPP` itself (`verbs_get_ctx_op` tests the slot): flows, counters, work queues.

use std::mem::size_of;

use crate::abi::*;

/// The tables of a new context on `device`, with `async_fd` as its event descriptor and
/// `cmd_fd` as its command descriptor.
pub(crate) fn verbs_context_for(
    device: *mut ibv_device,
    cmd_fd: i32,
    async_fd: i32,
) -> verbs_context {
    verbs_context {
        query_port: Some(crate::query::query_port_ex),
        advise_mr: Some(crate::pd::advise_mr),
        alloc_null_mr: None,
        read_counters: None,
        attach_counters_point_flow: None,
        create_counters: None,
        destroy_counters: None,
        reg_dm_mr: Some(crate::dm::reg_dm_mr),
        alloc_dm: Some(crate::dm::alloc_dm),
        free_dm: Some(crate::dm::free_dm),
        modify_flow_action_esp: None,
        destroy_flow_action: None,
        create_flow_action_esp: None,
        modify_qp_rate_limit: None,
        alloc_parent_domain: Some(crate::domain::alloc_parent_domain),
        dealloc_td: Some(crate::domain::dealloc_td),
        alloc_td: Some(crate::domain::alloc_td),
        modify_cq: None,
        post_srq_ops: None,
        destroy_rwq_ind_table: None,
        create_rwq_ind_table: None,
        destroy_wq: None,
        modify_wq: None,
        create_wq: None,
        query_rt_values: Some(crate::query::query_rt_values),
        create_cq_ex: Some(crate::cq::create_cq_ex),
        priv_: std::ptr::null_mut(),
        query_device_ex: Some(crate::query::query_device_ex),
        ibv_destroy_flow: None,
        abi_placeholder2: None,
        ibv_create_flow: None,
        abi_placeholder1: None,
        open_qp: Some(crate::xrc::open_qp),
        create_qp_ex: Some(crate::qp::create_qp_ex),
        get_srq_num: Some(crate::xrc::get_srq_num),
        create_srq_ex: Some(crate::xrc::create_srq_ex),
        open_xrcd: Some(crate::xrc::open_xrcd),
        close_xrcd: Some(crate::xrc::close_xrcd),
        _abi_placeholder3: 0,
        // The whole table exists: every slot's offset passes verbs_get_ctx_op's size test.
        sz: size_of::<verbs_context>(),
        context: ibv_context {
            device,
            ops: ibv_context_ops {
                _compat_query_device: Some(crate::query::ibv_query_device),
                _compat_query_port: Some(crate::query::ibv_query_port),
                _compat_alloc_pd: None,
                _compat_dealloc_pd: None,
                _compat_reg_mr: None,
                _compat_rereg_mr: None,
                _compat_dereg_mr: None,
                alloc_mw: Some(crate::mw::alloc_mw),
                bind_mw: Some(crate::mw::bind_mw),
                dealloc_mw: Some(crate::mw::dealloc_mw),
                _compat_create_cq: None,
                poll_cq: Some(crate::cq::poll_cq),
                req_notify_cq: Some(crate::cq::req_notify_cq),
                _compat_cq_event: None,
                _compat_resize_cq: None,
                _compat_destroy_cq: None,
                _compat_create_srq: None,
                _compat_modify_srq: None,
                _compat_query_srq: None,
                _compat_destroy_srq: None,
                post_srq_recv: Some(crate::post::post_srq_recv),
                _compat_create_qp: None,
                _compat_query_qp: None,
                _compat_modify_qp: None,
                _compat_destroy_qp: None,
                post_send: Some(crate::post::post_send),
                post_recv: Some(crate::post::post_recv),
                _compat_create_ah: None,
                _compat_destroy_ah: None,
                _compat_attach_mcast: None,
                _compat_detach_mcast: None,
                _compat_async_event: None,
            },
            cmd_fd,
            async_fd,
            num_comp_vectors: crate::util::comp_vectors(),
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            abi_compat: VERBS_ABI_IS_EXTENDED,
        },
    }
}
