#!/bin/sh
# Usage: prof.sh BIN TAG ROUTES [extra valgrind args]  -> /tmp/p4table/cl.TAG.ROUTES
# Callgrind with cache simulation, collecting inside run_packet only; prints
# per-packet Ir, Dr, D1mr (packets = the timed loop's count + the two warm-up
# passes over the frames: 1024 frames with routes, 64 without).
B=$1; T=$2; R=$3; shift 3
cd /tmp/p4table
valgrind --tool=callgrind --cache-sim=yes --toggle-collect='*run_packet*' "$@" \
  --callgrind-out-file=/tmp/p4table/cl.$T.$R $B /work/shared/p4-corpus $R 1 > /tmp/p4table/out.$T.$R 2>/tmp/p4table/err.$T.$R
python3 - /tmp/p4table/cl.$T.$R /tmp/p4table/out.$T.$R $R <<'PY'
import sys,re
f=open(sys.argv[1]).read()
ev=re.search(r'^events: (.*)$',f,re.M).group(1).split()
sm=list(map(int,re.search(r'^summary: (.*)$',f,re.M).group(1).split()))
o=open(sys.argv[2]).read()
n=int(re.search(r'of (\d+) forwarded',o).group(1))
pk=n+2*(1024 if int(sys.argv[3])>0 else 64)
d=dict(zip(ev,sm))
print(f"{sys.argv[1]}: packets {pk}; per packet Ir {d['Ir']/pk:.0f} Dr {d['Dr']/pk:.0f} D1mr {d['D1mr']/pk:.2f} D1mw {d['D1mw']/pk:.2f} | {o.strip()}")
PY
