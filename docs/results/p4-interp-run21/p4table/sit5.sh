#!/bin/sh
# p4table (issue 32, session 25): main d6f9d4c's bench (/tmp/p4table/base-bench,
# copied from /tmp/s25/nicflow-bench) against this branch's builds, alternating,
# 5 rounds (sit5.sh), 2 s per table. Adapted from p4-interp-run20/sit.sh.
# Usage (exclusive lock): flock -x /work/wt/quiet.lock sit.sh OUTDIR "NEW..."
O=$1
NEWS=${2:-new2}
mkdir -p $O
for i in 1 2 3 4 5; do for b in base $NEWS; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4table/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -E "^\[p4\] interpreter"
done; done
