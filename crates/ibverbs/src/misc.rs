//! The rest of the exported surface: string helpers, rate conversions, fork support, sysfs
//! helpers, conversions from the kernel's structs (used by librdmacm), and the verbs whose
//! objects softrdma's Rust API does not have (imported objects, dma-buf regions, ECE), which
//! answer `EOPNOTSUPP` truthfully. Shared receive queues are in `srq.rs`.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::abi::*;
use crate::util::{fail_errno, fail_minus_one, fail_null};

/// A `'static` NUL-terminated string for C.
macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<c_char>()
    };
}

/// `ibv_wc_status_str`.
pub(crate) unsafe extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    match status {
        0 => cstr!("success"),
        1 => cstr!("local length error"),
        2 => cstr!("local QP operation error"),
        3 => cstr!("local EE context operation error"),
        4 => cstr!("local protection error"),
        5 => cstr!("Work Request Flushed Error"),
        6 => cstr!("memory management operation error"),
        7 => cstr!("bad response error"),
        8 => cstr!("local access error"),
        9 => cstr!("remote invalid request error"),
        10 => cstr!("remote access error"),
        11 => cstr!("remote operation error"),
        12 => cstr!("transport retry counter exceeded"),
        13 => cstr!("RNR retry counter exceeded"),
        14 => cstr!("local RDD violation error"),
        15 => cstr!("remote invalid RD request"),
        16 => cstr!("aborted error"),
        17 => cstr!("invalid EE context number"),
        18 => cstr!("invalid EE context state"),
        19 => cstr!("fatal error"),
        20 => cstr!("response timeout error"),
        21 => cstr!("general error"),
        22 => cstr!("TM error"),
        23 => cstr!("TM software rendezvous"),
        _ => cstr!("unknown"),
    }
}

/// `ibv_node_type_str`.
pub(crate) unsafe extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    match node_type {
        1 => cstr!("InfiniBand channel adapter"),
        2 => cstr!("InfiniBand switch"),
        3 => cstr!("InfiniBand router"),
        4 => cstr!("iWARP NIC"),
        5 => cstr!("usNIC"),
        6 => cstr!("usNIC UDP"),
        7 => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

/// `ibv_port_state_str`.
pub(crate) unsafe extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    match state {
        0 => cstr!("no state change (NOP)"),
        1 => cstr!("down"),
        2 => cstr!("init"),
        3 => cstr!("armed"),
        4 => cstr!("active"),
        5 => cstr!("active deferred"),
        _ => cstr!("unknown"),
    }
}

/// `ibv_event_type_str`.
pub(crate) unsafe extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    match event {
        0 => cstr!("CQ error"),
        1 => cstr!("local work queue catastrophic error"),
        2 => cstr!("invalid request local work queue error"),
        3 => cstr!("local access violation work queue error"),
        4 => cstr!("communication established"),
        5 => cstr!("send queue drained"),
        6 => cstr!("path migrated"),
        7 => cstr!("path migration request error"),
        8 => cstr!("local catastrophic error"),
        9 => cstr!("port active"),
        10 => cstr!("port error"),
        11 => cstr!("LID change"),
        12 => cstr!("P_Key change"),
        13 => cstr!("SM change"),
        14 => cstr!("SRQ catastrophic error"),
        15 => cstr!("SRQ limit reached"),
        16 => cstr!("last WQE reached"),
        17 => cstr!("client reregistration"),
        18 => cstr!("GID table change"),
        19 => cstr!("WQ fatal"),
        _ => cstr!("unknown"),
    }
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s, Mb/s).
const RATES: [(c_int, c_int, c_int); 24] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 0, 25781),
    (16, 0, 103125),
    (17, 0, 206250),
    (18, 0, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
    (0, -1, -1),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s (-1 for unknown rates).
pub(crate) unsafe extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 > 0)
        .map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`.
pub(crate) unsafe extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps` (-1 for unknown rates).
pub(crate) unsafe extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.2 > 0)
        .map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`.
pub(crate) unsafe extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.2 == mbps && mbps > 0)
        .map_or(0, |r| r.0)
}

/// `ibv_fork_init`: nothing to do. softrdma pins no pages for DMA: the device is this
/// process's own threads, so a forked child simply has its own copy of the memory.
pub(crate) unsafe extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (see [`ibv_fork_init`]).
pub(crate) unsafe extern "C" fn ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}

/// `ibv_dontfork_range`: nothing to protect (see [`ibv_fork_init`]).
pub(crate) unsafe extern "C" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    let _ = (base, size);
    0
}

/// `ibv_dofork_range`.
pub(crate) unsafe extern "C" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    let _ = (base, size);
    0
}

/// `ibv_get_sysfs_path`.
pub(crate) unsafe extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    cstr!("/sys")
}

/// `ibv_read_sysfs_file`: reads `dir/file` into `buf` (NUL-terminated, a trailing newline
/// removed); the byte count, or -1. softrdma's device has no sysfs node, so its paths are
/// empty and reading them fails, as for any missing file.
pub(crate) unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: the caller passes NUL-terminated strings.
    let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
    let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) => return fail_minus_one(e.raw_os_error().unwrap_or(libc::ENOENT)),
    };
    let mut n = data.len().min(size - 1);
    if n > 0 && data[n - 1] == b'\n' {
        n -= 1;
    }
    // SAFETY: the caller's buffer holds `size` > n bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// `ibv_copy_ah_attr_from_kern`.
pub(crate) unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *const ib_uverbs_ah_attr,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes valid structs.
    let s = unsafe { &*src };
    let a = ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: s.dgid },
            flow_label: s.flow_label,
            sgid_index: s.sgid_index,
            hop_limit: s.hop_limit,
            traffic_class: s.traffic_class,
        },
        dlid: s.dlid,
        sl: s.sl,
        src_path_bits: s.src_path_bits,
        static_rate: s.static_rate,
        is_global: s.is_global,
        port_num: s.port_num,
    };
    // SAFETY: as above.
    unsafe { dst.write(a) };
}

/// `ibv_copy_qp_attr_from_kern`.
pub(crate) unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *const ib_uverbs_qp_attr,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes valid structs.
    let s = unsafe { &*src };
    let mut a = ibv_qp_attr {
        qp_state: s.qp_state as c_int,
        cur_qp_state: s.cur_qp_state as c_int,
        path_mtu: s.path_mtu as c_int,
        path_mig_state: s.path_mig_state as c_int,
        qkey: s.qkey,
        rq_psn: s.rq_psn,
        sq_psn: s.sq_psn,
        dest_qp_num: s.dest_qp_num,
        qp_access_flags: s.qp_access_flags,
        cap: ibv_qp_cap {
            max_send_wr: s.max_send_wr,
            max_recv_wr: s.max_recv_wr,
            max_send_sge: s.max_send_sge,
            max_recv_sge: s.max_recv_sge,
            max_inline_data: s.max_inline_data,
        },
        pkey_index: s.pkey_index,
        alt_pkey_index: s.alt_pkey_index,
        en_sqd_async_notify: s.en_sqd_async_notify,
        sq_draining: s.sq_draining,
        max_rd_atomic: s.max_rd_atomic,
        max_dest_rd_atomic: s.max_dest_rd_atomic,
        min_rnr_timer: s.min_rnr_timer,
        port_num: s.port_num,
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        alt_port_num: s.alt_port_num,
        alt_timeout: s.alt_timeout,
        ..Default::default()
    };
    // SAFETY: the fields are valid kernel structs; the destinations are ours.
    unsafe {
        ibv_copy_ah_attr_from_kern(&mut a.ah_attr, &s.ah_attr);
        ibv_copy_ah_attr_from_kern(&mut a.alt_ah_attr, &s.alt_ah_attr);
        dst.write(a);
    }
}

/// `ibv_copy_path_rec_from_kern`.
pub(crate) unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *const ib_user_path_rec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes valid structs.
    let s = unsafe { &*src };
    let r = ibv_sa_path_rec {
        dgid: ibv_gid { raw: s.dgid },
        sgid: ibv_gid { raw: s.sgid },
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as c_int,
        flow_label: s.flow_label,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        reversible: s.reversible as c_int,
        numb_path: s.numb_path,
        pkey: s.pkey,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        mtu: s.mtu as u8,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
    // SAFETY: as above.
    unsafe { dst.write(r) };
}

/// `ibv_copy_path_rec_to_kern`.
pub(crate) unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *const ibv_sa_path_rec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes valid structs.
    let s = unsafe { &*src };
    let r = ib_user_path_rec {
        dgid: s.dgid.raw,
        sgid: s.sgid.raw,
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as u32,
        flow_label: s.flow_label,
        reversible: s.reversible as u32,
        mtu: u32::from(s.mtu),
        pkey: s.pkey,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        numb_path: s.numb_path,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
    // SAFETY: as above.
    unsafe { dst.write(r) };
}

/// `ibv_query_qp_data_in_order`: 0, no in-order guarantee promised (rdma-core's answer when
/// a device does not say).
pub(crate) unsafe extern "C" fn ibv_query_qp_data_in_order(
    qp: *mut ibv_qp,
    op: c_int,
    flags: u32,
) -> c_int {
    let _ = (qp, op, flags);
    0
}

/// `ibv_resolve_eth_l2_from_gid`: softrdma has no Ethernet layer of its own (it sends UDP
/// through the kernel), so there is no L2 address to resolve: `-EOPNOTSUPP`.
pub(crate) unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    context: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    eth_mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    let _ = (context, attr, eth_mac, vid);
    -libc::EOPNOTSUPP
}

// Objects softrdma does not have yet, or never will (dma-buf regions, ECE negotiation).

/// `ibv_reg_dmabuf_mr`: softrdma cannot reach device memory behind a dma-buf.
pub(crate) unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut ibv_pd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut ibv_mr {
    let _ = (pd, offset, length, iova, fd, access);
    fail_null(libc::EOPNOTSUPP)
}

/// `ibv_set_ece`: no enhanced connection establishment options.
pub(crate) unsafe extern "C" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    let _ = (qp, ece);
    fail_errno(libc::EOPNOTSUPP)
}

/// `ibv_query_ece`.
pub(crate) unsafe extern "C" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    let _ = (qp, ece);
    fail_errno(libc::EOPNOTSUPP)
}
