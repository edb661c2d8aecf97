#!/bin/bash
# scripts/ibverbs-bench.sh: unmodified perftest through softrdma's libibverbs.so.1 against
# `softrdma perf`, the same test and flags, two processes each on 127.0.0.1 <-> 127.0.0.2,
# alternating ROUNDS times (a benchmark, not a test: figures depend on the machine's load).
#
#   cargo build --release --workspace
#   scripts/ibverbs-bench.sh ib_write_bw write-bw -s 65536 -n 5000
#   scripts/ibverbs-bench.sh ib_send_lat send-lat -s 8 -n 2000
#
# Prints the client's result row of each run. Needs Debian's perftest. ROUNDS (default 3);
# CARGO_TARGET_DIR as for cargo.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PERFTEST_PROGRAM SOFTRDMA_TEST [FLAGS...]"; exit 2; }
prog=$1; test=$2; shift 2
R=${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}/release
[ -e "$R/libibverbs.so.1" ] && [ -x "$R/softrdma" ] || { echo "build first: cargo build --release --workspace"; exit 2; }
out=$(mktemp -d)
row() { grep -E '^ [0-9]+ ' "$1" | head -1; }
for round in $(seq 1 "${ROUNDS:-3}"); do
  "$R/softrdma" exec --ip 127.0.0.1 -- "$prog" "$@" > "$out/s" 2>&1 &
  sleep 0.5
  "$R/softrdma" exec --ip 127.0.0.2 -- "$prog" "$@" 127.0.0.1 > "$out/c" 2>&1; wait
  echo "perftest $prog $round: $(row "$out/c")"
  "$R/softrdma" perf "$test" "$@" --bind 127.0.0.1 > "$out/s" 2>&1 &
  sleep 0.3
  "$R/softrdma" perf "$test" "$@" --bind 127.0.0.2 127.0.0.1 > "$out/c" 2>&1; wait
  echo "softrdma perf $test $round: $(row "$out/c")"
done
rm -rf "$out"
