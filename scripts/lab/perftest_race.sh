#!/bin/bash
# scripts/lab/perftest_race.sh: perftest 4.5-0.17's rdma_cm race between two rxe guests, no
# softrdma involved — the evidence that the RACE cells of rdmacm.sh are the tool's, not an
# interop fault. Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/perftest_race.sh
#
# Guest c1 runs `ib_send_bw -R` as the server at nice 19 and, once it listens, a busy loop at
# nice 0: the server, not the client, is now the slow side, as the TCG guest is against
# softrdma's client. Guest c2 runs the client once. The client's test-connection REQ then
# comes before the server listens again, rxe's CM answers REJ reason 8, and perftest 0.17's
# retry reuses the ids it destroyed (see rdmacm.sh): with the kernel's librdmacm, the client
# dies of a segmentation fault. Checked: the client's log shows REJECTED status 8 and it did
# not succeed; the capture shows the server accepted the control connection and rejected the
# second REQ with reason 8. Exit 0 when the race was shown, 1 if not, 2 on setup errors.
# Environment: SOFTRDMA_LAB (required), PERFTEST_RACE_OUT (default target/lab/perftest_race),
# PERFTEST_RACE_TOOL (default ib_send_bw), LAB_NS (default rxe-rdmacm), LAB_TAPS.
set -uo pipefail

export LAB_NS=${LAB_NS:-rxe-rdmacm}
export LAB_TAPS=${LAB_TAPS:-c1 c2}
export GUEST_TIMEOUT=${GUEST_TIMEOUT:-150}
unset LAB_LOSS
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
lab_setup perftest_race.sh
OUT=${PERFTEST_RACE_OUT:-$ROOT/target/lab/perftest_race}
T=${PERFTEST_RACE_TOOL:-ib_send_bw}
S=10.88.0.11 C=10.88.0.12
CONSOLE=${RXE_LAB_BUILD:-/var/tmp/rxe-lab}/logs/c1.log
mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/*.pcap

start_capture "$OUT/wire.pcap"
: > "$CONSOLE"
# The marker is spelled apart in the command, which the console may echo.
"$LAB/guest.sh" c1 $S "timeout 120 nice -n 19 $T -R -d rxe0 -x 1 -F -n 20 -s 4096 & s=\$!; until rdma res show cm_id | grep -q LISTEN; do sleep 0.1; done; sh -c 'while :; do :; done' & h=\$!; echo server''-listens; wait \$s; echo server-exit=\$?; kill \$h" \
  > "$OUT/server.log" 2>&1 &
spid=$!
for _ in $(seq 240); do grep -q server-listens "$CONSOLE" && break; sleep 0.5; done
"$LAB/guest.sh" c2 $C "$T -R -d rxe0 -x 1 -F -n 20 -s 4096 $S; echo client-exit=\$?" \
  > "$OUT/client.log" 2>&1
wait $spid
stop_capture

rej=$(tshark -r "$OUT/wire.pcap" -Y "ip.src == $S && infiniband.cm.rej.reason == 8" 2>/dev/null | head -1)
rep=$(tshark -r "$OUT/wire.pcap" -Y "ip.src == $S && infiniband.mad.attributeid == 0x0013" 2>/dev/null | head -1)
status=race-shown
grep -q 'RDMA_CM_EVENT_REJECTED; error: 8' "$OUT/client.log" || status=FAIL
grep -q 'client-exit=0' "$OUT/client.log" && status=FAIL
[ -n "$rej" ] && [ -n "$rep" ] || status=FAIL
tshark -r "$OUT/wire.pcap" -Y 'infiniband.mad.attributeid >= 0x0010' 2>/dev/null | sed 's/^/   /'
grep -E 'REJECTED|Segmentation|Failed|client-exit' "$OUT/client.log" | sed 's/^/   client: /'
echo "perftest 4.5-0.17 rxe<->rxe, slow server: $status (logs and capture in $OUT)"
[ "$status" = race-shown ]
