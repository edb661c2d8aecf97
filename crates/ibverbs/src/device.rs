//! The device list, opening and closing a context, and the device, port, GID and P_Key
//! queries.
//!
//! A process sees one device, `softrdma0`, on the address `SOFTRDMA_IP` names (see the crate
//! docs). The softrdma [`Device`] — its socket on `<ip>:4791` and its progress thread — exists
//! while at least one context is open; every `ibv_open_device` gives a new context on it.

use std::ffi::{c_char, c_int, c_void};

use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};

use softrdma::{Device, DeviceConfig, FaultConfig, OpenDeviceError};

use crate::context::Context;

use crate::abi::*;
use crate::util::{
    copy_c_str, fail_errno, fail_minus_one, fail_null, owned_by, register, set_errno, unregister,
    Kind,
};

/// The device's name in the list.
pub(crate) const DEVICE_NAME: &str = "softrdma0";

/// What the environment says about the device.
struct Setup {
    ip: IpAddr,
    busy_poll: bool,
    adaptive_spin: bool,
    gso: bool,
    /// Share the address with other processes (on unless SOFTRDMA_SHARE=0).
    share: bool,
    pcap: Option<String>,
    faults: FaultConfig,
    /// Print the device's counters to stderr when the last context closes.
    counters: bool,
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
        // On unless SOFTRDMA_ADAPTIVE_SPIN=0 (the Rust API's default).
        adaptive_spin: std::env::var("SOFTRDMA_ADAPTIVE_SPIN").map_or(true, |v| v != "0"),
        // On unless SOFTRDMA_GSO=0 (the Rust API's default).
        gso: std::env::var("SOFTRDMA_GSO").map_or(true, |v| v != "0"),
        // On unless SOFTRDMA_SHARE=0 (the Rust API's default).
        share: std::env::var("SOFTRDMA_SHARE").map_or(true, |v| v != "0"),
        pcap: std::env::var("SOFTRDMA_PCAP")
            .ok()
            .filter(|s| !s.is_empty()),
        faults: FaultConfig::from_env().map_err(|e| format!("{}: {e}", FaultConfig::ENV))?,
        counters: env_flag("SOFTRDMA_COUNTERS"),
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

/// The open softrdma device, how many contexts use it, and the process that opened it.
static OPEN: Mutex<Option<(Device, usize, u32)>> = Mutex::new(None);

/// Forgets a device this process inherited through `fork`: its threads stayed in the parent,
/// so the child must not use it, and must not close it either (closing would wait for those
/// threads and take the parent's place on the address away). As with a kernel device, the
/// child opens a device of its own; the inherited one is leaked, never dropped. Its sockets
/// and lock files were `/dev/null` in the child from the moment `fork` returned
/// (`softrdma_udp::fork`), so the child keeps nothing of the parent's on the address.
pub(crate) fn forget_if_inherited<T>(slot: &mut Option<T>, opened_by: impl Fn(&T) -> u32) {
    if slot
        .as_ref()
        .is_some_and(|t| opened_by(t) != std::process::id())
    {
        std::mem::forget(slot.take());
    }
}

fn open_shared(setup: &Setup) -> Result<Device, c_int> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    forget_if_inherited(&mut open, |o| o.2);
    if let Some((dev, users, _)) = open.as_mut() {
        *users += 1;
        return Ok(dev.clone());
    }
    let mut config = DeviceConfig::new(setup.ip)
        .busy_poll(setup.busy_poll)
        .adaptive_spin(setup.adaptive_spin)
        .gso(setup.gso)
        .share_address(setup.share)
        .faults(setup.faults);
    if let Some(p) = &setup.pcap {
        config = config.pcap(p);
    }
    match Device::open(config) {
        Ok(dev) => {
            *open = Some((dev.clone(), 1, std::process::id()));
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
                " (UDP port 4791 of this address is held by something that does not share it: \
                 the kernel's rdma_rxe, another user's program, or a softrdma process with \
                 SOFTRDMA_SHARE=0; give this process another address with SOFTRDMA_IP)"
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
    forget_if_inherited(&mut open, |o| o.2);
    if let Some((dev, users, _)) = open.as_mut() {
        *users -= 1;
        if *users == 0 {
            if listed().is_ok_and(|l| l.setup.counters) {
                report_counters(&dev.stats());
            }
            *open = None;
        }
    }
}

/// The device's non-zero counters on stderr (`SOFTRDMA_COUNTERS=1`, `softrdma exec
/// --counters`): what fault injection did and what the transport made of it, for a program
/// that has no way to ask.
fn report_counters(stats: &softrdma::DeviceStats) {
    let mut text = format!("softrdma: counters of {DEVICE_NAME}:\n");
    for (name, n) in stats.counters().into_iter().filter(|(_, n)| *n != 0) {
        text.push_str(&format!("softrdma:\t{name} {n}\n"));
    }
    eprint!("{text}");
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
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new descriptor
    // or -1.
    let memfd = unsafe { libc::memfd_create(c"softrdma-context".as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: a new descriptor this function owns (checked >= 0).
    let cmd_fd = (memfd >= 0)
        .then(|| unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(memfd) });
    let cmd_raw = cmd_fd.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd);
    let ctx = Box::new(Context {
        vctx: crate::tables::verbs_context_for(device, cmd_raw, async_fd),
        device: dev,
        async_events,
        cmd_fd,
        cqs: Mutex::new(Default::default()),
        qps: Mutex::new(Default::default()),
        srqs: Mutex::new(Default::default()),
        xrcd_files: Mutex::new(Default::default()),
        imports: Mutex::new(Vec::new()),
    });
    let ctx = Box::into_raw(ctx);
    // SAFETY: just allocated.
    let handle = unsafe { (*ctx).handle() };
    register(handle, Kind::Context, handle);
    handle
}

/// `ibv_close_device`.
pub(crate) unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    let Ok(ctx) = Context::from_handle(context) else {
        return fail_errno(libc::EINVAL);
    };
    // A context opened again by ibv_import_device closes that descriptor first.
    if let Some(taken) = ctx.imports.lock().unwrap_or_else(|e| e.into_inner()).pop() {
        drop(taken);
        return 0;
    }
    // Like the kernel when a context's descriptor closes: objects the program left behind
    // are destroyed (children first), so the device's address is free for the next open.
    for kind in [
        Kind::Qp,
        Kind::Srq,
        Kind::Xrcd,
        Kind::Ah,
        Kind::Mw,
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
                    Kind::Srq => crate::srq::ibv_destroy_srq(p as *mut ibv_srq),
                    Kind::Xrcd => crate::xrc::close_xrcd(p as *mut ibv_xrcd),
                    Kind::Ah => crate::ah::ibv_destroy_ah(p as *mut ibv_ah),
                    Kind::Mw => crate::mw::dealloc_mw(p as *mut ibv_mw),
                    Kind::Mr => crate::pd::ibv_dereg_mr(p as *mut ibv_mr),
                    Kind::Cq => crate::cq::destroy(p as *mut ibv_cq, false),
                    Kind::Channel => {
                        crate::cq::ibv_destroy_comp_channel(p as *mut ibv_comp_channel)
                    }
                    Kind::Pd => crate::pd::ibv_dealloc_pd(p as *mut ibv_pd),
                    _ => continue,
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
            Ok(other) => {
                use softrdma::AsyncEvent as E;
                let (map, id, event_type) = match other {
                    E::QpFatal { qp } => (&ctx.qps, qp, IBV_EVENT_QP_FATAL),
                    E::QpRequestError { qp } => (&ctx.qps, qp, IBV_EVENT_QP_REQ_ERR),
                    E::QpAccessError { qp } => (&ctx.qps, qp, IBV_EVENT_QP_ACCESS_ERR),
                    E::QpLastWqeReached { qp } => (&ctx.qps, qp, IBV_EVENT_QP_LAST_WQE_REACHED),
                    E::SrqLimitReached { srq } => (&ctx.srqs, srq, IBV_EVENT_SRQ_LIMIT_REACHED),
                    E::PortActive | E::PortError => {
                        let event_type = if other == E::PortActive {
                            IBV_EVENT_PORT_ACTIVE
                        } else {
                            IBV_EVENT_PORT_ERR
                        };
                        // SAFETY: the caller passes a writable event; the union's port_num
                        // (an int) shares the first bytes with the pointer.
                        unsafe {
                            event.write(ibv_async_event {
                                element: 1usize as *mut c_void,
                                event_type,
                            })
                        };
                        return 0;
                    }
                    _ => continue,
                };
                // An object destroyed since: its event is stale.
                let Some(handle) = Context::named(map, id) else {
                    continue;
                };
                // SAFETY: the caller passes a writable event.
                unsafe {
                    event.write(ibv_async_event {
                        element: handle as *mut c_void,
                        event_type,
                    })
                };
                return 0;
            }
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
