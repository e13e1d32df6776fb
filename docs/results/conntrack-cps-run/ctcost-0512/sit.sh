#!/bin/bash
# One sitting, inside the exclusive benchmark lock: main's daemon (base) and this branch's ($1)
# alternating, same bench binary (main's), pair 1 of lb and firewall, then pair 2 of each.
# Stops starting runs after 20:36 UTC (the task's deadline is 20:45).
N=${1:-new}
BENCH=/tmp/ctcost/bench; mkdir -p /tmp/ctcost/s-$N
for i in 1 2; do
  for sc in lb firewall; do
    for t in base $N; do
      B=/tmp/ctcost/$t
      if [ "$(date -u +%H%M)" -ge 2036 ]; then echo "== $(date +%T) deadline: stop"; exit 0; fi
      # A build outside the lock (seen at 19:32: /tmp/rv's cargo test) would take the cores:
      # wait for it, at most 1 min, and say so.
      for w in $(seq 1 12); do pgrep -x rustc >/dev/null || break; echo "   $(date +%T) rustc running outside the lock, waiting"; sleep 5; done
      echo "== $(date +%T) $sc $t $i load $(cat /proc/loadavg)"
      NICFLOW_BIN=$B $BENCH conntrack --scenario $sc --engines nicflow,linux-bridge-nft --modes cps \
          --reps 3 --seconds 5 --out /tmp/ctcost/s-$N/$sc-$t-$i 2>&1 | grep '^\[conntrack\]'
    done
  done
done
echo "== $(date +%T) end load $(cat /proc/loadavg)"
