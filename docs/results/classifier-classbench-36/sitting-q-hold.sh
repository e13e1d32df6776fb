#!/bin/bash
# One `flock -x /work/wt/quiet.lock` hold: cbprobe on all 24 files (base max2 zero2, two rounds),
# then, only if max2 (the committed candidate) passes the brief's test (geomean max2/base < 0.97,
# fw4 1K, fw3 1K and acl5 10K faster, no file more than 5% slower), the full nicflow-bench sitting.
D=/work/wt/clsrule/docs/results/classifier-classbench-36
echo "lock taken $(date -u +%T)"
# No benchmark after ~05:50 UTC (the lead's test suite): cbprobe (about 5 min) only if it
# starts by 05:44, the full sitting (about 6 min) only if it starts by 05:43.
now() { date -u +%H%M; }
if [ "$(now)" -gt 0544 ]; then echo "too late for cbprobe $(date -u +%T)"; exit 0; fi
$D/sitting-q-cbprobe.sh $D/sitting-q-cbprobe.txt base max2 zero2
python3 $D/sitting-q-summary.py $D/sitting-q-cbprobe.txt > $D/sitting-q-cbprobe-summary.txt
if python3 - $D/sitting-q-cbprobe-summary.txt <<'PY'
import sys
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1]) if l[:1].isalpha() and not l.startswith(('file', 'geomean'))]
head = open(sys.argv[1]).readline().rstrip('\n').split('\t')
col = head.index('max2/base')
r = {x[0]: float(x[col]) for x in rows}
g = [l for l in open(sys.argv[1]) if l.startswith('geomean max2/base')][0].split()[-1]
ok = float(g) < 0.97 and all(r[f] < 1.0 for f in ('fw4_1k', 'fw3_1k', 'acl5_10k')) and max(r.values()) <= 1.05
print('max2 passes' if ok else 'max2 fails', g, max(r.values()))
sys.exit(0 if ok else 1)
PY
then if [ "$(now)" -le 0543 ]; then $D/sitting-q-full.sh; else echo "too late for the full sitting $(date -u +%T)"; fi; fi
echo "lock released $(date -u +%T)"
