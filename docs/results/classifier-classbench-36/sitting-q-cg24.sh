#!/bin/bash
# Sitting Q: cachegrind (cache model, no branch model) per lookup on every file,
# (CBPROBE_REPS=3 - CBPROBE_REPS=1) / (2 x trace lines), each run under its own `flock -s`.
# usage: sitting-q-cg24.sh OUTDIR VARIANT...
OUT=$1; shift; mkdir -p $OUT
for f in /tmp/cbgen/*.rules; do F=$(basename $f .rules); for v in "$@"; do for r in 1 3; do
  echo "$F $v $r"
done; done; done | xargs -P 2 -L 1 bash -c '[ -s '$OUT'/$0-$1-$2.txt ] || flock -s /work/wt/quiet.lock env CBPROBE_NATIVE=1 CBPROBE_REPS=$2 valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 --D1=49152,12,64 --LL=2097152,16,64 --cachegrind-out-file=/dev/null /tmp/clsrule/cbprobe-$1 /tmp/cbgen/$0.rules /tmp/cbgen/$0.trace > '$OUT'/$0-$1-$2.txt 2>&1'
