#!/bin/bash
# scripts/lab/interop.sh: the whole softrdma <-> Linux rxe interop matrix, opt-in.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/interop.sh
#
# Runs scripts/lab/pingpong.sh, perf.sh, ibverbs.sh (unmodified programs through softrdma
# exec), cm.sh (the CM machine's probe against ucmatose), rping.sh, ucmatose.sh and
# udaddy.sh (softrdma rping / ucmatose / udaddy against librdmacm's), one after the other.
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
[ $rc = 0 ] && echo "interop: PASS" || echo "interop: FAIL"
exit $rc
