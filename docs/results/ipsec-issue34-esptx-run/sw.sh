#!/bin/sh
# After the A/B sitting, in one flock -x hold: this branch against strongSwan (10x goal).
OUT=/work/wt/esptx/docs/results/ipsec-issue34-esptx-run
if [ "$(date -u +%H%M)" -ge 1440 ]; then echo "== s2-sw-new skipped $(date -u +%T)"; exit 0; fi
echo "== s2-sw-new start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
NICFLOW_BIN=/tmp/esptx/new /tmp/esptx/bench-new ipsec --engines nicflow-ipsec,strongswan \
  --streams 1,4 --reps 1 --seconds 5 --out $OUT/s2-sw-new 2>&1 | grep -E 'Gbit/s|packets esp'
echo "== s2-sw-new end $(date -u +%T)"
