#!/bin/sh
# usage: quick.sh TAG STREAMS B1 B2 ... ; one short nicflow-ipsec run per binary, alternating.
T=$1; S=$2; shift 2; k=0
for B in "$@"; do k=$((k+1))
  NICFLOW_BIN=$B ${BENCH:-/tmp/espidle/bench-base} ipsec --engines nicflow-ipsec --streams $S --reps 1 --seconds 5 --out /tmp/espidle/q/$T-$k 2>&1 | grep -E "[0-9] streams: .*Gbit/s, |batches" | grep -v load | sed "s|^|$k $(basename $B) |"
done
