#!/bin/sh
# One sitting: main's bench (base) and this branch's (NEW) alternating, 3 rounds.
# usage: sit.sh OUTDIR NEW   (binaries /tmp/p4ref/base-bench and /tmp/p4ref/NEW-bench)
O=$1; N=$2
for i in 1 2 3; do for b in base $N; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4ref/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -iE "pps|interp" | head -6
done; done
