#!/bin/bash
# scripts/lab/nvmf.sh: NVMe over Fabrics (RDMA) between softrdma and the Linux kernel in the
# rxe lab (see the lab's README, "NVMe over Fabrics in the lab"). Opt-in and root only.
#
#   SOFTRDMA_LAB=/work/shared/rxe-lab scripts/lab/nvmf.sh
#   SOFTRDMA_LAB=/work/shared/rxe-lab LAB_LOSS=3 scripts/lab/nvmf.sh
#
# Runs, each checked and its capture decoded (softrdma decode: 0 icrc_bad, 0 malformed; and
# tshark, whose nvme-rdma dissector reads every capsule: 0 malformed):
#   1. the kernel host in a guest (tools/nvme-host.sh) against `softrdma nvmf-target` on this
#      host (10.88.0.1, a file-backed namespace): discover, connect, NVMF_MIB MiB written with
#      O_DIRECT and read back identical, disconnect; then (nvmf_guest.sh fs) mkfs.ext4 on the
#      namespace, files written, unmounted, disconnected, connected and mounted again,
#      checksums equal; without LAB_LOSS also fio in the guest (4 KiB random read at depth 32,
#      128 KiB sequential read and write);
#   2. `softrdma nvmf` on this host against the kernel target (tools/nvmet-target.sh, nvmet-rdma
#      over a 1 GiB null_blk) in a guest: discover, identify, NVMF_MIB MiB written and read back
#      identical (and 8 MiB more through memory windows the kernel invalidates), a short bench.
#
# Environment: SOFTRDMA_LAB (required), LAB_LOSS, LAB_NS, NVMF_MIB (default 64),
# NVMF_FIO_SECS (default 10; 0 skips fio), NVMF_NQN (default nqn.2026-12.lab:rxe), NVMF_OUT
# (default target/lab/nvmf[-lossP]), GUEST_TIMEOUT, CARGO_TARGET_DIR.
# Exit status: 0 if every run passed, 1 otherwise, 2 if the setup failed.
set -uo pipefail

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
# Under loss every lost tail of a READ response waits out the 2 s ACK timeout: slow.
export GUEST_TIMEOUT=${GUEST_TIMEOUT:-$([ -n "${LAB_LOSS:-}" ] && echo 2400 || echo 900)}
lab_setup nvmf.sh
MIB=${NVMF_MIB:-64}
FIO_SECS=${NVMF_FIO_SECS:-10}
NQN=${NVMF_NQN:-nqn.2026-12.lab:rxe}
OUT=${NVMF_OUT:-$ROOT/target/lab/nvmf${LAB_LOSS:+-loss$LAB_LOSS}}
HOST_IP=10.88.0.1
G1=10.88.0.11
G2=10.88.0.12
mkdir -p "$OUT"
# Under loss: no fio (its figures would say nothing), and responses as plain SENDs. The
# guests' rxe (6.1) loses track of the host's memory registrations when its requester goes
# back after a NAK or timeout while the target invalidates keys remotely: the next fast
# registration of that region fails ("rxe_reg_fast_mr: ... not free"), its I/O never
# completes and nvme-rdma resets the controller every 30 s. With the host invalidating its
# keys itself (LOCAL_INV) the same runs pass.
TARGET_FLAGS=()
if [ -n "${LAB_LOSS:-}" ]; then
  FIO_SECS=0
  TARGET_FLAGS=(--no-remote-invalidate)
fi

# Frames of FILE tshark marks malformed (it dissects nvme-rdma on UDP 4791 by itself).
tshark_check() { # FILE -> summary; status 1 if any frame is malformed
  command -v tshark >/dev/null || { echo "tshark: not installed"; return 0; }
  local n m
  n=$(tshark -r "$1" 2>/dev/null | wc -l)
  m=$(tshark -r "$1" 2>/dev/null | grep -c "Malformed")
  echo "tshark: $n frames, $m malformed"
  [ "$m" = 0 ]
}

# check NAME OK(0/1) DETAIL WIRE
check() {
  local name=$1 ok=$2 detail=$3 wire=$4 status=ok wd td
  [ "$ok" = 1 ] || status=FAIL
  wd=$(decode "$wire") || status=FAIL
  td=$(tshark_check "$wire") || status=FAIL
  record "$name" "$status" "$detail | wire: $wd | $td"
  echo "   -> $status: $detail | wire: $wd | $td"
}

# 1. The kernel host against softrdma's target.
tag=kernel-host
share=$OUT/share
mkdir -p "$share"
cp "$LAB/tools/nvme-host.sh" "$ROOT/scripts/lab/nvmf_guest.sh" "$share/"
img=$OUT/ns1.img
rm -f "$img"
echo "== nvme-host.sh (MIB=$MIB), mkfs/mount/checksums$([ "$FIO_SECS" != 0 ] && echo ", fio") in g2  ->  softrdma nvmf-target --ip $HOST_IP --file $img --size 256M"
start_capture "$OUT/$tag.wire.pcap"
# Not through nsx (a backgrounded function is a subshell): $! must be the target itself.
ip netns exec "$NS" timeout 3000 "$BIN" nvmf-target --ip "$HOST_IP" --file "$img" --size 256M \
  --nqn "$NQN" --stats-every 30 "${TARGET_FLAGS[@]}" > "$OUT/$tag.softrdma.log" 2>&1 &
tpid=$!
sleep 1
cmd=". /mnt/share/nvme-host.sh; NQN=$NQN MIB=$MIB main $HOST_IP && bash /mnt/share/nvmf_guest.sh fs $HOST_IP $NQN"
[ "$FIO_SECS" != 0 ] && cmd+=" && bash /mnt/share/nvmf_guest.sh fio $HOST_IP $NQN $FIO_SECS"
cmd+="; echo nvmf-guest-exit=\$?"
GUEST_SHARE=$share "$LAB/guest.sh" nv2 "$G2" "$cmd" > "$OUT/$tag.guest.log" 2>&1
kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
stop_capture
sed 's/^/   /' "$OUT/$tag.guest.log" | grep -v "^   \[nv2\] \(trtype\|subnqn\)" | tail -n 20
tail -n 2 "$OUT/$tag.softrdma.log" | sed 's/^/   /'
ok=0; grep -q "data: $MIB MiB written and read back identical" "$OUT/$tag.guest.log" && ok=1
check "kernel host -> softrdma: $MIB MiB" $ok "discover, connect, $MIB MiB O_DIRECT, disconnect" "$OUT/$tag.wire.pcap"
ok=0; grep -q "checksums equal" "$OUT/$tag.guest.log" && grep -q "nvmf-guest-exit=0" "$OUT/$tag.guest.log" && ok=1
record "kernel host -> softrdma: ext4" "$([ $ok = 1 ] && echo ok || echo FAIL)" "mkfs.ext4, 8 files, umount, reconnect, mount, sha256 equal"
if [ "$FIO_SECS" != 0 ]; then
  grep -E "IOPS=" "$OUT/$tag.guest.log" | sed 's/^/   fio: /'
fi

# 2. softrdma's host against the kernel target.
tag=softrdma-host
echo "== softrdma nvmf (discover, identify, verify $MIB MiB, bench)  ->  nvmet-rdma in g1 ($G1)"
start_capture "$OUT/$tag.wire.pcap"
# The kernel target serves until this host says it is done (a file on the guest's share).
rm -f "$share/nvmet-done"
cp "$LAB/tools/nvmet-target.sh" "$share/"
gcmd=". /mnt/share/nvmet-target.sh; (NQN=$NQN main $G1 900 &); for i in \$(seq 900); do [ -e /mnt/share/nvmet-done ] && break; sleep 1; done"
GUEST_SHARE=$share "$LAB/guest.sh" nv1 "$G1" "$gcmd" > "$OUT/$tag.guest.log" 2>&1 &
gpid=$!
conn=(-a "$G1" -w "$HOST_IP" -n "$NQN")
ok=1
deadline=$(( $(date +%s) + 180 ))
until nsx "$BIN" nvmf discover "${conn[@]}" > "$OUT/$tag.discover.log" 2>&1; do
  if [ "$(date +%s)" -ge "$deadline" ] || ! kill -0 $gpid 2>/dev/null; then ok=0; break; fi
  sleep 2
done
grep -q "subnqn:  $NQN" "$OUT/$tag.discover.log" || ok=0
{
  nsx "$BIN" nvmf identify "${conn[@]}" &&
  nsx "$BIN" nvmf verify "${conn[@]}" --size "${MIB}M" &&
  nsx "$BIN" nvmf verify "${conn[@]}" --size 8M --lba 262144 --remote-invalidate &&
  nsx "$BIN" nvmf bench "${conn[@]}" --runtime 5 --iodepth 16
} > "$OUT/$tag.softrdma.log" 2>&1 || ok=0
touch "$share/nvmet-done"
wait $gpid
stop_capture
sed 's/^/   /' "$OUT/$tag.softrdma.log" | tail -n 14
grep -q "verify: $MIB MiB written" "$OUT/$tag.softrdma.log" || ok=0
grep -q "verify: 8 MiB written" "$OUT/$tag.softrdma.log" || ok=0
check "softrdma -> kernel target: $MIB MiB" $ok "discover, identify, $MIB MiB + 8 MiB (remote invalidation) identical, bench" "$OUT/$tag.wire.pcap"

finish "nvmf interop${LAB_LOSS:+ (loss $LAB_LOSS%)}"
