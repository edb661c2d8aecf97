//! Completion queues and completion channels: `ibv_create_cq`, `ibv_create_cq_ex` (and the
//! `ibv_start_poll` family), `ibv_destroy_cq`, `ibv_poll_cq`, `ibv_req_notify_cq`,
//! `ibv_create_comp_channel`, `ibv_get_cq_event`, `ibv_ack_cq_events`.
//!
//! A completion channel's `fd` is a real descriptor (softrdma's [`CompletionChannel`]): it
//! becomes readable when an armed CQ gets a completion, so `poll()`/`epoll` work on it.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use softrdma::{CompletionChannel, CompletionQueue, WcOpcode, WcStatus, WorkCompletion};

use crate::abi::*;
use crate::context::Context;
use crate::util::{
    creating_user, destroying_used, fail_errno, fail_minus_one, fail_null, is_live, register,
    set_errno, unregister, Kind,
};

/// A completion channel: the C struct first.
#[repr(C)]
pub(crate) struct Channel {
    pub ibv: ibv_comp_channel,
    pub channel: CompletionChannel,
}

/// A completion queue: an `ibv_cq_ex` (whose first part is the `ibv_cq`), then softrdma's
/// queue and the bookkeeping of events and users.
#[repr(C)]
pub(crate) struct Cq {
    pub ibv: ibv_cq_ex,
    pub cq: CompletionQueue,
    /// QPs using this CQ: it cannot be destroyed before them.
    pub users: AtomicUsize,
    /// `ibv_destroy_cq` has begun: the CQ takes no new user, hands out no new event, and a
    /// second destroy is refused, while the first waits for acknowledgements.
    closing: AtomicBool,
    /// Completion events handed out by `ibv_get_cq_event` and acknowledged, and the
    /// condition `ibv_destroy_cq` waits on until they match.
    events: Mutex<(u32, u32)>,
    acked: Condvar,
    /// Asynchronous events (overrun) handed out and acknowledged.
    async_reported: AtomicU32,
    /// The completion the `ibv_start_poll` API is positioned on.
    current: Mutex<Option<WorkCompletion>>,
    /// The `sl` of a receive that came with a GRH area (see [`grh_sl`]).
    grh_sl: u8,
}

/// The `sl` of a UD receive on a device bound to `ip`: the network header the GRH area holds,
/// coded as RoCE NICs code it there for UD (bits 2..0: 1 IPv6, 2 IPv4; mlx5's CQE). RoCE has
/// no service level on the wire, and UCX's `ud_verbs` reads this field to know where the
/// destination address sits in the area: the last 16 bytes for IPv6, the last 4 for IPv4.
/// Other receives have `sl` 0.
fn grh_sl(ip: std::net::IpAddr) -> u8 {
    if ip.is_ipv4() {
        2
    } else {
        1
    }
}

impl Cq {
    /// The CQ behind a live handle, or `EINVAL`.
    pub(crate) fn from_handle<'a>(cq: *mut ibv_cq) -> Result<&'a Cq, c_int> {
        if !is_live(cq, Kind::Cq) {
            return Err(libc::EINVAL);
        }
        // SAFETY: live CQ handles are boxed `Cq`s (the ibv_cq_ex, then the ibv_cq, first)
        // until ibv_destroy_cq.
        Ok(unsafe { &*cq.cast::<Cq>() })
    }

    /// The CQ behind a live handle that is not being destroyed: one a new QP may use, or
    /// `EINVAL`.
    pub(crate) fn usable<'a>(cq: *mut ibv_cq) -> Result<&'a Cq, c_int> {
        let c = Self::from_handle(cq)?;
        if c.closing.load(Ordering::Acquire) {
            return Err(libc::EINVAL);
        }
        Ok(c)
    }
}

/// `ibv_create_comp_channel`.
pub(crate) unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    if Context::from_handle(context).is_err() {
        return fail_null(libc::EINVAL);
    }
    let channel = match CompletionChannel::new() {
        Ok(c) => c,
        Err(e) => return fail_null(e.raw_os_error().unwrap_or(libc::EMFILE)),
    };
    let p = Box::into_raw(Box::new(Channel {
        ibv: ibv_comp_channel {
            context,
            fd: channel.as_raw_fd(),
            refcnt: 0,
        },
        channel,
    }));
    let h = p.cast::<ibv_comp_channel>();
    register(h, Kind::Channel, context);
    h
}

/// `ibv_destroy_comp_channel`: `EBUSY` while CQs use it.
pub(crate) unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    let users = destroying_used();
    if !is_live(channel, Kind::Channel) {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: live channel handles are boxed `Channel`s.
    if unsafe { channel_users(channel) }.load(Ordering::Acquire) != 0 {
        return fail_errno(libc::EBUSY);
    }
    unregister(channel, Kind::Channel);
    drop(users);
    // SAFETY: live until just now, unregistered: freed once.
    drop(unsafe { Box::from_raw(channel.cast::<Channel>()) });
    0
}

/// The channel's `refcnt` (CQs reporting to it) as an atomic: CQs of several threads
/// count themselves at once (rdma-core does it under the context's mutex).
///
/// # Safety
/// `channel` is a live channel handle (a boxed `Channel`).
unsafe fn channel_users<'a>(channel: *mut ibv_comp_channel) -> &'a std::sync::atomic::AtomicI32 {
    // SAFETY: `refcnt` is an aligned, live c_int of the channel, which this library accesses
    // only through this atomic view.
    unsafe { std::sync::atomic::AtomicI32::from_ptr(std::ptr::addr_of_mut!((*channel).refcnt)) }
}

/// Creates the CQ object shared by `ibv_create_cq` and `ibv_create_cq_ex`.
fn create(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
) -> Result<*mut Cq, c_int> {
    let _users = creating_user();
    let ctx = Context::from_handle(context)?;
    let cqe = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
    if cqe == 0 {
        return Err(libc::EINVAL);
    }
    if !channel.is_null() && !is_live(channel, Kind::Channel) {
        return Err(libc::EINVAL);
    }
    let cq = ctx.device.create_cq(cqe).map_err(|e| match e {
        softrdma::CreateCqError::TooManyEntries { .. } => libc::EINVAL,
        _ => libc::EMFILE,
    })?;
    let p = Box::into_raw(Box::new(Cq {
        ibv: ibv_cq_ex {
            cq: ibv_cq {
                context,
                channel,
                cq_context,
                handle: cq.id(),
                cqe: cq.capacity() as c_int,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            comp_mask: 0,
            status: 0,
            wr_id: 0,
            start_poll: Some(start_poll),
            next_poll: Some(next_poll),
            end_poll: Some(end_poll),
            read_opcode: Some(read_opcode),
            read_vendor_err: Some(read_vendor_err),
            read_byte_len: Some(read_byte_len),
            read_imm_data: Some(read_imm_data),
            read_qp_num: Some(read_qp_num),
            read_src_qp: Some(read_src_qp),
            read_wc_flags: Some(read_wc_flags),
            read_slid: Some(read_zero_u32),
            read_sl: Some(read_sl),
            read_dlid_path_bits: Some(read_zero_u8),
            read_completion_ts: Some(read_completion_ts),
            read_cvlan: None,
            read_flow_tag: None,
            read_tm_info: None,
            read_completion_wallclock_ns: Some(read_completion_wallclock_ns),
        },
        cq,
        users: AtomicUsize::new(0),
        closing: AtomicBool::new(false),
        events: Mutex::new((0, 0)),
        acked: Condvar::new(),
        async_reported: AtomicU32::new(0),
        current: Mutex::new(None),
        grh_sl: grh_sl(ctx.device.ip()),
    }));
    // SAFETY: just allocated.
    let c = unsafe { &mut *p };
    if !channel.is_null() {
        // SAFETY: checked live above: a boxed Channel. Only its `channel` field is borrowed:
        // other threads count CQs in `ibv.refcnt` meanwhile (through `channel_users`).
        let ch = unsafe { &*std::ptr::addr_of!((*channel.cast::<Channel>()).channel) };
        // A new CQ has no channel yet, so attaching cannot be refused.
        let _ = c.cq.attach_channel(ch, p as u64);
        // SAFETY: checked live above, and kept so by the users lock.
        unsafe { channel_users(channel) }.fetch_add(1, Ordering::AcqRel);
    }
    ctx.cqs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(c.cq.id(), p as usize);
    register(p.cast::<ibv_cq>(), Kind::Cq, context);
    Ok(p)
}

/// `ibv_create_cq`.
pub(crate) unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    if !(0..crate::util::comp_vectors()).contains(&comp_vector) {
        return fail_null(libc::EINVAL);
    }
    match create(context, cqe, cq_context, channel) {
        Ok(p) => p.cast(),
        Err(e) => fail_null(e),
    }
}

/// `verbs_context.create_cq_ex` (behind the inline `ibv_create_cq_ex`).
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    if attr.is_null() {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: the caller passes a readable attribute struct.
    let a = unsafe { &*attr };
    if a.wc_flags & !IBV_CREATE_CQ_SUP_WC_FLAGS != 0 {
        return fail_null(libc::EOPNOTSUPP);
    }
    let timestamps =
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    if a.wc_flags & !(IBV_WC_STANDARD_FLAGS | timestamps) != 0 {
        // VLAN, flow tags, tag matching: not produced by softrdma.
        return fail_null(libc::EOPNOTSUPP);
    }
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        return fail_null(libc::EINVAL);
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0
        && !crate::domain::is_parent_domain(a.parent_domain)
    {
        // The field names a parent domain, never a plain PD (mlx5: EINVAL).
        return fail_null(libc::EINVAL);
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
        && a.flags & !(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) != 0
    {
        return fail_null(libc::EOPNOTSUPP);
    }
    if !u32::try_from(crate::util::comp_vectors()).is_ok_and(|n| a.comp_vector < n) {
        return fail_null(libc::EINVAL);
    }
    let Ok(cqe) = c_int::try_from(a.cqe) else {
        return fail_null(libc::EINVAL);
    };
    match create(context, cqe, a.cq_context, a.channel) {
        Ok(p) => p.cast(),
        Err(e) => fail_null(e),
    }
}

/// `ibv_destroy_cq`: `EBUSY` while QPs use it; waits until every completion event handed out
/// was acknowledged (`ibv_ack_cq_events`), as rdma-core does.
pub(crate) unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    destroy(cq, true)
}

/// Destroys a CQ; `wait_acks`: first wait until every completion event handed out was
/// acknowledged (not when the context closes under it).
pub(crate) fn destroy(cq: *mut ibv_cq, wait_acks: bool) -> c_int {
    let c = match Cq::from_handle(cq) {
        Ok(c) => c,
        Err(e) => return fail_errno(e),
    };
    if c.closing.swap(true, Ordering::AcqRel) {
        // Another thread is destroying it.
        return fail_errno(libc::EINVAL);
    }
    let busy = || {
        let busy = c.users.load(Ordering::Acquire) != 0;
        if busy {
            c.closing.store(false, Ordering::Release);
        }
        busy
    };
    if busy() {
        return fail_errno(libc::EBUSY);
    }
    if wait_acks {
        // Before the CQ leaves the handle table: the acknowledgements waited for come through
        // `ibv_ack_cq_events` on this very handle, often from another thread (ibv_get_cq_event(3):
        // destroying a CQ waits for all its events to be acknowledged). Unregistered first,
        // those acks failed and the destroy waited forever.
        let mut ev = c.events.lock().unwrap_or_else(|e| e.into_inner());
        while ev.0 != ev.1 {
            ev = c.acked.wait(ev).unwrap_or_else(|e| e.into_inner());
        }
    }
    // A QP that took the CQ before `closing` was set: its creation counts itself before the
    // users lock lets this check run.
    let users = destroying_used();
    if busy() {
        return fail_errno(libc::EBUSY);
    }
    if !unregister(cq, Kind::Cq) {
        return fail_errno(libc::EINVAL);
    }
    drop(users);
    // SAFETY: was live (a boxed Cq) and is unregistered: freed once, below.
    let b = unsafe { Box::from_raw(cq.cast::<Cq>()) };
    let context = b.ibv.cq.context;
    if let Ok(ctx) = Context::from_handle(context) {
        ctx.cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&b.cq.id());
    }
    let channel = b.ibv.cq.channel;
    if is_live(channel, Kind::Channel) {
        // SAFETY: a live channel is a boxed Channel (it cannot go while this CQ counts).
        unsafe { channel_users(channel) }.fetch_sub(1, Ordering::AcqRel);
    }
    drop(b);
    0
}

/// `ibv_resize_cq`: the CQ holds `cqe` completions from now on (and says so in `cq->cqe`).
/// `EINVAL` for a size below 1 or above `max_cqe`, or below the completions waiting (rxe).
pub(crate) unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    let c = match Cq::from_handle(cq) {
        Ok(c) => c,
        Err(e) => return fail_errno(e),
    };
    let Ok(size) = u32::try_from(cqe) else {
        return fail_errno(libc::EINVAL);
    };
    if size == 0 || c.cq.resize(size).is_err() {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: `cq` is a live CQ handle (checked above); `cqe` is the program's to read, as
    // ibv_create_cq's answer is.
    unsafe { (*cq).cqe = c.cq.capacity() as c_int };
    0
}

/// `ibv_wc_status` of a softrdma status.
pub(crate) fn wc_status(s: WcStatus) -> c_int {
    s.ibv_code() as c_int
}

/// `ibv_wc_opcode` of a softrdma completion opcode.
fn wc_opcode(o: WcOpcode) -> c_int {
    match o {
        WcOpcode::Send => 0,
        WcOpcode::RdmaWrite => 1,
        WcOpcode::RdmaRead => 2,
        WcOpcode::CompSwap => 3,
        WcOpcode::FetchAdd => 4,
        WcOpcode::BindMw => 5,
        WcOpcode::LocalInv => 6,
        // IBV_WC_ATOMIC_WRITE.
        WcOpcode::AtomicWrite => 9,
        // rdma-core 44 has no FLUSH verb (45 adds IBV_WR_FLUSH and IBV_WC_FLUSH = 8), so no
        // program of this ABI can post one; the value is 45's.
        WcOpcode::Flush => 8,
        WcOpcode::Recv => 128,
        WcOpcode::RecvRdmaWithImm => 129,
    }
}

/// `wc_flags` and the `imm_data`/`invalidated_rkey` field of a completion.
fn flags_and_imm(wc: &WorkCompletion) -> (u32, u32) {
    let grh = if wc.grh { IBV_WC_GRH } else { 0 };
    match (wc.imm_data, wc.invalidated_rkey) {
        // Immediate data travels in network order: the program reads it with ntohl.
        (Some(imm), _) => (grh | IBV_WC_WITH_IMM, imm.to_be()),
        (None, Some(rkey)) => (grh | IBV_WC_WITH_INV, rkey),
        (None, None) => (grh, 0),
    }
}

/// The `sl` of a completion of `c`.
fn sl_of(c: &Cq, wc: &WorkCompletion) -> u8 {
    if wc.grh {
        c.grh_sl
    } else {
        0
    }
}

/// The `ibv_wc` of a completion of `c`.
fn to_ibv_wc(c: &Cq, wc: &WorkCompletion) -> ibv_wc {
    let (wc_flags, imm_data) = flags_and_imm(wc);
    ibv_wc {
        wr_id: wc.wr_id,
        status: wc_status(wc.status),
        opcode: wc_opcode(wc.opcode),
        vendor_err: 0,
        byte_len: wc.byte_len,
        imm_data,
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        wc_flags,
        pkey_index: 0,
        slid: 0,
        sl: sl_of(c, wc),
        dlid_path_bits: 0,
    }
}

thread_local! {
    /// Where a polling thread's completions land before conversion: reused, so polling
    /// allocates nothing after a thread's first poll.
    static SCRATCH: RefCell<Vec<WorkCompletion>> = const { RefCell::new(Vec::new()) };
    /// Since when this thread's polls have found nothing (`None` after a completion).
    static EMPTY_SINCE: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// How long a thread may spin on empty CQs before its polls start to doze. Dozing costs a
/// wake-up per message (measured: `ib_send_lat -s 8` median 136 us with 100 us here, 13-28 us
/// with 1 ms, on 2 busy cores), so only a thread that has waited long spins no more.
const SPIN_BEFORE_DOZE: Duration = Duration::from_millis(1);
/// The longest one empty poll dozes.
const DOZE: Duration = Duration::from_micros(500);

/// Polls up to `max` completions of `c` into `out` the way a program spinning on
/// `ibv_poll_cq` needs on a small machine. An empty CQ first makes the thread drive the
/// device itself ([`CompletionQueue::poll_progress`]). A thread that has found nothing for
/// [`SPIN_BEFORE_DOZE`] then dozes in each poll until the device receives anything at all
/// (or [`DOZE`] passes): blocked, it is woken — and scheduled — as soon as a datagram comes,
/// where a thread spinning for milliseconds fights its peers (the other side, the device
/// threads) for the cores. A completion ends the dozing.
fn poll_spinning(c: &Cq, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
    let mut n = c.cq.poll_progress(max, out);
    if n == 0 {
        let now = Instant::now();
        match EMPTY_SINCE.get() {
            None => EMPTY_SINCE.set(Some(now)),
            Some(since) if now.duration_since(since) > SPIN_BEFORE_DOZE => {
                if c.cq.wait_activity(Some(DOZE)) {
                    n = c.cq.poll(max, out);
                }
            }
            Some(_) => {}
        }
    }
    if n > 0 {
        EMPTY_SINCE.set(None);
    }
    n
}

/// `ibv_context_ops.poll_cq` (the inline `ibv_poll_cq`): up to `num_entries` completions
/// into `wc`; returns how many, or -1 with `errno` for a bad argument.
pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    if cq.is_null() || num_entries < 0 || (wc.is_null() && num_entries > 0) {
        return fail_minus_one(libc::EINVAL);
    }
    if num_entries == 0 {
        return 0;
    }
    // SAFETY: the program passes a CQ of this library (it reached this function through the
    // CQ's context's table); it is a boxed Cq until ibv_destroy_cq.
    let c = unsafe { &*cq.cast::<Cq>() };
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        s.clear();
        let n = poll_spinning(c, num_entries as usize, &mut s);
        for (i, w) in s.iter().enumerate() {
            // SAFETY: the program's array holds `num_entries` >= n entries.
            unsafe { wc.add(i).write(to_ibv_wc(c, w)) };
        }
        n as c_int
    })
}

/// `ibv_context_ops.req_notify_cq` (the inline `ibv_req_notify_cq`).
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    if cq.is_null() {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: as in poll_cq.
    let c = unsafe { &*cq.cast::<Cq>() };
    match c.cq.req_notify(solicited_only != 0) {
        Ok(()) => 0,
        // No channel: the event could not go anywhere, and arming is a no-op, as on rxe
        // (the kernel's `ib_uverbs_req_notify_cq` arms a CQ without a channel and returns 0;
        // programs arm every CQ and then poll some).
        Err(_) => 0,
    }
}

/// `ibv_get_cq_event`: the next completion event of the channel (blocking unless the program
/// made the channel's fd non-blocking): 0, or -1 with `errno` (`EAGAIN` when non-blocking and
/// none is pending).
pub(crate) unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    if !is_live(channel, Kind::Channel) || cq.is_null() || cq_context.is_null() {
        return fail_minus_one(libc::EINVAL);
    }
    // SAFETY: live channel handles are boxed Channels. Only the `channel` field is borrowed
    // (CQs of other threads count themselves in `ibv.refcnt`, see `channel_users`).
    let ch = unsafe { &*std::ptr::addr_of!((*channel.cast::<Channel>()).channel) };
    loop {
        let token = match ch.get_event() {
            Ok(t) => t,
            Err(e) => return fail_minus_one(e.raw_os_error().unwrap_or(libc::EIO)),
        };
        let p = token as usize as *mut ibv_cq;
        let Ok(c) = Cq::usable(p) else {
            // The CQ was destroyed, or is being destroyed, after the event was queued: drop
            // the stale event (the kernel drops a destroyed CQ's queued events too).
            continue;
        };
        c.events.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
        // SAFETY: the caller passes writable out-pointers.
        unsafe {
            cq.write(p);
            cq_context.write(c.ibv.cq.cq_context);
        }
        return 0;
    }
}

/// `ibv_ack_cq_events`.
pub(crate) unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    let Ok(c) = Cq::from_handle(cq) else {
        set_errno(libc::EINVAL);
        return;
    };
    let mut ev = c.events.lock().unwrap_or_else(|e| e.into_inner());
    ev.1 = ev.1.wrapping_add(nevents);
    // SAFETY: the ibv_cq is ours; programs read the counter, never write it.
    unsafe { (*cq).comp_events_completed = ev.1 };
    drop(ev);
    c.acked.notify_all();
}

/// `ibv_ack_async_event` of a CQ event.
pub(crate) fn ack_async(cq: *mut ibv_cq) {
    if let Ok(c) = Cq::from_handle(cq) {
        let n = c.async_reported.fetch_add(1, Ordering::AcqRel) + 1;
        // SAFETY: as in ibv_ack_cq_events.
        unsafe { (*cq).async_events_completed = n };
    }
}

// The ibv_start_poll API. The program serializes these calls per CQ, as the header requires.

fn cq_of<'a>(cq: *mut ibv_cq_ex) -> &'a Cq {
    // SAFETY: reached through the CQ's own table: a boxed Cq of this library.
    unsafe { &*cq.cast::<Cq>() }
}

fn advance(cq: *mut ibv_cq_ex) -> c_int {
    let c = cq_of(cq);
    let next = SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        s.clear();
        poll_spinning(c, 1, &mut s);
        s.pop()
    });
    let mut cur = c.current.lock().unwrap_or_else(|e| e.into_inner());
    *cur = next;
    match next {
        Some(wc) => {
            // SAFETY: the ibv_cq_ex is ours; its status and wr_id are the current completion.
            unsafe {
                (*cq).status = wc_status(wc.status);
                (*cq).wr_id = wc.wr_id;
            }
            0
        }
        None => libc::ENOENT,
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: `attr` is the program's readable attribute struct or NULL.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    advance(cq)
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    advance(cq)
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    *cq_of(cq).current.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

fn with_current<R: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&WorkCompletion) -> R) -> R {
    cq_of(cq)
        .current
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(f)
        .unwrap_or_default()
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> c_int {
    with_current(cq, |w| wc_opcode(w.opcode))
}
unsafe extern "C" fn read_vendor_err(_cq: *mut ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    with_current(cq, |w| w.byte_len)
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    with_current(cq, |w| flags_and_imm(w).1)
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    with_current(cq, |w| w.qp_num)
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    with_current(cq, |w| w.src_qp)
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> u32 {
    with_current(cq, |w| flags_and_imm(w).0)
}
unsafe extern "C" fn read_zero_u32(_cq: *mut ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    let c = cq_of(cq);
    with_current(cq, |w| sl_of(c, w))
}
unsafe extern "C" fn read_zero_u8(_cq: *mut ibv_cq_ex) -> u8 {
    0
}
/// When the completion was made, on the device clock (`CLOCK_MONOTONIC` ns, ticking at
/// `hca_core_clock`: what `ibv_query_rt_values_ex` reads).
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    let c = cq_of(cq);
    with_current(cq, |w| c.cq.device().clock_ns(w.timestamp))
}
/// The same instant on the wall clock (`CLOCK_REALTIME` ns): the device clock shifted by the
/// two clocks' offset now, as rdma-core converts a raw timestamp with its clock info.
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    let c = cq_of(cq);
    let mono = with_current(cq, |w| c.cq.device().clock_ns(w.timestamp));
    let clock = crate::util::clock_ns;
    let offset = clock(libc::CLOCK_REALTIME).wrapping_sub(clock(libc::CLOCK_MONOTONIC));
    mono.wrapping_add(offset)
}
