#!/usr/bin/env python3
"""errpaths.py: RC error paths, packet by packet, against one device under test (DUT).

The DUT is `errpaths_dut` (scripts/lab/errpaths_dut.c), one RC QP per case, on Linux rxe (in
a lab guest) or on softrdma (on the lab host, through `softrdma exec`). This program is the
DUT's peer: it builds RoCEv2 packets itself (raw IPv4 socket, its own ICRC), from its own
address (--src, 10.88.0.2 in the lab), and drives the DUT over TCP (setup, post, poll).

Two kinds of case (CASES below):
- responder cases: we are the requester; each step sends one crafted request (bad R_Key, bad
  opcode, duplicate or out-of-window PSN, ...) and records what the DUT answers within --wait
  seconds (`out` lines: opcode, PSN, AETH syndrome, MSN);
- requester cases: the DUT posts a work request and we answer as POLICY says (RNR NAKs, no
  answer at all, a ghost ACK, a sequence NAK, an implied NAK, an error NAK); we record every
  request packet the DUT sends (`seen` lines).
Each case ends with the DUT's completions (status:opcode:byte_len:ms) and its QP state.

The output (--out) is the fixture format of crates/proto/tests/rxe_errpaths.rs: the case's
script and what the DUT answered, one line each. PSNs are absolute: we start our requests at
RQ_PSN, the DUT its own at SQ_PSN. Standard library only; run in the lab namespace as root.
"""
import argparse, select, socket, struct, sys, time, zlib

RQ_PSN = 0x100          # the PSN of our first request (the DUT's rq_psn)
SQ_PSN = 0x500          # the DUT's first PSN (its sq_psn)
OUR_QPN = 0x4242
OUR_VA, OUR_RKEY = 0x10000, 0x1234   # what errpaths_dut's WRs target (we play the memory)
BAD_RKEY_XOR = 0x00ABCD00
RXE_PANICS = ["opcode_reserved"]   # cases that crash the guest kernel (see RESPONDER)

OPS = {
    "SEND_FIRST": 0x00, "SEND_MIDDLE": 0x01, "SEND_LAST": 0x02, "SEND_ONLY": 0x04,
    "WRITE_FIRST": 0x06, "WRITE_ONLY": 0x0a, "READ_REQUEST": 0x0c,
    "READ_RESPONSE_FIRST": 0x0d, "READ_RESPONSE_MIDDLE": 0x0e, "READ_RESPONSE_LAST": 0x0f,
    "READ_RESPONSE_ONLY": 0x10, "ACKNOWLEDGE": 0x11, "ATOMIC_ACKNOWLEDGE": 0x12,
    "COMPARE_SWAP": 0x13, "FETCH_ADD": 0x14, "UD_SEND_ONLY": 0x64, "RESERVED_1F": 0x1f,
}
NAMES = {v: k for k, v in OPS.items()}

# ---- the cases ---------------------------------------------------------------------------
# Responder cases: (name, setup keys, steps). A step is ("in", OPNAME, {psn, rkey, va, len})
# or ("recv", N) (the DUT posts N receives). `rkey` is "good" or "bad"; `va` is an offset into
# the DUT's 64 KiB region; every request asks for an acknowledgement.
R = RQ_PSN
def send(psn, **k): return ("in", "SEND_ONLY", dict(psn=psn, len=8, **k))
RESPONDER = [
    ("write_bad_rkey", "recvs=2", [("in", "WRITE_ONLY", dict(psn=R, rkey="bad", len=8)), send(R + 1)]),
    ("write_out_of_bounds", "recvs=2",
     [("in", "WRITE_ONLY", dict(psn=R, va=65536 - 4, len=8)), send(R + 1)]),
    ("read_bad_rkey", "recvs=2", [("in", "READ_REQUEST", dict(psn=R, rkey="bad", len=8)), send(R + 1)]),
    ("cas_bad_rkey", "recvs=2", [("in", "COMPARE_SWAP", dict(psn=R, rkey="bad")), send(R + 1)]),
    ("faa_bad_rkey", "recvs=2", [("in", "FETCH_ADD", dict(psn=R, rkey="bad")), send(R + 1)]),
    ("faa_misaligned", "recvs=2", [("in", "FETCH_ADD", dict(psn=R, va=4)), send(R + 1)]),
    # Linux 6.1's rdma_rxe (Debian 6.1.172) panics on this one: it checks the ICRC over a
    # length taken from its opcode table, which has no entry for 0x1f (RXE_PANICS).
    ("opcode_reserved", "recvs=2", [("in", "RESERVED_1F", dict(psn=R, len=8)), send(R)]),
    ("opcode_ud_on_rc", "recvs=2", [("in", "UD_SEND_ONLY", dict(psn=R, len=8)), send(R)]),
    ("opcode_middle_first", "recvs=2", [("in", "SEND_MIDDLE", dict(psn=R, len=1024)), send(R + 1)]),
    ("opcode_last_after_only", "recvs=2", [send(R), ("in", "SEND_LAST", dict(psn=R + 1, len=8)), send(R + 2)]),
    ("dup_send", "recvs=3", [send(R), send(R), send(R + 1)]),
    ("dup_read", "recvs=2", [("in", "READ_REQUEST", dict(psn=R, len=8)),
                             ("in", "READ_REQUEST", dict(psn=R, len=8)), send(R + 1)]),
    ("dup_write_older", "recvs=2", [("in", "WRITE_ONLY", dict(psn=R, len=8)), send(R + 1),
                                    ("in", "WRITE_ONLY", dict(psn=R, len=8)), send(R + 2)]),
    ("psn_ahead", "recvs=2", [send(R + 5), send(R + 6), send(R)]),
    ("psn_window_edge_ahead", "recvs=2", [send(R + 0x7fffff), send(R)]),
    ("psn_window_edge_behind", "recvs=2", [send(R + 0x800001), send(R)]),
    ("psn_far_behind", "recvs=2", [send(R - 0x400000), send(R)]),
    ("rnr_nak", "recvs=0 min_rnr=12", [send(R), ("recv", 1), send(R)]),
    ("rnr_nak_timer_1", "recvs=0 min_rnr=1", [send(R)]),
    ("ghost_ack_to_idle_qp", "recvs=2",
     [("in", "ACKNOWLEDGE", dict(psn=SQ_PSN + 5)), send(R)]),
]

# Requester cases: (name, setup keys, posts, policy, observation window in seconds).
# Policies: silent | rnr:TIMER | ghost | seqnak | implied | nak:CODE (AETH NAK code 0..4).
REQUESTER = [
    ("rnr_retry_0", "rnr_retry=0", ["send 8"], "rnr:1", 3),
    ("rnr_retry_1", "rnr_retry=1", ["send 8"], "rnr:1", 3),
    ("rnr_retry_3", "rnr_retry=3", ["send 8"], "rnr:1", 3),
    ("rnr_retry_7_infinite", "rnr_retry=7", ["send 8"], "rnr:1", 3),
    ("retry_cnt_0", "retry_cnt=0 timeout=14", ["send 8"], "silent", 4),
    ("retry_cnt_1", "retry_cnt=1 timeout=14", ["send 8"], "silent", 4),
    ("retry_cnt_3", "retry_cnt=3 timeout=14", ["send 8"], "silent", 4),
    ("retry_cnt_7", "retry_cnt=7 timeout=14", ["send 8"], "silent", 6),
    ("ghost_ack", "retry_cnt=7 timeout=14", ["send 8"], "ghost", 3),
    ("seq_nak", "retry_cnt=7 timeout=14", ["send 3000"], "seqnak", 3),
    ("implied_nak", "retry_cnt=7 timeout=14", ["read 8", "send 8"], "implied", 3),
    ("nak_invalid_request", "", ["send 8"], "nak:1", 3),
    ("nak_remote_access", "", ["write 8"], "nak:2", 3),
    ("nak_remote_op", "", ["send 8"], "nak:3", 3),
    ("nak_remote_access_read", "", ["read 8"], "nak:2", 3),
    ("nak_remote_access_atomic", "", ["faa 8"], "nak:2", 3),
]

# ---- wire --------------------------------------------------------------------------------
def icrc(ip_udp_ib: bytes) -> int:
    b = bytearray(ip_udp_ib)
    ihl = (b[0] & 0x0f) * 4
    b[1] = 0xff; b[8] = 0xff; b[10:12] = b"\xff\xff"      # TOS, TTL, IP checksum
    b[ihl + 6:ihl + 8] = b"\xff\xff"                       # UDP checksum
    b[ihl + 8 + 4] = 0xff                                  # BTH FECN/BECN/resv6
    return zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xffffffff

def ip_csum(h: bytes) -> int:
    s = sum(struct.unpack("!%dH" % (len(h) // 2), h))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff

def bth(opcode, dqpn, psn, ackreq, padcnt=0):
    return struct.pack("!BBHII", opcode, padcnt << 4, 0xffff, dqpn & 0xffffff,
                       (ackreq << 31) | (psn & 0xffffff))

def aeth(syn, msn): return struct.pack("!I", (syn << 24) | (msn & 0xffffff))

class Wire:
    def __init__(self, src, dst):
        self.src, self.dst, self.ipid = src, dst, 1
        self.tx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.tx.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # no ICMP unreachables
        self.sink.bind((src, 4791))

    def send(self, ib: bytes):
        udp_len = 8 + len(ib) + 4
        self.ipid = (self.ipid + 1) & 0xffff or 1
        iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, self.ipid, 0x4000, 64, 17, 0,
                          socket.inet_aton(self.src), socket.inet_aton(self.dst))
        iph = iph[:10] + struct.pack("!H", ip_csum(iph)) + iph[12:]
        pkt = iph + struct.pack("!HHHH", 0xd00d, 4791, udp_len, 0) + ib
        self.tx.sendto(pkt + struct.pack("<I", icrc(pkt)), (self.dst, 0))

    def recv(self, timeout):
        """One RoCEv2 packet from the DUT (its BTH onwards, without ICRC), or None."""
        end = time.time() + timeout
        while True:
            left = end - time.time()
            if left <= 0: return None
            r, _, _ = select.select([self.rx, self.sink], [], [], left)
            if self.sink in r: self.sink.recv(65536)
            if self.rx not in r: continue
            pkt = self.rx.recv(65536)
            ihl = (pkt[0] & 15) * 4
            if pkt[12:16] != socket.inet_aton(self.dst) or pkt[16:20] != socket.inet_aton(self.src):
                continue
            if struct.unpack("!H", pkt[ihl + 2:ihl + 4])[0] != 4791: continue
            if struct.unpack("<I", pkt[-4:])[0] != icrc(pkt[:-4]):
                print("   (a packet with a bad ICRC)"); continue
            return pkt[ihl + 8:-4]

def parse(b):
    op, psn = b[0], int.from_bytes(b[9:12], "big")
    d = {"op": NAMES.get(op, "OP_%02x" % op), "psn": psn, "ackreq": b[8] >> 7, "raw": b}
    rest = b[12:]
    if op in (0x0d, 0x0f, 0x10, 0x11, 0x12):
        d["syn"], d["msn"] = rest[0], int.from_bytes(rest[1:4], "big")
    if op in (0x06, 0x0a, 0x0c):
        d["va"], d["rkey"], d["len"] = struct.unpack("!QII", rest[:16])
    return d

def fmt_out(d):
    s = "%s psn=0x%x" % (d["op"], d["psn"])
    if "syn" in d: s += " syn=0x%02x msn=%d" % (d["syn"], d["msn"])
    return s

# ---- the DUT's control channel --------------------------------------------------------------
class Dut:
    def __init__(self, host, port, timeout):
        t0 = time.time()
        while True:
            try:
                self.s = socket.create_connection((host, port), timeout=5); break
            except OSError:
                if time.time() - t0 > timeout: raise
                time.sleep(0.3)
        self.s.settimeout(None)
        self.f = self.s.makefile("r")

    def cmd(self, line):
        self.s.sendall((line + "\n").encode())
        return self.f.readline().strip()

    def start(self, line):   # a command whose answer comes later (poll)
        self.s.sendall((line + "\n").encode())

    def close(self):
        try: self.s.sendall(b"close\n")
        except OSError: pass
        self.s.close()

def kv(line, key):
    for w in line.split():
        if w.startswith(key + "="): return int(w.split("=", 1)[1], 0)
    raise KeyError(key)

# ---- responder cases ---------------------------------------------------------------------
def request(w, op, dqpn, st, va0, rkey):
    psn, n = st["psn"], st.get("len", 0)
    key = rkey ^ BAD_RKEY_XOR if st.get("rkey") == "bad" else rkey
    va = va0 + st.get("va", 0)
    code = OPS[op]
    pay = bytes((i * 7 + 1) & 0xff for i in range(n))
    if op in ("WRITE_ONLY", "WRITE_FIRST"):
        ext = struct.pack("!QII", va, key, n)
    elif op == "READ_REQUEST":
        ext, pay = struct.pack("!QII", va, key, n), b""
    elif op in ("COMPARE_SWAP", "FETCH_ADD"):
        ext, pay = struct.pack("!QIQQ", va, key, 1, 0x5a5a5a5a5a5a5a5a), b""
    elif op == "UD_SEND_ONLY":
        ext = struct.pack("!II", 0x11111111, OUR_QPN)
    elif op == "ACKNOWLEDGE":
        ext, pay = aeth(0x1f, 1), b""
    else:
        ext = b""
    pad = (4 - len(pay) % 4) % 4
    w.send(bth(code, dqpn, psn, 0 if op == "ACKNOWLEDGE" else 1, pad) + ext + pay + b"\0" * pad)

def run_responder(w, dut, name, keys, steps, wait, log):
    rep = dut.cmd("setup dqpn=0x%x dgid=0x%08x rq_psn=0x%x sq_psn=0x%x %s" % (
        OUR_QPN, struct.unpack("!I", socket.inet_aton(w.src))[0], RQ_PSN, SQ_PSN, keys))
    if not rep.startswith("ok"): sys.exit(f"{name}: setup failed: {rep}")
    qpn, rkey, va = kv(rep, "qpn"), kv(rep, "rkey"), kv(rep, "va")
    log.append(f"case {name} responder {keys}".rstrip())
    for st in steps:
        if st[0] == "recv":
            dut.cmd("recv %d" % st[1]); log.append("recv %d" % st[1]); continue
        _, op, a = st
        request(w, op, qpn, a, va, rkey)
        desc = " ".join("%s=%s" % (k, hex(v) if k in ("psn", "va") else v) for k, v in a.items())
        log.append(f"in {op} {desc}")
        end = time.time() + wait
        while True:
            p = w.recv(end - time.time())
            if p is None: break
            log.append("out " + fmt_out(parse(p)))
    log.append(dut.cmd("poll ms=500"))

# ---- requester cases ---------------------------------------------------------------------
def answer(w, dqpn, d, st):
    """Our correct answer to the DUT's request packet d (we complete what it asks)."""
    op = d["op"]
    if op == "READ_REQUEST":
        st["msn"] += 1
        n = d["len"]; pay = bytes(n); pad = (4 - n % 4) % 4
        w.send(bth(0x10, dqpn, d["psn"], 0, pad) + aeth(0x1f, st["msn"]) + pay + b"\0" * pad)
    elif op in ("COMPARE_SWAP", "FETCH_ADD"):
        st["msn"] += 1
        w.send(bth(0x12, dqpn, d["psn"], 0) + aeth(0x1f, st["msn"]) + bytes(8))
    elif d["ackreq"] or op in ("SEND_LAST", "SEND_ONLY", "WRITE_ONLY"):
        if op in ("SEND_LAST", "SEND_ONLY", "WRITE_ONLY", "WRITE_LAST"):
            st["msn"] += 1
        w.send(bth(0x11, dqpn, d["psn"], 0) + aeth(0x1f, st["msn"]))

def run_requester(w, dut, name, keys, posts, policy, window, log):
    rep = dut.cmd("setup dqpn=0x%x dgid=0x%08x rq_psn=0x%x sq_psn=0x%x recvs=0 %s" % (
        OUR_QPN, struct.unpack("!I", socket.inet_aton(w.src))[0], RQ_PSN, SQ_PSN, keys))
    if not rep.startswith("ok"): sys.exit(f"{name}: setup failed: {rep}")
    qpn = kv(rep, "qpn")
    log.append(f"case {name} requester {keys}".rstrip())
    log.append(f"policy {policy}")
    for p in posts:
        if dut.cmd("post " + p) != "ok": sys.exit(f"{name}: post {p} failed")
        log.append("post " + p)
    dut.start("poll ms=%d" % int(window * 1000))
    st = {"msn": 0, "n": 0, "done": False}
    t0 = time.time(); result = None; buf = ""
    while result is None:
        r, _, _ = select.select([w.rx, dut.s], [], [], window + 5)
        if not r: break
        if dut.s in r:
            result = dut.f.readline().strip(); break
        p = w.recv(0.05)
        if p is None: continue
        d = parse(p); st["n"] += 1
        log.append("seen %s psn=0x%x t=%.1f" % (d["op"], d["psn"], (time.time() - t0) * 1e3))
        print("   %7.1f ms  %s psn 0x%x" % ((time.time() - t0) * 1e3, d["op"], d["psn"]))
        if policy == "silent":
            continue
        if policy.startswith("rnr:"):
            w.send(bth(0x11, qpn, d["psn"], 0) + aeth(0x20 | int(policy[4:]), st["msn"]))
        elif policy.startswith("nak:"):
            w.send(bth(0x11, qpn, d["psn"], 0) + aeth(0x60 | int(policy[4:]), st["msn"]))
        elif policy == "ghost":
            if st["n"] == 1:   # an ACK for a PSN the DUT never sent, then honest answers
                w.send(bth(0x11, qpn, d["psn"] + 10, 0) + aeth(0x1f, 1))
            else:
                answer(w, qpn, d, st)
        elif policy == "seqnak":
            # the last packet of the first attempt: "I got only the first one" (PSN seq err
            # naming the next expected PSN); afterwards honest answers
            if d["op"] == "SEND_LAST" and not st["done"]:
                st["done"] = True
                w.send(bth(0x11, qpn, SQ_PSN + 1, 0) + aeth(0x60, st["msn"]))
            elif st["done"]:
                answer(w, qpn, d, st)
        elif policy == "implied":
            # the READ's first transmission goes unanswered, the SEND after it is ACKed: an
            # implied NAK of the READ; afterwards honest answers
            if d["op"] == "READ_REQUEST" and not st["done"]:
                continue
            if d["op"] == "SEND_ONLY" and not st["done"]:
                st["done"] = True
                w.send(bth(0x11, qpn, d["psn"], 0) + aeth(0x1f, 1))
                continue
            answer(w, qpn, d, st)
    if result is None: result = "wc (no answer from the DUT) state=?"
    # anything the DUT still sends after its answer (a flush is silent, a retry is not)
    end = time.time() + 0.3
    while True:
        p = w.recv(end - time.time())
        if p is None: break
        d = parse(p); log.append("late %s psn=0x%x" % (d["op"], d["psn"]))
    log.append(result)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dut", help="the DUT's IPv4 address")
    ap.add_argument("--src", default="10.88.0.2", help="our address (the DUT's peer)")
    ap.add_argument("--port", type=int, default=18600, help="the DUT's control port")
    ap.add_argument("--wait", type=float, default=0.3, help="seconds to wait for answers per step")
    ap.add_argument("--connect-timeout", type=float, default=120)
    ap.add_argument("--device", default="?", help="a name for the fixture header (rxe, softrdma)")
    ap.add_argument("--out", help="write the fixture here")
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--skip", help="comma-separated case names not to run")
    ap.add_argument("--count", action="store_true", help="print the number of cases selected")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    skip = set(a.skip.split(",")) if a.skip else set()
    def wanted(name): return (not only or name in only) and name not in skip
    if a.count:
        print(sum(1 for c in RESPONDER + REQUESTER if wanted(c[0]))); return
    w = Wire(a.src, a.dut)
    log = [f"# errpaths.py against {a.device} ({a.dut}); RQ_PSN=0x{RQ_PSN:x} SQ_PSN=0x{SQ_PSN:x}",
           "# written by scripts/lab/errpaths.sh; replayed by crates/proto/tests/rxe_errpaths.rs"]
    for name, keys, steps in RESPONDER:
        if not wanted(name): continue
        print(f"== {name}")
        dut = Dut(a.dut, a.port, a.connect_timeout)
        n0 = len(log)
        run_responder(w, dut, name, keys, steps, a.wait, log)
        dut.close()
        print("\n".join("   " + l for l in log[n0:]))
        time.sleep(0.2)
    for name, keys, posts, policy, window in REQUESTER:
        if not wanted(name): continue
        print(f"== {name}")
        dut = Dut(a.dut, a.port, a.connect_timeout)
        n0 = len(log)
        run_requester(w, dut, name, keys, posts, policy, window, log)
        dut.close()
        print("\n".join("   " + l for l in log[n0:] if not l.startswith("seen")))
        time.sleep(0.2)
    if a.out:
        with open(a.out, "w") as f: f.write("\n".join(log) + "\n")
    # a capture's decoder counts the unknown opcodes we sent as malformed: say how many
    print("errpaths: %d cases, %d malformed on purpose" % (
        sum(1 for l in log if l.startswith("case ")),
        sum(1 for l in log if l.startswith("in RESERVED_1F"))))

if __name__ == "__main__":
    main()
