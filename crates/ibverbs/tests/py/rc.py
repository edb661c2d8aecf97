"""Debian's python3-pyverbs on softrdma's libibverbs: open the device, connect two RC QPs,
RDMA WRITE and SEND between them, and check the bytes. Run with softrdma's library on
LD_LIBRARY_PATH and SOFTRDMA_IP set; prints "pyverbs: all checks passed" on success."""
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)


def poll(cq, n=1):
    deadline = time.time() + 10
    wcs = []
    while len(wcs) < n:
        check(time.time() < deadline, f"no completion ({len(wcs)} of {n})")
        got, polled = cq.poll(num_entries=n - len(wcs))
        wcs.extend(polled[:got])
    return wcs


names = [dev.name.decode() for dev in d.get_device_list()]
check(names == ["softrdma0"], f"device list {names}")
ctx = d.Context(name="softrdma0")
attr = ctx.query_device()
check(attr.phys_port_cnt == 1, "one port")
port = ctx.query_port(1)
check(port.state == e.IBV_PORT_ACTIVE, "port active")
gid = ctx.query_gid(1, 1)
check(str(gid).startswith("0000:0000:0000:0000:0000:ffff:"), f"IPv4-mapped GID {gid}")

pd = PD(ctx)
access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
          e.IBV_ACCESS_REMOTE_READ)
mr_a = MR(pd, 4096, access)
mr_b = MR(pd, 4096, access)
cq = CQ(ctx, 64)
init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                  cap=QPCap(max_send_wr=16, max_recv_wr=16))
# Given attributes, pyverbs moves a new QP to INIT with them (access flags included).
init_attr = QPAttr(port_num=1)
init_attr.qp_access_flags = access
qp_a = QP(pd, init, init_attr)
qp_b = QP(pd, init, init_attr)
check(qp_a.qp_state == e.IBV_QPS_INIT, "QP in INIT")

for qp, remote in ((qp_a, qp_b), (qp_b, qp_a)):
    qa = QPAttr(port_num=1)
    qa.qp_access_flags = access
    qa.path_mtu = e.IBV_MTU_1024
    qa.max_dest_rd_atomic = 1
    qa.max_rd_atomic = 1
    qa.min_rnr_timer = 12
    qa.timeout = 14
    qa.retry_cnt = 7
    qa.rnr_retry = 7
    qa.ah_attr = AHAttr(port_num=1, is_global=1,
                        gr=GlobalRoute(dgid=gid, sgid_index=1))
    qa.dest_qp_num = remote.qp_num
    qa.rq_psn = 0
    qa.sq_psn = 0
    qp.to_rts(qa)
check(qp_a.qp_state == e.IBV_QPS_RTS, "QP in RTS")

# RDMA WRITE a -> b.
payload = b"written by pyverbs over softrdma"
mr_a.write(payload, len(payload))
wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
            sg=[SGE(mr_a.buf, len(payload), mr_a.lkey)])
wr.set_wr_rdma(int(mr_b.rkey), int(mr_b.buf) + 100)
qp_a.post_send(wr)
wc = poll(cq)[0]
check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RDMA_WRITE,
      f"write completion {wc}")
check(mr_b.read(len(payload), 100) == payload, "WRITE data")

# SEND b -> a.
qp_a.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(mr_a.buf + 1024, 1024, mr_a.lkey)]))
message = b"sent by pyverbs"
mr_b.write(message, len(message))
qp_b.post_send(SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1,
                      sg=[SGE(mr_b.buf, len(message), mr_b.lkey)]))
wcs = poll(cq, 2)
recv = [w for w in wcs if w.wr_id == 2]
check(len(recv) == 1 and recv[0].status == e.IBV_WC_SUCCESS and
      recv[0].opcode == e.IBV_WC_RECV and recv[0].byte_len == len(message),
      f"recv completion {wcs}")
check(mr_a.read(len(message), 1024) == message, "SEND data")

# A refused verb is an exception with the errno, not a crash.
try:
    MR(pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)
    check(False, "remote write without local write must be refused")
except PyverbsRDMAError as ex:
    check(ex.error_code == 22, f"EINVAL, got {ex.error_code}")

for obj in (qp_a, qp_b, cq, mr_a, mr_b, pd, ctx):
    obj.close()
print("pyverbs: all checks passed")
