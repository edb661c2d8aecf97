#!/bin/bash
# scripts/lab/interop.sh: the whole softrdma <-> Linux rxe interop matrix, opt-in.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/interop.sh
#
# Runs scripts/lab/pingpong.sh, then scripts/lab/perf.sh if it exists. Without SOFTRDMA_LAB
# each part prints why it skips and exits 0. Exit status: 0 if every part passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -z "${SOFTRDMA_LAB:-}" ]; then
  echo "interop.sh: SOFTRDMA_LAB is not set (e.g. SOFTRDMA_LAB=/work/shared/rxe-lab): skipping"
  exit 0
fi
rc=0
"$HERE/pingpong.sh" || rc=1
if [ -x "$HERE/perf.sh" ]; then
  "$HERE/perf.sh" || rc=1
elif [ -f "$HERE/perf.sh" ]; then
  bash "$HERE/perf.sh" || rc=1
else
  echo "interop.sh: no scripts/lab/perf.sh yet: perf matrix skipped"
fi
[ $rc = 0 ] && echo "interop: PASS" || echo "interop: FAIL"
exit $rc
