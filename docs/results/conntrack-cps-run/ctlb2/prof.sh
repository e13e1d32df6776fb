#!/bin/bash
# One exclusive hold: perf of main's daemon (13f6970), lb then firewall, one 12-s repetition each.
B=${B:-/tmp/ctlb2/base-nicflow}; T=${T:-base}
for sc in ${SCEN:-lb firewall}; do
  /tmp/ctlb2/perfmon.sh $B /tmp/ctlb2/prof/perf-$sc-$T & m=$!
  echo "== $(date -u +%T) perf $sc $T load $(cat /proc/loadavg)"
  NICFLOW_BIN=$B /tmp/ctlb2/base-nicflow-bench conntrack --scenario $sc --engines nicflow --modes cps --reps 1 --seconds 12 \
     --out /tmp/ctlb2/prof/p-$sc-$T 2>&1 | grep '^\[conntrack\]'
  wait $m
done
echo "== $(date -u +%T) perf end"
