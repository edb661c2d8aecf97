#!/bin/bash
# scripts/lab/multicast.sh: UD multicast over real UDP sockets, in a network namespace this
# script makes (opt-in, root only; no rxe guests needed).
#
#   scripts/lab/multicast.sh
#
# `cargo test` skips the real-socket multicast tests, saying why, where loopback does not
# carry IP multicast (many containers and CI hosts). A fresh namespace whose lo is up does:
# this runs them there with SOFTRDMA_REQUIRE_MULTICAST=1, so a skip is a failure — the udp
# crate's group join/leave test and verbs' `ud_multicast_to_two_receivers_over_real_sockets`
# (one sender, two devices attached to 239.0.45.1 receiving, then one detached that must
# no longer receive).
#
# Environment:
#   MCAST_NS        namespace name (default softrdma-mcast; made and removed by this script)
#   CARGO_TARGET_DIR  as for cargo
# Exit status: 0 if the tests passed, 1 if they failed, 2 if the setup failed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NS=${MCAST_NS:-softrdma-mcast}
if [ "$(id -u)" != 0 ]; then
  echo "multicast.sh: needs root (ip netns); skipped"
  exit 0
fi
cd "$ROOT" || exit 2
# Build outside the namespace (it has no network for crates.io).
cargo test -q -p softrdma-udp -p softrdma --no-run || exit 2
ip netns add "$NS" || exit 2
trap 'ip netns del "$NS"' EXIT
ip -n "$NS" link set lo up || exit 2
ip -n "$NS" link set lo multicast on || exit 2
ip -n "$NS" route add 224.0.0.0/4 dev lo 2>/dev/null || true
ip netns exec "$NS" env SOFTRDMA_REQUIRE_MULTICAST=1 CARGO_NET_OFFLINE=true \
  cargo test -q -p softrdma-udp -p softrdma multicast -- --nocapture
rc=$?
if [ $rc = 0 ]; then echo "multicast: PASS"; else echo "multicast: FAIL"; rc=1; fi
exit $rc
