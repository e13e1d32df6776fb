#!/bin/bash
# perf of the daemon, main's (base) then this branch's (new), lb, one 12-s repetition each.
for t in base new; do
  B=/tmp/ctdel/$t
  /tmp/ctdel/perfmon.sh $B /tmp/ctdel/perf-$t & m=$!
  echo "== $(date +%T) perf $t load $(cat /proc/loadavg)"
  NICFLOW_BIN=$B /tmp/ctdel/bench conntrack --scenario lb --engines nicflow --modes cps --reps 1 --seconds 12 \
     --out /tmp/ctdel/p-lb-$t 2>&1 | grep '^\[conntrack\]'
  wait $m
done
echo "== $(date +%T) end"
