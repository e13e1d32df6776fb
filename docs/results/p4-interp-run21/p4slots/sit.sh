#!/bin/sh
# p4slots (issue 32, session 25): main d6f9d4c's bench (/tmp/p4slots/base-bench,
# copied from /tmp/s25 before any change) against this branch's builds,
# alternating, ROUNDS (default 3) rounds, 2 s per table. Adapted from p4-interp-run20/sit.sh
# (scratch dir /tmp/p4slots).
# Usage (exclusive lock): flock -x /work/wt/quiet.lock sit.sh OUTDIR "NEW..." [ROUNDS]
# ORDER="new3 base" runs the new build first in each round (default: base first).
O=$1
NEWS=${2:-new1}
mkdir -p $O
for i in $(seq 1 ${3:-3}); do for b in ${ORDER:-base $NEWS}; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4slots/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -E "^\[p4\] interpreter"
done; done
