//! The device rdma_cm works on: the process's one softrdma device, opened once through this
//! library's own `ibv_open_device`, so `id->verbs` is a context of the same device the
//! program's `ibv_get_device_list` shows (and `rdma_get_devices` returns that very context,
//! as librdmacm returns the contexts it opened), and one stack owns `<ip>:4791`.

use std::ffi::c_int;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::abi::{ibv_context, ibv_pd};
use crate::context::Context;

/// rdma_cm's context and protection domain (`id->verbs`, `id->pd`).
pub(crate) struct CmDevice {
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub device: softrdma::Device,
    /// The device's connection manager, kept running for the process's lifetime.
    _cm: softrdma_rdmacm::CmService,
}

// SAFETY: the context and PD handles are never freed (they live as long as the process, as
// librdmacm's do) and are used through the verbs, which are thread-safe.
unsafe impl Send for CmDevice {}
// SAFETY: as above.
unsafe impl Sync for CmDevice {}

impl CmDevice {
    pub(crate) fn ip(&self) -> IpAddr {
        self.device.ip()
    }
}

/// The device, opened on first use in this process (a child made by `fork` opens its own: see
/// [`crate::device::forget_if_inherited`]); the errno of the failure otherwise (the reason is
/// on stderr, from `ibv_open_device`).
pub(crate) fn cm_device() -> Result<&'static CmDevice, c_int> {
    static DEVICE: Mutex<Option<(Result<&'static CmDevice, c_int>, u32)>> = Mutex::new(None);
    let mut slot = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    crate::device::forget_if_inherited(&mut slot, |s| s.1);
    if let Some((opened, _)) = &*slot {
        return *opened;
    }
    // Never freed: ids and programs keep `id->verbs` and `id->pd` for the process's lifetime.
    let opened = open().map(|d| &*Box::leak(Box::new(d)));
    *slot = Some((opened, std::process::id()));
    opened
}

fn open() -> Result<CmDevice, c_int> {
    let mut n = 0;
    // SAFETY: our own verbs, called as a program calls them; the list is freed below.
    unsafe {
        let list = crate::device::ibv_get_device_list(&mut n);
        if list.is_null() || n < 1 {
            return Err(libc::ENODEV);
        }
        let ctx = crate::device::ibv_open_device(*list);
        let errno = crate::util::last_errno();
        crate::device::ibv_free_device_list(list);
        if ctx.is_null() {
            return Err(errno);
        }
        let pd = crate::pd::ibv_alloc_pd(ctx);
        if pd.is_null() {
            return Err(libc::ENOMEM);
        }
        let device = Context::from_handle(ctx)?.device.clone();
        let cm = softrdma_rdmacm::CmService::start(&device).map_err(|e| {
            eprintln!("softrdma: cannot start rdma_cm on {}: {e}", device.ip());
            libc::ENOMEM
        })?;
        Ok(CmDevice {
            ctx,
            pd,
            device,
            _cm: cm,
        })
    }
}
