#!/bin/bash
# scripts/lab/ibverbs.sh: this host's unmodified Debian ib_write_bw, ibv_rc_pingpong and
# ibv_srq_pingpong (-q 4),
# run on softrdma through `softrdma exec` (softrdma's libibverbs.so.1), against the same
# tools on Linux Soft-RoCE (rxe) in a lab guest, in both directions. Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/ibverbs.sh
#
# For each tool: 1. the host program is the client of the guest's server; 2. the guest's
# client connects to the host program as server. Both sides must exit 0 (ibv_rc_pingpong with
# -c validates every buffer); every run is captured on br0 and must decode with
# `softrdma decode` to 0 malformed and 0 icrc_bad packets.
#
# Environment: SOFTRDMA_LAB (required), IBV_ITERS (default 100), IBV_OUT (default
# target/lab/ibverbs), GUEST_TIMEOUT (default 120), LAB_NS (default rxe-ibverbs), LAB_TAPS,
# IBV_EXEC_FLAGS (more `softrdma exec` flags, e.g. "--loss 0.05 --seed 3 --counters": the
# host's device injects those faults, and rxe must still complete every run), IBV_TOOLS
# (which of ib_write_bw, ibv_rc_pingpong, odp — both with --odp on the host — and
# ibv_srq_pingpong; default all).
# Needs Debian's perftest and ibverbs-utils on this host. Exit: 0 pass, 1 fail, 2 setup.
set -uo pipefail

export LAB_NS=${LAB_NS:-rxe-ibverbs}
export LAB_TAPS=${LAB_TAPS:-p1 p2}
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup ibverbs.sh
(cd "$ROOT" && cargo build --release -q -p softrdma-ibverbs) || { echo "ibverbs.sh: build failed"; exit 2; }
for tool in ib_write_bw ibv_rc_pingpong ibv_srq_pingpong; do
  command -v "$tool" >/dev/null || { echo "ibverbs.sh: $tool missing (apt-get install perftest ibverbs-utils)"; exit 2; }
done
GUEST=${LAB_TAPS%% *}
ITERS=${IBV_ITERS:-100}
EXEC_FLAGS=${IBV_EXEC_FLAGS:-}
TOOLS=${IBV_TOOLS:-ib_write_bw ibv_rc_pingpong odp ibv_srq_pingpong}
OUT=${IBV_OUT:-$ROOT/target/lab/ibverbs}
HOST_IP=10.88.0.1
GUEST_IP=10.88.0.11
mkdir -p "$OUT"

# run TAG HOST_ROLE HOST_CMD GUEST_CMD: one pairing; HOST_ROLE is client or server.
run() {
  local tag=$1 role=$2 hcmd=$3 gcmd=$4 hrc grc gpid hpid status=ok detail wd
  echo "== $tag: host [$hcmd]  guest [$gcmd]"
  start_capture "$OUT/$tag.wire.pcap"
  if [ "$role" = client ]; then
    "$LAB/guest.sh" "$GUEST" "$GUEST_IP" "$gcmd" > "$OUT/$tag.guest.log" 2>&1 &
    gpid=$!
    local deadline=$(( $(date +%s) + 90 ))
    while :; do
      # shellcheck disable=SC2086
      nsx timeout -k 5 $(( GUEST_TIMEOUT + 30 )) "$BIN" exec --ip "$HOST_IP" $EXEC_FLAGS -- $hcmd \
        > "$OUT/$tag.host.log" 2>&1
      hrc=$?
      if [ $hrc -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && kill -0 $gpid 2>/dev/null && \
         grep -qiE "couldn't connect|unable to connect|connection refused" "$OUT/$tag.host.log"; then
        sleep 0.5; continue
      fi
      break
    done
    wait $gpid; grc=$?
  else
    # shellcheck disable=SC2086
    nsx timeout -k 5 $(( GUEST_TIMEOUT + 30 )) "$BIN" exec --ip "$HOST_IP" $EXEC_FLAGS -- $hcmd \
      > "$OUT/$tag.host.log" 2>&1 &
    hpid=$!
    "$LAB/guest.sh" "$GUEST" "$GUEST_IP" "rxe-retry 60 $gcmd" > "$OUT/$tag.guest.log" 2>&1
    grc=$?
    [ $grc -eq 0 ] || { sleep 2; kill "$hpid" 2>/dev/null; }
    wait $hpid; hrc=$?
  fi
  stop_capture
  sed 's/^/   host: /' "$OUT/$tag.host.log"; sed 's/^/   /' "$OUT/$tag.guest.log"
  [ "$hrc" = 0 ] && [ "$grc" = 0 ] || status=FAIL
  wd=$(decode "$OUT/$tag.wire.pcap") || status=FAIL
  detail="host rc=$hrc guest rc=$grc | wire: $wd"
  record "$tag" "$status" "$detail"
  echo "   -> $status: $detail"
}

BW="ib_write_bw -x 1 -F -n $ITERS -s 4096"
PP="ibv_rc_pingpong -g 1 -c -n $ITERS -s 4096"
SRQ="ibv_srq_pingpong -g 1 -q 4 -n $ITERS -s 4096"
wanted() { [[ " $TOOLS " == *" $1 "* ]]; }
if wanted ib_write_bw; then
  run host-client-ib_write_bw client "$BW $GUEST_IP" "$BW -d rxe0"
  run host-server-ib_write_bw server "$BW" "$BW -d rxe0 $HOST_IP"
fi
if wanted ibv_rc_pingpong; then
  run host-client-ibv_rc_pingpong client "$PP $GUEST_IP" "$PP -d rxe0"
  run host-server-ibv_rc_pingpong server "$PP" "$PP -d rxe0 $HOST_IP"
fi
if wanted odp; then
  # On-demand paging on softrdma's side only (rxe 6.1 has none): ibv_rc_pingpong --odp, and
  # ib_write_bw --odp, against the plain tools on rxe.
  run host-client-ibv_rc_pingpong-odp client "$PP --odp $GUEST_IP" "$PP -d rxe0"
  run host-server-ibv_rc_pingpong-odp server "$PP --odp" "$PP -d rxe0 $HOST_IP"
  run host-client-ib_write_bw-odp client "$BW --odp $GUEST_IP" "$BW -d rxe0"
  run host-server-ib_write_bw-odp server "$BW --odp" "$BW -d rxe0 $HOST_IP"
fi
if wanted ibv_srq_pingpong; then
  run host-client-ibv_srq_pingpong client "$SRQ $GUEST_IP" "$SRQ -d rxe0"
  run host-server-ibv_srq_pingpong server "$SRQ" "$SRQ -d rxe0 $HOST_IP"
fi

echo
echo "== libibverbs interop matrix (iters $ITERS; captures and logs in $OUT)"
finish "ibverbs matrix"
