"""A process that forks with softrdma's device open: the child opens a device of its own and
runs rc.py's checks on it (the inherited one has no threads in the child, as a kernel
device's mappings are the parent's), then the parent runs them again on its own, which the
child left alone. The child's device is another member of the address, so its QP numbers
carry another slot than the parent's (the same would make the two processes' packets meet
in one QP). rdma-core's rdma_cm tests fork this way. Prints "pyverbs: fork checks passed" on
success."""
import os
import runpy
import sys

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr

RC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rc.py")


def run_rc():
    """rc.py's checks; its exit status (0 when they all pass)."""
    try:
        runpy.run_path(RC, run_name="__main__")
    except SystemExit as ex:
        return ex.code if isinstance(ex.code, int) else 1
    return 0


def qp_slot(ctx, pd):
    """The address slot in the QP number of a new RC QP (its top byte of 24 bits)."""
    cq = CQ(ctx, 4)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap()))
    slot = qp.qp_num >> 16
    qp.close()
    cq.close()
    return slot


ctx = d.Context(name="softrdma0")
pd = PD(ctx)
parent_slot = qp_slot(ctx, pd)
sys.stdout.flush()
child = os.fork()
if child == 0:
    own = d.Context(name="softrdma0")
    child_slot = qp_slot(own, PD(own))
    if child_slot == parent_slot:
        print(f"FAIL: the child's QPs have the parent's slot {parent_slot}")
        sys.stdout.flush()
        os._exit(3)
    os._exit(run_rc())
_, status = os.waitpid(child, 0)
if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
    print(f"FAIL: the child's checks ended with status {status:#x}")
    sys.exit(1)
ctx.query_port(1)
if run_rc() != 0:
    sys.exit(1)
pd.close()
ctx.close()
print("pyverbs: fork checks passed")
