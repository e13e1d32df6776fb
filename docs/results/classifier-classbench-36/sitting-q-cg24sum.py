#!/usr/bin/env python3
# Per-lookup instructions, loads and L1d/LL misses from sitting-q-cg24.sh's outputs: (REPS=3 - REPS=1) / (2 x trace lines),
# per file base and candidate, the ratio, and the geomean of the instruction ratios.
import sys, re, os, math, glob
d, b, c = sys.argv[1:4]
def get(path):
    t = open(path).read().replace(',', '')
    g = lambda k: float(re.search(k + r':\s+(\d+)', t).group(1))
    return dict(Ir=g(r'I\s+refs'), rd=float(re.search(r'D\s+refs:\s+\d+\s+\(\s*(\d+) rd', t).group(1)), D1m=g(r'D1\s+misses'), LLm=g(r'LLd\s+misses'))
logs = []
print('file', 'Ir base', 'Ir new', 'ratio', 'loads base', 'loads new', 'D1m base', 'D1m new', 'LLm base', 'LLm new', sep='\t')
for f in sorted({os.path.basename(p).split('-')[0] for p in glob.glob(f'{d}/*-{b}-3.txt')}):
    try:
        n = sum(1 for _ in open(f'/tmp/cbgen/{f}.trace'))
        x = {v: {k: (get(f'{d}/{f}-{v}-3.txt')[k] - get(f'{d}/{f}-{v}-1.txt')[k]) / 2 / n for k in ('Ir', 'rd', 'D1m', 'LLm')} for v in (b, c)}
    except (FileNotFoundError, AttributeError):
        continue
    r = x[c]['Ir'] / x[b]['Ir']; logs.append(math.log(r))
    print(f, f"{x[b]['Ir']:.0f}", f"{x[c]['Ir']:.0f}", f'{r:.3f}', f"{x[b]['rd']:.0f}", f"{x[c]['rd']:.0f}", f"{x[b]['D1m']:.2f}", f"{x[c]['D1m']:.2f}", f"{x[b]['LLm']:.2f}", f"{x[c]['LLm']:.2f}", sep='\t')
print(f'geomean instructions {c}/{b} {math.exp(sum(logs) / len(logs)):.3f} over {len(logs)} files')
