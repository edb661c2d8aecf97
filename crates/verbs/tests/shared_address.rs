//! Several devices on one address (see `softrdma::DeviceConfig::share_address`): each gets its
//! own traffic, one that closes disturbs none of the others, and a mirror of the kernel's
//! socket array that went wrong is put right. Addresses 127.0.13.x.

mod common;

use std::time::{Duration, Instant};

use common::*;
use softrdma::{wr, AhAttr, QpInitAttr, WcStatus};

/// A WRITE then a SEND from `a` to `b`, with the memory and completions checked.
fn exchange(a: &Side, b: &Side, seed: u64) {
    let data = pattern(3000, seed);
    a.mr.write(0, &data).unwrap();
    let r = b.mr.remote();
    b.qp.post_recv([wr::recv(2, vec![b.mr.sge(8192, 4096)])])
        .unwrap();
    a.qp.post_send([
        wr::write(1, vec![a.mr.sge(0, 3000)], r.at(100), r.rkey),
        wr::send(3, vec![a.mr.sge(0, 3000)]),
    ])
    .unwrap();
    let wcs = wait_wcs(&a.cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let wc = wait_one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (2, WcStatus::Success, 3000)
    );
    assert_eq!(b.mr.read_vec(100, 3000).unwrap(), data);
    assert_eq!(b.mr.read_vec(8192, 3000).unwrap(), data);
}

#[test]
fn devices_on_one_address_each_get_their_own_traffic_and_survive_a_neighbour_closing() {
    let shared = "127.0.13.1";
    let peer = open("127.0.13.2");
    let a = Side::new(shared, 16384);
    let b = Side::new(shared, 16384);
    let c = Side::new(shared, 16384);
    let slots: Vec<u8> = [&a, &b, &c]
        .iter()
        .map(|s| s.dev.shared_address().unwrap().slot)
        .collect();
    assert!(slots[0] != slots[1] && slots[1] != slots[2] && slots[0] != slots[2]);
    for (s, slot) in [&a, &b, &c].iter().zip(&slots) {
        // The slot is the QPN's top byte: that is what the kernel steers by.
        assert_eq!((s.qp.qp_num() >> 16) as u8, *slot);
    }
    let peers: Vec<Side> = (0..3).map(|_| Side::on(peer.clone(), 16384)).collect();
    for (s, p) in [&a, &b, &c].iter().zip(&peers) {
        connect(&s.qp, &p.qp);
    }
    for (i, (s, p)) in [&a, &b, &c].iter().zip(&peers).enumerate() {
        exchange(p, s, i as u64);
        exchange(s, p, 10 + i as u64);
    }

    // The middle one closes: the last socket takes its place in the kernel's array.
    drop(b);
    // The others see it gone at their next look (every 50 ms).
    let start = Instant::now();
    while a.dev.shared_address().unwrap().members != 2 {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "b is still listed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    exchange(&peers[0], &a, 20);
    exchange(&peers[2], &c, 21);

    // A newcomer gets the address too, beside the others.
    let d = Side::new(shared, 16384);
    let pd = Side::on(peer.clone(), 16384);
    connect(&d.qp, &pd.qp);
    exchange(&pd, &d, 30);
    exchange(&peers[2], &c, 31);
    exchange(&peers[0], &a, 32);
}

#[test]
fn ud_datagrams_reach_the_device_of_their_qp() {
    let shared = "127.0.13.3";
    let sender = open("127.0.13.4");
    let spd = sender.alloc_pd();
    let scq = sender.create_cq(64).unwrap();
    let sqp = spd.create_qp(&QpInitAttr::ud(&scq)).unwrap();
    sqp.ready_ud(0x1111).unwrap();
    let smr = spd.reg_mr(4096, all_access()).unwrap();
    let receivers: Vec<_> = (0..3)
        .map(|_| {
            let dev = open(shared);
            let pd = dev.alloc_pd();
            let cq = dev.create_cq(64).unwrap();
            let qp = pd.create_qp(&QpInitAttr::ud(&cq)).unwrap();
            qp.ready_ud(0x1111).unwrap();
            let mr = pd.reg_mr(4096, all_access()).unwrap();
            qp.post_recv([wr::recv(9, vec![mr.sge(0, 4096)])]).unwrap();
            (dev, cq, qp, mr)
        })
        .collect();
    let ah = spd
        .create_ah(&AhAttr::new(softrdma::Gid::from_ip(ip(shared)), 1))
        .unwrap();
    for (i, (_, _, qp, _)) in receivers.iter().enumerate() {
        smr.write(0, &[i as u8 + 1; 100]).unwrap();
        sqp.post_send([wr::ud_send(
            i as u64,
            vec![smr.sge(0, 100)],
            &ah,
            qp.qp_num(),
            0x1111,
        )])
        .unwrap();
        assert_eq!(wait_one(&scq).status, WcStatus::Success);
    }
    for (i, (_, cq, _, mr)) in receivers.iter().enumerate() {
        let wc = wait_one(cq);
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 140));
        // After the 40-byte GRH: this receiver's own datagram.
        assert_eq!(mr.read_vec(40, 100).unwrap(), vec![i as u8 + 1; 100]);
    }
}

#[test]
fn a_table_that_lost_track_of_the_kernel_is_put_right_by_the_members() {
    let shared = "127.0.13.5";
    let peer = open("127.0.13.6");
    let a = Side::new(shared, 16384);
    let b = Side::new(shared, 16384);
    let (pa, pb) = (Side::on(peer.clone(), 16384), Side::on(peer.clone(), 16384));
    connect(&a.qp, &pa.qp);
    connect(&b.qp, &pb.qp);
    exchange(&pa, &a, 1);

    // Swap the two members' indices in the table, as two deaths at once in the wrong order
    // could, and have a listen attach the program that follows: a's and b's traffic now
    // reach each other.
    let path = a.dev.shared_address().unwrap().table;
    let text = std::fs::read_to_string(&path).unwrap();
    let swapped: String = text
        .lines()
        .map(
            |l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                ["member", slot, "0", pid] => format!("member {slot} 1 {pid}\n"),
                ["member", slot, "1", pid] => format!("member {slot} 0 {pid}\n"),
                _ => format!("{l}\n"),
            },
        )
        .collect();
    assert_ne!(swapped, text);
    std::fs::write(&path, swapped).unwrap();
    let _claim = a.dev.claim_service_id(0x0106_1234).unwrap();

    // The members notice datagrams for each other, check with probes, and put it right;
    // RC's retransmissions carry the exchange through meanwhile.
    let started = Instant::now();
    exchange(&pa, &a, 2);
    exchange(&pb, &b, 3);
    eprintln!("healed after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(5));
    let healed = std::fs::read_to_string(&path).unwrap();
    let index_of = |dev: &softrdma::Device| {
        let slot = dev.shared_address().unwrap().slot.to_string();
        healed
            .lines()
            .find_map(
                |l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["member", s, i, _] if *s == slot => Some(i.to_string()),
                    _ => None,
                },
            )
            .unwrap()
    };
    assert_eq!(
        (index_of(&a.dev), index_of(&b.dev)),
        ("0".into(), "1".into())
    );
}

/// A child made by `fork` while a device is open does not keep the device's socket on the
/// address (rdma-core's rdma_cm tests fork both sides from a parent that has a device open).
/// Were its copy of the socket to stay in the kernel's array after the device closed, the
/// member the table moves into the closed one's place would sit behind that dead socket, and
/// its traffic would reach nobody.
#[test]
fn a_forked_child_keeps_no_socket_of_a_device_that_closes() {
    let shared = "127.0.13.11";
    let peer = open("127.0.13.12");
    let a = Side::new(shared, 16384);
    let b = Side::new(shared, 16384);
    let pb = Side::on(peer.clone(), 16384);
    connect(&b.qp, &pb.qp);
    exchange(&pb, &b, 1);

    // SAFETY: the child only waits for the signal that kills it (pause is
    // async-signal-safe), as a child of a multithreaded process must; the parent reaps it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        loop {
            // SAFETY: as above.
            unsafe { libc::pause() };
        }
    }
    struct Reap(libc::pid_t);
    impl Drop for Reap {
        fn drop(&mut self) {
            // SAFETY: kills and reaps the child made above.
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
                libc::waitpid(self.0, std::ptr::null_mut(), 0);
            }
        }
    }
    let _child = Reap(pid);

    // a leaves (index 0): the table moves b there, as the kernel does once a's socket closes.
    drop(a);
    exchange(&pb, &b, 2);
    exchange(&b, &pb, 3);
}

#[test]
fn listening_on_a_service_another_device_holds_is_refused() {
    let a = open("127.0.13.7");
    let b = open("127.0.13.7");
    let claim = a.claim_service_id(0x0106_4e20).unwrap();
    let err = b.claim_service_id(0x0106_4e20).unwrap_err();
    assert!(
        matches!(err, softrdma::ShareError::ServiceInUse(0x0106_4e20)),
        "{err}"
    );
    // The same device may claim it again (two listeners on one port in one process).
    let again = a.claim_service_id(0x0106_4e20).unwrap();
    drop((claim, again));
    b.claim_service_id(0x0106_4e20).unwrap();
}

/// The kernel lets only sockets of the same user into a `SO_REUSEPORT` group: another user's
/// socket binding the address as a device would is refused, so it can neither receive the
/// address's datagrams nor attach a program to steer them.
#[test]
fn another_user_cannot_join_the_address() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: becoming another user needs root");
        return;
    }
    let _dev = open("127.0.13.8");
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 4791u16.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 13, 8]).to_be(),
        },
        sin_zero: [0; 8],
    };
    // The child only makes system calls (async-signal-safe after fork in a threaded
    // process): it becomes `nobody` and binds as a device would, with SO_REUSEPORT.
    // SAFETY: fork(2); the child calls only raw system calls and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: raw system calls on values that live in this frame; _exit never returns.
        unsafe {
            if libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534) != 0
                || libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) != 0
            {
                libc::_exit(3);
            }
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
            let one: libc::c_int = 1;
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEPORT,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
            let rc = libc::bind(
                fd,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            let errno = *libc::__errno_location();
            libc::_exit(match (rc, errno) {
                (0, _) => 1,
                (_, libc::EADDRINUSE) => 0,
                _ => 2,
            });
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above; `status` is a live c_int.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(libc::WIFEXITED(status));
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "another user's bind must fail with EADDRINUSE (1: it joined; 2: another error; 3: could not become nobody)"
    );
}

/// A second device on an address shares it, with a slot of its own; one that wants the address
/// alone cannot have it. On IPv6 loopback the GID is the address itself.
#[test]
fn a_second_device_takes_its_own_slot_and_a_lone_one_is_refused() {
    let d = open("127.0.13.40");
    let again = open("127.0.13.40");
    let (a, b) = (d.shared_address().unwrap(), again.shared_address().unwrap());
    assert_ne!(a.slot, b.slot);
    assert_eq!(b.members, 2);
    let alone = softrdma::DeviceConfig::new(ip("127.0.13.40")).share_address(false);
    assert!(softrdma::Device::open(alone).is_err());
    if let Ok(d6) = softrdma::Device::open(softrdma::DeviceConfig::new(ip("::1")).port(47910)) {
        assert_eq!(d6.query_gid(1, 0).unwrap().to_string(), "::1");
        assert_eq!(d6.query_gid(1, 1).unwrap().to_string(), "::1");
    }
}
