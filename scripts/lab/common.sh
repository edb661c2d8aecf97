#!/bin/bash
# scripts/lab/common.sh: what the interop scripts share — sourced, not run.
#
# lab_setup NAME   checks SOFTRDMA_LAB / root / the lab, builds softrdma (release), sets BIN,
#                  ROOT, LAB, NS (from LAB_NS) and brings the lab up; exits 0 with a message
#                  when SOFTRDMA_LAB is unset (opt-in), 2 when the setup fails.
#                  LAB_LOSS=P (percent) drops that share of RoCEv2 datagrams between this host
#                  and the guests, both directions, at random (nftables in the namespace), to
#                  check loss recovery against rxe; the rule goes when the script exits.
# nsx CMD...       runs CMD in the lab namespace.
# start_capture FILE [IF] / stop_capture
#                  tcpdump on br0 (or IF) of RoCEv2 and the out-of-band TCP port, in the
#                  background.
# decode FILE      prints `softrdma decode`'s summary line; returns its status.
# record NAME STATUS DETAIL, finish TITLE
#                  collect result rows; print them and exit 0 if every row is ok, else 1.

lab_setup() {
  local name=$1
  LAB=${SOFTRDMA_LAB:-}
  if [ -z "$LAB" ]; then
    echo "$name: SOFTRDMA_LAB is not set (e.g. SOFTRDMA_LAB=/work/shared/rxe-lab): skipping"
    exit 0
  fi
  [ "$(id -u)" = 0 ] || { echo "$name: the rxe lab needs root"; exit 2; }
  [ -x "$LAB/guest.sh" ] || { echo "$name: $LAB is not the rxe lab (no guest.sh)"; exit 2; }
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  NS=${LAB_NS:-rxe-lab}
  export LAB_NS=$NS
  export GUEST_TIMEOUT=${GUEST_TIMEOUT:-120}
  echo "== building softrdma (release)"
  (cd "$ROOT" && cargo build --release -q -p softrdma-cli) || { echo "$name: build failed"; exit 2; }
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/softrdma
  [ -x "$BIN" ] || { echo "$name: no binary at $BIN"; exit 2; }
  "$LAB/lab.sh" up || { echo "$name: lab.sh up failed"; exit 2; }
  trap 'stop_capture; clear_loss' EXIT
  if [ -n "${LAB_LOSS:-}" ]; then
    set_loss "$LAB_LOSS" || { echo "$name: could not set LAB_LOSS=$LAB_LOSS (needs nft)"; exit 2; }
    echo "== dropping ${LAB_LOSS}% of RoCEv2 datagrams both ways"
  fi
}

# Random loss of RoCEv2 datagrams to and from this host, in percent (nftables' numgen).
set_loss() { # PERCENT
  command -v nft >/dev/null || return 1
  clear_loss
  nsx nft -f - <<EOF
table inet softrdma_lab_loss {
  chain out { type filter hook output priority 0; udp dport 4791 numgen random mod 100 < $1 drop; }
  chain in { type filter hook input priority 0; udp dport 4791 numgen random mod 100 < $1 drop; }
}
EOF
}

clear_loss() {
  command -v nft >/dev/null || return 0
  nsx nft delete table inet softrdma_lab_loss 2>/dev/null || true
}

nsx() { ip netns exec "$NS" "$@"; }

TCPDUMP_PID=
start_capture() { # FILE [IF]
  # Not through nsx: a backgrounded function is a subshell, which ignores SIGINT; `ip netns
  # exec` execs tcpdump, so $! is tcpdump itself. -B: a large kernel buffer, so a busy 2-core
  # host (TCG guests) drops nothing.
  ip netns exec "$NS" tcpdump -i "${2:-br0}" -n -s 0 -B 65536 --immediate-mode -U -w "$1" \
    'udp port 4791 or tcp port 18515' >"$1.tcpdump.log" 2>&1 &
  TCPDUMP_PID=$!
  sleep 1
}

stop_capture() {
  [ -n "$TCPDUMP_PID" ] || return 0
  sleep 0.5
  kill -TERM "$TCPDUMP_PID" 2>/dev/null
  wait "$TCPDUMP_PID" 2>/dev/null
  TCPDUMP_PID=
}

decode() { # FILE -> summary line; decode's status
  local line rc
  line=$("$BIN" decode -q "$1" 2>&1); rc=$?
  echo "$line"
  return $rc
}

RESULTS=()
FAILED=0
record() { # NAME STATUS DETAIL
  RESULTS+=("$(printf '%-34s %-4s %s' "$1" "$2" "$3")")
  [ "$2" = ok ] || FAILED=1
}

finish() { # TITLE
  printf '%s\n' "${RESULTS[@]}"
  if [ "$FAILED" = 0 ]; then echo "$1: PASS"; else echo "$1: FAIL"; fi
  exit "$FAILED"
}
