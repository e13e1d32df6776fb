#!/bin/bash
# Sitting P: cbprobe on all 24 files, main's code (base) and the candidates alternately per
# file, two rounds; run the whole script under one `flock -x /work/wt/quiet.lock`.
# usage: sitting-p-cbprobe.sh OUT VARIANT... (binaries /tmp/clsloop/cbprobe-VARIANT)
OUT=$1; shift
{ date -u; uptime
for round in 1 2; do
  for f in /tmp/cbgen/*.rules; do
    F=$(basename $f .rules)
    for v in "$@"; do
      echo "$round $F $v $(CBPROBE_NATIVE=1 /tmp/clsloop/cbprobe-$v $f /tmp/cbgen/$F.trace 2>&1 | tail -1)"
    done
  done
done
date -u; uptime; } > $OUT 2>&1
