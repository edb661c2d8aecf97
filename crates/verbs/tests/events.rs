//! Completion channels, asynchronous events and caller memory at another virtual address
//! (what the C library needs for `ibv_comp_channel`, the context's `async_fd` and
//! `ibv_reg_mr_iova2`). Addresses 127.0.11.x.

mod common;

use std::io::ErrorKind;
use std::os::fd::AsRawFd;

use common::*;
use softrdma::{
    wr, AsyncEvent, AttachChannelError, CompletionChannel, QpInitAttr, WcOpcode, WcStatus,
    WorkCompletion,
};

/// poll(2) on one descriptor: whether it became readable within `ms`.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n == 1 && p.revents & libc::POLLIN != 0
}

fn set_nonblocking(fd: i32) {
    // SAFETY: fcntl on a descriptor the channel owns and keeps open.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert!(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0);
    }
}

#[test]
fn armed_cq_writes_one_event_per_arming() {
    let (a, b) = pair("127.0.11.1", "127.0.11.2", 4096);
    let ch = CompletionChannel::new().unwrap();
    let fd = ch.as_raw_fd();
    set_nonblocking(fd);
    assert_eq!(
        b.cq.req_notify(false),
        Err(AttachChannelError::NoChannel),
        "arming without a channel is refused"
    );
    b.cq.attach_channel(&ch, 0xfeed).unwrap();
    assert_eq!(
        b.cq.attach_channel(&ch, 1),
        Err(AttachChannelError::AlreadyAttached)
    );

    // Not armed: a completion makes no event.
    b.qp.post_recv([wr::recv(1, vec![b.mr.sge(0, 64)])])
        .unwrap();
    a.qp.post_send([wr::send(1, vec![a.mr.sge(0, 8)])]).unwrap();
    assert_eq!(wait_one(&b.cq).status, WcStatus::Success);
    assert!(!readable(fd, 50), "an unarmed CQ must not signal");
    assert_eq!(ch.get_event().unwrap_err().kind(), ErrorKind::WouldBlock);

    // Armed: the next completion wakes poll() and yields the token, once.
    b.cq.req_notify(false).unwrap();
    b.qp.post_recv([
        wr::recv(2, vec![b.mr.sge(0, 64)]),
        wr::recv(3, vec![b.mr.sge(0, 64)]),
    ])
    .unwrap();
    a.qp.post_send([wr::send(2, vec![a.mr.sge(0, 8)])]).unwrap();
    assert!(
        readable(fd, 5000),
        "the armed CQ's completion must wake poll()"
    );
    assert_eq!(ch.get_event().unwrap(), 0xfeed);
    assert_eq!(wait_one(&b.cq).wr_id, 2);
    a.qp.post_send([wr::send(3, vec![a.mr.sge(0, 8)])]).unwrap();
    assert_eq!(wait_one(&b.cq).wr_id, 3);
    assert!(!readable(fd, 50), "one arming gives one event");
    assert_eq!(ch.dropped(), 0);
}

#[test]
fn cq_overrun_is_an_async_event() {
    let a = Side::new("127.0.11.3", 4096);
    let b = Side::new("127.0.11.4", 4096);
    // A one-entry send CQ on a: two signaled sends overrun it.
    let small = a.dev.create_cq(1).unwrap();
    let qp = a.pd.create_qp(&QpInitAttr::rc(&small)).unwrap();
    connect(&qp, &b.qp);
    let events = a.dev.async_events().unwrap();
    assert_eq!(
        events.as_raw_fd(),
        a.dev.async_events().unwrap().as_raw_fd(),
        "one descriptor per device"
    );
    b.qp.post_recv([
        wr::recv(1, vec![b.mr.sge(0, 64)]),
        wr::recv(2, vec![b.mr.sge(0, 64)]),
    ])
    .unwrap();
    qp.post_send([
        wr::send(1, vec![a.mr.sge(0, 8)]),
        wr::send(2, vec![a.mr.sge(0, 8)]),
    ])
    .unwrap();
    wait_wcs(&b.cq, 2);
    assert!(
        readable(events.as_raw_fd(), 5000),
        "overrun must raise an async event"
    );
    assert_eq!(
        events.get_event().unwrap(),
        AsyncEvent::CqOverrun { cq: small.id() }
    );
    assert!(small.overrun());
    assert!(!readable(events.as_raw_fd(), 50), "reported once");
}

#[test]
fn raw_region_at_another_virtual_address() {
    let (a, b) = pair("127.0.11.5", "127.0.11.6", 4096);
    let mut buf = vec![0u8; 256];
    let iova = 0x10_0000_0000u64;
    // SAFETY: `buf` outlives the region (dropped at the end of the test, after `mr`), and is
    // only read after the WRITE completed.
    let mr = unsafe {
        b.pd.reg_mr_raw_iova(buf.as_mut_ptr(), buf.len(), iova, all_access())
            .unwrap()
    };
    assert_eq!(mr.addr(), iova);
    a.mr.write(0, b"at the iova").unwrap();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 11)], iova + 100, mr.rkey())])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    // Outside [iova, iova + len): refused by the responder.
    a.qp.post_send([wr::write(2, vec![a.mr.sge(0, 8)], iova + 250, mr.rkey())])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::RemAccessErr);
    drop(mr);
    assert_eq!(&buf[100..111], b"at the iova");
}

/// Tests that count what a spinner does one at a time: two ping-pongs spinning at once on a
/// 2-core machine take each other's cores for longer than a spinner's lease, and the
/// progress threads step in.
static SPINNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn spinning_alone() -> std::sync::MutexGuard<'static, ()> {
    SPINNING.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn spinning_poller_drives_the_device() {
    let _alone = spinning_alone();
    let (a, b) = pair("127.0.11.7", "127.0.11.8", 4096);
    b.qp.post_recv((0..100).map(|i| wr::recv(i, vec![b.mr.sge(0, 64)])))
        .unwrap();
    let mut out = Vec::new();
    for i in 0..100u64 {
        a.qp.post_send([wr::send(i, vec![a.mr.sge(0, 8)])]).unwrap();
        let deadline = std::time::Instant::now() + WAIT;
        while out.len() as u64 <= i {
            assert!(
                std::time::Instant::now() < deadline,
                "no completion for {i}"
            );
            b.cq.poll_progress(8, &mut out);
        }
    }
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, w)| w.wr_id == i as u64 && w.status == WcStatus::Success));
    assert_eq!(a.cq.poll_progress(0, &mut Vec::new()), 0);
}

/// Spins on `side`'s CQ (driving its device) until `n` completions arrived.
fn spin_for(side: &Side, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while out.len() < n {
        assert!(std::time::Instant::now() < deadline, "{out:?}");
        side.cq.poll_progress(n - out.len(), &mut out);
    }
    out
}

/// A connected pair for a ping-pong: each side has its first receive posted (at offset 64;
/// messages go from offset 0).
fn ping_pong_pair(a: &str, b: &str) -> (Side, Side) {
    let (a, b) = pair(a, b, 4096);
    for side in [&a, &b] {
        side.qp
            .post_recv([wr::recv(0, vec![side.mr.sge(64, 64)])])
            .unwrap();
    }
    (a, b)
}

#[test]
fn a_spinning_ping_pong_sends_each_ack_with_the_answer() {
    // Both sides spin on their CQs, repost the receive, then answer: the ACK of the message
    // just received waits for the answer and leaves in the same sendmmsg.
    let _alone = spinning_alone();
    let (a, b) = ping_pong_pair("127.0.11.11", "127.0.11.12");
    let rounds = 200u64;
    let before = [a.dev.stats().io, b.dev.stats().io];
    for i in 0..rounds {
        a.qp.post_send([wr::send(i, vec![a.mr.sge(0, 8)])]).unwrap();
        // b: the ping (and the ACK of its previous pong) ...
        let wcs = spin_for(&b, if i == 0 { 1 } else { 2 });
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        b.qp.post_recv([wr::recv(i + 1, vec![b.mr.sge(64, 64)])])
            .unwrap();
        b.qp.post_send([wr::send(i, vec![b.mr.sge(0, 8)])]).unwrap();
        // ... a: the ACK of its ping and the pong.
        let wcs = spin_for(&a, 2);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        a.qp.post_recv([wr::recv(i + 1, vec![a.mr.sge(64, 64)])])
            .unwrap();
    }
    let after = [a.dev.stats().io, b.dev.stats().io];
    let b_sent = after[1].tx_datagrams - before[1].tx_datagrams;
    let b_calls = after[1].tx_calls - before[1].tx_calls;
    // b sent a pong and an ACK per round: one call each without the wait. A retransmission,
    // or the progress thread flushing an ACK when a loaded machine kept the spinner from its
    // CQ past its lease, adds a call to some rounds (more than 20 of 200 in 2 runs of 30
    // under two busy loops on two cores), not to most.
    assert!(b_sent >= 2 * rounds, "{b_sent} datagrams");
    assert!(
        b_calls <= rounds + rounds / 2,
        "{b_calls} send calls for {b_sent} datagrams in {rounds} rounds"
    );
    let a_calls = after[0].tx_calls - before[0].tx_calls;
    // a's ACK of pong i goes with ping i + 1 (the last one on its own).
    assert!(a_calls <= rounds + rounds / 2 + 1, "{a_calls} send calls");
}

/// Whether `wcs` hold the send completion of pong `n` (an ACK delayed by load may complete
/// an earlier one with it).
fn completes_pong(wcs: &[WorkCompletion], n: u64) -> bool {
    wcs.iter()
        .any(|w| (w.opcode, w.wr_id, w.status) == (WcOpcode::Send, n, WcStatus::Success))
}

/// A spinner hands the application the answer as soon as it is placed: the ACK that came in
/// the same batch (a's ping carries the ACK of b's last pong) waits, and b's next post, once
/// its pong has gone out, handles it.
#[test]
fn a_spinner_hands_on_the_answer_before_the_ack_that_came_with_it() {
    let _alone = spinning_alone();
    let (a, b) = ping_pong_pair("127.0.11.13", "127.0.11.14");
    let rounds = 200u64;
    let mut deferred = 0;
    let mut later = Vec::new();
    for i in 0..rounds {
        // Both datagrams are in b's socket when this returns (on loopback the sender's
        // system call delivers them).
        a.qp.post_send([wr::send(i, vec![a.mr.sge(0, 8)])]).unwrap();
        let mut first = spin_for(&b, 1);
        // Under load a's progress thread may have sent the ACK of the last pong on its own
        // (a's spinner lease ran out): it then arrives first, and alone.
        let ack_alone = first[0].opcode == WcOpcode::Send;
        if ack_alone {
            assert_eq!(first[0].wr_id, i - 1);
            first = spin_for(&b, 1);
        }
        assert_eq!(
            (first[0].opcode, first[0].status),
            (WcOpcode::Recv, WcStatus::Success)
        );
        later.clear();
        let waiting = b.cq.poll(8, &mut later);
        b.qp.post_recv([wr::recv(i + 1, vec![b.mr.sge(64, 64)])])
            .unwrap();
        b.qp.post_send([wr::send(i, vec![b.mr.sge(0, 8)])]).unwrap();
        if i > 0 && !ack_alone && waiting == 0 {
            // The ACK of pong i - 1 was left for later: the post handled it. (Under load a
            // stalled side's retransmission may have brought that ACK earlier, and this one
            // is a duplicate that completes nothing.)
            later.clear();
            if b.cq.poll(8, &mut later) > 0 {
                assert!(completes_pong(&later, i - 1), "{later:?}");
                deferred += 1;
            }
        } else if i > 0 && !ack_alone {
            assert!(completes_pong(&later, i - 1), "{later:?}");
        }
        let wcs = spin_for(&a, 2);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        a.qp.post_recv([wr::recv(i + 1, vec![a.mr.sge(64, 64)])])
            .unwrap();
    }
    // b's progress thread takes the socket back when b stops spinning for 2 ms; under load
    // that may happen between rounds, and it handles the whole batch.
    assert!(
        deferred > rounds / 2,
        "the ACK waited in {deferred} of {rounds} rounds"
    );
    assert_eq!(spin_for(&b, 1)[0].wr_id, rounds - 1, "the last pong's ACK");
}

#[test]
fn wait_activity_wakes_on_a_datagram_without_a_completion() {
    let (a, b) = pair("127.0.11.9", "127.0.11.10", 4096);
    let cq = b.cq.clone();
    let waiter = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        let completed = cq.wait_activity(Some(std::time::Duration::from_secs(5)));
        (completed, start.elapsed())
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    // An RDMA WRITE lands in b's memory and completes only at a: b's CQ stays empty.
    a.mr.write(0, b"wake").unwrap();
    let r = b.mr.remote();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 4)], r.at(64), r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    let (completed, waited) = waiter.join().unwrap();
    assert!(!completed, "no completion on b's CQ");
    assert!(
        waited < std::time::Duration::from_secs(2),
        "woke after {waited:?}"
    );
    assert_eq!(b.mr.read_vec(64, 4).unwrap(), b"wake");
}

/// A spinner that stops after its completion leaves the rest of its batch (here the second
/// SEND) to the progress thread, which may have gone to sleep on the socket before the spinner
/// came and emptied it: it must still look by the end of the spinner's lease, not only when
/// the peer's tail-loss probe (5 ms) brings a duplicate.
#[test]
fn what_a_spinner_leaves_behind_is_handled_when_it_stops() {
    let _alone = spinning_alone();
    let (a, b) = pair("127.0.11.21", "127.0.11.22", 4096);
    let rounds = 60u64;
    let mut slow = Vec::new();
    for r in 0..rounds {
        b.qp.post_recv(
            (0..2).map(|i| wr::recv(r * 2 + i, vec![b.mr.sge(64 * (i as usize + 1), 64)])),
        )
        .unwrap();
        // b's lease runs out: its progress thread sleeps on the socket again.
        std::thread::sleep(std::time::Duration::from_millis(4));
        let a_qp = a.qp.clone();
        let sges = (a.mr.sge(0, 8), a.mr.sge(8, 8));
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_micros(300));
            a_qp.post_send([
                wr::send(r * 2, vec![sges.0]),
                wr::send(r * 2 + 1, vec![sges.1]),
            ])
            .unwrap();
        });
        let mut out = spin_for(&b, 1);
        sender.join().unwrap();
        // b stops driving: it only looks at its CQ.
        let stopped = std::time::Instant::now();
        while out.len() < 2 && stopped.elapsed() < WAIT {
            b.cq.poll(2 - out.len(), &mut out);
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        assert_eq!(out.len(), 2, "round {r}");
        if stopped.elapsed() > std::time::Duration::from_millis(4) {
            slow.push((r, stopped.elapsed()));
        }
        wait_wcs(&a.cq, 2);
    }
    // Left to a timer, the rest waited for a's tail-loss probe, whose delay grows with the
    // round trips it inflates: 36 to 234 ms for the slowest round. On a loaded machine a
    // round may still lose a time slice or two (4 to 12 ms).
    let e = a.dev.stats().engine;
    let slowest = slow.iter().map(|&(_, t)| t).max().unwrap_or_default();
    assert!(
        slowest < std::time::Duration::from_millis(30),
        "slow rounds: {slow:?}; a's tail probes {}, b's duplicate requests {}",
        e.tail_probes,
        b.dev.stats().engine.duplicate_requests
    );
}

/// The last waiter leaves while a spinner holds the socket; the progress thread, asleep
/// without the socket since the waiter came, must take it back when the spinner stops.
#[test]
fn a_device_keeps_receiving_after_its_waiter_and_spinner_leave() {
    let _alone = spinning_alone();
    let (a, b) = pair("127.0.11.23", "127.0.11.24", 4096);
    let other = b.dev.create_cq(16).unwrap();
    b.qp.post_recv([
        wr::recv(0, vec![b.mr.sge(0, 64)]),
        wr::recv(1, vec![b.mr.sge(64, 64)]),
    ])
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let waiter = std::thread::spawn(move || other.wait(Some(std::time::Duration::from_millis(20))));
    std::thread::sleep(std::time::Duration::from_millis(3));
    // A datagram while the waiter holds the socket: the progress thread, woken by it, goes
    // back to sleep without the socket and without a timeout.
    a.qp.post_send([wr::send(0, vec![a.mr.sge(0, 8)])]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    // b spins past the waiter's exit...
    let start = std::time::Instant::now();
    let mut out = Vec::new();
    while start.elapsed() < std::time::Duration::from_millis(25) {
        b.cq.poll_progress(8, &mut out);
    }
    assert!(!waiter.join().unwrap(), "nothing for the other CQ");
    // ...then only looks at its CQ.
    std::thread::sleep(std::time::Duration::from_millis(5));
    a.qp.post_send([wr::send(1, vec![a.mr.sge(0, 8)])]).unwrap();
    let sent = std::time::Instant::now();
    while out.len() < 2 && sent.elapsed() < WAIT {
        b.cq.poll(8, &mut out);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    assert_eq!(out.len(), 2, "both SENDs were received");
    assert_eq!(a.dev.stats().engine.retransmit_timeouts, 0);
    assert!(wait_wcs(&a.cq, 2)
        .iter()
        .all(|w| w.status == WcStatus::Success));
}
