#!/bin/bash
# scripts/shared-address-bench.sh: what sharing one address costs. The same benchmark between
# two processes, alternately on two addresses (127.0.0.1 <-> 127.0.0.2) and on one shared
# address (127.0.0.1 <-> 127.0.0.1), ROUNDS times each; prints every client row and the
# medians (a benchmark, not a test: run it on a quiet machine).
#
#   cargo build --release --workspace
#   scripts/shared-address-bench.sh perf write-bw -s 65536 -n 5000     # softrdma perf
#   scripts/shared-address-bench.sh perf send-lat -s 8 -n 20000
#   scripts/shared-address-bench.sh exec ib_write_bw -s 65536 -n 5000  # perftest, C ABI
#   scripts/shared-address-bench.sh exec ib_send_lat -s 8 -n 20000
#
# The figure compared is the row's 4th column for bandwidth (MB/s average; `softrdma perf`
# prints perftest's table) and the 5th for latency (t_typical, µs). ROUNDS (default 5).
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 perf|exec TEST [FLAGS...]"; exit 2; }
kind=$1; test=$2; shift 2
R=${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}/release
[ -e "$R/libibverbs.so.1" ] && [ -x "$R/softrdma" ] || { echo "build first: cargo build --release --workspace"; exit 2; }
case $test in *lat*) col=5 ;; *) col=4 ;; esac
out=$(mktemp -d)
row() { grep -E '^ +[0-9]+ ' "$1" | head -1; }
run() { # client address
  local cip=$1; shift
  if [ "$kind" = perf ]; then
    "$R/softrdma" perf "$test" "$@" --bind 127.0.0.1 > "$out/s" 2>&1 &
    sleep 0.3
    "$R/softrdma" perf "$test" "$@" --bind "$cip" 127.0.0.1 > "$out/c" 2>&1; wait
  else
    "$R/softrdma" exec --ip 127.0.0.1 -- "$test" "$@" > "$out/s" 2>&1 &
    sleep 0.5
    "$R/softrdma" exec --ip "$cip" -- "$test" "$@" 127.0.0.1 > "$out/c" 2>&1; wait
  fi
  row "$out/c"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for round in $(seq 1 "${ROUNDS:-5}"); do
  r=$(run 127.0.0.2 "$@"); echo "two addresses $round: $r"; echo "$r" | awk -v c=$col '{print $c}' >> "$out/two"
  r=$(run 127.0.0.1 "$@"); echo "one address  $round: $r"; echo "$r" | awk -v c=$col '{print $c}' >> "$out/one"
done
two=$(median < "$out/two"); one=$(median < "$out/one")
echo "median: two addresses $two, one address $one, ratio one/two $(awk -v a="$one" -v b="$two" 'BEGIN {printf "%.3f", a/b}')"
rm -rf "$out"
