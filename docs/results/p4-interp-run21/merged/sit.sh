#!/bin/sh
# Lead, session 25: main d6f9d4c's bench (/tmp/s25/sit/base-bench) against the
# merge of p4table, p4calls and p4slots (/tmp/s25/sit/merged-bench), alternating,
# ROUNDS rounds, 2 s per table. Adapted from p4-interp-run20/sit.sh.
# Usage (exclusive lock): flock -x /work/wt/quiet.lock sit.sh OUTDIR ROUNDS
O=$1
N=${2:-5}
mkdir -p $O
for i in $(seq 1 $N); do for b in base merged; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/s25/sit/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -E "^\[p4\] interpreter"
done; done
