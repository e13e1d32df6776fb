#!/bin/sh
# One sitting: main's bench (base) and this branch's (new) alternating,
# 3 rounds, 2 s per table; then (PERF=1) a perf profile of each, same hold.
# Usage (exclusive lock): flock -x /work/wt/quiet.lock sit.sh OUTDIR [VARIANT]
O=${1:-/work/wt/p4flat3/docs/results/p4-interp-run12/sitting1}
V=${2:-new}
mkdir -p $O
for i in 1 2 3; do for b in base $V; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4flat3/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -E "^\[p4\] interpreter"
done; done
if [ -n "$PERF" ]; then
  for b in base $V; do
    echo "# perf $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    perf record -g -o /tmp/p4flat3/perf-$b.data /tmp/p4flat3/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out /tmp/p4flat3/prof-$b 2>&1 | grep -E "^\[p4\] interpreter"
  done
fi
