#!/bin/bash
# scripts/lab/shared.sh: two softrdma processes on the lab host's one address (10.88.0.1)
# talk to two rxe guests at the same time, in both directions (softrdma's shared address;
# see docs/exec.md "Many programs on one address"). Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/shared.sh
#
# For each test of SHARED_TESTS (perftest programs):
#   1. two unmodified perftest servers through `softrdma exec --ip 10.88.0.1`, on ports 18515
#      and 18516, and a perftest client in each guest (s1 = 10.88.0.11, s2 = 10.88.0.12),
#      all four at once;
#   2. a perftest server in each guest, and two clients through `softrdma exec` on the one
#      address, at once.
# Then the same both ways with rping (rdma_cm: rxe's MADs must reach the right process of the
# address). Every process must exit 0 and print its result row (rping: no error); the
# capture of br0 must decode with `softrdma decode` to 0 malformed and 0 icrc_bad packets.
#
# Environment: SOFTRDMA_LAB (required), SHARED_TESTS (default "ib_write_bw ib_send_lat
# ib_read_bw"), SHARED_ITERS (default 200), SHARED_OUT (default target/lab/shared), LAB_NS
# (default rxe-share), GUEST_TIMEOUT, CARGO_TARGET_DIR.
# Exit status: 0 if every run passed, 1 otherwise, 2 if the setup failed.
set -uo pipefail

export LAB_NS=${LAB_NS:-rxe-share}
export LAB_TAPS=${LAB_TAPS:-s1 s2}
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup shared.sh
(cd "$ROOT" && cargo build --release -q -p softrdma-ibverbs) || { echo "shared.sh: build failed"; exit 2; }
HOST_IP=10.88.0.1
GUESTS=(s1 s2)
GUEST_IPS=(10.88.0.11 10.88.0.12)
PORTS=(18515 18516)
TESTS=${SHARED_TESTS:-"ib_write_bw ib_send_lat ib_read_bw"}
ITERS=${SHARED_ITERS:-200}
OUT=${SHARED_OUT:-$ROOT/target/lab/shared}
mkdir -p "$OUT"

rows() { sed 's/^\[[^]]*\]//' "$1" | grep -cE '^ +[0-9]+ +[0-9]+ '; }

# Checks of one side's log: perftest exits 0 with a result row; rping exits 0 with no error.
perftest_ok() { [ "$2" = 0 ] && [ "$(rows "$1")" -ge 1 ] && echo ok || echo FAIL; }
rping_ok() { [ "$2" = 0 ] && ! grep -qiE "error|fail" "$1" && echo ok || echo FAIL; }

# fill TEMPLATE I: the command of pair I (%p its port, %g its guest's address, %h the host's).
fill() { local c=${1//%p/${PORTS[$2]}}; c=${c//%g/${GUEST_IPS[$2]}}; echo "${c//%h/$HOST_IP}"; }

# run_case NAME CHECK HOST_ROLE HOST_CMD GUEST_CMD RETRY_ON: two pairs at once, the host's two
# programs on its one address (`softrdma exec --ip HOST_IP`), one peer in each guest. With
# HOST_ROLE server the guests' clients retry (rxe-retry) until the host listens; with client
# the host's clients retry while their output shows RETRY_ON (the guest's server is not up).
run_case() {
  local t=$1 chk=$2 role=$3 hcmd=$4 gcmd=$5 retry_on=$6 i
  echo "== $t: $(fill "$hcmd" 0) (x2 on $HOST_IP) / $(fill "$gcmd" 0) (in ${GUESTS[*]})"
  start_capture "$OUT/$t.wire.pcap"
  local hpids=() gpids=()
  for i in 0 1; do
    if [ "$role" = server ]; then
      # shellcheck disable=SC2046 # the command is words
      nsx timeout -k 5 $((GUEST_TIMEOUT + 30)) "$BIN" exec --ip "$HOST_IP" -- \
        $(fill "$hcmd" $i) > "$OUT/$t.host$i.log" 2>&1 &
      hpids+=($!)
      "$LAB/guest.sh" "${GUESTS[$i]}" "${GUEST_IPS[$i]}" "rxe-retry 60 $(fill "$gcmd" $i)" \
        > "$OUT/$t.guest$i.log" 2>&1 &
      gpids+=($!)
    else
      "$LAB/guest.sh" "${GUESTS[$i]}" "${GUEST_IPS[$i]}" "$(fill "$gcmd" $i)" \
        > "$OUT/$t.guest$i.log" 2>&1 &
      gpids+=($!)
      (
        deadline=$(( $(date +%s) + 90 ))
        while :; do
          # shellcheck disable=SC2046
          nsx timeout -k 5 $((GUEST_TIMEOUT + 30)) "$BIN" exec --ip "$HOST_IP" -- \
            $(fill "$hcmd" $i) > "$OUT/$t.host$i.log" 2>&1
          rc=$?
          if [ $rc -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && \
             grep -q "$retry_on" "$OUT/$t.host$i.log"; then
            sleep 0.5; continue
          fi
          exit $rc
        done
      ) &
      hpids+=($!)
    fi
  done
  local detail= status=ok src grc s g wd
  for i in 0 1; do
    wait "${hpids[$i]}"; src=$?
    wait "${gpids[$i]}"; grc=$?
    s=$($chk "$OUT/$t.host$i.log" $src); g=$($chk "$OUT/$t.guest$i.log" $grc)
    [ "$s$g" = okok ] || status=FAIL
    detail="$detail port ${PORTS[$i]}: softrdma rc=$src $s, ${GUESTS[$i]} rc=$grc $g;"
  done
  stop_capture
  wd=$(decode "$OUT/$t.wire.pcap") || status=FAIL
  record "$t" "$status" "$detail wire: $wd"
  echo "   -> $status:$detail wire: $wd"
}

size_of() { case $1 in *lat*) echo 8 ;; *) echo 4096 ;; esac; }

for prog in $TESTS; do
  flags="-n $ITERS -s $(size_of "$prog") -F"
  run_case "$prog-softrdma-servers" perftest_ok server \
    "$prog -d softrdma0 -x 1 -p %p $flags" "$prog -d rxe0 -x 1 -p %p $flags %h" ""
  run_case "$prog-softrdma-clients" perftest_ok client \
    "$prog -d softrdma0 -x 1 -p %p $flags %g" "$prog -d rxe0 -x 1 -p %p $flags" "Couldn't connect"
done
# rdma_cm: rxe's CM MADs must reach the right process of the address (REQ by Service ID, the
# rest by communication ID), and softrdma's reach the right rxe id.
run_case rping-softrdma-servers rping_ok server \
  "rping -s -a %h -p %p -C 10 -V" "rping -c -a %h -p %p -C 10 -V" ""
run_case rping-softrdma-clients rping_ok client \
  "rping -c -a %g -p %p -C 10 -V" "rping -s -a %g -p %p -C 10 -V" REJECTED
finish "shared address matrix"
