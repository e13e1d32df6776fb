#!/bin/sh
# After the A/B sitting, in one flock -x hold: this branch against strongSwan (10x goal),
# then the same call-graph profile of this branch's daemons as of main's.
OUT=/work/wt/espprof/docs/results/ipsec-issue34-espprof-run
echo "== s2-sw-new start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
NICFLOW_BIN=/tmp/espprof/new /tmp/espprof/bench-new ipsec --engines nicflow-ipsec,strongswan \
  --streams 1,4 --reps 1 --seconds 5 --out $OUT/s2-sw-new 2>&1 | grep -E 'Gbit/s|packets esp'
echo "== s2-sw-new end $(date -u +%T)"
$OUT/profile/prof.sh new /tmp/espprof/new
echo "== prof new end $(date -u +%T)"
