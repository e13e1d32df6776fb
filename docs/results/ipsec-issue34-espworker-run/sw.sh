#!/bin/sh
# This branch's daemons against strongSwan (kernel-libipsec). Run under flock -x /work/wt/quiet.lock.
OUT=/work/wt/espworker/docs/results/ipsec-issue34-espworker-run
echo "== sw-$1 start $(date -u +%T)"
NICFLOW_BIN=/tmp/espworker/$1 /tmp/espworker/bench ipsec --engines nicflow-ipsec,strongswan \
  --streams 1,4 --reps 2 --seconds 5 --out $OUT/sw-$1 2>&1 | grep -E 'Gbit/s|packets esp|batches|x '
echo "== sw-$1 end $(date -u +%T)"
