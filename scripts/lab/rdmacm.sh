#!/bin/bash
# scripts/lab/rdmacm.sh: this host's UNMODIFIED Debian librdmacm programs (rdmacm-utils 44:
# rping, ucmatose, udaddy, mckey, cmtime, rdma_server/rdma_client; perftest 4.5 with -R), run
# on softrdma through `softrdma exec` (softrdma's librdmacm.so.1 and libibverbs.so.1), against
# the same programs on Linux Soft-RoCE (rxe, the kernel's rdma_cm) in a lab guest, in both
# directions. Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/rdmacm.sh
#
# (rping.sh, ucmatose.sh and udaddy.sh test softrdma's own Rust re-implementations of those
# tools; this part runs the real binaries.) Every case runs twice: host server (or receiver)
# with a guest client (sender), and guest server with a host client:
#   rping -v -V -C 10, and again with -S 65000 (both sides: exit 0, 10 "ping data" lines
#     each, no data mismatch)
#   ucmatose -c 4, udaddy (both sides: "return status 0")
#   mckey (UD multicast to 239.88.0.1; receiver and sender: "data transfers complete",
#     "return status 0")
#   cmtime -c 100 (rdma-core 44's cmtime server never exits: the client's exit status and
#     its step table decide; the server must still be running when the client is done, and
#     is then killed — in the guest through a stop file on a 9p share)
#   rdma_server / rdma_client ("rdma_server: end 0", "rdma_client: end 0")
#   ib_write_bw -R, ib_read_lat -R, ib_send_bw -R, ib_atomic_bw -R (-d softrdma0 on this
#     host, -d rxe0 -x 1 in the guest; result rows with plausible figures, except the
#     passive ib_read_lat server, which prints none). With this host as the client, Debian's
#     perftest 4.5-0.17 mostly meets its own rdma_cm race against the slow TCG guest (and
#     under loss, rarely, the guest's client against this host's server); such a run is
#     repeated, and a cell whose every attempt met it reads RACE, not PASS, and does not fail
#     the run: see "perftest 4.5-0.17's race" below for what is checked first.
#   rping-killed: an rping client pinging without end is killed (kill -9) after 5 s; its
#     server must end by itself at once (rping ends on RDMA_CM_EVENT_DISCONNECTED), and the
#     capture must show the dead client's DREQ: sent by the guest kernel's CM for a guest
#     client, and by `softrdma exec` from the farewell the client's CM left (see
#     softrdma::farewell) for a host client.
# then rping, ucmatose and ib_write_bw -R again with RDMACM_LOSS percent (default 3) of the
# RoCEv2 datagrams to and from this host dropped at random both ways (common.sh's set_loss,
# nftables in the namespace): they must still pass.
# Each side's own exit status and success output are checked; every run is captured on br0
# and the capture must show RoCEv2 traffic with 0 bad ICRC and 0 malformed packets, by three
# readers: `softrdma decode`, the lab's tools/roce_pcap.py (an independent ICRC check), and
# tshark (0 malformed frames, 0 expert errors; tshark 4.0 does not check the ICRC itself). tshark
# runs with the upper-layer protocols carried in InfiniBand payloads disabled (rpcordma,
# smb_direct, iser, ...): their heuristics claim perftest's rdma_cm key-exchange SENDs and
# report "Malformed Packet: RPCoRDMA" even in rxe<->rxe captures
# (testdata/conformance/write_bw_cm.pcap: 16 such frames; 0 with them disabled).
#
# Environment: SOFTRDMA_LAB (required), RDMACM_OUT (default target/lab/rdmacm), RDMACM_CASES
# (a subset of: rping rping-S65000 ucmatose udaddy mckey cmtime rdma_server rping-killed
# ib_write_bw ib_read_lat ib_send_bw ib_atomic_bw loss; default all), RDMACM_LOSS (default 3),
# RDMACM_ITERS (perftest -n, default 200), GUEST_TIMEOUT (default 150), LAB_NS (default
# rxe-rdmacm), LAB_TAPS (default "c1 c2"), CARGO_TARGET_DIR, CARGO_BUILD_JOBS.
# LAB_LOSS is not used (the loss applies to the loss runs only).
# Needs Debian's rdmacm-utils and perftest on this host, tshark and nft.
# Exit: 0 pass, 1 fail, 2 setup.
set -uo pipefail

export LAB_NS=${LAB_NS:-rxe-rdmacm}
export LAB_TAPS=${LAB_TAPS:-c1 c2}
LOSS=${RDMACM_LOSS:-3}
# Room for a guest server's 80 s grace after its client (see run).
export GUEST_TIMEOUT=${GUEST_TIMEOUT:-150}
unset LAB_LOSS
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
START=$(date +%s)
lab_setup rdmacm.sh
# The softrdma-cli build leaves librdmacm.so.1 and libibverbs.so.1 out of target/release:
# they are softrdma-ibverbs' cdylib and build-script outputs.
(cd "$ROOT" && cargo build --release -q -p softrdma-ibverbs) || { echo "rdmacm.sh: build failed"; exit 2; }
[ -e "$(dirname "$BIN")/librdmacm.so.1" ] || { echo "rdmacm.sh: no librdmacm.so.1 beside $BIN"; exit 2; }
for tool in rping ucmatose udaddy mckey cmtime rdma_server rdma_client ib_write_bw ib_read_lat \
    ib_send_bw ib_atomic_bw tshark nft; do
  command -v "$tool" >/dev/null || { echo "rdmacm.sh: $tool missing (apt-get install rdmacm-utils perftest tshark nftables)"; exit 2; }
done
GUEST=${LAB_TAPS%% *}
HOST_IP=10.88.0.1
G=10.88.0.11
MCAST=239.88.0.1
ITERS=${RDMACM_ITERS:-200}
CASES=${RDMACM_CASES:-rping rping-S65000 ucmatose udaddy mckey cmtime rdma_server rping-killed ib_write_bw ib_read_lat ib_send_bw ib_atomic_bw loss}
OUT=${RDMACM_OUT:-$ROOT/target/lab/rdmacm}
CONSOLE=${RXE_LAB_BUILD:-/var/tmp/rxe-lab}/logs/$GUEST.log
SHARE=$OUT/share
mkdir -p "$OUT" "$SHARE"
rm -f "$OUT"/*.log "$OUT"/*.pcap "$OUT"/*.txt "$SHARE"/stop
HTIMEOUT=$(( GUEST_TIMEOUT + 30 ))
# The guest command's footer: its status, visible in the log, and as the guest's status.
FOOT='rc=$?; echo "tool-exit=$rc"; exit $rc'
# Marks the moment the guest's server starts (the guest is booted, rxe0 is up).
READY=rdmacm-guest-ready

# Upper-layer protocols of InfiniBand payloads and CM private data, off (see above).
TSHARK_OFF=()
for p in rpcordma smb_direct smc nvme-rdma lnet iser infiniband_sdp fcoib; do
  TSHARK_OFF+=(--disable-protocol "$p")
done
tshark "${TSHARK_OFF[@]}" -r "$ROOT/testdata/conformance/rdma_cm.pcap" -c 1 >/dev/null 2>&1 ||
  { echo "rdmacm.sh: tshark does not take ${TSHARK_OFF[*]}"; exit 2; }

# wire PCAP -> one line; 0 if the capture has RoCEv2 traffic, no bad ICRC, nothing malformed
wire() {
  local f=$1 ok=0 sd rp roce bad ts mal err
  sd=$(decode "$f") || ok=1
  roce=$(sed -n 's/.*roce: \([0-9]*\).*/\1/p' <<< "$sd")
  bad=$(sed -n 's/.*icrc_bad: \([0-9]*\).*/\1/p' <<< "$sd")
  mal=$(sed -n 's/.*malformed: \([0-9]*\).*/\1/p' <<< "$sd")
  [ "${roce:-0}" -gt 0 ] && [ "${bad:-1}" = 0 ] && [ "${mal:-1}" = 0 ] || ok=1
  rp=$(python3 "$LAB/tools/roce_pcap.py" "$f" 2>&1 | sed -n 's/^ *RoCEv2 packets: \([0-9]*\), ICRC mismatches: \([0-9]*\).*/\1 \2/p')
  set -- $rp
  [ "${2:-1}" = 0 ] && [ "${1:-0}" = "${roce:-x}" ] || ok=1
  rp="roce_pcap ${1:-?} pkts ${2:-?} icrc bad"
  ts=$(tshark "${TSHARK_OFF[@]}" -r "$f" -Y infiniband 2>/dev/null | wc -l)
  mal=$(tshark "${TSHARK_OFF[@]}" -r "$f" -Y '_ws.malformed' 2>/dev/null | wc -l)
  err=$(tshark "${TSHARK_OFF[@]}" -r "$f" -Y '_ws.expert.severity == error' 2>/dev/null | wc -l)
  [ "$ts" -gt 0 ] && [ "$mal" = 0 ] && [ "$err" = 0 ] || ok=1
  drops=$(grep -o '[0-9]* packets dropped by kernel' "$f.tcpdump.log" 2>/dev/null | cut -d' ' -f1)
  [ "${drops:-0}" = 0 ] || ok=1
  echo "decode [$sd] $rp | tshark $ts ib frames, $mal malformed, $err expert errors | tcpdump drops ${drops:-?}"
  return $ok
}

# --- success checks of each tool's output: CHECK LOG -> 0 if it shows success -----------
# text LOG -> the log without the guest's "[c1] " prefixes and carriage returns
text() { sed -E 's/^\[[a-z0-9]+\] ?//' "$1" | tr -d '\r'; }
pings() { # LOG -> how many "ping data" lines
  text "$1" | grep -cE '^(server )?ping data: rdma-ping-'
}
ok_rping() { [ "$(pings "$1")" -ge 10 ] && ! grep -qiE 'mismatch|error' "$1"; }
ok_status0() { grep -q 'return status 0' "$1"; }
ok_mckey() { grep -q 'data transfers complete' "$1" && grep -q 'return status 0' "$1"; }
ok_cmtime_client() {
  local t; t=$(text "$1")
  grep -q '^step  *total ms' <<< "$t" && grep -qE '^connect *: *[0-9.]+' <<< "$t" &&
    grep -qE '^disconnect *: *[0-9.]+' <<< "$t" && ! grep -qE 'event: |error' <<< "$t"
}
# The cmtime server (never exits): the wrapper's word that it was running until stopped.
ok_cmtime_server() { grep -q 'cmtime-server-alive' "$1"; }
ok_rdma_server() { grep -q 'rdma_server: end 0' "$1"; }
ok_rdma_client() { grep -q 'rdma_client: end 0' "$1"; }
rows() { text "$1" | grep -E '^ [0-9]+ +[0-9]+ +[0-9.]+' | tr -s ' \t' ' '; }
ok_bw() { # bytes iters peak avg msgrate, with iterations and a message rate
  local r b n p a m; r=$(rows "$1"); [ -n "$r" ] || return 1
  while read -r b n p a m _; do
    awk -v n="$n" -v a="$a" -v m="$m" 'BEGIN { exit !(n > 0 && a >= 0 && m > 0) }' || return 1
  done <<< "$r"
}
ok_lat() { # bytes iters t_min t_max t_typical ...: 0 < t_min <= t_typical <= t_max
  local r b n mn mx ty; r=$(rows "$1"); [ -n "$r" ] || return 1
  while read -r b n mn mx ty _; do
    awk -v a="$mn" -v b="$mx" -v c="$ty" 'BEGIN { exit !(a > 0 && a <= c && c <= b) }' || return 1
  done <<< "$r"
}
ok_norows() { [ -z "$(rows "$1")" ] && grep -q 'Data ex. method : rdma_cm' "$1"; }
# The killed rping client: it pinged, was killed as planned, and its side's DREQ is on the wire.
ok_killed_client() {
  local src=$G
  case $1 in *.host.log) src=$HOST_IP ;; esac
  [ "$(pings "$1")" -ge 3 ] && grep -q 'rping-client-killed' "$1" &&
    [ -n "$(tshark -r "${1%.*.log}.wire.pcap" -Y "ip.src == $src && infiniband.mad.attributeid == 0x0015" 2>/dev/null | head -1)" ]
}
# Its server: it served pings and ended by itself, without errors.
ok_killed_server() { [ "$(pings "$1")" -ge 3 ] && ! grep -qiE 'mismatch|error|still running' "$1"; }

# brief LOG -> the line that best shows the outcome
brief() {
  local n; n=$(pings "$1")
  [ "$n" -gt 0 ] && { echo "$n pings"; return; }
  text "$1" | grep -E \
    'return status|data transfers complete|rdma_(server|client): end|^connect *:|^ [0-9]+ +[0-9]+ +[0-9.]+|tool-exit|alive|error|Error|REJECTED|UNREACHABLE|timed out|Couldn' |
    grep -v '^tool-exit' | tail -1 | tr -s ' \t' ' ' | cut -c1-70
}

# wait_guest PATTERN PID SECS -> 0 when the guest's console shows PATTERN (the guest is
# alive). The console file, not guest.sh's output: that comes through mawk, which reads its
# pipe in blocks, so lines show up there late.
wait_guest() {
  local deadline=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    grep -q "$1" "$CONSOLE" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

# guest_accepted PCAP -> 0 if the (live) capture has a CM ConnectReply from the guest
guest_accepted() {
  [ -n "$(tshark -r "$1" -Y "ip.src == $G && infiniband.mad.attributeid == 0x0013" 2>/dev/null | head -1)" ]
}

# A host client fails only because the guest's server is not listening yet.
NOT_YET='REJECTED|UNREACHABLE|ADDR_ERROR|ROUTE_ERROR|rdma_connect|connect error|Connection refused|Couldn.t connect|Unable to perform rdma_client|failed to connect|unable to connect'

declare -A CELL
ORDER=()
# run CASE DIR HOST_CMD GUEST_CMD HOST_CHECK GUEST_CHECK [GUEST_READY_PATTERN]
#   DIR host-server: the host program starts first (server/receiver), the guest's client
#   (sender) goes through rxe-retry. DIR host-client: the guest's server starts first; the host
#   client starts once the guest log shows GUEST_READY_PATTERN (default: $READY), and is
#   retried while it fails with $NOT_YET.
run() {
  local case=$1 dir=$2 hcmd=$3 gcmd=$4 hcheck=$5 gcheck=$6 ready=${7:-$READY}
  local hrc grc gpid hpid status=ok wd tries=0 t0 secs hb gb
  TAG="$case.$dir"
  t0=$(date +%s)
  rm -f "$SHARE/stop"
  echo "== $case, $dir: host [softrdma exec -- $hcmd]  guest [$gcmd]"
  start_capture "$OUT/$TAG.wire.pcap"
  if [ "$dir" = host-server ]; then
    # Not through nsx (a backgrounded function is a subshell): $! is the host program's
    # timeout, so that killing it frees 10.88.0.1:4791 for the next run.
    # shellcheck disable=SC2086
    ip netns exec "$NS" timeout -k 5 "$HTIMEOUT" "$BIN" exec --ip "$HOST_IP" -- stdbuf -oL -eL $hcmd \
      > "$OUT/$TAG.host.log" 2>&1 &
    hpid=$!
    GUEST_SHARE=$SHARE "$LAB/guest.sh" "$GUEST" "$G" "rxe-retry 60 $gcmd; $FOOT" \
      > "$OUT/$TAG.guest.log" 2>&1
    grc=$?
    if [ "$case" = cmtime ]; then
      # cmtime's server never exits: it must still be running now; then it is stopped.
      if kill -0 "$hpid" 2>/dev/null; then echo cmtime-server-alive >> "$OUT/$TAG.host.log"; fi
      kill "$hpid" 2>/dev/null
    else
      # The server ends after its client; give it a while, not the whole host timeout.
      local left=$(( grc == 0 ? 40 : 3 ))
      while [ $left -gt 0 ] && kill -0 "$hpid" 2>/dev/null; do sleep 1; left=$((left - 1)); done
      kill -0 "$hpid" 2>/dev/null && echo "(rdmacm.sh: the host program was still running well after the guest ended: killed)" >> "$OUT/$TAG.host.log"
      kill "$hpid" 2>/dev/null
    fi
    wait "$hpid"; hrc=$?
    [ "$case" = cmtime ] && ok_cmtime_server "$OUT/$TAG.host.log" && hrc=0
  else
    : > "$CONSOLE"  # no marker of the last run
    # The marker is spelled apart in the command, which the console may echo. The server
    # runs in the background: when the host client is done (the stop file), it has GRACE s
    # to end by itself, else it is killed (its status then fails the run) — a server whose
    # client failed would otherwise wait for the whole guest timeout. 80 s but for perftest
    # (15 s): the kernel's CM resends an unanswered DREQ 15 times about 4.4 s apart before
    # it reports the disconnect, and softrdma's CM, which lives in the host process, answers
    # nothing once that process has exited (a DREP lost under LAB loss is not resent).
    local gwrap="$gcmd" grace=160
    case $case in ib_*) grace=30 ;; rping-killed) grace=20 ;; esac
    [ "$case" = cmtime ] || gwrap="$gcmd & s=\$!; while kill -0 \$s 2>/dev/null && [ ! -e /mnt/share/stop ]; do sleep 0.3; done; for i in \$(seq $grace); do kill -0 \$s 2>/dev/null || break; sleep 0.5; done; kill \$s 2>/dev/null && echo 'rdmacm.sh: server still running $((grace / 2)) s after its client ended: killed'; wait \$s"
    GUEST_SHARE=$SHARE "$LAB/guest.sh" "$GUEST" "$G" "echo ${READY%-*}''-${READY##*-}; $gwrap; $FOOT" \
      > "$OUT/$TAG.guest.log" 2>&1 &
    gpid=$!
    if wait_guest "$ready" "$gpid" 100; then
      sleep 2
      local deadline=$(( $(date +%s) + 60 ))
      while :; do
        tries=$((tries + 1))
        # shellcheck disable=SC2086
        nsx timeout -k 5 "$HTIMEOUT" "$BIN" exec --ip "$HOST_IP" -- stdbuf -oL -eL $hcmd > "$OUT/$TAG.host.log" 2>&1
        hrc=$?
        # Retried only while the guest's CM has accepted nothing (no REP from it on the wire):
        # once its server took a connection, a second client would meet it mid-test.
        if [ $hrc -ne 0 ] && [ "$(date +%s)" -lt "$deadline" ] && kill -0 "$gpid" 2>/dev/null &&
           grep -qE "$NOT_YET" "$OUT/$TAG.host.log" && ! guest_accepted "$OUT/$TAG.wire.pcap"; then
          cp "$OUT/$TAG.host.log" "$OUT/$TAG.host.try$tries.log"
          sleep 1; continue
        fi
        break
      done
    else
      echo "(the guest never showed '$ready')" > "$OUT/$TAG.host.log"; hrc=99
    fi
    # Servers that never exit are told to stop (GUEST_SHARE stop file).
    touch "$SHARE/stop"
    wait "$gpid"; grc=$?
  fi
  cp "$CONSOLE" "$OUT/$TAG.console.log" 2>/dev/null
  stop_capture
  secs=$(( $(date +%s) - t0 ))
  sed 's/^/   host: /' "$OUT/$TAG.host.log" | tail -n 25; sed 's/^/   /' "$OUT/$TAG.guest.log" | tail -n 25
  [ "$hrc" = 0 ] || status=FAIL
  [ "$grc" = 0 ] || status=FAIL
  hb=ok; "$hcheck" "$OUT/$TAG.host.log" || { hb=FAIL; status=FAIL; }
  gb=ok; "$gcheck" "$OUT/$TAG.guest.log" || { gb=FAIL; status=FAIL; }
  wd=$(wire "$OUT/$TAG.wire.pcap") || status=FAIL
  local detail="${secs}s host rc=$hrc out=$hb [$(brief "$OUT/$TAG.host.log")] guest rc=$grc out=$gb [$(brief "$OUT/$TAG.guest.log")]"
  [ $tries -gt 1 ] && detail="$detail (host client tries: $tries)"
  detail="$detail | wire: $wd"
  record "$TAG" "$status" "$detail"
  echo "   -> $status: $detail"
  [ -n "${CELL[$case]:-}" ] || ORDER+=("$case")
  CELL[$case.$dir]=$status
  CELL[$case]=1
}

wanted() { [[ " $CASES " == *" $1 "* ]]; }

# pair CASE SERVER_CMD(ADDR) CLIENT_CMD(ADDR) SERVER_CHECK CLIENT_CHECK: both directions;
# @S@ in the commands is replaced by the server's address, @B@ by the own address.
pair() {
  local c=$1 s=$2 cl=$3 sck=$4 cck=$5
  local hs=${s//@B@/$HOST_IP} gc=${cl//@S@/$HOST_IP}; gc=${gc//@B@/$G}
  run "$c" host-server "$hs" "$gc" "$sck" "$cck"
  local gs=${s//@B@/$G} hc=${cl//@S@/$G}; hc=${hc//@B@/$HOST_IP}
  run "$c" host-client "$hc" "$gs" "$cck" "$sck"
}

# perftest 4.5-0.17's race (mostly host client, guest server). With -R the client first connects a
# control QP, exchanges versions and keys over it, and then at once sends the REQ of the test
# QP; the server, meanwhile, destroyed its control listener when it accepted, and listens again
# on the same port only once its last key SEND is acknowledged. softrdma's client sends that
# REQ about 0.4 ms after its ACK of the server's last SEND (rxe's client in a TCG guest takes
# 3.8 ms: testdata/conformance/write_bw_cm.pcap), before the TCG guest listens again: rxe
# answers REJ reason 8 (no listener), as any IB CM answers any fast client. perftest means to
# retry that (10 times, 100 ms apart: rdma_cm_client_connection), but in 4.5-0.17 the first
# failure destroys the ids, the event channel and the node array, and the retry reuses them:
# rdma_resolve_addr on a freed id read from a freed array. softrdma's librdmacm answers EINVAL
# ("Failed to resolve RDMA CM address", then "Failed to destroy RDMA CM ID number 0"); the
# kernel's librdmacm dereferences it: the same race provoked rxe to rxe (perftest_race.sh:
# the server guest made slower than its client) ends in "Segmentation fault". Upstream fixed
# the retry in perftest 3d9d8d0 ("Fix crashes and logical flaws in RDMA CM connection retry",
# first released in 26.04.17: it reallocates the nodes and ids before each retry), which no
# Debian perftest has yet. So, not an interop fault, and nothing softrdma can do without
# slowing its client down on purpose: a run that fails exactly so is repeated with a fresh
# guest, up to PERFTEST_ATTEMPTS times, and if every attempt fails so, the cell reads RACE
# (with the timing of the last attempt) and does not fail the run. Exactly so means all of:
# the client's log shows REJECTED with status 8 and then 0.17's broken retry; the capture
# shows the guest accepted the control connection, and its REJ reason 8 answered our next
# REQ, sent after our ACK of its last SEND. Earlier attempts' logs and captures stay in OUT
# as *.attemptN.*.
# The same race can hit the other direction under loss: a lost ACK of softrdma's last key
# SEND holds softrdma's server back for its retransmission (about 30 ms), and rxe's client,
# which moves on once it has received the SEND, sends its test REQ first (REJ 8 from this
# host; the guest's rxe-retry then runs a second client against the test listener). A
# host-server run that failed with that on the wire (our REP for the control connection,
# then our REJ 8 to the guest's next REQ) is repeated likewise.
PERFTEST_ATTEMPTS=${RDMACM_PERFTEST_ATTEMPTS:-4}
# race_timing PCAP SERVER CLIENT -> the timing of the race if the capture shows it (status 0):
# SERVER accepted the control connection, and answered CLIENT's next REQ with REJ 8
race_timing() {
  tshark -r "$1" -T fields -e frame.time_relative -e ip.src -e infiniband.bth.opcode \
    -e infiniband.mad.attributeid -e infiniband.cm.rej.reason 2>/dev/null |
    awk -F'\t' -v s="$2" -v c="$3" '
      $2 == s && $4 == "0x0013" && !rep { rep = 1 }
      $2 == c && $3 == 17 { ack = $1 }
      rep && !req && $2 == c && $4 == "0x0010" { req = $1; last = ack }
      req && !rej && $2 == s && $4 == "0x0012" { rej = $1; reason = $5 }
      END {
        if (!(req && last && rej && reason == "0x0008")) exit 1
        printf "test REQ %.2f ms after the client'"'"'s ACK of the last key SEND, REJ 8 %.2f ms after the REQ\n",
          (req - last) * 1000, (rej - req) * 1000
      }'
}
# perftest_race TAG DIR -> 0 if the run failed by that race (see above)
perftest_race() {
  if [ "$2" = host-client ]; then
    grep -q 'Event: RDMA_CM_EVENT_REJECTED; error: 8' "$OUT/$1.host.log" &&
      grep -q 'Failed to resolve RDMA CM address' "$OUT/$1.host.log" &&
      race_timing "$OUT/$1.wire.pcap" "$G" "$HOST_IP" >/dev/null
  else
    race_timing "$OUT/$1.wire.pcap" "$HOST_IP" "$G" >/dev/null
  fi
}

# race_cell CASE DIR HOST_CMD GUEST_CMD HOST_CHECK GUEST_CHECK: run, repeated while it fails
# by perftest 0.17's race (see above)
race_cell() {
  local c=$1 dir=$2 n=1 tag=$1.$2 r raced=0 line s=$G cl=$HOST_IP
  [ "$dir" = host-server ] && { s=$HOST_IP; cl=$G; }
  while :; do
    run "$c" "$dir" "$3" "$4" "$5" "$6"
    [ "${CELL[$tag]}" = ok ] && break
    perftest_race "$tag" "$dir" || break
    [ $n -lt "$PERFTEST_ATTEMPTS" ] || { raced=1; break; }
    echo "   (perftest 4.5-0.17's rdma_cm race, see the script: attempt $((n + 1)) with a fresh guest)"
    for r in "$OUT/$tag".*; do
      case $r in *.attempt[0-9]*) ;; *) mv "$r" "$OUT/$tag.attempt$n.${r#"$OUT/$tag".}" ;; esac
    done
    unset 'RESULTS[-1]'
    n=$((n + 1))
  done
  if [ $raced = 1 ]; then
    # The result row's status column (34 + 1 characters in) becomes "race".
    line=${RESULTS[-1]}
    RESULTS[-1]="$(printf '%-34s %-4s %s' "$tag" race "${line:40}") | all $n attempts met perftest 4.5-0.17's rdma_cm race, not an interop fault (see the script): $(race_timing "$OUT/$tag.wire.pcap" "$s" "$cl")"
    CELL[$tag]="RACE (perftest 0.17, $n tries)"
  elif [ $n -gt 1 ]; then
    RESULTS[-1]="${RESULTS[-1]} (attempt $n of $PERFTEST_ATTEMPTS: the earlier ones met perftest 4.5-0.17's rdma_cm race)"
    CELL[$tag]="${CELL[$tag]} (try $n)"
  fi
  FAILED=0
  for r in "${RESULTS[@]}"; do
    case $(awk '{print $2}' <<< "$r") in ok | race) ;; *) FAILED=1 ;; esac
  done
}

perftest() { # CASE PROGRAM FLAGS SERVER_CHECK CLIENT_CHECK
  local c=$1 p=$2 f=$3 sck=$4 cck=$5
  race_cell "$c" host-server "$p -R -d softrdma0 -F $f" "$p -R -d rxe0 -x 1 -F $f $HOST_IP" "$sck" "$cck"
  race_cell "$c" host-client "$p -R -d softrdma0 -F $f $G" "$p -R -d rxe0 -x 1 -F $f" "$cck" "$sck"
}

# The killed client: pings its server until it is killed (kill -9) after 5 s; exits 0 if it
# pinged and died of that kill (the rping-killed case).
cat > "$SHARE/killed-client.sh" <<'KILLED'
rping -c -a "$1" -v -C 100000000 & p=$!
sleep 5
kill -9 $p
wait $p; rc=$?
[ $rc = 137 ] && echo rping-client-killed
[ $rc = 137 ]
KILLED

matrix() {
  local suffix=${1:-}
  wanted rping && pair "rping$suffix" "rping -s -a @B@ -v -V -C 10" "rping -c -a @S@ -v -V -C 10" ok_rping ok_rping
  if [ -z "$suffix" ] && wanted rping-S65000; then
    pair rping-S65000 "rping -s -a @B@ -v -V -C 10 -S 65000" "rping -c -a @S@ -v -V -C 10 -S 65000" ok_rping ok_rping
  fi
  wanted ucmatose && pair "ucmatose$suffix" "ucmatose -b @B@ -c 4" "ucmatose -s @S@ -c 4" ok_status0 ok_status0
  [ -n "$suffix" ] || {
    wanted udaddy && pair udaddy "udaddy -b @B@" "udaddy -s @S@" ok_status0 ok_status0
    if wanted mckey; then
      # The receiver is the "server": it must have joined before the sender sends (the
      # sender sends 3 s after its join). Host receiver: it joins long before the guest has
      # booted. Guest receiver: the host sender starts once the guest printed its join.
      run mckey host-server "mckey -m $MCAST -b $HOST_IP" "mckey -m $MCAST -b $G -s" ok_mckey ok_mckey
      run mckey host-client "mckey -m $MCAST -b $HOST_IP -s" "mckey -m $MCAST -b $G" ok_mckey ok_mckey \
        'mckey: joined dgid'
    fi
    if wanted cmtime; then
      run cmtime host-server "cmtime -b $HOST_IP -c 100" "cmtime -s $HOST_IP -b $G -c 100" \
        ok_cmtime_server ok_cmtime_client
      # In the guest the server runs in the background until the stop file appears.
      run cmtime host-client "cmtime -s $G -b $HOST_IP -c 100" \
        "cmtime -b $G -c 100 & s=\$!; for i in \$(seq 400); do [ -e /mnt/share/stop ] && break; sleep 0.5; done; if kill -0 \$s; then echo cmtime-server-alive; kill \$s; true; else wait \$s; echo cmtime-server-exited=\$?; false; fi" \
        ok_cmtime_client ok_cmtime_server
    fi
    wanted rdma_server && pair rdma_server "rdma_server -s @B@" "rdma_client -s @S@" ok_rdma_server ok_rdma_client
    if wanted rping-killed; then
      # rping's server ends on RDMA_CM_EVENT_DISCONNECTED: the killed client's DREQ.
      run rping-killed host-server "rping -s -a $HOST_IP -v" \
        "bash /mnt/share/killed-client.sh $HOST_IP" ok_killed_server ok_killed_client
      run rping-killed host-client "bash $SHARE/killed-client.sh $G" "rping -s -a $G -v" \
        ok_killed_client ok_killed_server
    fi
  }
  wanted ib_write_bw && perftest "ib_write_bw$suffix" ib_write_bw "-n $ITERS -s 4096" ok_bw ok_bw
  [ -n "$suffix" ] || {
    wanted ib_read_lat && perftest ib_read_lat ib_read_lat "-n $ITERS -s 4096" ok_norows ok_lat
    wanted ib_send_bw && perftest ib_send_bw ib_send_bw "-n $ITERS -s 4096" ok_bw ok_bw
    wanted ib_atomic_bw && perftest ib_atomic_bw ib_atomic_bw "-n $ITERS" ok_bw ok_bw
  }
}

matrix
if wanted loss; then
  set_loss "$LOSS" || { echo "rdmacm.sh: could not set the loss (needs nft)"; exit 2; }
  echo "== dropping ${LOSS}% of RoCEv2 datagrams to and from this host, both ways"
  CASES="$CASES rping ucmatose ib_write_bw" matrix "+loss$LOSS"
  clear_loss
fi

{
  echo
  echo "== librdmacm interop matrix: unmodified tools through softrdma exec (10.88.0.1) <-> rxe ($G)"
  printf '%-22s %-26s %-26s\n' case "host server, guest client" "guest server, host client"
  for c in "${ORDER[@]}"; do
    hs=${CELL[$c.host-server]:--}; hc=${CELL[$c.host-client]:--}
    printf '%-22s %-26s %-26s\n' "$c" "${hs/#ok/PASS}" "${hc/#ok/PASS}"
  done
  echo "(mckey: server = receiver, client = sender; captures and logs in $OUT; $(( $(date +%s) - START )) s)"
  echo
} | tee "$OUT/summary.txt"
printf '%s\n' "${RESULTS[@]}" > "$OUT/results.txt"
finish "rdmacm matrix"
