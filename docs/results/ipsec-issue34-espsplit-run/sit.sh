#!/bin/sh
# One hold of a sitting: main's daemons (base, copied before any change) and this branch's
# (new), alternating, same nicflow-bench (main's; NICFLOW_BIN picks the daemons).
# Run under flock -x /work/wt/quiet.lock. Usage: sit.sh SITTING B1 B2 ... (base|new).
S=$1; shift
OUT=/work/wt/espsplit/docs/results/ipsec-issue34-espsplit-run
for B in "$@"; do
  k=$(ls -d $OUT/s$S-*-* 2>/dev/null | wc -l); k=$((k+1))
  echo "== s$S-$k-$B start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  NICFLOW_BIN=/tmp/espsplit/$B/nicflow /tmp/espsplit/base-nicflow-bench ipsec \
    --engines nicflow-ipsec,nicflow --streams ${STREAMS:-1,4} --reps 2 --seconds 5 \
    --out $OUT/s$S-$k-$B 2>&1 | grep -E 'Gbit/s|packets esp|batches'
  echo "== s$S-$k-$B end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
