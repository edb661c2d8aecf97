#!/bin/bash
# scripts/lab/interop.sh: the whole softrdma <-> Linux rxe interop matrix, opt-in.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/interop.sh
#
# Runs scripts/lab/pingpong.sh, perf.sh, ibverbs.sh (unmodified programs through softrdma
# exec), cm.sh (the CM machine's probe against ucmatose), rping.sh, ucmatose.sh and
# udaddy.sh (softrdma rping / ucmatose / udaddy against librdmacm's), one after the other;
# then perf.sh again with `--cc dcqcn` on softrdma's side (a subset), as rxe has no CC.
# Without SOFTRDMA_LAB each part prints why it skips and exits 0. Exit status: 0 if every
# part passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -z "${SOFTRDMA_LAB:-}" ]; then
  echo "interop.sh: SOFTRDMA_LAB is not set (e.g. SOFTRDMA_LAB=/work/shared/rxe-lab): skipping"
  exit 0
fi
rc=0
for part in pingpong perf ibverbs cm rping ucmatose udaddy; do
  bash "$HERE/$part.sh" || rc=1
done
# softrdma's congestion control against peers that have none (rxe): nothing may change.
PERF_SOFTRDMA_FLAGS="--cc dcqcn --cc-line-gbps 10" \
  PERF_TESTS="write-bw read-bw send-bw send-lat write-bw,-q,4 write-bw,-R" \
  PERF_OUT="${PERF_OUT:-$HERE/../../target/lab/perf}-cc" bash "$HERE/perf.sh" || rc=1
[ $rc = 0 ] && echo "interop: PASS" || echo "interop: FAIL"
exit $rc
