#!/bin/bash
# scripts/lab/ucmatose.sh: `softrdma ucmatose` against librdmacm's `ucmatose` (cmatose) on
# Linux Soft-RoCE (rxe) in the rxe lab, both directions: UCM_CONNS RC connections through
# rdma_cm, UCM_COUNT messages of UCM_SIZE bytes each way on each, torn down. Opt-in, root.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/ucmatose.sh
#
# Runs (both sides must print "return status 0" and exit 0; the capture must decode to 0
# malformed / 0 icrc_bad packets):
#   1. softrdma ucmatose -s 10.88.0.11 (this host)  ->  ucmatose -b 10.88.0.11 (g1);
#   2. ucmatose -s 10.88.0.1 (g2)  ->  softrdma ucmatose -b 10.88.0.1 (this host).
# Environment: SOFTRDMA_LAB (required), LAB_LOSS, LAB_NS, UCM_CONNS (default 4), UCM_COUNT
# (default 10), UCM_SIZE (default 100), UCM_OUT (default target/lab/ucmatose), CARGO_TARGET_DIR.
# Exit status: 0 if both runs passed, 1 otherwise, 2 if the setup failed.
set -uo pipefail

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup ucmatose.sh
CONNS=${UCM_CONNS:-4}
COUNT=${UCM_COUNT:-10}
SIZE=${UCM_SIZE:-100}
OUT=${UCM_OUT:-$ROOT/target/lab/ucmatose}
HOST_IP=10.88.0.1
G1=10.88.0.11
G2=10.88.0.12
PORT=7471
FLAGS="-c $CONNS -C $COUNT -S $SIZE -p $PORT"
mkdir -p "$OUT"

check() { # NAME SOFTRDMA_RC GUEST_LOG SOFTRDMA_LOG WIRE
  local name=$1 src=$2 glog=$3 slog=$4 wire=$5 status=ok wd
  [ "$src" = 0 ] || status=FAIL
  grep -q "return status 0" "$glog" || status=FAIL
  grep -q "return status 0" "$slog" || status=FAIL
  wd=$(decode "$wire") || status=FAIL
  record "$name" "$status" "softrdma rc=$src | wire: $wd"
  echo "   -> $status: softrdma rc=$src | wire: $wd"
}

# 1. softrdma client -> ucmatose server in g1.
tag=softrdma-client
echo "== ucmatose -b $G1 $FLAGS (g1)  <-  softrdma ucmatose -s $G1 -b $HOST_IP $FLAGS"
start_capture "$OUT/$tag.wire.pcap"
"$LAB/guest.sh" g1 "$G1" "ucmatose -b $G1 $FLAGS" > "$OUT/$tag.guest.log" 2>&1 &
gpid=$!
# Until the guest's ucmatose listens, its CM rejects (or, booting, nothing answers): retry.
deadline=$(( $(date +%s) + 90 ))
while :; do
  nsx timeout 150 "$BIN" ucmatose -s "$G1" -b "$HOST_IP" $FLAGS > "$OUT/$tag.softrdma.log" 2>&1
  src=$?
  if [ $src -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && kill -0 $gpid 2>/dev/null && \
     grep -q "RDMA_CM_EVENT_REJECTED" "$OUT/$tag.softrdma.log"; then
    sleep 1; continue
  fi
  break
done
wait $gpid
stop_capture
sed 's/^/   softrdma: /' "$OUT/$tag.softrdma.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
check "softrdma client x$CONNS -> ucmatose" $src "$OUT/$tag.guest.log" "$OUT/$tag.softrdma.log" "$OUT/$tag.wire.pcap"

# 2. ucmatose client in g2 -> softrdma server.
tag=softrdma-server
echo "== softrdma ucmatose -b $HOST_IP $FLAGS  <-  ucmatose -s $HOST_IP $FLAGS (g2)"
start_capture "$OUT/$tag.wire.pcap"
# Not through nsx (a backgrounded function is a subshell): $! must be the server itself, so
# that killing it frees 10.88.0.1:4791 for the next run.
ip netns exec "$NS" timeout 200 "$BIN" ucmatose -b "$HOST_IP" $FLAGS > "$OUT/$tag.softrdma.log" 2>&1 &
spid=$!
"$LAB/guest.sh" g2 "$G2" "rxe-retry 60 ucmatose -s $HOST_IP $FLAGS" > "$OUT/$tag.guest.log" 2>&1
wait $spid; src=$?
stop_capture
sed 's/^/   softrdma: /' "$OUT/$tag.softrdma.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
check "ucmatose client x$CONNS -> softrdma" $src "$OUT/$tag.guest.log" "$OUT/$tag.softrdma.log" "$OUT/$tag.wire.pcap"

finish "ucmatose interop"
