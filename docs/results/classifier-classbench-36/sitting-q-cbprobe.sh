#!/bin/bash
# Sitting Q: cbprobe on all 24 files, main's code (base) and the candidates alternately per
# file, two rounds; run the whole script under one `flock -x /work/wt/quiet.lock`.
# usage: sitting-q-cbprobe.sh OUT VARIANT... (binaries /tmp/clsrule/cbprobe-VARIANT)
OUT=$1; shift
{ date -u; uptime
for round in 1 2; do
  for f in /tmp/cbgen/*.rules; do
    F=$(basename $f .rules)
    for v in "$@"; do
      echo "$round $F $v $(CBPROBE_NATIVE=1 /tmp/clsrule/cbprobe-$v $f /tmp/cbgen/$F.trace 2>&1 | tail -1)"
    done
  done
done
date -u; uptime; } > $OUT 2>&1
