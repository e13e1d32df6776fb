#!/bin/sh
# p4merge (issue 32, session 24): main 13f6970's bench (the lead's copy,
# /tmp/p4merge/base-bench) against the merged p4vars+p4args build,
# alternating, 3 rounds, 2 s per table. Adapted from p4-interp-run19/sit.sh
# (scratch dir /tmp/p4merge).
# Usage (exclusive lock): flock -x /work/wt/quiet.lock sit.sh OUTDIR "NEW..."
O=$1
NEWS=${2:-new1}
mkdir -p $O
for i in 1 2 3 4 5; do for b in base $NEWS; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4merge/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -E "^\[p4\] interpreter"
done; done
