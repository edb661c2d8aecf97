#!/bin/bash
# scripts/cc-netns.sh: DCQCN on the real wire, opt-in (root; iproute2, nftables, tcpdump).
#
#   bash scripts/cc-netns.sh            # CC_MARK_MBYTES=100 CC_SECONDS=4 by default
#
# Two network namespaces joined by a veth pair, a softrdma device in each. On the sender's
# side netfilter marks ECN Congestion Experienced on the RoCEv2 traffic beyond a rate
# (`nft ... udp dport 4791 limit rate over N mbytes/second ip ecn set ce`), as a congested
# switch would. `softrdma perf write-bw --cc dcqcn` runs across for CC_SECONDS; the receiver
# answers the marks with CNPs, the sender cuts its rate. Checked: CE marks and CNPs on the
# wire (tcpdump on the veth of the CE-marked packets and the CNPs, decoded by `softrdma
# decode`, every ICRC good), the counters on both sides (CE seen and CNPs sent by the
# receiver, CNPs received and rate cuts by the sender), and the sender's throughput settling
# near the marking threshold (between a third of it and twice it). The same run without
# congestion control is printed for comparison.
#
# Environment: CC_MARK_MBYTES (marking threshold, MB/s), CC_SECONDS, CC_OUT (captures and
# logs; default target/cc-netns), SOFTRDMA_BIN (default: target/release/softrdma, built if
# missing). Exit status: 0 if every check passed (or the script skipped), 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "cc-netns.sh: needs root (network namespaces, nftables): skipping"
  exit 0
fi
for tool in ip nft tcpdump; do
  if ! command -v "$tool" >/dev/null; then
    echo "cc-netns.sh: $tool is not installed: skipping"
    exit 0
  fi
done
MARK=${CC_MARK_MBYTES:-100}
SECS=${CC_SECONDS:-4}
OUT=${CC_OUT:-$ROOT/target/cc-netns}
BIN=${SOFTRDMA_BIN:-$ROOT/target/release/softrdma}
if [ ! -x "$BIN" ]; then
  (cd "$ROOT" && cargo build --release -q -p softrdma-cli) || exit 1
fi
mkdir -p "$OUT"
A=cc-a B=cc-b IPA=10.99.0.1 IPB=10.99.0.2

cleanup() {
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
}
trap cleanup EXIT
cleanup
ip netns add "$A" && ip netns add "$B" || exit 1
ip link add cc-va netns "$A" type veth peer name cc-vb netns "$B" || exit 1
ip -n "$A" addr add "$IPA/24" dev cc-va
ip -n "$B" addr add "$IPB/24" dev cc-vb
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
done
ip -n "$A" link set cc-va up
ip -n "$B" link set cc-vb up

mark() {
  ip netns exec "$A" nft -f - <<EOF
table ip cc {
  chain post {
    type filter hook postrouting priority 0;
    udp dport 4791 limit rate over $MARK mbytes/second ip ecn set ce
  }
}
EOF
}

# run TAG CC: one timed write-bw across, server in B, client in A; logs in $OUT/TAG.*
run() {
  local tag=$1 cc=$2
  ip netns exec "$B" timeout 60 "$BIN" perf write-bw --bind "$IPB" --cc "$cc" -D "$SECS" --no-gso \
    --counters > "$OUT/$tag.server.log" 2>&1 &
  local spid=$!
  # What congestion control is about: CE-marked packets and CNPs (BTH opcode 0x81).
  ip netns exec "$A" timeout $((SECS + 6)) tcpdump -i cc-va -U -c 20000 -w "$OUT/$tag.pcap" \
    'udp port 4791 and ((ip[1] & 3) == 3 or udp[8] == 0x81)' > "$OUT/$tag.tcpdump.log" 2>&1 &
  local tpid=$!
  sleep 0.5
  local rc=1
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    # --no-gso (both sides): one datagram per packet, so the capture on the veth shows each
    # packet (a GSO send crosses a veth unsplit).
    ip netns exec "$A" timeout 60 "$BIN" perf write-bw --bind "$IPA" --cc "$cc" -D "$SECS" \
      --no-gso --counters "$IPB" > "$OUT/$tag.client.log" 2>&1
    rc=$?
    grep -q "cannot connect" "$OUT/$tag.client.log" || break
    sleep 0.3
  done
  wait "$spid"; local src=$?
  sleep 0.5; kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
  echo "$rc $src"
}

counter() { awk -v k="$2" '$1 == k { print $2 }' "$1" | tail -1; }
bw() { grep -E '^ 65536 ' "$1" | awk '{print $4}' | tail -1; }

echo "== without congestion control, no marking"
read -r crc src < <(run plain none)
echo "   client rc=$crc server rc=$src, $(bw "$OUT/plain.client.log") MB/s"

mark || { echo "cc-netns.sh: nft refused the marking rule"; exit 1; }
echo "== DCQCN, CE marked beyond $MARK MB/s"
read -r crc src < <(run dcqcn dcqcn)
sed 's/^/   client: /' "$OUT/dcqcn.client.log" | grep -E 'MB/sec|65536|DCQCN|cnps|ecn_ce|cc_rate' 
sed 's/^/   server: /' "$OUT/dcqcn.server.log" | grep -E 'cnps|ecn_ce|cc_rate'
decoded=$("$BIN" decode "$OUT/dcqcn.pcap")
cnp_wire=$(grep -c ' CNP ' <<< "$decoded")
ce_wire=$(grep -c 'ecn=CE' <<< "$decoded")
summary=$(tail -1 <<< "$decoded")
rate=$(bw "$OUT/dcqcn.client.log")
echo "   wire: $summary; $ce_wire CE-marked packets, $cnp_wire CNPs"
grep ' CNP ' <<< "$decoded" | head -2 | sed 's/^/   /'

ok=1
check() { if eval "$1"; then echo "   ok: $2"; else echo "   FAIL: $2"; ok=0; fi; }
check '[ "$crc" = 0 ] && [ "$src" = 0 ]' "both sides exit 0"
check '[ "$cnp_wire" -gt 0 ] && [ "$ce_wire" -gt 0 ]' "CE marks and CNPs on the wire"
check 'grep -q "icrc_bad: 0, malformed: 0" <<< "$summary"' "every ICRC good, nothing malformed"
check '[ "$(counter "$OUT/dcqcn.server.log" cnps_sent)" -gt 0 ]' "the receiver sent CNPs"
check '[ "$(counter "$OUT/dcqcn.client.log" cc_rate_cuts)" -gt 0 ]' "the sender cut its rate"
check 'awk -v r="$rate" -v m="$MARK" "BEGIN { exit !(r > m / 3 && r < m * 2) }"' \
  "throughput $rate MB/s near the marking threshold of $MARK MB/s"
if command -v tshark >/dev/null; then
  # Wireshark's RPC-over-RDMA heuristic takes WRITE payloads for RPC; it is not RoCE's.
  tm=$(tshark --disable-protocol rpcordma -r "$OUT/dcqcn.pcap" -Y _ws.malformed 2>/dev/null | wc -l)
  tc=$(tshark -r "$OUT/dcqcn.pcap" -Y 'infiniband.bth.opcode == 0x81' 2>/dev/null | wc -l)
  check '[ "$tm" = 0 ] && [ "$tc" = "$cnp_wire" ]' "tshark reads the $tc CNPs, nothing malformed"
fi
[ $ok = 1 ] && echo "cc-netns: PASS" || echo "cc-netns: FAIL"
[ $ok = 1 ]
