#!/bin/bash
# scripts/lab/nvmf_guest.sh: the guest side of scripts/lab/nvmf.sh, run inside a lab guest
# (shared at /mnt/share) with the kernel's NVMe-oF host (nvme-rdma) and nvme-cli:
#
#   nvmf_guest.sh fs ADDR NQN      connect, mkfs.ext4, write 8 files of 2 MiB, sha256sum them,
#                                  unmount, disconnect, connect again, mount, check the sums,
#                                  unmount, disconnect; exit 0 only if every sum matches
#   nvmf_guest.sh fio ADDR NQN S   connect, fio for S seconds each: 4 KiB random read at queue
#                                  depth 32, 128 KiB sequential read and write at depth 8
set -u
NS_DEV=

connect() { # ADDR NQN
  modprobe nvme-rdma || return 1
  nvme connect -t rdma -a "$1" -s 4420 -n "$2" || return 1
  local i
  for i in $(seq 100); do
    NS_DEV=$(ls /dev/nvme*n1 2>/dev/null | head -1)
    [ -n "$NS_DEV" ] && [ -b "$NS_DEV" ] && return 0
    sleep 0.1
  done
  echo "no namespace block device appeared"; return 1
}

fs() { # ADDR NQN
  local addr=$1 nqn=$2 i ok
  connect "$addr" "$nqn" || return 1
  mkfs.ext4 -q -F "$NS_DEV" || {
    echo "mkfs.ext4 failed"; dmesg | grep -i "nvme\|rxe" | tail -20; nvme disconnect -n "$nqn"; return 1
  }
  mkdir -p /mnt/ns && mount "$NS_DEV" /mnt/ns || { nvme disconnect -n "$nqn"; return 1; }
  for i in $(seq 8); do dd if=/dev/urandom of=/mnt/ns/f$i bs=1M count=2 status=none; done
  (cd /mnt/ns && sha256sum f*) > /tmp/sums
  umount /mnt/ns
  nvme disconnect -n "$nqn"
  echo "fs: 8 files written, $(wc -l < /tmp/sums) sums, unmounted, disconnected"
  # The files come back from the target, not from this guest's caches.
  connect "$addr" "$nqn" || return 1
  mount "$NS_DEV" /mnt/ns || { nvme disconnect -n "$nqn"; return 1; }
  ok=0; (cd /mnt/ns && sha256sum -c --quiet /tmp/sums) && ok=1
  umount /mnt/ns
  nvme disconnect -n "$nqn"
  [ $ok = 1 ] && echo "fs: mounted again after reconnecting, checksums equal"
  [ $ok = 1 ] || dmesg | grep -i "nvme\|rxe" | tail -20
  [ $ok = 1 ]
}

fio_jobs() { # ADDR NQN SECS
  local addr=$1 nqn=$2 secs=$3
  connect "$addr" "$nqn" || return 1
  fio --name=randread --filename="$NS_DEV" --rw=randread --bs=4k --iodepth=32 \
    --ioengine=libaio --direct=1 --runtime="$secs" --time_based --group_reporting | grep -E "IOPS|clat \(|lat \(u|lat \(m" | head -3
  fio --name=seqread --filename="$NS_DEV" --rw=read --bs=128k --iodepth=8 \
    --ioengine=libaio --direct=1 --runtime="$secs" --time_based | grep -E "IOPS" | head -1
  fio --name=seqwrite --filename="$NS_DEV" --rw=write --bs=128k --iodepth=8 \
    --ioengine=libaio --direct=1 --runtime="$secs" --time_based | grep -E "IOPS" | head -1
  nvme disconnect -n "$nqn"
}

case "${1:-}" in
  fs) fs "$2" "$3" ;;
  fio) fio_jobs "$2" "$3" "${4:-10}" ;;
  *) echo "usage: $0 fs|fio ADDR NQN [SECS]"; exit 2 ;;
esac
