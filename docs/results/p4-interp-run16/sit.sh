#!/bin/sh
# The two merged rounds together (issue 32, session 22): main before them
# (4912aa3's bench, copied before any change) against main after both
# merges (0a1b55b), alternating, 3 rounds, 2 s per table.
# Usage (exclusive lock): flock -x /work/wt/quiet.lock sit.sh OUTDIR
O=$1
mkdir -p $O
for i in 1 2 3; do for b in base new; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/lead/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -E "^\[p4\] interpreter"
done; done
