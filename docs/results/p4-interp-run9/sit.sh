#!/bin/sh
# One sitting: main's bench (base) and this branch's (new) alternating, 3 rounds.
O=/work/wt/p4tier/docs/results/p4-interp-run9
for i in 1 2 3; do for b in base new; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4tier/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -iE "pps|interp" | head -6
done; done
