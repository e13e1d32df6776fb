#!/bin/sh
# One sitting: main's daemons (base) and this branch's (new), alternating, same bench binary
# (this branch's nicflow-bench, which also reads the new socket-call counters; NICFLOW_BIN
# picks the daemons), then this branch against strongSwan. Run under flock -x /work/wt/quiet.lock.
# Usage: sit.sh SITTING B1 B2 ... (base|new1).
S=$1; shift
OUT=/work/wt/espidle/docs/results/ipsec-issue34-espidle-run
k=0
for B in "$@"; do
  k=$((k+1))
  # The deadline (17:35 UTC): a run of ~6 min does not start after 17:12.
  if [ "$(date -u +%H%M)" -ge 1712 ]; then echo "== s$S-$k-$B skipped $(date -u +%T)"; continue; fi
  echo "== s$S-$k-$B start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  NICFLOW_BIN=/tmp/espidle/$B /tmp/espidle/bench-new ipsec \
    --engines nicflow-ipsec,nicflow-ipsec-transport,nicflow --streams 1,4,16 --reps 2 --seconds 5 \
    --out $OUT/s$S-$k-$B 2>&1 | grep -E 'Gbit/s|packets esp|batches'
  echo "== s$S-$k-$B end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
if [ "$(date -u +%H%M)" -lt 1722 ]; then
  echo "== sw-new1 start $(date -u +%T)"
  NICFLOW_BIN=/tmp/espidle/new1 /tmp/espidle/bench-new ipsec --engines nicflow-ipsec,strongswan \
    --streams 1,4 --reps 2 --seconds 5 --out $OUT/s$S-sw-new1 2>&1 | grep -E 'Gbit/s|packets esp|batches'
  echo "== sw-new1 end $(date -u +%T)"
fi
