#!/bin/bash
# base (main's daemon) and new (this branch's), same bench binary, alternating; lb 2 pairs, firewall 2 pairs
cd /tmp/ctlb
BENCH=/tmp/ctlb/n2/nicflow-bench
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
for sc in lb firewall; do
  for i in 1 2; do
    for t in base new; do
      if [ $t = base ]; then B=/tmp/ctlb/b/nicflow; else B=/tmp/ctlb/n2/nicflow; fi
      NICFLOW_BIN=$B $BENCH conntrack --scenario $sc --engines nicflow,linux-bridge-nft --modes cps --reps 3 --seconds 5 --out /tmp/ctlb/s2-$sc-$t-$i > s2-$sc-$t-$i.log 2>&1
      echo "$sc $t $i $(date -u +%T) $(grep -E 'nicflow Cps' s2-$sc-$t-$i.log | tr '\n' ' ')"
    done
  done
done
echo "end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
