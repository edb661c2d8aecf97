//! Device memory (`Device::alloc_dm`): the copy rules and the device's budget, and a
//! zero-based region on it that a peer WRITEs, READs and adds to, and that sends from it
//! locally, with the bytes checked through the copies. Addresses 127.0.5.70 and 127.0.5.71.

mod common;

use common::*;
use softrdma::{
    wr, AccessFlags, AllocDmError, DmCopyError, WcOpcode, WcStatus, MAX_DM_LOG_ALIGN, MAX_DM_SIZE,
};

#[test]
fn copies_in_units_of_four_inside_the_allocation_and_a_budget_per_device() {
    let dev = open("127.0.5.70");
    assert_eq!(dev.query_device().max_dm_size, MAX_DM_SIZE as u64);
    assert!(matches!(
        dev.alloc_dm(0, 0),
        Err(AllocDmError::NoSpace { asked: 0, .. })
    ));
    assert_eq!(
        dev.alloc_dm(64, MAX_DM_LOG_ALIGN + 1).unwrap_err(),
        AllocDmError::Alignment(MAX_DM_LOG_ALIGN + 1)
    );
    let dm = dev.alloc_dm(100, 6).unwrap();
    assert_eq!(dm.len(), 100);
    let mut back = [0u8; 8];
    dm.copy_from(92, &mut back).unwrap();
    assert_eq!(back, [0; 8], "allocated zeroed");
    dm.copy_to(92, b"abcdefgh").unwrap();
    dm.copy_from(92, &mut back).unwrap();
    assert_eq!(&back, b"abcdefgh");
    assert_eq!(
        dm.copy_to(1, b"abcd"),
        Err(DmCopyError::Unaligned { offset: 1, len: 4 })
    );
    assert_eq!(
        dm.copy_from(4, &mut [0u8; 3]),
        Err(DmCopyError::Unaligned { offset: 4, len: 3 })
    );
    assert_eq!(
        dm.copy_to(96, b"abcdefgh"),
        Err(DmCopyError::OutOfBounds {
            offset: 96,
            len: 8,
            dm_len: 100
        })
    );
    assert!(matches!(
        dm.copy_from(usize::MAX - 3, &mut [0u8; 4]),
        Err(DmCopyError::OutOfBounds { .. })
    ));

    // The device has MAX_DM_SIZE in all; freeing gives it back.
    let rest = dev.alloc_dm(MAX_DM_SIZE - 100, 0).unwrap();
    assert_eq!(dev.dm_in_use(), MAX_DM_SIZE);
    assert_eq!(
        dev.alloc_dm(4, 0).unwrap_err(),
        AllocDmError::NoSpace { asked: 4, left: 0 }
    );
    drop(rest);
    assert_eq!(dev.dm_in_use(), 100);
    assert!(dev.alloc_dm(4, 0).is_ok());
}

#[test]
fn a_zero_based_region_on_device_memory_carries_rdma_both_ways() {
    let (a, b) = pair("127.0.5.71", "127.0.5.71", 4096);
    let dm = b.dev.alloc_dm(1024, 0).unwrap();
    // Bytes 64..320 of the allocation, at addresses 0..256.
    let mr = b.pd.reg_dm_mr(&dm, 64, 256, all_access()).unwrap();
    assert_eq!((mr.addr(), mr.len()), (0, 256));
    assert!(b.pd.reg_dm_mr(&dm, 1000, 32, all_access()).is_err());
    let r = mr.remote();
    assert_eq!(r.addr, 0);

    // WRITE from the peer lands at allocation offset 64 + 16.
    let data = pattern(100, 9);
    a.mr.write(0, &data).unwrap();
    a.qp.post_send([wr::write(1, vec![a.mr.sge(0, 100)], r.at(16), r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    let mut back = vec![0u8; 100];
    dm.copy_from(80, &mut back).unwrap();
    assert_eq!(back, data);
    let mut before = [0u8; 16];
    dm.copy_from(64, &mut before).unwrap();
    assert_eq!(before, [0; 16], "nothing before the target");

    // READ by the peer, and FETCH_ADD on a word of the region.
    dm.copy_to(256, &7u64.to_ne_bytes()).unwrap();
    a.qp.post_send([wr::read(2, vec![a.mr.sge(1000, 100)], r.at(16), r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).opcode, WcOpcode::RdmaRead);
    assert_eq!(a.mr.read_vec(1000, 100).unwrap(), data);
    a.qp.post_send([wr::fetch_add(3, a.mr.sge(2000, 8), r.at(192), r.rkey, 5)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::Success);
    assert_eq!(a.mr.read_u64(2000).unwrap(), 7);
    let mut word = [0u8; 8];
    dm.copy_from(256, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 12);

    // Beyond the region's 256 bytes: the remote access error, nothing written.
    a.qp.post_send([wr::write(4, vec![a.mr.sge(0, 16)], r.at(248), r.rkey)])
        .unwrap();
    assert_eq!(wait_one(&a.cq).status, WcStatus::RemAccessErr);
    let mut after = [0u8; 8];
    dm.copy_from(320, &mut after).unwrap();
    assert_eq!(after, [0; 8]);

    // The region is a local source too: a SEND from it (lkey, address 0-based), on a fresh
    // pair since the error above ended that connection.
    let (c, d) = pair("127.0.5.71", "127.0.5.71", 4096);
    let dm2 = d.dev.alloc_dm(64, 0).unwrap();
    let local =
        d.pd.reg_dm_mr(&dm2, 0, 64, AccessFlags::LOCAL_WRITE)
            .unwrap();
    dm2.copy_to(0, b"sent from device memory!").unwrap();
    c.qp.post_recv([wr::recv(5, vec![c.mr.sge(0, 64)])])
        .unwrap();
    d.qp.post_send([wr::send(6, vec![local.sge(0, 24)])])
        .unwrap();
    assert_eq!(wait_one(&d.cq).status, WcStatus::Success);
    let wc = wait_one(&c.cq);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 24));
    assert_eq!(c.mr.read_vec(0, 24).unwrap(), b"sent from device memory!");

    // The memory lives as long as a region on it: the handle may go first.
    let in_use = d.dev.dm_in_use();
    drop(dm2);
    assert_eq!(d.dev.dm_in_use(), in_use);
    drop(local);
    assert_eq!(d.dev.dm_in_use(), in_use - 64);
}
