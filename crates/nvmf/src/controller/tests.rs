//! The controller without a network: sessions fed commands and data directly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::backend::MemoryBackend;
use crate::wire::cqe::Status;
use crate::wire::fabrics::{
    property, Connect, ConnectData, Property, CC_ENABLE_NVM, CC_SHN_NORMAL, CNTLID_DYNAMIC,
    CSTS_RDY, CSTS_SHST_COMPLETE,
};
use crate::wire::identify::{self, cns, IdentifyController, IdentifyNamespace, NsId};
use crate::wire::log::{lid, subtype, DiscoveryLog, ErrorEntry, SmartLog};
use crate::wire::sgl::SglDescriptor;
use crate::wire::sqe::{admin, io, Sqe};

const NQN: &str = "nqn.2026-12.io.softrdma:test";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:test-host";
/// The admin queue's Connect fields: record format 0, 32 entries, no keep alive timeout.
const ADMIN_CONNECT: Connect = Connect {
    recfmt: 0,
    qid: 0,
    sqsize: 31,
    cattr: 0,
    kato: 0,
};

#[derive(Default)]
struct Handle(AtomicUsize);

impl QueueHandle for Handle {
    fn shut_down(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn registry(allowed: Vec<String>) -> Arc<Registry> {
    let backend = Arc::new(MemoryBackend::new(1 << 20));
    let ns = Namespace::new(1, backend, 512, NQN).unwrap();
    let s = Subsystem::new(NQN, vec![Arc::new(ns)], allowed).unwrap();
    Arc::new(
        Registry::new(
            "127.0.0.1:4420".parse().unwrap(),
            vec![s],
            Limits::default(),
        )
        .unwrap(),
    )
}

struct Q {
    s: Session,
    handle: Arc<Handle>,
    now: Instant,
}

impl Q {
    fn new(reg: &Arc<Registry>, qid: u16, entries: u16) -> Q {
        let handle = Arc::new(Handle::default());
        Q {
            s: Session::new(reg.clone(), qid, entries, handle.clone()),
            handle,
            now: Instant::now(),
        }
    }

    /// Runs `sqe` with `data` (host to controller) and an SGL of `transfer_len`.
    fn run_len(&mut self, sqe: &Sqe, data: &[u8], transfer_len: u32) -> Outcome {
        if let Err(r) = self.s.precheck(sqe) {
            return Outcome::Complete(r);
        }
        let req = Request {
            sqe,
            data,
            transfer_len,
        };
        self.s.execute(&req, self.now)
    }

    fn run(&mut self, sqe: &Sqe, data: &[u8], transfer_len: u32) -> Response {
        match self.run_len(sqe, data, transfer_len) {
            Outcome::Complete(r) => r,
            Outcome::Held => panic!("held"),
        }
    }

    fn connect(&mut self, subnqn: &str, hostnqn: &str, cntlid: u16, sqsize: u16) -> Response {
        let qid = self.s.qid();
        let c = Connect {
            recfmt: 0,
            qid,
            sqsize,
            cattr: 0,
            kato: 5000,
        };
        let d = ConnectData {
            hostid: [7; 16],
            cntlid,
            subnqn: subnqn.into(),
            hostnqn: hostnqn.into(),
        };
        self.run(&c.to_sqe(1, SglDescriptor::NONE), &d.emit(), 1024)
    }

    fn prop(&mut self, set: bool, offset: u32, value: u64) -> Response {
        let p = Property {
            eight_bytes: offset == property::CAP,
            offset,
            value,
        };
        self.run(&p.to_sqe(set, 2), &[], 0)
    }

    fn admin(&mut self, opcode: u8, nsid: u32, cdw: [u32; 6], len: u32) -> Response {
        let mut sqe = Sqe::new(opcode, 3, SglDescriptor::NONE);
        sqe.nsid = nsid;
        sqe.cdw = cdw;
        self.run(&sqe, &[], len)
    }
}

/// A Property Get of `offset`, 8 bytes wide or 4.
fn get_sqe(eight_bytes: bool, offset: u32) -> Sqe {
    let p = Property {
        eight_bytes,
        offset,
        value: 0,
    };
    p.to_sqe(false, 4)
}

/// An admin queue connected to the NVM subsystem and enabled.
fn enabled_admin(reg: &Arc<Registry>) -> Q {
    let mut a = Q::new(reg, 0, 32);
    assert_eq!(
        a.connect(NQN, HOST, CNTLID_DYNAMIC, 31).status,
        Status::SUCCESS
    );
    assert_eq!(
        a.prop(true, property::CC, u64::from(CC_ENABLE_NVM)).status,
        Status::SUCCESS
    );
    a
}

/// An enabled admin queue and I/O queue 1 of `entries` connected to its controller.
fn io_queue(reg: &Arc<Registry>, entries: u16) -> (Q, Q) {
    let a = enabled_admin(reg);
    let cntlid = a.s.controller().unwrap().cntlid;
    let mut q = Q::new(reg, 1, entries);
    let r = q.connect(NQN, HOST, cntlid, entries - 1);
    assert!(r.status.is_success());
    (a, q)
}

fn rw(opcode: u8, slba: u64, nlb: u16) -> Sqe {
    let mut sqe = Sqe::new(opcode, 9, SglDescriptor::NONE);
    sqe.nsid = 1;
    sqe.cdw[0] = slba as u32;
    sqe.cdw[1] = (slba >> 32) as u32;
    sqe.cdw[2] = u32::from(nlb - 1);
    sqe
}

#[test]
fn test_admin_connect_enable_and_properties() {
    let reg = registry(Vec::new());
    let mut a = Q::new(&reg, 0, 32);
    let r = a.connect(NQN, HOST, CNTLID_DYNAMIC, 31);
    assert_eq!(r.status, Status::SUCCESS);
    let cntlid = r.dw0 as u16;
    assert_eq!(reg.controller(cntlid).unwrap().hostnqn, HOST);
    // CAP: MQES 127, CQR, TO 15, CSS NVM.
    let cap = a.prop(false, property::CAP, 0);
    assert_eq!(
        u64::from(cap.dw0) | u64::from(cap.dw1) << 32,
        0x20_0f01_007f
    );
    assert_eq!(a.prop(false, property::VS, 0).dw0, 0x0001_0300);
    assert_eq!(a.prop(false, property::CSTS, 0).dw0, 0);
    // Identify before enabling is out of sequence.
    let early = a.admin(admin::IDENTIFY, 0, [1, 0, 0, 0, 0, 0], 4096);
    assert_eq!(early.status, Status::COMMAND_SEQUENCE_ERROR.dnr());
    a.prop(true, property::CC, u64::from(CC_ENABLE_NVM));
    assert_eq!(a.prop(false, property::CC, 0).dw0, CC_ENABLE_NVM);
    assert_eq!(a.prop(false, property::CSTS, 0).dw0, CSTS_RDY);
    // A 4-byte read of CAP, a write of CSTS, an unknown offset: Invalid Field.
    let bad = get_sqe(false, property::CAP);
    assert_eq!(a.run(&bad, &[], 0).status, Status::INVALID_FIELD.dnr());
    assert_eq!(
        a.prop(true, property::CSTS, 1).status,
        Status::INVALID_FIELD.dnr()
    );
    assert_eq!(a.prop(false, 0x40, 0).status, Status::INVALID_FIELD.dnr());
    // Shutdown: SHST complete at once.
    a.prop(true, property::CC, u64::from(CC_ENABLE_NVM | CC_SHN_NORMAL));
    assert_eq!(
        a.prop(false, property::CSTS, 0).dw0 & 0xc,
        CSTS_SHST_COMPLETE
    );
}

#[test]
fn test_connect_rejections_name_the_field() {
    let reg = registry(vec![HOST.into()]);
    let mut a = Q::new(&reg, 0, 32);
    // A subsystem that does not exist: Invalid Parameters, the data's SUBNQN (offset 256).
    let r = a.connect("nqn.2026-12.io.softrdma:nobody", HOST, CNTLID_DYNAMIC, 31);
    assert_eq!(r.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
    assert_eq!(r.dw0, 0x0001_0100);
    // A host not on the list: Invalid Host, the data's HOSTNQN (offset 512).
    let r = a.connect(
        NQN,
        "nqn.2014-08.org.nvmexpress:uuid:stranger",
        CNTLID_DYNAMIC,
        31,
    );
    assert_eq!(r.status, Status::CONNECT_INVALID_HOST.dnr());
    assert_eq!(r.dw0, 0x0001_0200);
    // A static controller id on the admin queue.
    let r = a.connect(NQN, HOST, 5, 31);
    assert_eq!(
        (r.status, r.dw0),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 0x0001_0010)
    );
    // SQSIZE beyond the admin queue's 32 entries, and 0.
    for sqsize in [32, 0] {
        let r = a.connect(NQN, HOST, CNTLID_DYNAMIC, sqsize);
        assert_eq!(
            (r.status, r.dw0),
            (Status::CONNECT_INVALID_PARAMETERS.dnr(), 44)
        );
    }
    // Connect data of the wrong length.
    let c = ADMIN_CONNECT;
    let r = a.run(&c.to_sqe(1, SglDescriptor::NONE), &[0; 512], 512);
    assert_eq!(r.status, Status::SGL_DATA_LENGTH_INVALID.dnr());
    // Record format 1.
    let r = a.run(
        &Connect { recfmt: 1, ..c }.to_sqe(1, SglDescriptor::NONE),
        &[0; 1024],
        1024,
    );
    assert_eq!(r.status, Status::CONNECT_INCOMPATIBLE_FORMAT.dnr());
    assert!(reg.controllers().is_empty(), "no controller was made");
    // A command other than Connect first.
    let r = a.admin(admin::IDENTIFY, 0, [1, 0, 0, 0, 0, 0], 4096);
    assert_eq!(r.status, Status::COMMAND_SEQUENCE_ERROR.dnr());
    // And then it works, once; a second Connect on the queue is "busy".
    assert!(a.connect(NQN, HOST, CNTLID_DYNAMIC, 31).status.is_success());
    let r = a.connect(NQN, HOST, CNTLID_DYNAMIC, 31);
    assert_eq!(r.status, Status::CONNECT_CONTROLLER_BUSY.dnr());
}

#[test]
fn test_io_queue_connect() {
    let reg = registry(Vec::new());
    let mut a = Q::new(&reg, 0, 32);
    let cntlid = a.connect(NQN, HOST, CNTLID_DYNAMIC, 31).dw0 as u16;
    // Before CC.EN: out of sequence.
    let mut q1 = Q::new(&reg, 1, 128);
    let r = q1.connect(NQN, HOST, cntlid, 127);
    assert_eq!(r.status, Status::COMMAND_SEQUENCE_ERROR.dnr());
    a.prop(true, property::CC, u64::from(CC_ENABLE_NVM));
    // Two I/O queues granted.
    let r = a.admin(admin::SET_FEATURES, 0, [0x07, 0x0001_0001, 0, 0, 0, 0], 0);
    assert_eq!((r.status, r.dw0), (Status::SUCCESS, 0x0001_0001));
    let r = a.admin(admin::GET_FEATURES, 0, [0x07, 0, 0, 0, 0, 0], 0);
    assert_eq!(r.dw0, 0x0001_0001);
    // Wrong controller id, wrong host: the data's CNTLID.
    let r = q1.connect(NQN, HOST, cntlid + 1, 127);
    assert_eq!(
        (r.status, r.dw0),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 0x0001_0010)
    );
    let r = q1.connect(NQN, "nqn.2014-08.org.nvmexpress:uuid:other", cntlid, 127);
    assert_eq!(r.dw0, 0x0001_0010);
    assert!(q1.connect(NQN, HOST, cntlid, 127).status.is_success());
    // Queue 3 of 2: the command's QID (offset 42).
    let mut q3 = Q::new(&reg, 3, 128);
    let r = q3.connect(NQN, HOST, cntlid, 127);
    assert_eq!(
        (r.status, r.dw0),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 42)
    );
    // Queue 1 again, on another connection: busy.
    let mut again = Q::new(&reg, 1, 128);
    assert_eq!(
        again.connect(NQN, HOST, cntlid, 127).status,
        Status::CONNECT_CONTROLLER_BUSY.dnr()
    );
    assert_eq!(reg.controller(cntlid).unwrap().queues(), vec![0, 1]);
    // The admin queue goes: the controller and its I/O queue with it.
    a.s.close(false);
    assert_eq!(
        q1.handle.0.load(Ordering::SeqCst),
        1,
        "queue 1 told to close"
    );
    assert!(reg.controller(cntlid).is_none());
    assert_eq!(
        reg.subsystems()[0]
            .counters
            .unsafe_shutdowns
            .load(Ordering::Relaxed),
        1
    );
}

#[test]
fn test_identify() {
    let reg = registry(Vec::new());
    let mut a = enabled_admin(&reg);
    let r = a.admin(
        admin::IDENTIFY,
        0,
        [cns::CONTROLLER.into(), 0, 0, 0, 0, 0],
        4096,
    );
    let c = IdentifyController::parse(&r.data).unwrap();
    assert_eq!(c.subnqn, NQN);
    assert_eq!(
        (c.nn, c.mdts, c.sqes, c.cqes, c.maxcmd),
        (1, 8, 0x66, 0x44, 128)
    );
    assert_eq!((c.ioccsz, c.iorcsz, c.icdoff), ((64 + 8192) / 16, 1, 0));
    assert_eq!(c.sgls, 0x0010_0005, "SGLs, keyed, in-capsule offsets");
    assert_eq!(
        (c.kas, c.cntrltype, c.oncs),
        (10, identify::cntrltype::IO, 0x0c)
    );
    let r = a.admin(
        admin::IDENTIFY,
        1,
        [cns::NAMESPACE.into(), 0, 0, 0, 0, 0],
        4096,
    );
    let ns = IdentifyNamespace::parse(&r.data).unwrap();
    assert_eq!(
        (ns.nsze, ns.block_size(), ns.nmic, ns.dlfeat),
        (2048, 512, 1, 9)
    );
    let r = a.admin(
        admin::IDENTIFY,
        0,
        [cns::ACTIVE_NS_LIST.into(), 0, 0, 0, 0, 0],
        4096,
    );
    assert_eq!(identify::parse_ns_list(&r.data), vec![1]);
    let r = a.admin(
        admin::IDENTIFY,
        1,
        [cns::ACTIVE_NS_LIST.into(), 0, 0, 0, 0, 0],
        4096,
    );
    assert!(identify::parse_ns_list(&r.data).is_empty());
    let r = a.admin(
        admin::IDENTIFY,
        1,
        [cns::NS_DESCRIPTORS.into(), 0, 0, 0, 0, 0],
        4096,
    );
    let ids = identify::parse_ns_descriptors(&r.data);
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], NsId::Nguid(ns.nguid));
    let r = a.admin(
        admin::IDENTIFY,
        0,
        [cns::CSI_CONTROLLER.into(), 0, 0, 0, 0, 0],
        4096,
    );
    assert!(r.data.len() == 4096 && r.data.iter().all(|&b| b == 0));
    // Errors: namespace 0, namespace 2 (beyond NN), an unknown CNS, a short SGL.
    let r = a.admin(admin::IDENTIFY, 0, [0, 0, 0, 0, 0, 0], 4096);
    assert_eq!(r.status, Status::INVALID_NAMESPACE.dnr());
    let r = a.admin(admin::IDENTIFY, 2, [0, 0, 0, 0, 0, 0], 4096);
    assert_eq!(r.status, Status::INVALID_NAMESPACE.dnr());
    let r = a.admin(admin::IDENTIFY, 0, [0x15, 0, 0, 0, 0, 0], 4096);
    assert_eq!(r.status, Status::INVALID_FIELD.dnr());
    let r = a.admin(admin::IDENTIFY, 0, [1, 0, 0, 0, 0, 0], 512);
    assert_eq!(r.status, Status::SGL_DATA_LENGTH_INVALID.dnr());
    // Unknown admin opcodes.
    assert_eq!(
        a.admin(0x80, 0, [0; 6], 0).status,
        Status::INVALID_OPCODE.dnr()
    );
}

#[test]
fn test_logs_features_keep_alive_aer() {
    let reg = registry(Vec::new());
    let mut a = enabled_admin(&reg);
    let ctrl = a.s.controller().unwrap().clone();
    // One failed command goes to the error log.
    let r = a.admin(admin::IDENTIFY, 9, [0, 0, 0, 0, 0, 0], 4096);
    assert!(!r.status.is_success());
    // Error log: one 64-byte entry asked for (NUMD 15).
    let r = a.admin(
        admin::GET_LOG_PAGE,
        0,
        [u32::from(lid::ERROR) | 15 << 16, 0, 0, 0, 0, 0],
        64,
    );
    let e = ErrorEntry::parse(&r.data).unwrap();
    assert_eq!(
        (e.error_count, e.cid, e.status, e.nsid),
        (1, 3, Status::INVALID_NAMESPACE.dnr(), 9)
    );
    // SMART: 512 bytes (NUMD 127), after a write and a read.
    let mut q1 = Q::new(&reg, 1, 128);
    q1.connect(NQN, HOST, ctrl.cntlid, 127);
    q1.run(&rw(io::WRITE, 0, 2), &[1; 1024], 1024);
    q1.run(&rw(io::READ, 0, 1), &[], 512);
    let r = a.admin(
        admin::GET_LOG_PAGE,
        u32::MAX,
        [u32::from(lid::SMART) | 127 << 16, 0, 0, 0, 0, 0],
        512,
    );
    let s = SmartLog::parse(&r.data).unwrap();
    assert_eq!(
        (
            s.host_reads,
            s.host_writes,
            s.data_units_read,
            s.data_units_written
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(s.num_err_log_entries, 1);
    // An unknown log page; the discovery log on an I/O controller; NUMD and SGL disagreeing.
    let r = a.admin(
        admin::GET_LOG_PAGE,
        0,
        [0x42 | 127 << 16, 0, 0, 0, 0, 0],
        512,
    );
    assert_eq!(r.status, Status::INVALID_LOG_PAGE.dnr());
    let r = a.admin(
        admin::GET_LOG_PAGE,
        0,
        [0x70 | 255 << 16, 0, 0, 0, 0, 0],
        1024,
    );
    assert_eq!(r.status, Status::INVALID_LOG_PAGE.dnr());
    let r = a.admin(admin::GET_LOG_PAGE, 0, [2 | 127 << 16, 0, 0, 0, 0, 0], 4096);
    assert_eq!(r.status, Status::SGL_DATA_LENGTH_INVALID.dnr());
    // Keep alive timer: set, read back; Set Features saved: not saveable.
    assert!(a
        .admin(admin::SET_FEATURES, 0, [0x0f, 2000, 0, 0, 0, 0], 0)
        .status
        .is_success());
    assert_eq!(
        a.admin(admin::GET_FEATURES, 0, [0x0f, 0, 0, 0, 0, 0], 0)
            .dw0,
        2000
    );
    let r = a.admin(
        admin::SET_FEATURES,
        0,
        [0x0f | 1 << 31, 2000, 0, 0, 0, 0],
        0,
    );
    assert_eq!(r.status, Status::FEATURE_NOT_SAVEABLE.dnr());
    let r = a.admin(admin::GET_FEATURES, 0, [0x42, 0, 0, 0, 0, 0], 0);
    assert_eq!(r.status, Status::INVALID_FIELD.dnr());
    // Host identifier: the Connect's, 16 bytes with EXHID.
    let r = a.admin(admin::GET_FEATURES, 0, [0x81, 1, 0, 0, 0, 0], 16);
    assert_eq!(r.data, vec![7; 16]);
    // Keep Alive, Abort.
    assert!(a.admin(admin::KEEP_ALIVE, 0, [0; 6], 0).status.is_success());
    assert_eq!(a.admin(admin::ABORT, 0, [0; 6], 0).dw0, 1);
    // Four asynchronous event requests are held, the fifth is over the limit.
    let aer = Sqe::new(admin::ASYNC_EVENT, 20, SglDescriptor::NONE);
    for _ in 0..4 {
        assert_eq!(a.run_len(&aer, &[], 0), Outcome::Held);
    }
    assert_eq!(a.run(&aer, &[], 0).status, Status::AER_LIMIT_EXCEEDED.dnr());
    assert_eq!(ctrl.aers_held(), 4);
    // Checked once per timeout, as nvmet does: the first window (2 s from the Set
    // Features) saw commands, the second sees none and ends the controller.
    let ms = |n| a.now + Duration::from_millis(n);
    assert_eq!(reg.reap_expired(ms(1900)), 0, "the window is not over");
    assert_eq!(
        reg.reap_expired(ms(2100)),
        0,
        "commands came: a new window begins"
    );
    assert_eq!(reg.reap_expired(ms(4000)), 0, "the new window is not over");
    assert_eq!(reg.reap_expired(ms(4200)), 1, "no command in it");
    assert_eq!(ctrl.torn_down(), Some(TeardownReason::KeepAliveExpired));
    assert_eq!(a.handle.0.load(Ordering::SeqCst), 1);
    assert_eq!(q1.handle.0.load(Ordering::SeqCst), 1);
    assert!(reg.controllers().is_empty());
}

#[test]
fn test_discovery_controller() {
    let reg = registry(vec![HOST.into()]);
    let mut a = Q::new(&reg, 0, 32);
    let c = ADMIN_CONNECT;
    let d = ConnectData {
        hostid: [1; 16],
        cntlid: CNTLID_DYNAMIC,
        subnqn: crate::wire::fabrics::DISCOVERY_NQN.into(),
        hostnqn: HOST.into(),
    };
    assert!(a
        .run(&c.to_sqe(0, SglDescriptor::NONE), &d.emit(), 1024)
        .status
        .is_success());
    let ctrl = a.s.controller().unwrap().clone();
    assert_eq!(
        ctrl.kato_ms(),
        DISCOVERY_KATO_MS,
        "a discovery host without KATO still times out"
    );
    a.prop(true, property::CC, u64::from(CC_ENABLE_NVM));
    let r = a.admin(admin::IDENTIFY, 0, [1, 0, 0, 0, 0, 0], 4096);
    let id = IdentifyController::parse(&r.data).unwrap();
    assert_eq!((id.cntrltype, id.nn), (identify::cntrltype::DISCOVERY, 0));
    // The header alone (NUMD 255: 1024 bytes), then all of it.
    let r = a.admin(
        admin::GET_LOG_PAGE,
        0,
        [0x70 | 255 << 16, 0, 0, 0, 0, 0],
        1024,
    );
    assert_eq!(DiscoveryLog::parse_header(&r.data).unwrap(), (1, 2));
    let r = a.admin(
        admin::GET_LOG_PAGE,
        0,
        [0x70 | 767 << 16, 0, 0, 0, 0, 0],
        3072,
    );
    let log = DiscoveryLog::parse(&r.data).unwrap();
    assert_eq!(log.entries[0].subnqn, NQN);
    assert_eq!(log.entries[0].subtype, subtype::NVM);
    assert_eq!(
        (
            log.entries[0].traddr.as_str(),
            log.entries[0].trsvcid.as_str()
        ),
        ("127.0.0.1", "4420")
    );
    assert_eq!(log.entries[1].subtype, subtype::CURRENT_DISCOVERY);
    // An entry at an offset (LPOL 1024).
    let r = a.admin(
        admin::GET_LOG_PAGE,
        0,
        [0x70 | 255 << 16, 0, 1024, 0, 0, 0],
        1024,
    );
    assert_eq!(&r.data[256..256 + NQN.len()], NQN.as_bytes());
    let r = a.admin(
        admin::GET_LOG_PAGE,
        0,
        [0x70 | 255 << 16, 0, 2, 0, 0, 0],
        1024,
    );
    assert_eq!(
        r.status,
        Status::INVALID_FIELD.dnr(),
        "an offset not dword aligned"
    );
    // No namespaces, no I/O queues.
    let r = a.admin(admin::IDENTIFY, 1, [0, 0, 0, 0, 0, 0], 4096);
    assert_eq!(r.status, Status::INVALID_FIELD.dnr());
    let mut q1 = Q::new(&reg, 1, 32);
    let r = q1.connect(crate::wire::fabrics::DISCOVERY_NQN, HOST, ctrl.cntlid, 31);
    assert_eq!(
        (r.status, r.dw0),
        (Status::CONNECT_INVALID_PARAMETERS.dnr(), 42)
    );
    // A host not allowed into the NVM subsystem does not see it.
    let mut other = Q::new(&reg, 0, 32);
    let d = ConnectData {
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:x".into(),
        ..d
    };
    other.run(&c.to_sqe(0, SglDescriptor::NONE), &d.emit(), 1024);
    other.prop(true, property::CC, u64::from(CC_ENABLE_NVM));
    let r = other.admin(
        admin::GET_LOG_PAGE,
        0,
        [0x70 | 255 << 16, 0, 0, 0, 0, 0],
        1024,
    );
    assert_eq!(DiscoveryLog::parse_header(&r.data).unwrap(), (1, 1));
}

#[test]
fn test_io_commands() {
    let reg = registry(Vec::new());
    let (_a, mut q) = io_queue(&reg, 128);
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    assert!(q
        .run(&rw(io::WRITE, 10, 8), &data, 4096)
        .status
        .is_success());
    let r = q.run(&rw(io::READ, 10, 8), &[], 4096);
    assert!(r.status.is_success() && r.data == data);
    // FUA write, flush one namespace and all of them.
    let mut fua = rw(io::WRITE, 0, 1);
    fua.cdw[2] |= 1 << 30;
    assert!(q.run(&fua, &[5; 512], 512).status.is_success());
    let mut flush = Sqe::new(io::FLUSH, 1, SglDescriptor::NONE);
    flush.nsid = 1;
    assert!(q.run(&flush, &[], 0).status.is_success());
    flush.nsid = u32::MAX;
    assert!(q.run(&flush, &[], 0).status.is_success());
    flush.nsid = 2;
    assert_eq!(
        q.run(&flush, &[], 0).status,
        Status::INVALID_NAMESPACE.dnr()
    );
    // Write Zeroes over blocks 11..13, then a deallocating one over block 16.
    let mut wz = rw(io::WRITE_ZEROES, 11, 2);
    assert!(q.run(&wz, &[], 0).status.is_success());
    wz = rw(io::WRITE_ZEROES, 16, 1);
    wz.cdw[2] |= 1 << 25;
    assert!(q.run(&wz, &[], 0).status.is_success());
    let r = q.run(&rw(io::READ, 10, 8), &[], 4096);
    assert!(r.data[..512] == data[..512]);
    assert!(r.data[512..1536].iter().all(|&b| b == 0));
    assert!(r.data[1536..3072] == data[1536..3072]);
    assert!(r.data[3072..3584].iter().all(|&b| b == 0));
    assert!(r.data[3584..] == data[3584..]);
    // Dataset Management: deallocate blocks 10 and 17 (two ranges).
    let mut ranges = vec![0u8; 32];
    ranges[4..8].copy_from_slice(&1u32.to_le_bytes());
    ranges[8..16].copy_from_slice(&10u64.to_le_bytes());
    ranges[20..24].copy_from_slice(&1u32.to_le_bytes());
    ranges[24..32].copy_from_slice(&17u64.to_le_bytes());
    let mut dsm = Sqe::new(io::DSM, 1, SglDescriptor::NONE);
    dsm.nsid = 1;
    dsm.cdw[0] = 1;
    dsm.cdw[1] = 1 << 2;
    assert!(q.run(&dsm, &ranges, 32).status.is_success());
    let r = q.run(&rw(io::READ, 10, 8), &[], 4096);
    assert!(r.data[..512].iter().all(|&b| b == 0));
    assert!(r.data[3584..].iter().all(|&b| b == 0));
    assert!(r.data[1536..3072] == data[1536..3072]);
    // Errors: past the end, SGL length disagreeing, beyond MDTS, unknown namespace, opcode.
    let r = q.run(&rw(io::READ, 2047, 2), &[], 1024);
    assert_eq!((r.status, r.lba), (Status::LBA_OUT_OF_RANGE.dnr(), 2047));
    let r = q.run(&rw(io::READ, u64::MAX, 2), &[], 1024);
    assert_eq!(r.status, Status::LBA_OUT_OF_RANGE.dnr(), "no overflow");
    let r = q.run(&rw(io::WRITE, 0, 8), &data, 512);
    assert_eq!(r.status, Status::SGL_DATA_LENGTH_INVALID.dnr());
    let r = q.run(&rw(io::READ, 0, 2048), &[], 1 << 20);
    assert!(r.status.is_success(), "1 MiB is MDTS");
    let mut bad_ns = rw(io::READ, 0, 1);
    bad_ns.nsid = 3;
    assert_eq!(
        q.run(&bad_ns, &[], 512).status,
        Status::INVALID_NAMESPACE.dnr()
    );
    let r = q.run(&Sqe::new(0x05, 1, SglDescriptor::NONE), &[], 0);
    assert_eq!(r.status, Status::INVALID_OPCODE.dnr());
    let r = q.run(&dsm, &ranges[..16], 16);
    assert_eq!(
        r.status,
        Status::SGL_DATA_LENGTH_INVALID.dnr(),
        "two ranges announced, one sent"
    );
    // Reserved flags: FUSE and PRP data pointers.
    let mut fused = rw(io::READ, 0, 1);
    fused.flags |= 1;
    assert_eq!(q.run(&fused, &[], 512).status, Status::INVALID_FIELD.dnr());
    let mut prp = rw(io::READ, 0, 1);
    prp.flags = 0;
    assert_eq!(q.run(&prp, &[], 512).status, Status::INVALID_FIELD.dnr());
    // Property Get on an I/O queue.
    let get_cap = get_sqe(true, property::CAP);
    assert_eq!(q.run(&get_cap, &[], 0).status, Status::INVALID_OPCODE.dnr());
}

#[test]
fn test_sq_head_wraps_at_the_queue_size() {
    let reg = registry(Vec::new());
    let (_a, mut q) = io_queue(&reg, 4);
    let heads: Vec<u16> = (0..5)
        .map(|_| {
            let r = q.run(&rw(io::READ, 0, 1), &[], 512);
            q.s.cqe(9, &r).sqhd
        })
        .collect();
    assert_eq!(heads, vec![2, 3, 0, 1, 2]);
}
