#!/bin/sh
# Second sitting: main's bench (base), the kept change (a) and the kept
# change + compiled extract/emit (b) alternating, 3 rounds.
O=/work/wt/p4slab/docs/results/p4-interp-run10/sitting2
mkdir -p $O
for i in 1 2 3; do for b in base a b; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4slab/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -iE "\[p4\] interpreter" | head -4
done; done
