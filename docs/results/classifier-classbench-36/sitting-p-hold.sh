#!/bin/bash
# One `flock -x /work/wt/quiet.lock` hold: cbprobe on all 24 files (base c e f, two rounds),
# then, only if candidate f passes the brief's test (geomean f/base < 0.97, fw4 1K, fw3 1K
# and acl5 10K faster, no file more than 5% slower), the full nicflow-bench sitting.
D=/work/wt/clsloop/docs/results/classifier-classbench-36
$D/sitting-p-cbprobe.sh $D/sitting-p-cbprobe-cef.txt base c e f
python3 $D/sitting-p-summary.py $D/sitting-p-cbprobe-cef.txt > $D/sitting-p-cbprobe-cef-summary.txt
if python3 - $D/sitting-p-cbprobe-cef-summary.txt <<'PY'
import sys
rows = [l.split('\t') for l in open(sys.argv[1]) if l[:1].isalpha() and not l.startswith(('file', 'geomean'))]
head = open(sys.argv[1]).readline().split('\t')
col = head.index('f/base')
r = {x[0]: float(x[col]) for x in rows}
g = [l for l in open(sys.argv[1]) if l.startswith('geomean f/base')][0].split()[-1]
ok = float(g) < 0.97 and all(r[f] < 1.0 for f in ('fw4_1k', 'fw3_1k', 'acl5_10k')) and max(r.values()) <= 1.05
print('f passes' if ok else 'f fails', g, max(r.values()))
sys.exit(0 if ok else 1)
PY
then $D/sitting-p-full.sh; fi
