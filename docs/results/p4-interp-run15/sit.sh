#!/bin/sh
# One sitting: main's bench (base, copied before any change) and this
# branch's last build (the last of VARIANTS) alternating, 3 rounds, 2 s
# per table (the bench's two tables: routing.stf's entries, 1,000 /28
# routes). Only the last variant runs: the lock came late (queue).
# Usage (exclusive lock): flock -x /work/wt/quiet.lock sit.sh OUTDIR "new2 new3"
O=${1:-/work/wt/p4frame/docs/results/p4-interp-run15/sitting1}
V=$(echo "${2:-new}" | awk '{print $NF}')
mkdir -p $O
for i in 1 2 3; do for b in base $V; do
  echo "# $b-$i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/p4frame/$b-bench p4 --interp-only --reps 1 --seconds 2 --engines none --out $O/$b-$i 2>&1 | grep -E "^\[p4\] interpreter"
done; done
