//! The device list, opening and closing a context, and the device, port, GID and P_Key
//! queries.
//!
//! A process sees one device, `softrdma0`, on the address `SOFTRDMA_IP` names (see the crate
//! docs). The softrdma [`Device`] — its socket on `<ip>:4791` and its progress thread — exists
//! while at least one context is open; every `ibv_open_device` gives a new context on it.

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};

use softrdma::{AsyncEvents, AtomicCap, Device, DeviceConfig, OpenDeviceError};

use crate::abi::*;
use crate::util::{
    copy_c_str, copy_prefix, fail_errno, fail_minus_one, fail_null, is_live, owned_by, register,
    set_errno, unregister, Kind,
};

/// The device's name in the list.
pub(crate) const DEVICE_NAME: &str = "softrdma0";

/// What the environment says about the device.
struct Setup {
    ip: IpAddr,
    busy_poll: bool,
    gso: bool,
    pcap: Option<String>,
}

/// The process's one `ibv_device`, and how to open it.
struct Listed {
    device: Box<ibv_device>,
    setup: Setup,
}

// SAFETY: the ibv_device is written once, before it is shared, and only read afterwards.
unsafe impl Send for Listed {}
// SAFETY: as above.
unsafe impl Sync for Listed {}

/// The address a device without `SOFTRDMA_IP` uses: the one the host sends from towards the
/// outside (a connected UDP socket's local address; no packet is sent), else 127.0.0.1 —
/// the same choice as `softrdma devinfo` and `softrdma exec`.
fn default_ip() -> IpAddr {
    let probe = || -> std::io::Result<IpAddr> {
        let s = std::net::UdpSocket::bind(("0.0.0.0", 0))?;
        // TEST-NET-1 (RFC 5737): nothing is sent, the kernel only picks a source address.
        s.connect(("192.0.2.1", 9))?;
        Ok(s.local_addr()?.ip())
    };
    probe().unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Reads the environment once. An unusable `SOFTRDMA_IP` is reported on stderr (the program
/// only sees "no device").
fn setup() -> Result<Setup, String> {
    let ip = match std::env::var("SOFTRDMA_IP") {
        Ok(s) if !s.trim().is_empty() => {
            let ip: IpAddr = s
                .trim()
                .parse()
                .map_err(|_| format!("SOFTRDMA_IP={s:?} is not an IP address"))?;
            if ip.is_unspecified() {
                return Err(format!(
                    "SOFTRDMA_IP={s}: a device needs a specific address, not a wildcard"
                ));
            }
            ip.to_canonical()
        }
        _ => default_ip(),
    };
    Ok(Setup {
        ip,
        busy_poll: env_flag("SOFTRDMA_BUSY_POLL"),
        gso: env_flag("SOFTRDMA_GSO"),
        pcap: std::env::var("SOFTRDMA_PCAP")
            .ok()
            .filter(|s| !s.is_empty()),
    })
}

fn listed() -> Result<&'static Listed, c_int> {
    static LISTED: OnceLock<Result<Listed, String>> = OnceLock::new();
    let r = LISTED.get_or_init(|| {
        let setup = setup()?;
        let mut device = Box::new(ibv_device {
            _ops: ibv_device_ops_compat {
                _dummy1: None,
                _dummy2: None,
            },
            node_type: IBV_NODE_CA,
            transport_type: IBV_TRANSPORT_IB,
            name: [0; IBV_SYSFS_NAME_MAX],
            dev_name: [0; IBV_SYSFS_NAME_MAX],
            dev_path: [0; IBV_SYSFS_PATH_MAX],
            ibdev_path: [0; IBV_SYSFS_PATH_MAX],
        });
        copy_c_str(&mut device.name, DEVICE_NAME);
        copy_c_str(&mut device.dev_name, DEVICE_NAME);
        // No sysfs node exists for a softrdma device: the paths stay empty.
        Ok(Listed { device, setup })
    });
    match r {
        Ok(l) => Ok(l),
        Err(msg) => {
            static REPORTED: OnceLock<()> = OnceLock::new();
            REPORTED.get_or_init(|| eprintln!("softrdma: {msg}"));
            Err(libc::EINVAL)
        }
    }
}

fn is_our_device(device: *const ibv_device) -> bool {
    listed().is_ok_and(|l| std::ptr::eq(device, &*l.device))
}

/// The open softrdma device and how many contexts use it.
static OPEN: Mutex<Option<(Device, usize)>> = Mutex::new(None);

fn open_shared(setup: &Setup) -> Result<Device, c_int> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((dev, users)) = open.as_mut() {
        *users += 1;
        return Ok(dev.clone());
    }
    let mut config = DeviceConfig::new(setup.ip)
        .busy_poll(setup.busy_poll)
        .gso(setup.gso);
    if let Some(p) = &setup.pcap {
        config = config.pcap(p);
    }
    match Device::open(config) {
        Ok(dev) => {
            *open = Some((dev.clone(), 1));
            Ok(dev)
        }
        Err(e) => {
            let errno = match &e {
                OpenDeviceError::Socket(s) => {
                    match std::error::Error::source(s)
                        .and_then(|e| e.downcast_ref::<std::io::Error>())
                        .and_then(std::io::Error::raw_os_error)
                    {
                        Some(code) => code,
                        None => libc::EIO,
                    }
                }
                OpenDeviceError::Unspecified => libc::EINVAL,
                _ => libc::EIO,
            };
            let hint = if errno == libc::EADDRINUSE {
                " (UDP port 4791 of this address is taken, by another softrdma process or by \
                 the kernel's rdma_rxe; give this process its own address with SOFTRDMA_IP)"
            } else if errno == libc::EADDRNOTAVAIL {
                " (no interface holds this address; set SOFTRDMA_IP to a local address)"
            } else {
                ""
            };
            eprintln!(
                "softrdma: cannot open {DEVICE_NAME} on {}:4791: {e}{hint}",
                setup.ip
            );
            Err(errno)
        }
    }
}

fn release_shared() {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, users)) = open.as_mut() {
        *users -= 1;
        if *users == 0 {
            *open = None;
        }
    }
}

/// An open context: the `verbs_context` (with the `ibv_context` at its end) first, so the
/// `ibv_context` pointer the program holds converts back by a fixed offset.
#[repr(C)]
pub(crate) struct Context {
    pub vctx: verbs_context,
    pub device: Device,
    pub async_events: AsyncEvents,
    /// CQ id → `ibv_cq` address, to name the CQ of an asynchronous event.
    pub cqs: Mutex<std::collections::HashMap<u32, usize>>,
}

impl Context {
    /// The context behind a live `ibv_context` handle, or `EINVAL`.
    pub(crate) fn from_handle<'a>(ctx: *mut ibv_context) -> Result<&'a Context, c_int> {
        if !is_live(ctx, Kind::Context) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live contexts are `Context`s allocated by ibv_open_device, whose
        // ibv_context sits at this fixed offset; it stays allocated until ibv_close_device.
        Ok(unsafe { &*Context::from_ptr(ctx) })
    }

    /// The context that contains `ctx`, without checking (for the hot path).
    pub(crate) fn from_ptr(ctx: *mut ibv_context) -> *mut Context {
        ctx.cast::<u8>()
            .wrapping_sub(offset_of!(Context, vctx) + offset_of!(verbs_context, context))
            .cast()
    }

    pub(crate) fn handle(&mut self) -> *mut ibv_context {
        &mut self.vctx.context
    }
}

/// `ibv_get_device_list`: the one softrdma device.
pub(crate) unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    if !num.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num = 0 };
    }
    let l = match listed() {
        Ok(l) => l,
        Err(e) => return fail_null(e),
    };
    let list = Box::new([
        std::ptr::from_ref(&*l.device).cast_mut(),
        std::ptr::null_mut(),
    ]);
    if !num.is_null() {
        // SAFETY: as above.
        unsafe { *num = 1 };
    }
    Box::into_raw(list).cast()
}

/// `ibv_free_device_list`.
pub(crate) unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if !list.is_null() {
        // SAFETY: lists come from ibv_get_device_list, which boxes a two-element array.
        drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_device; 2]>()) });
    }
}

/// `ibv_get_device_name`.
pub(crate) unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    if !is_our_device(device) {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: checked to be our static device.
    unsafe { (*device).name.as_ptr() }
}

/// `ibv_get_device_index`: softrdma's device has no kernel index.
pub(crate) unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    let _ = device;
    -1
}

/// `ibv_get_device_guid`: the node GUID, big-endian.
pub(crate) unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    match listed() {
        Ok(l) if std::ptr::eq(device, &*l.device) => softrdma::gid::node_guid(l.setup.ip).to_be(),
        _ => {
            set_errno(libc::EINVAL);
            0
        }
    }
}

/// `ibv_open_device`: a new context on the softrdma device (binding `<ip>:4791` if no other
/// context has it open).
pub(crate) unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    let l = match listed() {
        Ok(l) if std::ptr::eq(device, &*l.device) => l,
        Ok(_) => return fail_null(libc::EINVAL),
        Err(e) => return fail_null(e),
    };
    let dev = match open_shared(&l.setup) {
        Ok(d) => d,
        Err(e) => return fail_null(e),
    };
    let async_events = match dev.async_events() {
        Ok(a) => a,
        Err(e) => {
            release_shared();
            return fail_null(e.raw_os_error().unwrap_or(libc::EMFILE));
        }
    };
    let async_fd = std::os::fd::AsRawFd::as_raw_fd(&async_events);
    let ctx = Box::new(Context {
        vctx: crate::context::verbs_context_for(device, async_fd),
        device: dev,
        async_events,
        cqs: Mutex::new(Default::default()),
    });
    let ctx = Box::into_raw(ctx);
    // SAFETY: just allocated.
    let handle = unsafe { (*ctx).handle() };
    register(handle, Kind::Context, handle);
    handle
}

/// `ibv_close_device`.
pub(crate) unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    if !is_live(context, Kind::Context) {
        return fail_errno(libc::EINVAL);
    }
    // Like the kernel when a context's descriptor closes: objects the program left behind
    // are destroyed (children first), so the device's address is free for the next open.
    for kind in [
        Kind::Qp,
        Kind::Ah,
        Kind::Mr,
        Kind::Cq,
        Kind::Channel,
        Kind::Pd,
    ] {
        for p in owned_by(context, kind) {
            // SAFETY: live handles of this context, destroyed by their own verb.
            let _ = unsafe {
                match kind {
                    Kind::Qp => crate::qp::ibv_destroy_qp(p as *mut ibv_qp),
                    Kind::Ah => crate::ah::ibv_destroy_ah(p as *mut ibv_ah),
                    Kind::Mr => crate::pd::ibv_dereg_mr(p as *mut ibv_mr),
                    Kind::Cq => crate::cq::destroy(p as *mut ibv_cq, false),
                    Kind::Channel => {
                        crate::cq::ibv_destroy_comp_channel(p as *mut ibv_comp_channel)
                    }
                    Kind::Pd | Kind::Context => crate::pd::ibv_dealloc_pd(p as *mut ibv_pd),
                }
            };
        }
    }
    if !unregister(context, Kind::Context) {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: the handle was live, so it is a boxed Context from ibv_open_device, now
    // unregistered: freed exactly once.
    drop(unsafe { Box::from_raw(Context::from_ptr(context)) });
    release_shared();
    0
}

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
        max_srq_wr: 0,
        max_srq_sge: 0,
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
        odp_caps: ibv_odp_caps {
            general_caps: 0,
            rc_odp_caps: 0,
            uc_odp_caps: 0,
            ud_odp_caps: 0,
        },
        completion_timestamp_mask: 0,
        hca_core_clock: 0,
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
        max_dm_size: 0,
        pci_atomic_caps: [0; 3],
        xrc_odp_caps: 0,
        phys_port_cnt_ex: u32::from(orig.phys_port_cnt),
    };
    // SAFETY: the caller's struct holds `attr_size` bytes.
    unsafe { copy_prefix(&ex, attr.cast(), attr_size) };
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
        qkey_viol_cntr: 0,
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
    let gid = ctx
        .device
        .query_gid(port8, index)
        .map_err(|_| libc::EINVAL)?;
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
    match gid_entry(ctx, u32::from(port), index) {
        Ok(_) => {
            // SAFETY: the caller passes a writable enum.
            unsafe { gid_type.write(IBV_GID_TYPE_SYSFS_ROCE_V2) };
            0
        }
        Err(e) => fail_minus_one(e),
    }
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

/// `ibv_get_async_event`: the next asynchronous event of the context (blocking unless the
/// program made `async_fd` non-blocking).
pub(crate) unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    let ctx = match Context::from_handle(context) {
        Ok(c) => c,
        Err(e) => return fail_minus_one(e),
    };
    if event.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    loop {
        match ctx.async_events.get_event() {
            Ok(softrdma::AsyncEvent::CqOverrun { cq }) => {
                let Some(&handle) = ctx.cqs.lock().unwrap_or_else(|e| e.into_inner()).get(&cq)
                else {
                    // The CQ was destroyed since: its event is stale.
                    continue;
                };
                // SAFETY: the caller passes a writable event.
                unsafe {
                    event.write(ibv_async_event {
                        element: handle as *mut c_void,
                        event_type: IBV_EVENT_CQ_ERR,
                    })
                };
                return 0;
            }
            Ok(_) => continue,
            Err(e) => return fail_minus_one(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
}

/// `ibv_ack_async_event`.
pub(crate) unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    // SAFETY: the caller passes the event ibv_get_async_event filled.
    let e = unsafe { &*event };
    if e.event_type == IBV_EVENT_CQ_ERR {
        crate::cq::ack_async(e.element.cast());
    }
}
