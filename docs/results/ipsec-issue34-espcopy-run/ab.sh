#!/bin/sh
# One sitting: main's daemons and this branch's, back to back, same bench binary
# (this branch's nicflow-bench; NICFLOW_BIN picks the daemons). Run under
# flock -x /work/wt/quiet.lock. Usage: ab.sh SITTING FIRST SECOND (base|new).
S=$1; shift
OUT=/work/wt/espcopy/docs/results/ipsec-issue34-espcopy-run
for B in "$@"; do
  echo "== s$S-$B start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  NICFLOW_BIN=/tmp/espcopy/$B /tmp/espcopy/bench-new ipsec \
    --engines nicflow-ipsec,nicflow-ipsec-transport,nicflow --streams 1,4,16 --reps 2 --seconds 5 \
    --out $OUT/s$S-$B 2>&1 | grep -E 'Gbit/s|packets esp'
  echo "== s$S-$B end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
