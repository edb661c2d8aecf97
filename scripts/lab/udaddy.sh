#!/bin/bash
# scripts/lab/udaddy.sh: `softrdma udaddy` against librdmacm's `udaddy` on
# Linux Soft-RoCE (rxe) in the rxe lab, both directions: UDA_CONNS UD QPs resolved through
# rdma_cm's SIDR, UDA_COUNT datagrams of UDA_SIZE bytes each way on each. Opt-in, root.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/udaddy.sh
#
# Runs (both sides must print "return status 0" and exit 0; the capture must decode to 0
# malformed / 0 icrc_bad packets):
#   1. softrdma udaddy -s 10.88.0.11 (this host)  ->  udaddy -b 10.88.0.11 (g1);
#   2. udaddy -s 10.88.0.1 (g2)  ->  softrdma udaddy -b 10.88.0.1 (this host).
# Datagrams may be lost (UD): run without LAB_LOSS. Environment: SOFTRDMA_LAB (required),
# LAB_NS, UDA_CONNS (default 4), UDA_COUNT (default 10), UDA_SIZE (default 100), UDA_OUT
# (default target/lab/udaddy), CARGO_TARGET_DIR.
# Exit status: 0 if both runs passed, 1 otherwise, 2 if the setup failed.
set -uo pipefail

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup udaddy.sh
CONNS=${UDA_CONNS:-4}
COUNT=${UDA_COUNT:-10}
SIZE=${UDA_SIZE:-100}
OUT=${UDA_OUT:-$ROOT/target/lab/udaddy}
HOST_IP=10.88.0.1
G1=10.88.0.11
G2=10.88.0.12
PORT=7174
FLAGS="-c $CONNS -C $COUNT -S $SIZE"  # udaddy's port is fixed (7174); its -p is the port space
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

# 1. softrdma client -> udaddy server in g1.
tag=softrdma-client
echo "== udaddy -b $G1 $FLAGS (g1)  <-  softrdma udaddy -s $G1 -b $HOST_IP $FLAGS"
start_capture "$OUT/$tag.wire.pcap"
"$LAB/guest.sh" g1 "$G1" "udaddy -b $G1 $FLAGS" > "$OUT/$tag.guest.log" 2>&1 &
gpid=$!
# Until the guest's udaddy listens, its CM rejects (or, booting, nothing answers): retry.
deadline=$(( $(date +%s) + 90 ))
while :; do
  nsx timeout 150 "$BIN" udaddy -s "$G1" -b "$HOST_IP" $FLAGS > "$OUT/$tag.softrdma.log" 2>&1
  src=$?
  if [ $src -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && kill -0 $gpid 2>/dev/null && \
     grep -q "RDMA_CM_EVENT_REJECTED\|RDMA_CM_EVENT_UNREACHABLE" "$OUT/$tag.softrdma.log"; then
    sleep 1; continue
  fi
  break
done
wait $gpid
stop_capture
sed 's/^/   softrdma: /' "$OUT/$tag.softrdma.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
check "softrdma client x$CONNS -> udaddy" $src "$OUT/$tag.guest.log" "$OUT/$tag.softrdma.log" "$OUT/$tag.wire.pcap"

# 2. udaddy client in g2 -> softrdma server.
tag=softrdma-server
echo "== softrdma udaddy -b $HOST_IP $FLAGS  <-  udaddy -s $HOST_IP $FLAGS (g2)"
start_capture "$OUT/$tag.wire.pcap"
# Not through nsx (a backgrounded function is a subshell): $! must be the server itself, so
# that killing it frees 10.88.0.1:4791 for the next run.
ip netns exec "$NS" timeout 200 "$BIN" udaddy -b "$HOST_IP" $FLAGS > "$OUT/$tag.softrdma.log" 2>&1 &
spid=$!
"$LAB/guest.sh" g2 "$G2" "rxe-retry 60 udaddy -s $HOST_IP $FLAGS" > "$OUT/$tag.guest.log" 2>&1
wait $spid; src=$?
stop_capture
sed 's/^/   softrdma: /' "$OUT/$tag.softrdma.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
check "udaddy client x$CONNS -> softrdma" $src "$OUT/$tag.guest.log" "$OUT/$tag.softrdma.log" "$OUT/$tag.wire.pcap"

finish "udaddy interop"
