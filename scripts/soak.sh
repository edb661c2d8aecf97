#!/bin/bash
# scripts/soak.sh: the soaks of issue 32 at full length, opt-in (no root needed).
#
#   bash scripts/soak.sh            # SOAK_SECS=600 SOAK_CYCLES=10000 by default
#
# 1. crates/verbs/tests/soak.rs: 64 RC QP pairs on loopback (127.0.62.1 and .2) running rounds
#    of RDMA WRITE, READ, SEND/RECV, FETCH_ADD and CMP_SWAP for SOAK_SECS seconds, one device
#    losing 1 % of the datagrams it sends and 1 % of those it receives (DeviceConfig::faults).
#    Checked: every result (memory after each WRITE, READ and SEND, both atomics' original
#    values and the counter word), no error completion, RSS within 10 % of its value after the
#    warm-up, and the counters: tx_packets = tx_datagrams + injected drops, one socket's
#    tx_datagrams = the other's rx_datagrams, and one engine's tx_packets = the other's
#    rx_packets + the injected drops between them.
# 2. crates/rdmacm/tests/soak.rs: SOAK_CYCLES rdma_cm connect/SEND/disconnect cycles on
#    loopback (127.0.63.1 and .2) with the client's device kept open, then SOAK_CYCLES more
#    with it opened and closed each cycle. Checked: open file descriptors equal before and
#    after, RSS within 10 %.
#
# Both run in release mode with --nocapture and print their figures. `cargo test` runs the same
# tests short (5 s, 200 cycles each way). Environment: SOAK_SECS, SOAK_CYCLES, CARGO (default
# cargo). Exit status: 0 if both passed, 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${SOAK_SECS:-600}
CYCLES=${SOAK_CYCLES:-10000}
CARGO=${CARGO:-cargo}
cd "$ROOT" || exit 1

rc=0
echo "== data path: 64 QPs, mixed WRITE/READ/SEND/atomics, 1 % loss both ways, ${SECS} s"
SOFTRDMA_SOAK_SECS=$SECS "$CARGO" test --release -q -p softrdma --test soak -- --nocapture \
  || rc=1
echo "== rdma_cm: ${CYCLES} connect/disconnect cycles, client device kept; ${CYCLES} reopening it"
SOFTRDMA_CM_SOAK_CYCLES=$CYCLES "$CARGO" test --release -q -p softrdma-rdmacm --test soak \
  -- --nocapture || rc=1
[ $rc = 0 ] && echo "soak: PASS" || echo "soak: FAIL"
exit $rc
