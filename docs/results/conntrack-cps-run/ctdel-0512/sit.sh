#!/bin/bash
# One sitting, inside one exclusive benchmark lock: main's daemon (base) and this branch's (new)
# alternating, same bench binary (main's), lb then firewall, two pairs each.
BENCH=/tmp/ctdel/bench
for sc in lb firewall; do
  for i in 1 2; do
    for t in base new; do
      B=/tmp/ctdel/$t
      echo "== $(date +%T) $sc $t $i load $(cat /proc/loadavg)"
      NICFLOW_BIN=$B $BENCH conntrack --scenario $sc --engines nicflow,linux-bridge-nft --modes cps \
          --reps 3 --seconds 5 --out /tmp/ctdel/s-$sc-$t-$i 2>&1 | grep '^\[conntrack\]'
    done
  done
done
echo "== $(date +%T) end load $(cat /proc/loadavg)"
