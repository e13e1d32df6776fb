#!/bin/bash
# Sitting Q: cachegrind per lookup = (CBPROBE_REPS=5 - CBPROBE_REPS=1) / (4 x trace lines),
# binaries /tmp/clsrule/cbprobe-VARIANT; raw cachegrind summaries to OUTDIR.
# usage: sitting-q-cachegrind.sh OUTDIR VARIANT...
OUT=$1; shift; mkdir -p $OUT
jobs=()
for f in fw4_1k fw3_1k acl5_10k; do for v in "$@"; do for r in 1 5; do
  echo "$f $v $r"
done; done; done | xargs -P 2 -L 1 bash -c 'CBPROBE_NATIVE=1 CBPROBE_REPS=$2 valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes --I1=32768,8,64 --D1=49152,12,64 --LL=2097152,16,64 --cachegrind-out-file=/dev/null /tmp/clsrule/cbprobe-$1 /tmp/cbgen/$0.rules /tmp/cbgen/$0.trace > '$OUT'/$0-$1-$2.txt 2>&1' 
