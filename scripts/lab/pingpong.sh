#!/bin/bash
# scripts/lab/pingpong.sh: `softrdma pingpong` against rdma-core's `ibv_rc_pingpong`,
# `ibv_uc_pingpong` and `ibv_ud_pingpong` on Linux Soft-RoCE (rxe), in the rxe lab (see the
# lab's README). Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/pingpong.sh
#
# For each case TRANSPORT:SIZE of PP_CASES (default: RC with each of PP_SIZES, below, at and
# above the path MTU of 1024; UC 64, 4096 and 10000; UD 64 and 1024, the guests' port MTU) it
# runs ibv_<transport>_pingpong against `softrdma pingpong --transport TRANSPORT`, with -c
# validation on both sides (SRQ: ibv_srq_pingpong -q PP_SRQ_QPS -c against
# `softrdma pingpong --srq -c`, the tool's all-zero check):
#   1. softrdma client (in the lab namespace, bound to 10.88.0.1) -> the rdma-core server in
#      guest g1 (10.88.0.11);
#   2. softrdma server (bound to 10.88.0.1) <- the rdma-core client in guest g1 (rxe-retry).
# Both sides must exit 0 and neither may report "invalid data". Every run is captured twice:
# tcpdump on br0 (what really crossed the wire) and softrdma's own --pcap tap; both captures
# must decode with `softrdma decode` to 0 malformed and 0 icrc_bad packets.
#
# Environment:
#   SOFTRDMA_LAB    the lab folder (required; without it the script prints why and exits 0)
#   PP_SIZES        RC message sizes of the default cases (default "64 1024 4096 10000")
#   PP_CASES        TRANSPORT:SIZE cases (default: RC:<each of PP_SIZES> UC:64 UC:4096
#                   UC:10000 UD:64 UD:1024 SRQ:64 SRQ:4096), e.g. PP_CASES="UD:1024 SRQ:4096"
#   PP_SRQ_QPS      QPs of the SRQ cases (default 4)
#   PP_ITERS        exchanges per run (default 20; the guests run under TCG, keep it small)
#   PP_OUT          where captures and logs go (default target/lab/pingpong)
#   GUEST_TIMEOUT   hard limit per guest (default 120 s: a broken peer makes rxe retry forever)
#   LAB_NS          lab namespace (default rxe-lab); guest g1 is used
#   CARGO_TARGET_DIR, CARGO_BUILD_JOBS  as for cargo
# Exit status: 0 if every run passed, 1 otherwise, 2 if the setup failed.
set -uo pipefail

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup pingpong.sh
SIZES=${PP_SIZES:-"64 1024 4096 10000"}
CASES=${PP_CASES:-"$(for s in $SIZES; do printf 'RC:%s ' "$s"; done)UC:64 UC:4096 UC:10000 UD:64 UD:1024 SRQ:64 SRQ:4096"}
SRQ_QPS=${PP_SRQ_QPS:-4}
ITERS=${PP_ITERS:-20}
OUT=${PP_OUT:-$ROOT/target/lab/pingpong}
HOST_IP=10.88.0.1
GUEST_IP=10.88.0.11
mkdir -p "$OUT"


# check NAME SOFTRDMA_RC GUEST_RC SOFTRDMA_LOG GUEST_LOG WIRE_PCAP TAP_PCAP
check() {
  local name=$1 src=$2 grc=$3 slog=$4 glog=$5 wire=$6 tap=$7 status=ok detail wd td
  grep -q "invalid data" "$slog" "$glog" && status=FAIL
  [ "$src" = 0 ] && [ "$grc" = 0 ] || status=FAIL
  wd=$(decode "$wire") || status=FAIL
  td=$(decode "$tap") || status=FAIL
  detail="softrdma rc=$src, $prog rc=$grc | wire: $wd | tap: $td"
  record "$name" "$status" "$detail"
  echo "   -> $status: $detail"
}

for case in $CASES; do
  transport=${case%%:*}
  size=${case#*:}
  t=$(echo "$transport" | tr 'A-Z' 'a-z')
  prog=ibv_${t}_pingpong
  common="-g 1 -c -s $size -n $ITERS"
  mine="--transport $transport $common"
  if [ "$transport" = SRQ ]; then
    # ibv_srq_pingpong: PP_SRQ_QPS RC QPs on one SRQ; its -c checks an all-zero buffer.
    common="-g 1 -q $SRQ_QPS -c -s $size -n $ITERS"
    mine="--srq $common"
  fi

  # 1. softrdma client -> rxe server.
  name="softrdma-client $transport s=$size"
  tag="client-$t-$size"
  echo "== $name: $prog -d rxe0 $common (g1)  <-  softrdma pingpong --bind $HOST_IP $mine $GUEST_IP"
  start_capture "$OUT/$tag.wire.pcap"
  "$LAB/guest.sh" g1 "$GUEST_IP" "$prog -d rxe0 $common" > "$OUT/$tag.guest.log" 2>&1 &
  gpid=$!
  deadline=$(( $(date +%s) + 90 ))
  while :; do
    nsx "$BIN" pingpong --bind "$HOST_IP" $mine --timeout 60 --pcap "$OUT/$tag.tap.pcap" \
      "$GUEST_IP" > "$OUT/$tag.softrdma.log" 2>&1
    src=$?
    if [ $src -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && kill -0 $gpid 2>/dev/null && \
       grep -q "Couldn't connect" "$OUT/$tag.softrdma.log"; then
      sleep 0.3; continue
    fi
    break
  done
  wait $gpid; grc=$?
  stop_capture
  sed 's/^/   softrdma: /' "$OUT/$tag.softrdma.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
  check "$name" $src $grc "$OUT/$tag.softrdma.log" "$OUT/$tag.guest.log" \
    "$OUT/$tag.wire.pcap" "$OUT/$tag.tap.pcap"

  # 2. rxe client -> softrdma server.
  name="softrdma-server $transport s=$size"
  tag="server-$t-$size"
  echo "== $name: softrdma pingpong --bind $HOST_IP $mine  <-  $prog -d rxe0 $common $HOST_IP (g1)"
  start_capture "$OUT/$tag.wire.pcap"
  ip netns exec "$NS" timeout -k 5 $(( GUEST_TIMEOUT + 30 )) "$BIN" pingpong --bind "$HOST_IP" $mine --timeout 60 \
    --pcap "$OUT/$tag.tap.pcap" > "$OUT/$tag.softrdma.log" 2>&1 &
  spid=$!
  "$LAB/guest.sh" g1 "$GUEST_IP" "rxe-retry 60 $prog -d rxe0 $common $HOST_IP" \
    > "$OUT/$tag.guest.log" 2>&1
  grc=$?
  if [ $grc -ne 0 ]; then
    # The guest is gone; do not let the server wait for a client that will never come.
    sleep 2; kill "$spid" 2>/dev/null
  fi
  wait $spid; src=$?
  stop_capture
  sed 's/^/   softrdma: /' "$OUT/$tag.softrdma.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
  check "$name" $src $grc "$OUT/$tag.softrdma.log" "$OUT/$tag.guest.log" \
    "$OUT/$tag.wire.pcap" "$OUT/$tag.tap.pcap"
done

echo
echo "== pingpong interop matrix (iters $ITERS, -c; captures and logs in $OUT)"
finish "pingpong matrix"
