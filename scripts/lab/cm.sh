#!/bin/bash
# scripts/lab/cm.sh: softrdma's rdma_cm (the IB CM over QP 1) against Linux's, on Linux
# Soft-RoCE (rxe) in the rxe lab (see the lab's README). Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/cm.sh
#
# softrdma's verbs device has no QP 1 yet, so the softrdma side is the probe
# `crates/cm/examples/rdma_cm_probe.rs`: the sans-IO rdma_cm with a GSI QP of its own (MADs in
# UD packets on UDP 4791, bound to 10.88.0.1) and made-up QP numbers. The peer is rdma-core's
# `ucmatose -C 0` (cmatose without messages), which exits 0 only if every connection was
# established and then disconnected:
#   1. probe client (CM_CONNS connections) -> ucmatose server in g1 (10.88.0.11); the server
#      disconnects, the probe answers the DREQs;
#   2. ucmatose client in g2 (10.88.0.12) -> probe server, which accepts, then disconnects;
#   3. probe client -> g1 on a port nobody listens on: rxe's REJ 8 must come back;
#   4. ucmatose client in g2 -> the probe with no listener: ucmatose must report
#      RDMA_CM_EVENT_REJECTED, error 8.
# Both sides must pass (ucmatose exit 0 in 1 and 2); every run is captured on br0 and must
# decode with `softrdma decode` to 0 malformed and 0 icrc_bad packets.
#
# Environment:
#   SOFTRDMA_LAB    the lab folder (required; without it the script prints why and exits 0)
#   CM_CONNS        connections per run (default 4)
#   CM_OUT          where captures and logs go (default target/lab/cm)
#   GUEST_TIMEOUT   hard limit per guest (default 120 s)
#   LAB_NS          lab namespace (default rxe-lab)
#   CARGO_TARGET_DIR, CARGO_BUILD_JOBS  as for cargo
# Exit status: 0 if every run passed, 1 otherwise, 2 if the setup failed.
set -uo pipefail

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup cm.sh
CONNS=${CM_CONNS:-4}
OUT=${CM_OUT:-$ROOT/target/lab/cm}
HOST_IP=10.88.0.1
G1=10.88.0.11
G2=10.88.0.12
PORT=7471
mkdir -p "$OUT"
echo "== building the rdma_cm probe (release)"
(cd "$ROOT" && cargo build --release -q -p softrdma-cm --example rdma_cm_probe) || { echo "cm.sh: build failed"; exit 2; }
PROBE=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/rdma_cm_probe

# check NAME PROBE_RC GUEST_RC PROBE_LOG GUEST_LOG WIRE_PCAP [GUEST_PATTERN]
check() {
  local name=$1 prc=$2 grc=$3 plog=$4 glog=$5 wire=$6 pattern=${7:-} status=ok wd
  [ "$prc" = 0 ] || status=FAIL
  if [ -n "$pattern" ]; then
    grep -q "$pattern" "$glog" || status=FAIL
  else
    [ "$grc" = 0 ] || status=FAIL
  fi
  wd=$(decode "$wire") || status=FAIL
  record "$name" "$status" "probe rc=$prc, ucmatose rc=$grc | wire: $wd"
  echo "   -> $status: probe rc=$prc ucmatose rc=$grc | $(tail -n 1 "$plog") | wire: $wd"
}

# 1. probe client -> ucmatose server.
tag=client
echo "== ucmatose -C 0 -c $CONNS -p $PORT (g1)  <-  rdma_cm_probe client $HOST_IP $G1 $PORT $CONNS"
start_capture "$OUT/$tag.wire.pcap"
"$LAB/guest.sh" g1 "$G1" "ucmatose -C 0 -c $CONNS -p $PORT" > "$OUT/$tag.guest.log" 2>&1 &
gpid=$!
nsx "$PROBE" client "$HOST_IP" "$G1" "$PORT" "$CONNS" > "$OUT/$tag.probe.log" 2>&1
prc=$?
wait $gpid; grc=$?
stop_capture
sed 's/^/   /' "$OUT/$tag.probe.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
check "probe-client x$CONNS" $prc $grc "$OUT/$tag.probe.log" "$OUT/$tag.guest.log" "$OUT/$tag.wire.pcap"

# 2. ucmatose client -> probe server.
tag=server
echo "== rdma_cm_probe server $HOST_IP $PORT $CONNS  <-  ucmatose -C 0 -c $CONNS -s $HOST_IP -p $PORT (g2)"
start_capture "$OUT/$tag.wire.pcap"
nsx "$PROBE" server "$HOST_IP" "$PORT" "$CONNS" > "$OUT/$tag.probe.log" 2>&1 &
ppid=$!
"$LAB/guest.sh" g2 "$G2" "ucmatose -C 0 -c $CONNS -s $HOST_IP -p $PORT" > "$OUT/$tag.guest.log" 2>&1
grc=$?
wait $ppid; prc=$?
stop_capture
sed 's/^/   /' "$OUT/$tag.probe.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
check "probe-server x$CONNS" $prc $grc "$OUT/$tag.probe.log" "$OUT/$tag.guest.log" "$OUT/$tag.wire.pcap"

# 3. probe client -> a port nobody listens on in g1.
tag=reject-by-rxe
echo "== (g1: nobody listens on 9999)  <-  rdma_cm_probe reject $HOST_IP $G1 9999"
start_capture "$OUT/$tag.wire.pcap"
"$LAB/guest.sh" g1 "$G1" "sleep 25" > "$OUT/$tag.guest.log" 2>&1 &
gpid=$!
nsx "$PROBE" reject "$HOST_IP" "$G1" 9999 > "$OUT/$tag.probe.log" 2>&1
prc=$?
wait $gpid; grc=$?
stop_capture
sed 's/^/   /' "$OUT/$tag.probe.log"
check "rejected by rxe (REJ 8)" $prc $grc "$OUT/$tag.probe.log" "$OUT/$tag.guest.log" "$OUT/$tag.wire.pcap"

# 4. ucmatose client -> the probe, which has no listener.
tag=reject-by-probe
echo "== rdma_cm_probe none $HOST_IP 40  <-  ucmatose -C 0 -s $HOST_IP -p 9999 (g2)"
start_capture "$OUT/$tag.wire.pcap"
nsx "$PROBE" none "$HOST_IP" 40 > "$OUT/$tag.probe.log" 2>&1 &
ppid=$!
"$LAB/guest.sh" g2 "$G2" "ucmatose -C 0 -s $HOST_IP -p 9999" > "$OUT/$tag.guest.log" 2>&1
grc=$?
wait $ppid; prc=$?
stop_capture
sed 's/^/   /' "$OUT/$tag.probe.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
check "rejected by the probe (REJ 8)" $prc $grc "$OUT/$tag.probe.log" "$OUT/$tag.guest.log" \
  "$OUT/$tag.wire.pcap" "RDMA_CM_EVENT_REJECTED, error: 8"

finish "rdma_cm interop"
