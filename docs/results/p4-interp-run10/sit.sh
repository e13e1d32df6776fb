#!/bin/sh
# One sitting: main's bench (base), change A (a: frame stack kept) and
# A + B (b: compiled extract/emit) alternating, 3 rounds.
O=/work/wt/p4slab/docs/results/p4-interp-run10
mkdir -p $O
for i in 1 2 3; do for b in base a; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4slab/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -iE "interpreter" | head -4
done; done
# Profiles of the two variants' harness, same hold.
for b in a; do
  echo "# perf $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  perf record -g -o /tmp/p4slab/perf-$b.data /tmp/p4slab/loop-$b /work/shared/p4-corpus 1000 2 2>&1 | grep routes
done
