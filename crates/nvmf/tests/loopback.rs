//! Host and target over real RoCEv2 on loopback, one softrdma device per 127.0.38.x: every
//! admin and I/O command the issue lists, in-capsule data and keyed SGLs with remote
//! invalidation, rejections (NVMe-oF RDMA reject codes, Connect statuses), several hosts and
//! queues at once, malformed capsules, a host that stops sending keep alives. Again over the
//! in-process fabric, duplicating and reordering, in `over_fabric.rs`.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use softrdma::{Device, DeviceConfig, FaultConfig, QpInitAttr};
use softrdma_nvmf::backend::MemoryBackend;
use softrdma_nvmf::controller::{Namespace, Subsystem, TeardownReason};
use softrdma_nvmf::host::{Data, HostConfig, HostError, IoQueue, RemoteController};
use softrdma_nvmf::transport::{Target, TargetConfig};
use softrdma_nvmf::wire::cqe::Status;
use softrdma_nvmf::wire::fabrics::{property, CSTS_RDY, DISCOVERY_NQN};
use softrdma_nvmf::wire::identify::{self, cns};
use softrdma_nvmf::wire::log::{lid, ErrorEntry, SmartLog};
use softrdma_nvmf::wire::rdma_cm::{CmReject, CmRequest, RejectStatus};
use softrdma_nvmf::wire::sgl::SglDescriptor;
use softrdma_nvmf::wire::sqe::{admin, io, Sqe};
use softrdma_rdmacm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RdmaQpType};

const NQN: &str = "nqn.2026-12.io.softrdma:loop";
const MIB: u64 = 1 << 20;

fn subsystem(namespaces: u32, size: u64, hosts: Vec<String>) -> Subsystem {
    let ns = (1..=namespaces)
        .map(|id| {
            let b = Arc::new(MemoryBackend::new(size));
            Arc::new(Namespace::new(id, b, 512, NQN).unwrap())
        })
        .collect();
    Subsystem::new(NQN, ns, hosts).unwrap()
}

fn target_with(ip: &str, s: Subsystem) -> Target {
    let addr: SocketAddr = common::addr(&format!("{ip}:4420"));
    Target::start(TargetConfig::new(addr, vec![s])).unwrap()
}

fn host(target: &Target, src: &str) -> HostConfig {
    let mut c = HostConfig::new(target.local_addr());
    c.source = Some(common::ip(src));
    c.timeout = Duration::from_secs(10);
    c
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn sqe(opcode: u8, nsid: u32, cdw: [u32; 6]) -> Sqe {
    let mut s = Sqe::new(opcode, 0, SglDescriptor::NONE);
    s.nsid = nsid;
    s.cdw = cdw;
    s
}

/// Waits until `f` holds (or fails after `limit`).
fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn discovery_and_every_admin_command() {
    let t = target_with("127.0.38.1", subsystem(2, 8 * MIB, Vec::new()));
    let cfg = host(&t, "127.0.38.2");

    // The discovery controller: Identify, the log (header, then all), the error log.
    let d = RemoteController::connect(&cfg, DISCOVERY_NQN, 0).unwrap();
    assert_eq!(d.identify.cntrltype, identify::cntrltype::DISCOVERY);
    let log = d.discovery_log().unwrap();
    assert_eq!(log.entries.len(), 2);
    assert_eq!(log.entries[0].subnqn, NQN);
    assert_eq!(log.entries[0].traddr, "127.0.38.1");
    assert_eq!(log.entries[0].trsvcid, "4420");
    assert_eq!(log.entries[1].subnqn, DISCOVERY_NQN);
    d.shutdown().unwrap();

    let c = RemoteController::connect(&cfg, NQN, 4).unwrap();
    assert_eq!(c.io_queues, 4);
    // Properties.
    assert_eq!(c.cap & 0xffff, 127, "MQES");
    assert_eq!(c.version, 0x0001_0300);
    assert_eq!(
        c.property(property::CSTS, false).unwrap() as u32 & CSTS_RDY,
        CSTS_RDY
    );
    // Identify: controller, active namespaces, each namespace and its descriptors, CNS 6.
    assert_eq!(c.identify.subnqn, NQN);
    assert_eq!((c.identify.nn, c.identify.sgls), (2, 0x0010_0005));
    assert_eq!(c.namespaces().unwrap(), vec![1, 2]);
    let ns = c.namespace(2).unwrap();
    assert_eq!((ns.blocks, ns.block_size), (8 * MIB / 512, 512));
    let descs = c
        .admin(
            "Identify",
            sqe(admin::IDENTIFY, 2, [3, 0, 0, 0, 0, 0]),
            Data::In(4096),
        )
        .unwrap();
    let ids = identify::parse_ns_descriptors(&descs.data);
    assert_eq!(ids[0], identify::NsId::Nguid(ns.identify.nguid));
    let csi = c
        .admin(
            "Identify",
            sqe(
                admin::IDENTIFY,
                0,
                [u32::from(cns::CSI_CONTROLLER), 0, 0, 0, 0, 0],
            ),
            Data::In(4096),
        )
        .unwrap();
    assert_eq!(csi.data.len(), 4096);
    // Features: number of queues, keep alive timer, async event config, write cache.
    let q = c
        .admin(
            "Get Features",
            sqe(admin::GET_FEATURES, 0, [7, 0, 0, 0, 0, 0]),
            Data::None,
        )
        .unwrap();
    assert_eq!(q.cqe.dw0, 0x0003_0003);
    c.admin(
        "Set Features",
        sqe(admin::SET_FEATURES, 0, [0x0f, 4000, 0, 0, 0, 0]),
        Data::None,
    )
    .unwrap();
    let k = c
        .admin(
            "Get Features",
            sqe(admin::GET_FEATURES, 0, [0x0f, 0, 0, 0, 0, 0]),
            Data::None,
        )
        .unwrap();
    assert_eq!(k.cqe.dw0, 4000);
    c.admin(
        "Set Features",
        sqe(admin::SET_FEATURES, 0, [0x0b, 0x100, 0, 0, 0, 0]),
        Data::None,
    )
    .unwrap();
    let a = c
        .admin(
            "Get Features",
            sqe(admin::GET_FEATURES, 0, [0x0b, 0, 0, 0, 0, 0]),
            Data::None,
        )
        .unwrap();
    assert_eq!(a.cqe.dw0, 0x100);
    let w = c
        .admin(
            "Get Features",
            sqe(admin::GET_FEATURES, 0, [0x06, 0, 0, 0, 0, 0]),
            Data::None,
        )
        .unwrap();
    assert_eq!(w.cqe.dw0, 1);
    let hid = c
        .admin(
            "Get Features",
            sqe(admin::GET_FEATURES, 0, [0x81, 1, 0, 0, 0, 0]),
            Data::In(16),
        )
        .unwrap();
    assert_eq!(hid.data, cfg.hostid.to_vec());
    // Keep Alive.
    c.admin("Keep Alive", sqe(admin::KEEP_ALIVE, 0, [0; 6]), Data::None)
        .unwrap();
    // An error, then the error log shows it; the SMART log counts it.
    let e = c
        .admin(
            "Identify",
            sqe(admin::IDENTIFY, 7, [0, 0, 0, 0, 0, 0]),
            Data::In(4096),
        )
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::INVALID_NAMESPACE.dnr()));
    let log = c.log_page(lid::ERROR, 0, 0, 64).unwrap();
    let entry = ErrorEntry::parse(&log).unwrap();
    assert_eq!(
        (entry.status, entry.nsid, entry.sqid),
        (Status::INVALID_NAMESPACE.dnr(), 7, 0)
    );
    let smart = SmartLog::parse(&c.log_page(lid::SMART, u32::MAX, 0, 512).unwrap()).unwrap();
    assert_eq!(smart.num_err_log_entries, 1);
    let e = c.log_page(0x42, 0, 0, 512).unwrap_err();
    assert_eq!(e.status(), Some(Status::INVALID_LOG_PAGE.dnr()));
    // Asynchronous Event Requests: four are held without an answer, a fifth is over AERL;
    // the admin queue goes on serving meanwhile.
    for _ in 0..4 {
        c.async_event_request().unwrap();
    }
    let e = c
        .admin("AER", sqe(admin::ASYNC_EVENT, 0, [0; 6]), Data::None)
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::AER_LIMIT_EXCEEDED.dnr()));
    c.admin("Keep Alive", sqe(admin::KEEP_ALIVE, 0, [0; 6]), Data::None)
        .unwrap();
    let ctrl = t.registry().controllers();
    assert_eq!(ctrl.len(), 1);
    assert_eq!(ctrl[0].aers_held(), 4);
    c.shutdown().unwrap();
    eventually(
        Duration::from_secs(5),
        "the controller goes with its admin queue",
        || t.registry().controllers().is_empty(),
    );
    assert_eq!(ctrl[0].torn_down(), Some(TeardownReason::AdminQueueClosed));
}

#[test]
fn io_commands_in_capsule_keyed_and_invalidated() {
    let t = target_with("127.0.38.3", subsystem(1, 64 * MIB, Vec::new()));
    for (remote_invalidate, in_capsule) in [(false, true), (true, false), (true, true)] {
        let mut cfg = host(&t, "127.0.38.4");
        cfg.remote_invalidate = remote_invalidate;
        cfg.in_capsule = in_capsule;
        let c = RemoteController::connect(&cfg, NQN, 1).unwrap();
        let ns = c.namespace(1).unwrap();
        let mut q = c.io_queue(1).unwrap();
        // 4 KiB (in the capsule when allowed), 1 MiB (MDTS), 3 MiB (split in three).
        for (lba, len, seed) in [
            (0, 4096, 1u8),
            (100, MIB as usize, 2),
            (5000, 3 * MIB as usize, 3),
        ] {
            let data = pattern(len, seed);
            q.write(&ns, lba, &data).unwrap();
            assert!(
                q.read(&ns, lba, (len / 512) as u64).unwrap() == data,
                "{len} bytes at {lba}"
            );
        }
        // The response invalidates the key exactly when the host asked.
        let read = softrdma_nvmf::host::IoQueue::rw_sqe(io::READ, 1, 0, 8);
        let done = q.queue().execute("Read", read, Data::In(4096)).unwrap();
        assert_eq!(done.invalidated.is_some(), remote_invalidate);
        assert!(done.data == pattern(4096, 1));
        // Flush (one namespace and all), Write Zeroes (plain and deallocating), DSM.
        q.flush(1).unwrap();
        q.flush(u32::MAX).unwrap();
        q.write_zeroes(1, 2, 2, false).unwrap();
        q.write_zeroes(1, 101, 1, true).unwrap();
        q.deallocate(1, &[(6, 1), (102, 2)]).unwrap();
        let back = q.read(&ns, 0, 8).unwrap();
        let want = pattern(4096, 1);
        assert!(back[..1024] == want[..1024]);
        assert!(back[1024..2048].iter().all(|&b| b == 0), "write zeroes");
        assert!(back[2048..3072] == want[2048..3072]);
        assert!(back[3072..3584].iter().all(|&b| b == 0), "deallocated");
        let back = q.read(&ns, 100, 4).unwrap();
        let want = pattern(MIB as usize, 2);
        assert!(back[..512] == want[..512]);
        assert!(back[512..].iter().all(|&b| b == 0));
        // I/O errors through the network: past the end, an unknown namespace.
        let last = ns.blocks;
        let e = q
            .queue()
            .execute(
                "Read",
                softrdma_nvmf::host::IoQueue::rw_sqe(io::READ, 1, last, 1),
                Data::In(512),
            )
            .unwrap_err();
        assert_eq!(e.status(), Some(Status::LBA_OUT_OF_RANGE.dnr()));
        let e = q
            .queue()
            .execute(
                "Read",
                softrdma_nvmf::host::IoQueue::rw_sqe(io::READ, 9, 0, 1),
                Data::In(512),
            )
            .unwrap_err();
        assert_eq!(e.status(), Some(Status::INVALID_NAMESPACE.dnr()));
        q.disconnect();
        c.shutdown().unwrap();
    }
    let s = t.stats();
    assert_eq!((s.fatal_errors, s.rejected), (0, 0));
}

#[test]
fn wrong_nqn_wrong_host_and_bad_private_data_are_rejected() {
    let allowed = "nqn.2014-08.org.nvmexpress:uuid:allowed";
    let t = target_with("127.0.38.5", subsystem(1, 4 * MIB, vec![allowed.into()]));
    let mut cfg = host(&t, "127.0.38.6");
    // A subsystem that does not exist: Connect Invalid Parameters on the data's SUBNQN.
    let e = RemoteController::connect(&cfg, "nqn.2026-12.io.softrdma:none", 1).unwrap_err();
    match e {
        HostError::Status {
            command,
            status,
            dw0,
        } => {
            assert_eq!(command, "Connect");
            assert_eq!(status, Status::CONNECT_INVALID_PARAMETERS.dnr());
            assert_eq!(dw0, 1 << 16 | 256, "IATTR 1 (data), IPO 256 (subnqn)");
        }
        other => panic!("{other}"),
    }
    // A host the subsystem does not allow: Connect Invalid Host.
    let e = RemoteController::connect(&cfg, NQN, 1).unwrap_err();
    assert_eq!(e.status(), Some(Status::CONNECT_INVALID_HOST.dnr()));
    cfg.hostnqn = allowed.into();
    RemoteController::connect(&cfg, NQN, 1)
        .unwrap()
        .shutdown()
        .unwrap();

    // The transport's reject codes, for private data a host should not send.
    let at = t.local_addr();
    // The REQ carries 56 bytes of consumer private data whatever the host gave, zero
    // padded: 3 bytes read as HSQSIZE 0.
    let cases: [(Vec<u8>, u8, RejectStatus); 6] = [
        (vec![0, 0, 0], 16, RejectStatus::InvalidHsqsize),
        (
            CmRequest {
                recfmt: 0,
                qid: 0,
                hrqsize: 32,
                hsqsize: 31,
            }
            .emit()
            .to_vec(),
            0,
            RejectStatus::InvalidIrd,
        ),
        (
            CmRequest {
                recfmt: 1,
                qid: 0,
                hrqsize: 32,
                hsqsize: 31,
            }
            .emit()
            .to_vec(),
            16,
            RejectStatus::InvalidRecfmt,
        ),
        (
            CmRequest {
                recfmt: 0,
                qid: 500,
                hrqsize: 32,
                hsqsize: 31,
            }
            .emit()
            .to_vec(),
            16,
            RejectStatus::InvalidQid,
        ),
        (
            CmRequest {
                recfmt: 0,
                qid: 0,
                hrqsize: 64,
                hsqsize: 63,
            }
            .emit()
            .to_vec(),
            16,
            RejectStatus::InvalidHsqsize,
        ),
        (
            CmRequest {
                recfmt: 0,
                qid: 1,
                hrqsize: 8,
                hsqsize: 15,
            }
            .emit()
            .to_vec(),
            16,
            RejectStatus::InvalidHrqsize,
        ),
    ];
    for (private_data, ird, want) in cases {
        let ch = EventChannel::new();
        let id = CmId::new(&ch, PortSpace::Tcp, RdmaQpType::Rc);
        id.resolve_addr(Some(common::addr("127.0.38.6:0")), at)
            .unwrap();
        assert_eq!(
            ch.get_event(Some(Duration::from_secs(5))).unwrap().kind,
            CmEventKind::AddrResolved
        );
        id.resolve_route().unwrap();
        assert_eq!(
            ch.get_event(Some(Duration::from_secs(5))).unwrap().kind,
            CmEventKind::RouteResolved
        );
        let pd = id.pd().unwrap();
        let cq = id.device().unwrap().create_cq(16).unwrap();
        let _qp = id.create_qp(&pd, &QpInitAttr::rc(&cq)).unwrap();
        id.connect(&ConnParam {
            private_data,
            responder_resources: ird,
            ..ConnParam::rc(0)
        })
        .unwrap();
        match ch.get_event(Some(Duration::from_secs(5))).unwrap().kind {
            CmEventKind::Rejected {
                reason,
                private_data,
            } => {
                assert_eq!(reason, softrdma_rdmacm::RejectReason::ConsumerDefined);
                assert_eq!(CmReject::parse(&private_data).unwrap().status, want);
            }
            other => panic!("{want:?}: {other:?}"),
        }
    }
    let s = t.stats();
    assert_eq!(s.rejected, 6);
    assert_eq!(s.last_reject, Some(RejectStatus::InvalidHrqsize));
}

#[test]
fn several_hosts_and_queues_at_once() {
    let t = target_with("127.0.38.7", subsystem(1, 64 * MIB, Vec::new()));
    std::thread::scope(|s| {
        for (h, src) in ["127.0.38.8", "127.0.38.9", "127.0.38.10"]
            .into_iter()
            .enumerate()
        {
            let t = &t;
            s.spawn(move || {
                let cfg = host(t, src);
                let c = RemoteController::connect(&cfg, NQN, 3).unwrap();
                let ns = c.namespace(1).unwrap();
                let queues: Vec<_> = (1..=3).map(|qid| c.io_queue(qid).unwrap()).collect();
                std::thread::scope(|s| {
                    for (i, mut q) in queues.into_iter().enumerate() {
                        let ns = &ns;
                        s.spawn(move || {
                            // Each queue of each host its own 2 MiB.
                            let lba = ((h * 3 + i) as u64) * 4096;
                            let data = pattern(2 * MIB as usize, (h * 3 + i) as u8);
                            for _ in 0..3 {
                                q.write(ns, lba, &data).unwrap();
                                assert!(q.read(ns, lba, 4096).unwrap() == data);
                            }
                            q.disconnect();
                        });
                    }
                });
                c.shutdown().unwrap();
            });
        }
    });
    let s = t.stats();
    assert_eq!(s.accepted, 12, "3 hosts x (admin + 3 I/O queues)");
    assert_eq!(s.fatal_errors, 0);
    eventually(Duration::from_secs(5), "every queue closed", || {
        t.stats().queues_live == 0
    });
}

#[test]
fn malformed_capsules_get_the_status_the_spec_names() {
    let t = target_with("127.0.38.11", subsystem(1, 4 * MIB, Vec::new()));
    let cfg = host(&t, "127.0.38.12");
    let c = RemoteController::connect(&cfg, NQN, 2).unwrap();
    let mut io_q = c.io_queue(1).unwrap();
    let q = io_q.queue();
    let mut expect = |sqe: Sqe, extra: &[u8], want: Status| {
        let cid = q.submit_capsule(sqe, extra).unwrap();
        let done = q.wait(cid).unwrap();
        assert_eq!(done.cqe.status, want, "{sqe:?}");
        assert_eq!(done.cqe.sqid, 1);
    };
    let read = |dptr| {
        let mut s = softrdma_nvmf::host::IoQueue::rw_sqe(io::READ, 1, 0, 1);
        s.dptr = dptr;
        s
    };
    // PRP instead of SGL, a fused command.
    let mut prp = read(SglDescriptor::NONE);
    prp.flags = 0;
    expect(prp, &[], Status::INVALID_FIELD.dnr());
    let mut fused = read(SglDescriptor::NONE);
    fused.flags |= 1;
    expect(fused, &[], Status::INVALID_FIELD.dnr());
    // A Segment descriptor; a keyed descriptor of subtype 1; in-capsule data for a read.
    let mut seg = [0u8; 16];
    seg[15] = 0x20;
    expect(
        read(SglDescriptor::parse(&seg)),
        &[],
        Status::SGL_TYPE_INVALID.dnr(),
    );
    let keyed_offset = SglDescriptor::Keyed {
        address: 0,
        length: 512,
        key: 1,
        subtype: 1,
    };
    expect(read(keyed_offset), &[], Status::INVALID_FIELD.dnr());
    expect(
        read(SglDescriptor::in_capsule(0, 512)),
        &[0; 512],
        Status::INVALID_FIELD.dnr(),
    );
    // In-capsule data past the advertised 8 KiB; more than the capsule carried.
    let mut w = softrdma_nvmf::host::IoQueue::rw_sqe(io::WRITE, 1, 0, 1);
    w.dptr = SglDescriptor::in_capsule(8192, 512);
    expect(w, &[0; 512], Status::SGL_OFFSET_INVALID.dnr());
    w.dptr = SglDescriptor::in_capsule(0, 4096);
    expect(w, &[0; 512], Status::SGL_DATA_LENGTH_INVALID.dnr());
    // A write whose SGL disagrees with its block count; a keyed length beyond MDTS.
    w.dptr = SglDescriptor::in_capsule(0, 1024);
    expect(w, &[0; 1024], Status::SGL_DATA_LENGTH_INVALID.dnr());
    expect(
        read(SglDescriptor::keyed(0x1000, 4 << 20, 1, false)),
        &[],
        Status::INVALID_FIELD.dnr(),
    );
    // Unknown opcodes; a Property Get on an I/O queue; a second Connect.
    expect(sqe(0x7e, 1, [0; 6]), &[], Status::INVALID_OPCODE.dnr());
    let pg = softrdma_nvmf::wire::fabrics::Property {
        eight_bytes: true,
        offset: 0,
        value: 0,
    };
    expect(pg.to_sqe(false, 0), &[], Status::INVALID_OPCODE.dnr());
    // A Flush that describes data.
    let mut f = sqe(io::FLUSH, 1, [0; 6]);
    f.dptr = SglDescriptor::in_capsule(0, 16);
    expect(f, &[0; 16], Status::INVALID_FIELD.dnr());
    // Random commands (any opcode, dwords, in-capsule bytes): every one answered.
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..500 {
        let mut s = sqe(rnd() as u8, rnd() as u32 % 3, [0; 6]);
        s.flags = if rnd() % 8 == 0 { rnd() as u8 } else { 0x40 };
        for d in s.cdw.iter_mut() {
            *d = rnd() as u32;
        }
        let len = (rnd() % 600) as usize;
        s.dptr = SglDescriptor::in_capsule(rnd() % 64, len as u32);
        let cid = q.submit_capsule(s, &vec![0xa5; len]).unwrap();
        let done = q.wait(cid).unwrap();
        assert_eq!(done.cqe.cid, cid);
    }
    // The queue still works.
    let ns = c.namespace(1).unwrap();
    io_q.write(&ns, 0, &pattern(4096, 9)).unwrap();
    assert!(io_q.read(&ns, 0, 8).unwrap() == pattern(4096, 9));
    // A capsule shorter than a command ends the queue (and its controller), not the target.
    io_q.queue().send_runt(&[0x02; 40]).unwrap();
    eventually(
        Duration::from_secs(5),
        "the runt's queue is dropped",
        || t.stats().short_capsules == 1,
    );
    eventually(Duration::from_secs(5), "the controller ends", || {
        t.registry().controllers().is_empty()
    });
    assert_eq!(t.stats().fatal_errors, 1);
    drop(io_q);
    drop(c);
    // And serves the next host.
    let c = RemoteController::connect(&host(&t, "127.0.38.12"), NQN, 1).unwrap();
    c.shutdown().unwrap();
}

#[test]
fn a_host_that_stops_keeping_alive_is_cleaned_up() {
    let t = target_with("127.0.38.13", subsystem(1, 4 * MIB, Vec::new()));
    let mut cfg = host(&t, "127.0.38.14");
    cfg.kato_ms = 1000;
    let mut c = RemoteController::connect(&cfg, NQN, 1).unwrap();
    let ns = c.namespace(1).unwrap();
    let mut q = c.io_queue(1).unwrap();
    // While the keep alive thread runs, 2.5 s of idling change nothing.
    std::thread::sleep(Duration::from_millis(2500));
    q.write(&ns, 0, &pattern(4096, 4)).unwrap();
    assert_eq!(t.registry().controllers().len(), 1);
    c.stop_keep_alive();
    let stopped = Instant::now();
    eventually(Duration::from_secs(5), "keep alive expiry", || {
        t.stats().keep_alive_expired == 1
    });
    let took = stopped.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "expired after {took:?}, before the 1 s timeout"
    );
    assert!(t.registry().controllers().is_empty());
    eventually(Duration::from_secs(5), "both queues closed", || {
        t.stats().queues_live == 0
    });
    // The host's next command fails: its queues were disconnected.
    assert!(q.read(&ns, 0, 8).is_err());
}

/// 3 % of the datagrams of both devices lost: 2000 pipelined 4 KiB writes then reads (16 in
/// flight), data through windows the target invalidates with its responses, every block
/// back intact. Go-back-N retransmissions then bring the host stale copies of READ requests
/// whose key the target has since invalidated (see the engine's `rc_edges` test).
#[test]
fn io_under_loss_with_remote_invalidation() {
    let lossy = |ip: &str, seed| {
        let faults = FaultConfig {
            loss: 0.03,
            seed,
            ..FaultConfig::NONE
        };
        Device::open(common::on_network(DeviceConfig::new(ip.parse().unwrap())).faults(faults))
            .unwrap()
    };
    let mut tc = TargetConfig::new(
        "127.0.38.15:4420".parse().unwrap(),
        vec![subsystem(1, 16 * MIB, Vec::new())],
    );
    tc.device = Some(lossy("127.0.38.15", 7));
    let t = Target::start(tc).unwrap();
    let mut cfg = HostConfig::new(t.local_addr());
    cfg.device = Some(lossy("127.0.38.16", 9));
    cfg.remote_invalidate = true;
    cfg.in_capsule = false;
    cfg.timeout = Duration::from_secs(30);
    let c = RemoteController::connect(&cfg, NQN, 1).unwrap();
    let mut io_q = c.io_queue(1).unwrap();
    let q = io_q.queue();
    const N: u64 = 1000;
    for reading in [false, true] {
        let (mut next, mut done, mut inflight) = (0u64, 0u64, std::collections::HashMap::new());
        let deadline = Instant::now() + Duration::from_secs(60);
        while done < N {
            assert!(Instant::now() < deadline, "{done} of {N} done in 60 s");
            while next < N && inflight.len() < 16 {
                let data = pattern(4096, next as u8);
                let cid = if reading {
                    q.submit(IoQueue::rw_sqe(io::READ, 1, next * 8, 8), Data::In(4096))
                        .unwrap()
                } else {
                    q.submit(IoQueue::rw_sqe(io::WRITE, 1, next * 8, 8), Data::Out(&data))
                        .unwrap()
                };
                inflight.insert(cid, next);
                next += 1;
            }
            for (cid, done_cmd) in q.poll(Some(Duration::from_millis(10))).unwrap() {
                let i = inflight.remove(&cid).unwrap();
                assert!(done_cmd.cqe.status.is_success());
                assert!(
                    done_cmd.invalidated.is_some(),
                    "the target invalidated the key"
                );
                if reading {
                    assert!(done_cmd.data == pattern(4096, i as u8), "block {i}");
                }
                done += 1;
            }
        }
    }
    assert_eq!(t.stats().fatal_errors, 0);
}
