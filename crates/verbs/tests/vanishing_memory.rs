//! Registered memory the application unmaps or protects while it is registered (issue 32,
//! item 3): softrdma pins nothing, so its accesses fail, and every operation that touches the
//! memory ends with the error a NIC gives for memory it cannot reach — never a crash of the
//! process. Over real UDP on loopback, addresses 127.0.61.x.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

mod common;

use common::{all_access, open, wait_one};
use softrdma::{
    wr, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpInitAttr, QueuePair, WcStatus,
};

const PAGE: usize = 4096;

/// Three anonymous pages whose middle one the test unmaps or protects.
struct Pages(*mut u8);

impl Pages {
    fn new() -> Pages {
        // SAFETY: an anonymous private mapping; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Pages(p.cast())
    }
    fn hole(&self) -> u64 {
        self.0 as u64 + PAGE as u64
    }
    fn unmap_middle(&self) {
        // SAFETY: the middle page of our mapping, reached only through the registration.
        assert_eq!(unsafe { libc::munmap(self.0.add(PAGE).cast(), PAGE) }, 0);
    }
    fn protect_middle(&self, prot: libc::c_int) {
        // SAFETY: as above.
        let rc = unsafe { libc::mprotect(self.0.add(PAGE).cast(), PAGE, prot) };
        assert_eq!(rc, 0);
    }
    fn register(&self, pd: &ProtectionDomain) -> MemoryRegion {
        // SAFETY: the mapping outlives the region (both live until the test ends); the
        // application touches it only through the region.
        unsafe { pd.reg_mr_raw(self.0, 3 * PAGE, all_access()) }.unwrap()
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.0.cast(), 3 * PAGE) };
    }
}

struct End {
    dev: Device,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

impl End {
    fn new(addr: &str) -> End {
        let dev = open(addr);
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(64).unwrap();
        End { dev, pd, cq }
    }
    fn qp(&self) -> QueuePair {
        self.pd.create_qp(&QpInitAttr::rc(&self.cq)).unwrap()
    }
}

/// A fresh connected pair (each failure moves its QPs to the error state).
fn pair(a: &End, b: &End) -> (QueuePair, QueuePair) {
    let (qa, qb) = (a.qp(), b.qp());
    common::connect(&qa, &qb);
    (qa, qb)
}

#[test]
fn remote_access_to_unmapped_memory_is_a_remote_access_error() {
    let (a, b) = (End::new("127.0.61.1"), End::new("127.0.61.2"));
    let local = a.pd.reg_mr(PAGE, all_access()).unwrap();
    let pages = Pages::new();
    let target = pages.register(&b.pd);
    let rkey = target.remote().rkey;
    pages.unmap_middle();
    let hole = pages.hole();
    let ops = [
        wr::write(1, vec![local.sge(0, 512)], hole + 8, rkey),
        wr::read(2, vec![local.sge(0, 512)], hole + 8, rkey),
        wr::fetch_add(3, local.sge(0, 8), hole + 8, rkey, 1),
        // A WRITE that starts in mapped memory and runs into the hole.
        wr::write(4, vec![local.sge(0, 2048)], hole - 1024, rkey),
    ];
    for op in ops {
        let id = op.wr_id;
        let (qa, _qb) = pair(&a, &b);
        qa.post_send([op]).unwrap();
        let wc = wait_one(&a.cq);
        assert_eq!(
            (wc.wr_id, wc.status),
            (id, WcStatus::RemAccessErr),
            "{wc:?}"
        );
    }
    // The rest of the region still works, and the device counted the NAKs it sent.
    let (qa, _qb) = pair(&a, &b);
    local.write(0, b"still here").unwrap();
    let start = pages.0 as u64;
    qa.post_send([wr::write(5, vec![local.sge(0, 10)], start, rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(target.read_vec(0, 10).unwrap(), b"still here");
    assert!(target.read_vec(PAGE, 8).is_err(), "the hole cannot be read");
    let naks = b
        .dev
        .stats()
        .engine
        .naks_sent_of(softrdma::NakKind::RemoteAccess);
    assert_eq!(naks, 4);
}

#[test]
fn local_access_to_unmapped_memory_is_a_local_protection_error() {
    let (a, b) = (End::new("127.0.61.3"), End::new("127.0.61.4"));
    let pages = Pages::new();
    let local = pages.register(&a.pd);
    let remote = b.pd.reg_mr(PAGE, all_access()).unwrap();
    pages.unmap_middle();
    // A SEND gathering from the hole.
    let (qa, qb) = pair(&a, &b);
    qb.post_recv([wr::recv(9, vec![remote.sge(0, 512)])])
        .unwrap();
    qa.post_send([wr::send(1, vec![local.sge(PAGE, 512)])])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::LocProtErr);
    // A READ whose response lands in the hole.
    let (qa, _qb) = pair(&a, &b);
    let r = remote.remote();
    qa.post_send([wr::read(2, vec![local.sge(PAGE + 8, 256)], r.addr, r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::LocProtErr);
}

/// A SEND into a receive buffer that was unmapped: the receiver's WQE completes with a local
/// protection error, and the sender learns of a remote operational error (as rxe answers a
/// receive it cannot place).
#[test]
fn a_receive_into_unmapped_memory_fails_on_both_sides() {
    let (a, b) = (End::new("127.0.61.5"), End::new("127.0.61.6"));
    let local = a.pd.reg_mr(PAGE, all_access()).unwrap();
    let pages = Pages::new();
    let recv = pages.register(&b.pd);
    let (qa, qb) = pair(&a, &b);
    qb.post_recv([wr::recv(7, vec![recv.sge(PAGE, 512)])])
        .unwrap();
    pages.unmap_middle();
    qa.post_send([wr::send(1, vec![local.sge(0, 100)])])
        .unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::LocProtErr));
    assert_eq!(wait_one(&a.cq).status, WcStatus::RemOpErr);
}

/// Protection instead of unmapping: a read-only page can be READ, not written; a page with
/// no access can be neither; once writable again, it works.
#[test]
fn protected_memory_allows_what_its_protection_allows() {
    let (a, b) = (End::new("127.0.61.7"), End::new("127.0.61.8"));
    let local = a.pd.reg_mr(PAGE, all_access()).unwrap();
    let pages = Pages::new();
    let target = pages.register(&b.pd);
    target.fill(PAGE, 64, 0x5a).unwrap();
    let rkey = target.remote().rkey;
    let hole = pages.hole();
    let run = |op: softrdma::SendWr| {
        let (qa, _qb) = pair(&a, &b);
        qa.post_send([op]).unwrap();
        wait_one(&a.cq).status
    };
    pages.protect_middle(libc::PROT_READ);
    let read = wr::read(1, vec![local.sge(0, 64)], hole, rkey);
    assert_eq!(run(read), WcStatus::Success);
    assert_eq!(local.read_vec(0, 64).unwrap(), vec![0x5a; 64]);
    let write = wr::write(2, vec![local.sge(0, 64)], hole, rkey);
    assert_eq!(run(write), WcStatus::RemAccessErr);
    pages.protect_middle(libc::PROT_NONE);
    assert_eq!(
        run(wr::read(3, vec![local.sge(0, 64)], hole, rkey)),
        WcStatus::RemAccessErr
    );
    pages.protect_middle(libc::PROT_READ | libc::PROT_WRITE);
    local.fill(0, 64, 0x33).unwrap();
    assert_eq!(
        run(wr::write(4, vec![local.sge(0, 64)], hole, rkey)),
        WcStatus::Success
    );
    assert_eq!(target.read_vec(PAGE, 64).unwrap(), vec![0x33; 64]);
}

/// On-demand paging in the Rust API: the implicit region (the whole address space) takes a
/// remote WRITE and READ anywhere, and an access error for a page not mapped; prefetching
/// faults pages in, fails for the unmapped one and for a range outside the region.
#[test]
fn the_implicit_region_and_prefetch() {
    let (a, b) = (End::new("127.0.61.9"), End::new("127.0.61.10"));
    let local = a.pd.reg_mr(PAGE, all_access()).unwrap();
    let pages = Pages::new();
    // SAFETY: the peer is this test, trusted with the address space; the pages are reached
    // only through the region while operations run.
    let all = unsafe { b.pd.reg_mr_implicit(all_access()) }.unwrap();
    assert_eq!((all.addr(), all.len()), (0, usize::MAX));
    let rkey = all.remote().rkey;
    let start = pages.0 as u64;
    all.prefetch(start as usize, 3 * PAGE, true).unwrap();
    let (qa, _qb) = pair(&a, &b);
    local.write(0, b"anywhere at all").unwrap();
    qa.post_send([
        wr::write(1, vec![local.sge(0, 15)], start + 100, rkey),
        wr::read(2, vec![local.sge(512, 15)], start + 100, rkey),
    ])
    .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(
        all.read_vec(start as usize + 100, 15).unwrap(),
        b"anywhere at all"
    );
    assert_eq!(local.read_vec(512, 15).unwrap(), b"anywhere at all");

    pages.unmap_middle();
    let hole = pages.hole() as usize;
    assert_eq!(
        all.prefetch(hole, PAGE, false),
        Err(softrdma::PrefetchError::Inaccessible)
    );
    qa.post_send([wr::write(3, vec![local.sge(0, 8)], hole as u64, rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::RemAccessErr);
    // A region of one page: prefetching past its end is refused.
    assert_eq!(
        local.prefetch(PAGE - 8, 16, false),
        Err(softrdma::PrefetchError::OutOfRange)
    );
    local.prefetch(0, PAGE, true).unwrap();
}

/// A WRITE whose first packet lands in mapped memory and whose rest the device receives
/// straight into the region (direct placement) — into a page unmapped under it: the kernel's
/// copy fails (EFAULT) instead of faulting, the device stops placing into that WRITE, and the
/// resent packets meet the ordinary path's access error. As without placement: a remote
/// access error at the requester, one NAK, nothing written beyond the hole's edge.
#[test]
fn a_placed_write_into_an_unmapped_page_is_a_remote_access_error() {
    let (a, b) = (End::new("127.0.61.9"), End::new("127.0.61.10"));
    let local = a.pd.reg_mr(3 * PAGE, all_access()).unwrap();
    local.fill(0, 3 * PAGE, 0x77).unwrap();
    let pages = Pages::new();
    let target = pages.register(&b.pd);
    let rkey = target.remote().rkey;
    pages.unmap_middle();
    let (qa, _qb) = pair(&a, &b);
    let start = pages.0 as u64;
    qa.post_send([wr::write(
        1,
        vec![local.sge(0, 3 * PAGE as u32)],
        start,
        rkey,
    )])
    .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemAccessErr), "{wc:?}");
    let stats = b.dev.stats();
    assert_eq!(
        stats.engine.naks_sent_of(softrdma::NakKind::RemoteAccess),
        1
    );
    assert!(
        stats.io.rx_errors >= 1,
        "the placed receive failed: {:?}",
        stats.io
    );
    assert_eq!(stats.io.rx_placed, 0);
    // The page before the hole got the FIRST; the one after it nothing.
    assert_eq!(target.read_vec(0, PAGE).unwrap(), vec![0x77; PAGE]);
    assert_eq!(target.read_vec(2 * PAGE, 16).unwrap(), vec![0; 16]);
}
