#!/bin/bash
# scripts/lab/errpaths.sh: RC error paths, packet by packet, against Linux Soft-RoCE (rxe)
# and softrdma. Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab bash scripts/lab/errpaths.sh
#
# scripts/lab/errpaths.py (the injector, at 10.88.0.2 in the lab namespace) sends the same
# crafted RoCEv2 packets to an RC QP of scripts/lab/errpaths_dut.c, which runs
#   1. on softrdma, on the lab host (10.88.0.1), through `softrdma exec`;
#   2. on rxe, in one lab guest (10.88.0.11), booted once for all the cases;
# and records each device's answers (NAK syndromes, ACKs, retries, completion statuses, the
# QP state afterwards) in ERR_OUT/softrdma.txt and ERR_OUT/rxe.txt, the fixture format of
# crates/proto/tests/rxe_errpaths.rs. The two are then compared line by line (diff); the
# differences softrdma keeps on purpose are the documented exceptions of that test, which
# replays the rxe answers against softrdma's engine. ERR_FIXTURE=1 copies rxe.txt over the
# test's fixture (crates/proto/tests/fixtures/rxe_errpaths.txt).
#
# Environment: SOFTRDMA_LAB (required), ERR_OUT (default target/lab/errpaths), ERR_ONLY
# (comma-separated case names), ERR_FIXTURE, ERR_RXE_PANIC=1 (also send rxe the case that
# panics its kernel, last: the guest dies there), GUEST_TIMEOUT (default 600), LAB_NS (default
# rxe-errpaths), CARGO_TARGET_DIR, CARGO_BUILD_JOBS. Needs a C compiler and libibverbs-dev on
# this host (errpaths_dut is built here and run in the guest, whose Debian matches this
# host's). Exit: 0 if both runs completed every case, 1 otherwise, 2 if the setup failed.
set -uo pipefail

export LAB_NS=${LAB_NS:-rxe-errpaths}
export LAB_TAPS=${LAB_TAPS:-e1}
export GUEST_TIMEOUT=${GUEST_TIMEOUT:-600}
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup errpaths.sh
(cd "$ROOT" && cargo build --release -q -p softrdma-ibverbs) || { echo "errpaths.sh: build failed"; exit 2; }
OUT=${ERR_OUT:-$ROOT/target/lab/errpaths}
HOST_IP=10.88.0.1
INJ_IP=10.88.0.2
GUEST_IP=10.88.0.11
GUEST=${LAB_TAPS%% *}
mkdir -p "$OUT"
cc -O1 -Wall -Werror -o "$OUT/errpaths_dut" "$ROOT/scripts/lab/errpaths_dut.c" -libverbs ||
  { echo "errpaths.sh: cannot build errpaths_dut (libibverbs-dev installed?)"; exit 2; }
# The injector's own address on the bridge: the devices answer it there.
nsx ip addr replace "$INJ_IP/24" dev br0 || exit 2
trap 'stop_capture; clear_loss; nsx ip addr del "$INJ_IP/24" dev br0 2>/dev/null' EXIT
INJ=(nsx python3 "$ROOT/scripts/lab/errpaths.py" --src "$INJ_IP")
[ -n "${ERR_ONLY:-}" ] && INJ+=(--only "$ERR_ONLY")
# A reserved opcode panics the guest's kernel (see errpaths.py): rxe is spared it unless asked.
RXE_SKIP=(--skip opcode_reserved)
[ -n "${ERR_RXE_PANIC:-}" ] && RXE_SKIP=()
NCASES=$("${INJ[@]}" --count x)
RXE_NCASES=$("${INJ[@]}" "${RXE_SKIP[@]}" --count x)

# ended DEVICE INJECTOR_RC DUT_PID: waits for the DUT (or its guest), records the run.
INJ_RC=
ended() {
  local drc
  wait "$3"; drc=$?
  stop_capture
  tail -1 "$OUT/$1.injector.log"
  if [ "$2" = 0 ] && [ $drc = 0 ]; then record "$1" ok "injector rc=$2 dut rc=$drc"
  else record "$1" FAIL "injector rc=$2 dut rc=$drc (logs in $OUT)"; fi
  INJ_RC=$2
}

# 1. softrdma on the host.
echo "== softrdma: errpaths_dut through softrdma exec on $HOST_IP ($NCASES cases)"
# (between two addresses of this host: over lo, not the bridge)
start_capture "$OUT/softrdma.pcap" lo
nsx timeout -k 5 600 "$BIN" exec --ip "$HOST_IP" -- "$OUT/errpaths_dut" 18600 "$NCASES" \
  > "$OUT/softrdma.dut.log" 2>&1 &
dpid=$!
"${INJ[@]}" --device softrdma --out "$OUT/softrdma.txt" "$HOST_IP" > "$OUT/softrdma.injector.log" 2>&1
ended softrdma $? $dpid

# 2. rxe in a guest: the DUT serves NCASES sessions, then the guest powers off.
echo "== rxe: errpaths_dut in guest $GUEST ($GUEST_IP, $RXE_NCASES cases)"
start_capture "$OUT/rxe.pcap"
GUEST_SHARE="$OUT" "$LAB/guest.sh" "$GUEST" "$GUEST_IP" "/mnt/share/errpaths_dut 18600 $RXE_NCASES" \
  > "$OUT/rxe.guest.log" 2>&1 &
gpid=$!
"${INJ[@]}" "${RXE_SKIP[@]}" --device rxe --out "$OUT/rxe.txt" "$GUEST_IP" > "$OUT/rxe.injector.log" 2>&1
ended rxe $? $gpid
irc=$INJ_RC

# Every capture must decode with good ICRCs, and the only malformed packets in it be the
# ones the injector sent so on purpose (an unknown opcode).
for d in rxe softrdma; do
  want=$(sed -n 's/.*, \([0-9]*\) malformed on purpose.*/\1/p' "$OUT/$d.injector.log")
  w=$("$BIN" decode -q "$OUT/$d.pcap" 2>&1)
  if echo "$w" | grep -q "icrc_bad: 0, malformed: ${want:-x}\b"; then
    record "$d capture" ok "$w (malformed on purpose: $want)"
  else
    record "$d capture" FAIL "$w (malformed on purpose: ${want:-?})"
  fi
done
echo "== differences (rxe | softrdma), timings left out"
diff <(grep -v '^#' "$OUT/rxe.txt" | sed 's/:[0-9]*\( \|$\)/\1/g') \
  <(grep -v '^#' "$OUT/softrdma.txt" | sed 's/:[0-9]*\( \|$\)/\1/g') > "$OUT/diff.txt"
sed 's/^/   /' "$OUT/diff.txt"
if [ -n "${ERR_FIXTURE:-}" ] && [ $irc = 0 ]; then
  cp "$OUT/rxe.txt" "$ROOT/crates/proto/tests/fixtures/rxe_errpaths.txt"
  echo "== fixture updated: crates/proto/tests/fixtures/rxe_errpaths.txt"
fi
finish "errpaths (answers in $OUT/rxe.txt, $OUT/softrdma.txt)"
