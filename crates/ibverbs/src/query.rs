//! The device, port, GID and P_Key queries: `ibv_query_device`, `ibv_query_device_ex`,
//! `ibv_query_port` (the exported symbol and the `verbs_context` entry behind the macro),
//! `ibv_query_gid`, `_ibv_query_gid_ex`, `_ibv_query_gid_table`, `ibv_query_gid_type`,
//! `ibv_query_pkey`, `ibv_get_pkey_index`, and `ibv_query_rt_values_ex` (the device clock).

use std::ffi::c_int;
use std::mem::size_of;

use softrdma::{AtomicCap, QueryError};

use crate::abi::*;
use crate::context::Context;
use crate::util::{copy_c_str, copy_prefix, fail_errno, fail_minus_one};

/// The device attributes in `ibv_device_attr` form.
fn device_attr(ctx: &Context) -> ibv_device_attr {
    let a = ctx.device.query_device();
    let clamp = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    let mut out = ibv_device_attr {
        fw_ver: [0; 64],
        node_guid: a.node_guid.to_be(),
        sys_image_guid: a.sys_image_guid.to_be(),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: clamp(a.max_qp),
        max_qp_wr: clamp(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags as u32,
        max_sge: clamp(a.max_sge),
        max_sge_rd: clamp(a.max_sge_rd),
        max_cq: clamp(a.max_cq),
        max_cqe: clamp(a.max_cqe),
        max_mr: clamp(a.max_mr),
        max_pd: clamp(a.max_pd),
        max_qp_rd_atom: clamp(a.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: clamp(a.max_qp_rd_atom.saturating_mul(a.max_qp.min(1024))),
        max_qp_init_rd_atom: clamp(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: match a.atomic_cap {
            AtomicCap::None => IBV_ATOMIC_NONE,
            AtomicCap::Hca => IBV_ATOMIC_HCA,
            AtomicCap::Glob => IBV_ATOMIC_GLOB,
        },
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: clamp(a.max_mcast_grp),
        max_mcast_qp_attach: clamp(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: clamp(a.max_total_mcast_qp_attach),
        max_ah: clamp(a.max_ah),
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: clamp(a.max_srq),
        max_srq_wr: clamp(a.max_srq_wr),
        max_srq_sge: clamp(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    };
    copy_c_str(&mut out.fw_ver, &a.fw_ver);
    out
}

/// `ibv_query_device`.
pub(crate) unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_errno(e),
    };
    if attr.is_null() {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: the caller passes a writable ibv_device_attr.
    unsafe { attr.write(device_attr(ctx)) };
    0
}

/// `verbs_context.query_device_ex` (behind the inline `ibv_query_device_ex`).
pub(crate) unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_errno(e),
    };
    // SAFETY: `input` is NULL or the caller's readable input struct.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return fail_errno(libc::EINVAL);
    }
    if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
        return fail_errno(libc::EINVAL);
    }
    let orig = device_attr(ctx);
    let ex = ibv_device_attr_ex {
        orig_attr: orig,
        comp_mask: 0,
        // softrdma pins nothing, so every region is on demand, the implicit one included
        // (see `pd::access_flags`); every operation of each transport may touch such memory.
        odp_caps: ibv_odp_caps {
            general_caps: ODP_SUPPORT | ODP_SUPPORT_IMPLICIT,
            rc_odp_caps: ODP_SEND | ODP_RECV | ODP_WRITE | ODP_READ | ODP_ATOMIC | ODP_SRQ_RECV,
            uc_odp_caps: ODP_SEND | ODP_RECV | ODP_WRITE | ODP_SRQ_RECV,
            ud_odp_caps: ODP_SEND | ODP_RECV | ODP_SRQ_RECV,
        },
        // Completion timestamps are whole 64-bit nanosecond counts.
        completion_timestamp_mask: u64::MAX,
        hca_core_clock: CLOCK_KHZ,
        device_cap_flags_ex: u64::from(orig.device_cap_flags),
        tso_caps: [0; 2],
        rss_caps: ibv_rss_caps {
            supported_qpts: 0,
            max_rwq_indirection_tables: 0,
            max_rwq_indirection_table_size: 0,
            rx_hash_fields_mask: 0,
            rx_hash_function: 0,
        },
        max_wq_type_rq: 0,
        packet_pacing_caps: [0; 3],
        raw_packet_caps: 0,
        tm_caps: [0; 5],
        cq_mod_caps: [0; 2],
        max_dm_size: ctx.device.query_device().max_dm_size,
        pci_atomic_caps: [0; 3],
        // An XRC initiator sends as RC does; its SRQs receive as a basic SRQ does.
        xrc_odp_caps: ODP_SEND | ODP_WRITE | ODP_READ | ODP_ATOMIC | ODP_SRQ_RECV,
        phys_port_cnt_ex: u32::from(orig.phys_port_cnt),
    };
    // SAFETY: the caller's struct holds `attr_size` bytes.
    unsafe { copy_prefix(&ex, attr.cast(), attr_size) };
    0
}

/// The rate of the device clock `ibv_query_rt_values_ex` reads, in kHz
/// (`ibv_device_attr_ex.hca_core_clock`): the clock counts nanoseconds.
const CLOCK_KHZ: u64 = 1_000_000;

/// `verbs_context.query_rt_values` (behind the inline `ibv_query_rt_values_ex`): the device
/// clock, `CLOCK_MONOTONIC` in nanoseconds, as mlx5 gives its clock: the whole count in
/// `raw_clock.tv_nsec` (`tv_sec` 0), ticking at `hca_core_clock`. `EINVAL` for a value other
/// than the raw clock; the mask says what was written.
pub(crate) unsafe extern "C" fn query_rt_values(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    if Context::from_handle(context).is_err() || values.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller passes a readable and writable ibv_values_ex.
    let v = unsafe { &mut *values };
    if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
        return libc::EINVAL;
    }
    if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
        // time_t and long are both 64 bits on the platforms softrdma runs on.
        v.raw_clock = libc::timespec {
            tv_sec: 0,
            tv_nsec: crate::util::clock_ns(libc::CLOCK_MONOTONIC) as i64,
        };
    }
    0
}

/// The port attributes in `ibv_port_attr` form.
fn port_attr(ctx: &Context, port: u8) -> Result<ibv_port_attr, c_int> {
    let p = ctx.device.query_port(port).map_err(|_| libc::EINVAL)?;
    Ok(ibv_port_attr {
        state: match p.state {
            softrdma::PortState::Active => IBV_PORT_ACTIVE,
            softrdma::PortState::Down => 1,
        },
        max_mtu: c_int::from(p.max_mtu.ibv_enum()),
        active_mtu: c_int::from(p.active_mtu.ibv_enum()),
        gid_tbl_len: c_int::try_from(p.gid_tbl_len).unwrap_or(c_int::MAX),
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: IBV_LINK_LAYER_ETHERNET,
        flags: IBV_QPF_GRH_REQUIRED,
        port_cap_flags2: 0,
    })
}

/// `verbs_context.query_port` (behind the `ibv_query_port` macro): fills `len` bytes.
pub(crate) unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_errno(e),
    };
    if attr.is_null() {
        return fail_errno(libc::EINVAL);
    }
    match port_attr(ctx, port) {
        Ok(a) => {
            // SAFETY: the caller's struct holds `len` bytes.
            unsafe { copy_prefix(&a, attr.cast(), len) };
            0
        }
        Err(e) => fail_errno(e),
    }
}

/// `ibv_query_port` (the exported symbol, reached by programs built before the macro and by
/// `_compat_query_port`): fills rdma-core's compat size, without `port_cap_flags2`.
pub(crate) unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded; the exported symbol's struct is the compat size.
    unsafe { query_port_ex(context, port, attr, COMPAT_PORT_ATTR_SIZE) }
}

/// The GID table entry `index` of port `port`, as `ibv_gid_entry`.
fn gid_entry(ctx: &Context, port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    let port8 = u8::try_from(port).map_err(|_| libc::EINVAL)?;
    let gid = ctx.device.query_gid(port8, index).map_err(|e| match e {
        QueryError::EmptyGid(_) => libc::ENODATA,
        _ => libc::EINVAL,
    })?;
    let ifindex = softrdma::gid::interface_index(ctx.device.ip());
    Ok(ibv_gid_entry {
        gid: ibv_gid { raw: gid.0 },
        gid_index: index,
        port_num: port,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: ifindex,
    })
}

/// `ibv_query_gid`: 0, or -1 for a port or index that does not exist.
pub(crate) unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_minus_one(e),
    };
    let Ok(index) = u32::try_from(index) else {
        return fail_minus_one(libc::EINVAL);
    };
    if gid.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    match gid_entry(ctx, u32::from(port), index) {
        Ok(e) => {
            // SAFETY: the caller passes a writable 16-byte GID.
            unsafe { gid.write(e.gid) };
            0
        }
        // As rdma-core: an empty entry reads as the zero GID.
        Err(libc::ENODATA) => {
            // SAFETY: as above.
            unsafe { gid.write(ibv_gid { raw: [0; 16] }) };
            0
        }
        Err(e) => fail_minus_one(e),
    }
}

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`): 0 or an errno value.
pub(crate) unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_errno(e),
    };
    if flags != 0 || entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
        return fail_errno(libc::EINVAL);
    }
    match gid_entry(ctx, port, index) {
        Ok(e) => {
            // SAFETY: the caller's entry holds `entry_size` bytes.
            unsafe { copy_prefix(&e, entry.cast(), entry_size) };
            0
        }
        Err(e) => fail_errno(e),
    }
}

/// `_ibv_query_gid_table` (behind the inline `ibv_query_gid_table`): the number of entries
/// written, or a negative errno.
pub(crate) unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return -(e as isize),
    };
    if flags != 0 || entry_size < size_of::<ibv_gid_entry>() || entries.is_null() {
        return -(libc::EINVAL as isize);
    }
    let table = ctx.device.gid_table();
    if table.len() > max_entries {
        return -(libc::EINVAL as isize);
    }
    for (i, g) in table.iter().enumerate() {
        let Ok(e) = gid_entry(ctx, 1, g.index) else {
            return -(libc::EINVAL as isize);
        };
        // SAFETY: the caller's array holds `max_entries` entries of `entry_size` bytes, and
        // i < table.len() <= max_entries.
        unsafe { copy_prefix(&e, entries.cast::<u8>().add(i * entry_size), entry_size) };
    }
    table.len() as isize
}

/// `ibv_query_gid_type` (`IBVERBS_PRIVATE_34`, used by `ibv_devinfo` and perftest): every
/// softrdma GID is RoCE v2 (`IBV_GID_TYPE_SYSFS_ROCE_V2`).
pub(crate) unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port: u8,
    index: u32,
    gid_type: *mut c_int,
) -> c_int {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_minus_one(e),
    };
    if gid_type.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    let t = match gid_entry(ctx, u32::from(port), index) {
        Ok(_) => IBV_GID_TYPE_SYSFS_ROCE_V2,
        // As rdma-core: an empty entry has the first type.
        Err(libc::ENODATA) => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
        Err(e) => return fail_minus_one(e),
    };
    // SAFETY: the caller passes a writable enum.
    unsafe { gid_type.write(t) };
    0
}

/// The default P_Key, the only entry of the P_Key table.
const DEFAULT_PKEY: u16 = 0xffff;

/// `ibv_query_pkey`: index 0 is the default P_Key (network order).
pub(crate) unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if Context::from_handle(context).is_err() || pkey.is_null() || port != 1 || index != 0 {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: the caller passes a writable __be16.
    unsafe { pkey.write(DEFAULT_PKEY.to_be()) };
    0
}

/// `ibv_get_pkey_index`: the index of a P_Key (network order), -1 if absent.
pub(crate) unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port: u8,
    pkey: u16,
) -> c_int {
    if Context::from_handle(context).is_err() || port != 1 {
        return fail_minus_one(libc::EINVAL);
    }
    if u16::from_be(pkey) == DEFAULT_PKEY {
        0
    } else {
        fail_minus_one(libc::ENOENT)
    }
}

// `enum ibv_odp_general_caps` and `enum ibv_odp_transport_cap_bits`.
const ODP_SUPPORT: u64 = 1 << 0;
const ODP_SUPPORT_IMPLICIT: u64 = 1 << 1;
const ODP_SEND: u32 = 1 << 0;
const ODP_RECV: u32 = 1 << 1;
const ODP_WRITE: u32 = 1 << 2;
const ODP_READ: u32 = 1 << 3;
const ODP_ATOMIC: u32 = 1 << 4;
const ODP_SRQ_RECV: u32 = 1 << 5;
