#!/bin/bash
# One sitting, inside the exclusive benchmark lock: main's daemon (base) and this branch's ($1)
# alternating, same bench binary (main's), lb then firewall, two pairs each.
N=${1:-new}
BENCH=/tmp/ctcost/bench; mkdir -p /tmp/ctcost/s-$N
for sc in lb firewall; do
  for i in 1 2; do
    for t in base $N; do
      B=/tmp/ctcost/$t
      # A build outside the lock (seen at 19:32: /tmp/rv's cargo test) would take the cores:
      # wait for it, at most 3 min, and say so.
      for w in $(seq 1 36); do pgrep -x rustc >/dev/null || break; echo "   $(date +%T) rustc running outside the lock, waiting"; sleep 5; done
      echo "== $(date +%T) $sc $t $i load $(cat /proc/loadavg)"
      NICFLOW_BIN=$B $BENCH conntrack --scenario $sc --engines nicflow,linux-bridge-nft --modes cps \
          --reps 3 --seconds 5 --out /tmp/ctcost/s-$N/$sc-$t-$i 2>&1 | grep '^\[conntrack\]'
    done
  done
done
echo "== $(date +%T) end load $(cat /proc/loadavg)"
