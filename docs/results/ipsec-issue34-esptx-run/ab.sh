#!/bin/sh
# One sitting: main's daemons (base) and this branch's (new), alternating, same
# bench binary (this branch's nicflow-bench; NICFLOW_BIN picks the daemons).
# Run under flock -x /work/wt/quiet.lock. Usage: ab.sh SITTING B1 B2 ... (base|new).
S=$1; shift
OUT=/work/wt/esptx/docs/results/ipsec-issue34-esptx-run
k=0
for B in "$@"; do
  k=$((k+1))
  # The deadline (14:50 UTC): a run of ~6 min does not start after 14:31.
  if [ "$(date -u +%H%M)" -ge 1431 ]; then echo "== s$S-$k-$B skipped $(date -u +%T)"; continue; fi
  echo "== s$S-$k-$B start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  NICFLOW_BIN=/tmp/esptx/$B /tmp/esptx/bench-new ipsec \
    --engines nicflow-ipsec,nicflow-ipsec-transport,nicflow --streams 1,4,16 --reps 2 --seconds 5 \
    --out $OUT/s$S-$k-$B 2>&1 | grep -E 'Gbit/s|packets esp'
  echo "== s$S-$k-$B end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
