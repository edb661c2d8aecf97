//! The body of the `engine_wr_packet` fuzz target, shared by cargo-fuzz (`fuzz_targets/`) and
//! the stable-toolchain harness in `crates/proto/tests/fuzz_engine.rs`.
//!
//! The input is a script. Two engines, A and B, each with one RC QP connected to the other
//! and memory regions placed to provoke arithmetic trouble (one ends at the top of the
//! address space), run it: the bytes choose work requests with hostile operands (addresses
//! near `u64::MAX`, lengths near `u32::MAX`, wrong and stale keys, inline data, any flags),
//! deliver the packets the engines produce — mutated (bit flips, extreme values in header
//! fields, truncation, a foreign source), dropped, duplicated — forge packets of any opcode,
//! change QP states, deregister and re-register regions, and move time forward.
//!
//! Beyond "no panic", it checks what must hold whatever the peer and the application do:
//! every completion names a work request that was posted and not yet completed (no ghost or
//! duplicate completions); a region without local or remote write rights never changes;
//! producing output always ends (an engine with nothing new to do runs dry).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use softrdma_proto::{
    AccessFlags, AddressVector, CqHandle, DatagramMeta, Duration, Engine, EngineConfig, Instant,
    Mtu, PdHandle, QpAttr, QpCaps, QpState, QpType, RecvWr, RegionMemory, SendFlags, SendOp,
    SendWr, Sge, VecMemory, WcOpcode, WorkCompletion,
};
use softrdma_wire::{
    emit_headers, packet_len, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ExtHeaders, Feth, Headers,
    Ieth, ImmDt, Opcode, Psn, Reth, Syndrome, Xrceth, ICRC_LEN,
};

/// Script steps per input, at most: a bound on the work one input can cause.
const MAX_STEPS: usize = 400;
/// Packets one engine may produce in one flush before the harness calls it a livelock. The
/// largest message is a few of the small regions below at the smallest MTU.
const MAX_PACKETS_PER_FLUSH: usize = 20_000;
const PSN_A: u32 = 0xff_fff0; // crosses the 24-bit wrap soon
const PSN_B: u32 = 0x00_1234;

/// Reads the script: every read succeeds, with zeros once the input is used up.
struct Script<'a> {
    data: &'a [u8],
    at: usize,
}

impl Script<'_> {
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.u8()) % n.max(1)
    }
    fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
    /// `n` bytes of payload, from one byte of the script (payload contents matter little;
    /// script bytes are better spent on decisions).
    fn payload(&mut self, n: usize) -> Vec<u8> {
        let seed = self.u8();
        (0..n).map(|k| seed ^ (k as u8).wrapping_mul(31)).collect()
    }
}

/// One registered region as the harness knows it.
struct Region {
    key: u32,
    iova: u64,
    len: u64,
    access: AccessFlags,
    mem: Arc<VecMemory>,
    /// Contents that must never change (a region without write rights).
    frozen: Option<Vec<u8>>,
    live: bool,
}

struct Side {
    engine: Engine,
    pd: PdHandle,
    cq: CqHandle,
    qpn: u32,
    ip: IpAddr,
    regions: Vec<Region>,
    /// Keys this side's regions had before re-registration (stale keys to try).
    stale_keys: Vec<u32>,
    sends: BTreeSet<u64>,
    recvs: BTreeSet<u64>,
    /// Packets sent and not yet delivered: (source, bytes).
    outbox: Vec<(SocketAddr, Vec<u8>)>,
}

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + i as u8))
}

/// Regions of each side: (iova, length, access). The second ends at `u64::MAX` (the last address a region may reach); the third
/// grants nothing that writes (its contents are frozen).
fn region_specs() -> [(u64, u64, AccessFlags); 4] {
    [
        (0x1000, 8192, AccessFlags::all()),
        (u64::MAX - 4096, 4096, AccessFlags::all()),
        (0x10_0000, 256, AccessFlags::REMOTE_READ),
        (0x20_0000, 64, AccessFlags::LOCAL_WRITE),
    ]
}

impl Side {
    fn new(i: usize) -> Side {
        let mut engine = Engine::new(EngineConfig {
            verify_icrc: false,
            key_seed: 0x5eed + i as u64,
            ..EngineConfig::new(ip(i))
        });
        let pd = engine.alloc_pd();
        let cq = engine.create_cq(1 << 16);
        let mut regions = Vec::new();
        for (k, (iova, len, access)) in region_specs().into_iter().enumerate() {
            let fill: Vec<u8> = (0..len).map(|b| (b as u8) ^ (k as u8 * 0x35)).collect();
            let mem = Arc::new(VecMemory::from_vec(fill.clone()));
            let key = engine
                .reg_mr(pd, iova, len, access, mem.clone())
                .expect("valid region");
            let writable = access.contains(AccessFlags::LOCAL_WRITE);
            regions.push(Region {
                key,
                iova,
                len,
                access,
                mem,
                frozen: (!writable).then_some(fill),
                live: true,
            });
        }
        let qpn = engine
            .create_qp(pd, cq, cq, QpType::Rc, QpCaps::default())
            .expect("valid QP");
        Side {
            engine,
            pd,
            cq,
            qpn,
            ip: ip(i),
            regions,
            stale_keys: Vec::new(),
            sends: BTreeSet::new(),
            recvs: BTreeSet::new(),
            outbox: Vec::new(),
        }
    }

    fn connect(&mut self, peer_qpn: u32, peer_ip: IpAddr, mtu: Mtu, rq: u32, sq: u32) {
        let e = &mut self.engine;
        e.modify_qp(self.qpn, &QpAttr::rc_init(AccessFlags::all()))
            .expect("INIT");
        let av = AddressVector {
            dest_ip: peer_ip,
            traffic_class: 0,
            hop_limit: 64,
        };
        e.modify_qp(
            self.qpn,
            &QpAttr::rc_rtr(mtu, av, peer_qpn, Psn::new(rq), 4, 1),
        )
        .expect("RTR");
        e.modify_qp(self.qpn, &QpAttr::rc_rts(Psn::new(sq), 4, 3, 3, 4))
            .expect("RTS");
    }

    /// Moves everything the engine has to send into the outbox.
    fn flush(&mut self, now: Instant) {
        let mut buf = Vec::new();
        let mut n = 0;
        while let Some(t) = self.engine.poll_transmit(now, &mut buf) {
            assert!(t.len <= buf.len(), "transmit longer than its buffer");
            self.outbox
                .push((SocketAddr::new(self.ip, t.src_port), buf[..t.len].to_vec()));
            n += 1;
            assert!(n <= MAX_PACKETS_PER_FLUSH, "poll_transmit does not run dry");
        }
    }

    /// Polls completions and checks each names an outstanding work request.
    fn poll(&mut self) {
        let mut wcs: Vec<WorkCompletion> = Vec::new();
        self.engine
            .poll_cq(self.cq, usize::MAX, &mut wcs)
            .expect("CQ");
        for wc in wcs {
            let recv = matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
            let set = if recv {
                &mut self.recvs
            } else {
                &mut self.sends
            };
            assert!(
                set.remove(&wc.wr_id),
                "completion for a work request not outstanding: {wc:?}"
            );
            assert_eq!(wc.qp_num, self.qpn, "{wc:?}");
        }
    }

    fn check_frozen(&self) {
        for r in &self.regions {
            if let Some(f) = &r.frozen {
                assert!(
                    r.mem.snapshot() == *f,
                    "a region without write rights changed (key {:#x})",
                    r.key
                );
            }
        }
    }
}

/// An address: inside, at the edges of, or far outside some region.
fn address(s: &mut Script<'_>, regions: &[Region]) -> u64 {
    // Mostly the region that grants everything, so requests get far enough to matter.
    let r = &regions[if s.bool() { 0 } else { s.below(regions.len()) }];
    match s.below(8) {
        0 => s.u64(),
        1 => u64::MAX - u64::from(s.u8()),
        2 => r
            .iova
            .wrapping_add(r.len)
            .wrapping_sub(u64::from(s.u8() % 16)),
        3 => r.iova.wrapping_sub(u64::from(s.u8() % 16)),
        _ => r.iova.wrapping_add(u64::from(s.u16()) % r.len.max(1)),
    }
}

fn key(s: &mut Script<'_>, regions: &[Region], stale: &[u32]) -> u32 {
    match s.below(8) {
        0 => s.u32(),
        1 if !stale.is_empty() => stale[s.below(stale.len())],
        2 => regions[s.below(regions.len())].key ^ (1 << s.below(32)),
        3 => regions[s.below(regions.len())].key,
        _ => regions[0].key,
    }
}

fn length(s: &mut Script<'_>) -> u32 {
    match s.below(8) {
        0 => s.u32(),
        1 => u32::MAX - u32::from(s.u8()),
        2 => 0,
        3 => 256 + u32::from(s.u16()) % 1200,
        4 => u32::from(s.u16()) % 9000,
        _ => u32::from(s.u8()) % 80,
    }
}

fn sgl(s: &mut Script<'_>, side: &Side) -> Vec<Sge> {
    if s.bool() {
        // Well-formed: one SGE inside the region that grants everything, so that traffic
        // flows and the hostile parts meet a connection with work in progress.
        let r = &side.regions[0];
        let len = u64::from(s.u16()) % 3000;
        let off = u64::from(s.u16()) % (r.len - len);
        return vec![Sge {
            addr: r.iova + off,
            length: len as u32,
            lkey: r.key,
        }];
    }
    (0..s.below(5) + s.below(2))
        .map(|_| Sge {
            addr: address(s, &side.regions),
            length: length(s),
            lkey: key(s, &side.regions, &side.stale_keys),
        })
        .collect()
}

struct Fuzz<'a> {
    s: Script<'a>,
    sides: [Side; 2],
    now: Instant,
    next_wr_id: u64,
    /// The first PSN each side sent on the current connection.
    psns: [u32; 2],
}

impl Fuzz<'_> {
    fn post_send(&mut self, i: usize) {
        let peer_regions = &self.sides[1 - i].regions;
        let s = &mut self.s;
        let (remote_addr, rkey) = if s.bool() {
            let r = &peer_regions[0];
            let off = u64::from(s.u16()) % (r.len / 2);
            (r.iova + if s.bool() { off & !7 } else { off }, r.key)
        } else {
            (
                address(s, peer_regions),
                key(s, peer_regions, &self.sides[1 - i].stale_keys),
            )
        };
        let op = match s.below(8) {
            0 => SendOp::Send,
            1 => SendOp::SendWithImm { imm: s.u32() },
            2 => SendOp::SendWithInv { rkey },
            3 => SendOp::RdmaWrite { remote_addr, rkey },
            4 => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm: s.u32(),
            },
            5 => SendOp::RdmaRead { remote_addr, rkey },
            6 => SendOp::AtomicCmpSwap {
                remote_addr: remote_addr & !7,
                rkey,
                compare: s.u64(),
                swap: s.u64(),
            },
            _ => SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add: s.u64(),
            },
        };
        let bits = s.u8();
        let mut flags = SendFlags::empty();
        for (on, f) in [
            (bits & 0x07 != 0, SendFlags::SIGNALED),
            (bits & 0x18 == 0x18, SendFlags::FENCE),
            (bits & 0x20 != 0, SendFlags::SOLICITED),
            (bits & 0xc0 == 0xc0, SendFlags::INLINE),
        ] {
            if on {
                flags = flags | f;
            }
        }
        // Inline data with the flag, and now and then without it (refused at post).
        let inline_data = (flags.contains(SendFlags::INLINE) || bits == 0x3f).then(|| {
            let n = usize::from(s.u16()) % 300;
            s.payload(n).into_boxed_slice()
        });
        let sg_list = if op.is_atomic() && s.bool() {
            let r = &self.sides[i].regions[0];
            vec![Sge {
                addr: (r.iova + (u64::from(s.u16()) % r.len)) & !7,
                length: 8,
                lkey: r.key,
            }]
        } else {
            sgl(s, &self.sides[i])
        };
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let wr = SendWr {
            wr_id,
            op,
            sg_list,
            flags,
            inline_data,
            ud: None,
            xrc_srqn: None,
        };
        let side = &mut self.sides[i];
        if side.engine.post_send(self.now, side.qpn, wr).is_ok() {
            side.sends.insert(wr_id);
        }
    }

    fn post_recv(&mut self, i: usize) {
        let sg_list = sgl(&mut self.s, &self.sides[i]);
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let side = &mut self.sides[i];
        if side
            .engine
            .post_recv(side.qpn, RecvWr { wr_id, sg_list })
            .is_ok()
        {
            side.recvs.insert(wr_id);
        }
    }

    /// Delivers side `i`'s outbox to its peer, each packet maybe dropped, duplicated or
    /// mutated.
    fn deliver(&mut self, i: usize, faults: bool) {
        let packets = std::mem::take(&mut self.sides[i].outbox);
        for (mut src, mut p) in packets {
            let copies = if faults {
                match self.s.below(16) {
                    0 => 0,
                    1 => 2,
                    _ => 1,
                }
            } else {
                1
            };
            if faults && self.s.below(8) == 0 {
                mutate(&mut self.s, &mut p, &mut src);
            }
            for _ in 0..copies {
                self.handle(1 - i, src, &p);
            }
        }
    }

    fn handle(&mut self, to: usize, src: SocketAddr, p: &[u8]) {
        let meta = DatagramMeta::new(src, ip(to));
        self.sides[to].engine.handle_datagram(self.now, &meta, p);
    }

    /// A packet made up from scratch, of any opcode, to side `to`'s QP (or another QPN).
    fn forge(&mut self, to: usize) {
        let s = &mut self.s;
        let opcode = if s.below(4) == 0 {
            Opcode(s.u8())
        } else {
            FORGE_OPCODES[s.below(FORGE_OPCODES.len())]
        };
        let target = &self.sides[to];
        let qpn = if s.below(8) == 0 { s.u32() } else { target.qpn };
        // Near where the sender's PSNs are (they start there and move on slowly).
        let base = self.psns[1 - to];
        let psn = match s.below(4) {
            0 => Psn::new(s.u32()),
            _ => Psn::new(base).add(u32::from(s.u8())),
        };
        let headers = opcode.info().map_or(Headers::NONE, |info| info.headers);
        let has = |h| headers.contains(h);
        let (va, rkey) = (
            address(s, &target.regions),
            key(s, &target.regions, &target.stale_keys),
        );
        let ext = ExtHeaders {
            xrceth: has(Headers::XRCETH).then(|| Xrceth {
                srqn: s.u32() & 0xff_ffff,
            }),
            reth: has(Headers::RETH).then(|| Reth {
                va,
                rkey,
                dma_len: length(s),
            }),
            atomic_eth: has(Headers::ATOMIC_ETH).then(|| AtomicEth {
                va,
                rkey,
                swap_add: s.u64(),
                compare: s.u64(),
            }),
            aeth: has(Headers::AETH).then(|| Aeth {
                syndrome: Syndrome::from_byte(s.u8()),
                msn: s.u32() & 0xff_ffff,
            }),
            atomic_ack_eth: has(Headers::ATOMIC_ACK_ETH).then(|| AtomicAckEth { orig: s.u64() }),
            imm_dt: has(Headers::IMM_DT).then(|| ImmDt { imm: s.u32() }),
            ieth: has(Headers::IETH).then_some(Ieth { rkey }),
            deth: has(Headers::DETH).then(|| Deth {
                qkey: s.u32(),
                src_qpn: s.u32() & 0xff_ffff,
            }),
            feth: has(Headers::FETH).then(|| Feth {
                selectivity: s.u8() & 3,
                placement: s.u8() & 3,
            }),
        };
        let mut bth = Bth::new(opcode, qpn, psn);
        bth.ack_req = s.bool();
        let payload_len = match s.below(4) {
            0 => 0,
            1 => 256 << s.below(5),
            _ => usize::from(s.u16()) % 4200,
        };
        let payload = s.payload(payload_len);
        if opcode.info().is_none() {
            // Unknown opcode: a BTH and whatever follows.
            let mut p = vec![0u8; Bth::LEN];
            bth.emit(&mut p);
            p.extend_from_slice(&payload);
            p.extend_from_slice(&[0; ICRC_LEN]);
            let src = SocketAddr::new(self.sides[1 - to].ip, 0xc000);
            self.handle(to, src, &p);
            return;
        }
        let mut p = vec![0u8; packet_len(opcode, payload.len())];
        let h = emit_headers(&bth, &ext, payload.len(), &mut p);
        p[h..h + payload.len()].copy_from_slice(&payload);
        let mut src = SocketAddr::new(self.sides[1 - to].ip, 0xc000);
        if s.below(8) == 0 {
            src = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)), 4791);
        }
        self.handle(to, src, &p);
    }

    fn modify(&mut self, i: usize) {
        let s = &mut self.s;
        let state = [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Err,
        ][s.below(6)];
        let attr = QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        };
        let side = &mut self.sides[i];
        let _ = side.engine.modify_qp(side.qpn, &attr);
    }

    /// Takes both QPs through RESET and connects them again with new PSNs: outstanding work
    /// is discarded without completions (ibverbs semantics), packets still in the outboxes
    /// become stale traffic for the new connection.
    fn reconnect(&mut self) {
        let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][self.s.below(3)];
        let (pa, pb) = (self.s.u32() & 0xff_ffff, self.s.u32() & 0xff_ffff);
        self.psns = [pa, pb];
        let reset = QpAttr {
            qp_state: Some(QpState::Reset),
            ..QpAttr::default()
        };
        for side in &mut self.sides {
            side.poll();
            side.engine.modify_qp(side.qpn, &reset).expect("to RESET");
            side.sends.clear();
            side.recvs.clear();
        }
        let (qa, qb) = (self.sides[0].qpn, self.sides[1].qpn);
        self.sides[0].connect(qb, ip(1), mtu, pb, pa);
        self.sides[1].connect(qa, ip(0), mtu, pa, pb);
    }

    fn reconnect_if_broken(&mut self) {
        let broken = self.sides.iter().any(|side| {
            side.engine
                .qp(side.qpn)
                .is_some_and(|q| q.state() != QpState::Rts)
        });
        if broken {
            self.reconnect();
        }
    }

    /// Deregisters one of the writable regions or registers it again under a new key.
    fn churn_region(&mut self, i: usize) {
        let k = self.s.below(2);
        let side = &mut self.sides[i];
        let r = &mut side.regions[k];
        if r.live {
            assert!(side.engine.dereg_mr(r.key).is_ok(), "dereg of a live key");
            side.stale_keys.push(r.key);
            r.live = false;
        } else {
            let mem: Arc<dyn RegionMemory> = r.mem.clone();
            r.key = side
                .engine
                .reg_mr(side.pd, r.iova, r.len, r.access, mem)
                .expect("re-registration");
            r.live = true;
        }
    }

    fn tick(&mut self, by: Duration) {
        self.now = self.now + by;
        for side in &mut self.sides {
            if side.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                side.engine.handle_timeout(self.now);
            }
        }
    }

    fn step(&mut self) {
        let i = self.s.below(2);
        match self.s.below(16) {
            0..=4 => self.post_send(i),
            5 | 6 => self.post_recv(i),
            7..=11 => {
                self.sides[i].flush(self.now);
                self.deliver(i, true);
            }
            12 => self.forge(i),
            13 => match self.s.below(4) {
                0 => self.modify(i),
                1 => self.churn_region(i),
                _ => self.reconnect(),
            },
            14 => self.reconnect_if_broken(),
            _ => {
                let by = Duration::from_micros(u64::from(self.s.u16()) * 64);
                self.tick(by);
            }
        }
        for side in &mut self.sides {
            side.poll();
            side.check_frozen();
        }
    }
}

const FORGE_OPCODES: [Opcode; 25] = [
    Opcode::RC_SEND_FIRST,
    Opcode::RC_SEND_MIDDLE,
    Opcode::RC_SEND_LAST,
    Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
    Opcode::RC_SEND_ONLY,
    Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_FIRST,
    Opcode::RC_RDMA_WRITE_MIDDLE,
    Opcode::RC_RDMA_WRITE_LAST,
    Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_ONLY,
    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_READ_REQUEST,
    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    Opcode::RC_RDMA_READ_RESPONSE_LAST,
    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_ATOMIC_ACKNOWLEDGE,
    Opcode::RC_COMPARE_SWAP,
    Opcode::RC_FETCH_ADD,
    Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    // Another transport's packets to an RC QP: dropped as such.
    Opcode::XRC_SEND_ONLY,
    Opcode::XRC_RDMA_WRITE_ONLY,
    Opcode::XRC_ACKNOWLEDGE,
];

/// Damages a packet in transit: one bit, one byte, an extreme 8-byte value at any offset
/// (header fields: addresses, keys, lengths, PSNs), a cut, extra bytes, or a foreign source.
fn mutate(s: &mut Script<'_>, p: &mut Vec<u8>, src: &mut SocketAddr) {
    if p.is_empty() {
        return;
    }
    let at = usize::from(s.u16()) % p.len();
    match s.below(7) {
        0 => p[at] ^= 1 << s.below(8),
        1 => p[at] = s.u8(),
        2 => {
            let v = match s.below(3) {
                0 => u64::MAX - u64::from(s.u8()),
                1 => u64::from(u32::MAX - u32::from(s.u8())),
                _ => s.u64(),
            };
            for (k, b) in v.to_be_bytes().iter().enumerate() {
                if let Some(x) = p.get_mut(at + k) {
                    *x = *b;
                }
            }
        }
        3 => p.truncate(at),
        4 => {
            let n = usize::from(s.u8());
            let extra = s.payload(n);
            p.extend_from_slice(&extra);
        }
        5 => *src = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)), src.port()),
        _ => p[0] = s.u8(), // another opcode over the same headers
    }
}

/// Runs one script. Panics only if the engine panics or breaks an invariant above.
pub fn engine_wr_packet(data: &[u8]) {
    let mut s = Script { data, at: 0 };
    let mtu = [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][s.below(3)];
    let mut sides = [Side::new(0), Side::new(1)];
    let (qa, qb) = (sides[0].qpn, sides[1].qpn);
    sides[0].connect(qb, ip(1), mtu, PSN_B, PSN_A);
    sides[1].connect(qa, ip(0), mtu, PSN_A, PSN_B);
    let mut f = Fuzz {
        s,
        sides,
        now: Instant::from_nanos(1_000),
        next_wr_id: 1,
        psns: [PSN_A, PSN_B],
    };
    let mut steps = 0;
    while !f.s.done() && steps < MAX_STEPS {
        f.step();
        steps += 1;
    }
    // Heal: no more faults; let retransmissions and responses run for a while.
    for round in 0..64 {
        for i in 0..2 {
            f.sides[i].flush(f.now);
            f.deliver(i, false);
        }
        for side in &mut f.sides {
            side.poll();
            side.check_frozen();
        }
        if round % 8 == 7 {
            f.tick(Duration::from_millis(100));
        }
    }
}
