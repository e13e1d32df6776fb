#!/usr/bin/env python3
# Per-lookup counts from sitting-q-cachegrind.sh's outputs: (REPS=5 - REPS=1) / (4 x trace lines).
import sys, re, os
d = sys.argv[1]; vs = sys.argv[2:]
def get(path):
    t = open(path).read().replace(',', '')
    g = lambda k: float(re.search(r'== ' + k + r':\s+(\d+)', t).group(1))
    return dict(Ir=g('I\s+refs'), loads=g('D\s+refs') - 0, rd=float(re.search(r'D\s+refs:\s+\d+\s+\(\s*(\d+) rd', t).group(1)),
                wr=float(re.search(r'D\s+refs:\s+\d+\s+\(\s*\d+ rd\s+\+\s+(\d+) wr', t).group(1)),
                D1m=g('D1\s+misses'), LLm=g('LLd\s+misses'), br=g('Branches'), mis=g('Mispredicts'))
for f in ['fw4_1k', 'fw3_1k', 'acl5_10k']:
    n = sum(1 for _ in open(f'/tmp/cbgen/{f}.trace'))
    for v in vs:
        a, b = get(f'{d}/{f}-{v}-1.txt'), get(f'{d}/{f}-{v}-5.txt')
        x = {k: (b[k] - a[k]) / 4 / n for k in a}
        print(f"{f:9} {v:6} Ir {x['Ir']:7.1f} loads {x['rd']:6.1f} stores {x['wr']:5.1f} D1m {x['D1m']:5.2f} LLm {x['LLm']:5.2f} br {x['br']:6.1f} mispr {x['mis']:5.2f}")
