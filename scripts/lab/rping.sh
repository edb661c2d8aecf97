#!/bin/bash
# scripts/lab/rping.sh: `softrdma rping` against librdmacm's `rping` on Linux Soft-RoCE (rxe)
# in the rxe lab (see the lab's README), both directions, over rdma_cm (the IB CM on QP 1).
# Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/rping.sh
#   SOFTRDMA_LAB=/work/shared/rxe-lab LAB_LOSS=3 scripts/lab/rping.sh
#
# Runs, each must exit 0 on both sides and decode to 0 malformed / 0 icrc_bad packets:
#   1. softrdma rping -c (this host, 10.88.0.1) -> rping -s in g1 (10.88.0.11);
#   2. rping -c in g2 (10.88.0.12) -> softrdma rping -s on this host;
#   3. softrdma rping -c -> g1 on a port nobody listens on: rejected (exit 1, "REJECTED"
#      with reason 8), not a hang;
#   4. rping -c in g2 -> this host on a port nobody listens on: rping reports the rejection.
# The pings verify their data (-V) with RPING_SIZE-byte buffers, RPING_COUNT of them.
#
# Environment: SOFTRDMA_LAB (required), LAB_LOSS, LAB_NS, RPING_COUNT (default 10),
# RPING_SIZE (default 100), RPING_OUT (default target/lab/rping), GUEST_TIMEOUT,
# CARGO_TARGET_DIR.
# Exit status: 0 if every run passed, 1 otherwise, 2 if the setup failed.
set -uo pipefail

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup rping.sh
COUNT=${RPING_COUNT:-10}
SIZE=${RPING_SIZE:-100}
OUT=${RPING_OUT:-$ROOT/target/lab/rping}
HOST_IP=10.88.0.1
G1=10.88.0.11
G2=10.88.0.12
PORT=7174
mkdir -p "$OUT"

# check NAME SOFTRDMA_RC GUEST_RC SOFTRDMA_LOG GUEST_LOG WIRE [PATTERN FILE]
check() {
  local name=$1 src=$2 grc=$3 slog=$4 glog=$5 wire=$6 pattern=${7:-} pfile=${8:-} status=ok wd
  if [ -n "$pattern" ]; then
    grep -q "$pattern" "$pfile" || status=FAIL
  else
    [ "$src" = 0 ] && [ "$grc" = 0 ] || status=FAIL
    grep -q "mismatch" "$slog" "$glog" && status=FAIL
  fi
  wd=$(decode "$wire") || status=FAIL
  record "$name" "$status" "softrdma rc=$src, rping rc=$grc | wire: $wd"
  echo "   -> $status: softrdma rc=$src rping rc=$grc | wire: $wd"
}

# 1. softrdma client -> rping server.
tag=softrdma-client
echo "== rping -s -a $G1 -p $PORT -S $SIZE -V (g1)  <-  softrdma rping -c -a $G1 -I $HOST_IP -C $COUNT -S $SIZE -V -v"
start_capture "$OUT/$tag.wire.pcap"
"$LAB/guest.sh" g1 "$G1" "rping -s -a $G1 -p $PORT -S $SIZE -V -v" > "$OUT/$tag.guest.log" 2>&1 &
gpid=$!
# Until the guest's rping listens, its CM rejects (or, booting, does not answer): retry.
deadline=$(( $(date +%s) + 90 ))
while :; do
  nsx timeout 90 "$BIN" rping -c -a "$G1" -I "$HOST_IP" -p "$PORT" -C "$COUNT" -S "$SIZE" -V -v \
    > "$OUT/$tag.softrdma.log" 2>&1
  src=$?
  if [ $src -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && kill -0 $gpid 2>/dev/null && \
     grep -q "RDMA_CM_EVENT_REJECTED\|RDMA_CM_EVENT_UNREACHABLE" "$OUT/$tag.softrdma.log"; then
    sleep 1; continue
  fi
  break
done
wait $gpid; grc=$?
stop_capture
tail -n 3 "$OUT/$tag.softrdma.log" | sed 's/^/   /'; tail -n 3 "$OUT/$tag.guest.log" | sed 's/^/   /'
grep -c "^ping data" "$OUT/$tag.softrdma.log" | sed 's/^/   pings: /'
check "softrdma client x$COUNT -> rping" $src $grc "$OUT/$tag.softrdma.log" "$OUT/$tag.guest.log" "$OUT/$tag.wire.pcap"

# 2. rping client -> softrdma server.
tag=softrdma-server
echo "== softrdma rping -s -a $HOST_IP -p $PORT -S $SIZE -v  <-  rping -c -a $HOST_IP -C $COUNT -S $SIZE -V -v (g2)"
start_capture "$OUT/$tag.wire.pcap"
# Not through nsx (a backgrounded function is a subshell): $! must be the server itself, so
# that killing it frees 10.88.0.1:4791 for the next run.
ip netns exec "$NS" timeout 150 "$BIN" rping -s -a "$HOST_IP" -p "$PORT" -S "$SIZE" -v > "$OUT/$tag.softrdma.log" 2>&1 &
spid=$!
"$LAB/guest.sh" g2 "$G2" "rxe-retry 60 rping -c -a $HOST_IP -p $PORT -C $COUNT -S $SIZE -V -v; echo rping-exit=\$?" \
  > "$OUT/$tag.guest.log" 2>&1
grc=$?
grep -q "rping-exit=0" "$OUT/$tag.guest.log" || grc=1
wait $spid; src=$?
stop_capture
tail -n 3 "$OUT/$tag.softrdma.log" | sed 's/^/   /'; tail -n 3 "$OUT/$tag.guest.log" | sed 's/^/   /'
check "rping client x$COUNT -> softrdma" $src $grc "$OUT/$tag.softrdma.log" "$OUT/$tag.guest.log" "$OUT/$tag.wire.pcap"

# 3. softrdma client -> nobody listening in g1: REJ 8, not a hang.
tag=reject-by-rxe
echo "== (g1: nobody on 9999)  <-  softrdma rping -c -a $G1 -p 9999"
start_capture "$OUT/$tag.wire.pcap"
"$LAB/guest.sh" g1 "$G1" "sleep 40" > "$OUT/$tag.guest.log" 2>&1 &
gpid=$!
# Until the guest is up nothing answers (UNREACHABLE): retry until the REJ comes.
deadline=$(( $(date +%s) + 60 ))
while :; do
  nsx timeout 60 "$BIN" rping -c -a "$G1" -I "$HOST_IP" -p 9999 -C 1 > "$OUT/$tag.softrdma.log" 2>&1
  src=$?
  if [ "$(date +%s)" -lt "$deadline" ] && kill -0 $gpid 2>/dev/null && \
     grep -q "RDMA_CM_EVENT_UNREACHABLE" "$OUT/$tag.softrdma.log"; then
    sleep 1; continue
  fi
  break
done
wait $gpid; grc=$?
stop_capture
sed 's/^/   /' "$OUT/$tag.softrdma.log"
[ "$src" = 1 ] || echo "   (softrdma rping should exit 1)"
check "rejected by rxe (REJ 8)" $src $grc "$OUT/$tag.softrdma.log" "$OUT/$tag.guest.log" \
  "$OUT/$tag.wire.pcap" "RDMA_CM_EVENT_REJECTED, error 8" "$OUT/$tag.softrdma.log"

# 4. rping client in g2 -> this host with no listener.
tag=reject-by-softrdma
echo "== softrdma rping -s -a $HOST_IP -p $PORT (listening on $PORT only)  <-  rping -c -a $HOST_IP -p 9999 (g2)"
start_capture "$OUT/$tag.wire.pcap"
# Not through nsx (a backgrounded function is a subshell): $! must be the server itself, so
# that killing it frees 10.88.0.1:4791 for the next run.
ip netns exec "$NS" timeout 60 "$BIN" rping -s -a "$HOST_IP" -p "$PORT" > "$OUT/$tag.softrdma.log" 2>&1 &
spid=$!
"$LAB/guest.sh" g2 "$G2" "rping -c -a $HOST_IP -p 9999 -C 1; echo rping-exit=\$?" > "$OUT/$tag.guest.log" 2>&1
grc=$?
kill $spid 2>/dev/null; wait $spid 2>/dev/null
stop_capture
sed 's/^/   /' "$OUT/$tag.guest.log"
check "rejected by softrdma (REJ 8)" 0 $grc "$OUT/$tag.softrdma.log" "$OUT/$tag.guest.log" \
  "$OUT/$tag.wire.pcap" "REJECTED" "$OUT/$tag.guest.log"

finish "rping interop"
