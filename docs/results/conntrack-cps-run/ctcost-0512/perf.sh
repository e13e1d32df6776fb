#!/bin/bash
# One exclusive hold: perf of main's daemon (base) and this branch's (new2), lb then firewall,
# one 12-s repetition each; then the sitting (sit.sh) with new2.
for sc in lb firewall; do
  for t in base new2; do
    B=/tmp/ctcost/$t
    /tmp/ctcost/perfmon.sh $B /tmp/ctcost/prof/perf-$sc-$t & m=$!
    echo "== $(date +%T) perf $sc $t load $(cat /proc/loadavg)"
    NICFLOW_BIN=$B /tmp/ctcost/bench conntrack --scenario $sc --engines nicflow --modes cps --reps 1 --seconds 12 \
       --out /tmp/ctcost/prof/p-$sc-$t 2>&1 | grep '^\[conntrack\]'
    wait $m
  done
done
echo "== $(date +%T) perf end"
/tmp/ctcost/sit.sh new2 > /tmp/ctcost/sit-new2.out 2>&1
