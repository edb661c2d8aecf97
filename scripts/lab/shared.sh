#!/bin/bash
# scripts/lab/shared.sh: two softrdma processes on the lab host's one address (10.88.0.1)
# talk to two rxe guests at the same time, in both directions (softrdma's shared address;
# see README "Many programs on one address"). Opt-in and root only.
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

# check NAME LOG RC: exit 0 and a result row.
check() {
  local status=ok
  [ "$3" = 0 ] && [ "$(rows "$2")" -ge 1 ] || status=FAIL
  echo "$status"
}

size_of() { case $1 in *lat*) echo 8 ;; *) echo 4096 ;; esac; }

for prog in $TESTS; do
  flags="-n $ITERS -s $(size_of "$prog") -F"
  # 1. softrdma servers on the one address, rxe clients.
  t="$prog-softrdma-servers"
  echo "== $t: two softrdma exec -- $prog servers on $HOST_IP:{${PORTS[*]}}, clients in ${GUESTS[*]}"
  start_capture "$OUT/$t.wire.pcap"
  spids=()
  for i in 0 1; do
    nsx timeout -k 5 $((GUEST_TIMEOUT + 30)) "$BIN" exec --ip "$HOST_IP" -- \
      "$prog" -d softrdma0 -x 1 -p "${PORTS[$i]}" $flags > "$OUT/$t.host$i.log" 2>&1 &
    spids+=($!)
  done
  gpids=()
  for i in 0 1; do
    "$LAB/guest.sh" "${GUESTS[$i]}" "${GUEST_IPS[$i]}" \
      "rxe-retry 60 $prog -d rxe0 -x 1 -p ${PORTS[$i]} $flags $HOST_IP" > "$OUT/$t.guest$i.log" 2>&1 &
    gpids+=($!)
  done
  detail=
  status=ok
  for i in 0 1; do
    wait "${gpids[$i]}"; grc=$?
    wait "${spids[$i]}"; src=$?
    s=$(check x "$OUT/$t.host$i.log" $src); g=$(check x "$OUT/$t.guest$i.log" $grc)
    [ "$s$g" = okok ] || status=FAIL
    detail="$detail port ${PORTS[$i]}: softrdma rc=$src $s, ${GUESTS[$i]} rc=$grc $g;"
  done
  stop_capture
  wd=$(decode "$OUT/$t.wire.pcap") || status=FAIL
  record "$t" "$status" "$detail wire: $wd"
  echo "   -> $status:$detail wire: $wd"

  # 2. rxe servers, softrdma clients on the one address.
  t="$prog-softrdma-clients"
  echo "== $t: $prog servers in ${GUESTS[*]}, two softrdma exec -- $prog clients on $HOST_IP"
  start_capture "$OUT/$t.wire.pcap"
  gpids=()
  for i in 0 1; do
    "$LAB/guest.sh" "${GUESTS[$i]}" "${GUEST_IPS[$i]}" \
      "$prog -d rxe0 -x 1 -p ${PORTS[$i]} $flags" > "$OUT/$t.guest$i.log" 2>&1 &
    gpids+=($!)
  done
  cpids=()
  for i in 0 1; do
    (
      deadline=$(( $(date +%s) + 90 ))
      while :; do
        nsx timeout -k 5 $((GUEST_TIMEOUT + 30)) "$BIN" exec --ip "$HOST_IP" -- \
          "$prog" -d softrdma0 -x 1 -p "${PORTS[$i]}" $flags "${GUEST_IPS[$i]}" > "$OUT/$t.host$i.log" 2>&1
        rc=$?
        # The guest's server is not listening yet: perftest's client cannot connect.
        if [ $rc -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && \
           grep -q "Couldn't connect" "$OUT/$t.host$i.log"; then
          sleep 0.5; continue
        fi
        exit $rc
      done
    ) &
    cpids+=($!)
  done
  detail=
  status=ok
  for i in 0 1; do
    wait "${cpids[$i]}"; src=$?
    wait "${gpids[$i]}"; grc=$?
    s=$(check x "$OUT/$t.host$i.log" $src); g=$(check x "$OUT/$t.guest$i.log" $grc)
    [ "$s$g" = okok ] || status=FAIL
    detail="$detail port ${PORTS[$i]}: softrdma rc=$src $s, ${GUESTS[$i]} rc=$grc $g;"
  done
  stop_capture
  wd=$(decode "$OUT/$t.wire.pcap") || status=FAIL
  record "$t" "$status" "$detail wire: $wd"
  echo "   -> $status:$detail wire: $wd"
done

# rdma_cm: rxe's CM MADs must reach the right process of the address (REQ by Service ID, the
# rest by communication ID), and softrdma's reach the right rxe id.
rping_ok() { [ "$2" = 0 ] && ! grep -qiE "error|fail" "$1" && echo ok || echo FAIL; }
t="rping-softrdma-servers"
echo "== $t: two softrdma exec -- rping -s on $HOST_IP:{${PORTS[*]}}, rping -c in ${GUESTS[*]}"
start_capture "$OUT/$t.wire.pcap"
spids=(); gpids=()
for i in 0 1; do
  nsx timeout -k 5 $((GUEST_TIMEOUT + 30)) "$BIN" exec --ip "$HOST_IP" -- \
    rping -s -a "$HOST_IP" -p "${PORTS[$i]}" -C 10 -V > "$OUT/$t.host$i.log" 2>&1 &
  spids+=($!)
done
for i in 0 1; do
  "$LAB/guest.sh" "${GUESTS[$i]}" "${GUEST_IPS[$i]}" \
    "rxe-retry 60 rping -c -a $HOST_IP -p ${PORTS[$i]} -C 10 -V" > "$OUT/$t.guest$i.log" 2>&1 &
  gpids+=($!)
done
detail=; status=ok
for i in 0 1; do
  wait "${gpids[$i]}"; grc=$?; wait "${spids[$i]}"; src=$?
  s=$(rping_ok "$OUT/$t.host$i.log" $src); g=$(rping_ok "$OUT/$t.guest$i.log" $grc)
  [ "$s$g" = okok ] || status=FAIL
  detail="$detail port ${PORTS[$i]}: softrdma rc=$src $s, ${GUESTS[$i]} rc=$grc $g;"
done
stop_capture
wd=$(decode "$OUT/$t.wire.pcap") || status=FAIL
record "$t" "$status" "$detail wire: $wd"
echo "   -> $status:$detail wire: $wd"

t="rping-softrdma-clients"
echo "== $t: rping -s in ${GUESTS[*]}, two softrdma exec -- rping -c on $HOST_IP"
start_capture "$OUT/$t.wire.pcap"
gpids=(); cpids=()
for i in 0 1; do
  "$LAB/guest.sh" "${GUESTS[$i]}" "${GUEST_IPS[$i]}" \
    "rping -s -a ${GUEST_IPS[$i]} -p ${PORTS[$i]} -C 10 -V" > "$OUT/$t.guest$i.log" 2>&1 &
  gpids+=($!)
done
for i in 0 1; do
  (
    deadline=$(( $(date +%s) + 90 ))
    while :; do
      nsx timeout -k 5 60 "$BIN" exec --ip "$HOST_IP" -- \
        rping -c -a "${GUEST_IPS[$i]}" -p "${PORTS[$i]}" -C 10 -V > "$OUT/$t.host$i.log" 2>&1
      rc=$?
      # The guest's server is not listening yet: the REQ is rejected.
      if [ $rc -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && grep -q REJECTED "$OUT/$t.host$i.log"; then
        sleep 0.5; continue
      fi
      exit $rc
    done
  ) &
  cpids+=($!)
done
detail=; status=ok
for i in 0 1; do
  wait "${cpids[$i]}"; src=$?; wait "${gpids[$i]}"; grc=$?
  s=$(rping_ok "$OUT/$t.host$i.log" $src); g=$(rping_ok "$OUT/$t.guest$i.log" $grc)
  [ "$s$g" = okok ] || status=FAIL
  detail="$detail port ${PORTS[$i]}: softrdma rc=$src $s, ${GUESTS[$i]} rc=$grc $g;"
done
stop_capture
wd=$(decode "$OUT/$t.wire.pcap") || status=FAIL
record "$t" "$status" "$detail wire: $wd"
echo "   -> $status:$detail wire: $wd"
finish "shared address matrix"
