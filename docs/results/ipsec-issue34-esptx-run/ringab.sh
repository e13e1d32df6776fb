#!/bin/sh
# Transmit ring A/B (issue 34, step 2): daemons with the ring (ring) against the
# same code without it (new1: this branch's first commit), alternating, tunnel mode only.
# Run under flock -x /work/wt/quiet.lock. Usage: ringab.sh SITTING B1 B2 ...
S=$1; shift
OUT=/work/wt/esptx/docs/results/ipsec-issue34-esptx-run
k=0
for B in "$@"; do
  k=$((k+1))
  echo "== r$S-$k-$B start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  NICFLOW_BIN=/tmp/esptx/$B /tmp/esptx/bench-new ipsec \
    --engines nicflow-ipsec --streams 1,4,16 --reps 1 --seconds 5 \
    --out $OUT/r$S-$k-$B 2>&1 | grep -E 'Gbit/s|packets esp'
  echo "== r$S-$k-$B end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
