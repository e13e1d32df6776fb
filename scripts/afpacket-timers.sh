#!/usr/bin/env bash
# Idle cost of AF_PACKET (TPACKET_V3) ports: local timer interrupts per
# second on the machine with N idle ports on a nicflow daemon, each ring
# with block_timeout_ms=T (docs/results/containers.md, issue 17).
#   bash scripts/afpacket-timers.sh N [T]     (root; release build first)
# Creates veths nfaq<pid>_<i>, removes them and the daemon on exit.
set -euo pipefail
n=${1:?number of ports}; to=${2:-1}
cd "$(dirname "$0")/.."
bin=${NICFLOW_BIN:-target/release/nicflow}
pfx="nfaq$$_"
sock="/tmp/${pfx}sock"
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  for i in $(seq 1 "$n"); do ip link del "$pfx$i" 2>/dev/null || true; done
  rm -f "$sock"
}
trap cleanup EXIT
for i in $(seq 1 "$n"); do
  ip link add "$pfx$i" type veth peer name "${pfx}p$i"
  ip link set "$pfx$i" up; ip link set "${pfx}p$i" up
done
"$bin" daemon --socket "$sock" >/dev/null 2>&1 & pid=$!
for _ in $(seq 100); do "$bin" --socket "$sock" show >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" --socket "$sock" add-br br0 >/dev/null
for i in $(seq 1 "$n"); do
  "$bin" --socket "$sock" add-port br0 "$pfx$i" --type afpacket "block_timeout_ms=$to" >/dev/null
done
sleep 1
loc() { awk '/^ *LOC:/ { s = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i; print s }' /proc/interrupts; }
a=$(loc); sleep 5; b=$(loc)
echo "ports=$n block_timeout_ms=$to LOC interrupts/s=$(( (b - a) / 5 ))"
