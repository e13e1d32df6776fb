#!/bin/sh
# One sitting: main's bench (base) and this branch's builds (VARIANTS)
# alternating, 3 rounds, 2 s per table; then (PERF=1) a perf profile of
# base and of the last variant, same hold.
# Usage (exclusive lock): flock -x /work/wt/quiet.lock sit.sh OUTDIR "new"
O=${1:-/work/wt/p4scalar/docs/results/p4-interp-run14/sitting1}
V=${2:-new}
mkdir -p $O
for i in 1 2 3; do for b in base $V; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4scalar/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -E "^\[p4\] interpreter"
done; done
if [ -n "$PERF" ]; then
  last=$(echo $V | awk '{print $NF}')
  for b in base $last; do
    echo "# perf $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    perf record -g -o /tmp/p4scalar/perf-$b.data /tmp/p4scalar/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out /tmp/p4scalar/prof-$b 2>&1 | grep -E "^\[p4\] interpreter"
  done
fi
